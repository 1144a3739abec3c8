// ComputeWeights: the copies of the parameters that the forward and backward GEMMs read.
//
// fp32 master weights live in the ParameterStore's flat value buffer. With compute dtype f32
// the compute weights ARE those values (no copy). With bf16 the model keeps one flat bf16
// buffer of the same layout, refreshed by one cast after every change of the master values
// (init, checkpoint load, optimizer step), so each step casts the weights once, not once per
// micro-batch. Gradients always go to the f32 master gradient buffer. The bf16 copy lives on
// the store's device.
#pragma once

#include <cstddef>

#include "parallel/parameter.h"

namespace megatron {

class ComputeWeights {
 public:
  // dtype: F32 or BF16. The store may still be unallocated; views are bound on refresh().
  ComputeWeights(ParameterStore& store, DType dtype);

  // Re-derives the compute copies from the master values. Call after store.allocate() and
  // after every change of the values; a no-op copy-wise for f32.
  void refresh();

  DType dtype() const { return dtype_; }
  // Parameter `index` (as returned by ParameterStore::add) in the compute dtype, local shape.
  const Tensor& weight(size_t index) const;
  // Its f32 master value and f32 gradient (gradients accumulate there).
  const Tensor& master(size_t index) const;
  Tensor& grad(size_t index) const;

 private:
  ParameterStore& store_;
  DType dtype_;
  Tensor flat_;                // [total local elements] in dtype_ (bf16 only)
  std::vector<Tensor> views_;  // one per parameter, local shape, dtype_
};

}  // namespace megatron
