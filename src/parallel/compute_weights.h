// ComputeWeights: the copies of the parameters that the forward and backward GEMMs read.
//
// Parameters the GEMMs and embeddings read are served in the compute dtype, weight(i); the few
// that a layer reads in f32 (LayerNorm's γ and β, BERT's pooler and heads, the LM-head bias)
// are served in f32, master(i). Where they come from depends on the store's value dtype:
// - f32 values (the store's values are the fp32 weights): with compute dtype f32 the compute
//   weights ARE those values (no copy); with bf16 the model keeps one flat bf16 buffer of the
//   same layout, refreshed by one cast after every change of the values (init, checkpoint
//   load, optimizer step), so each step casts the weights once, not once per micro-batch.
//   master(i) is the value itself.
// - bf16 values (a trainer whose optimizer holds the fp32 master weights, --bf16): weight(i)
//   is the value itself, and master(i) an f32 copy of it, made on first use and refreshed
//   with the rest, so only the parameters read in f32 pay for a second copy.
// Gradients always go to the f32 gradient buffer. Every copy lives on the store's device.
#pragma once

#include <cstddef>
#include <vector>

#include "parallel/parameter.h"

namespace megatron {

class ComputeWeights {
 public:
  // dtype: F32 or BF16 (F32 needs f32 values). The store may still be unallocated; views are
  // bound on refresh().
  ComputeWeights(ParameterStore& store, DType dtype);

  // Re-derives the compute copies from the values. Call after store.allocate() and after
  // every change of the values; a no-op copy-wise for f32.
  void refresh();

  DType dtype() const { return dtype_; }
  // Parameter `index` (as returned by ParameterStore::add) in the compute dtype, local shape.
  const Tensor& weight(size_t index) const;
  // Its value in f32 (the value itself, or with bf16 values an f32 copy made on the first
  // call: the model calls it from one thread) and its f32 gradient (gradients accumulate there).
  const Tensor& master(size_t index) const;
  Tensor& grad(size_t index) const;

 private:
  ParameterStore& store_;
  DType dtype_;
  Tensor flat_;                // [total local elements] in dtype_ (bf16 compute, f32 values only)
  std::vector<Tensor> views_;  // one per parameter, local shape, dtype_
  // With bf16 values: f32 [local shape] copies of the parameters read through master(),
  // undefined for the others.
  mutable std::vector<Tensor> f32_copies_;
};

}  // namespace megatron
