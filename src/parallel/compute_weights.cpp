#include "parallel/compute_weights.h"

#include "kernels/elementwise.h"

namespace megatron {

ComputeWeights::ComputeWeights(ParameterStore& store, DType dtype) : store_(store), dtype_(dtype) {
  MT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "compute dtype ", dtype_name(dtype),
           " is not supported; expected f32 or bf16");
}

void ComputeWeights::refresh() {
  Tensor& master = store_.flat_values();
  MT_CHECK(master.defined(), "ComputeWeights::refresh() before ParameterStore::allocate()");
  auto& params = store_.params();
  if (dtype_ == DType::F32) {
    views_.clear();
    for (const Parameter& p : params) views_.push_back(p.value);
    return;
  }
  if (!flat_.defined() || flat_.numel() != master.numel() || flat_.device() != master.device()) {
    flat_ = Tensor::empty({master.numel()}, dtype_, master.device());
    views_.clear();
    for (const Parameter& p : params) {
      const int64_t n = shape_numel(p.local_shape);
      views_.push_back(flat_.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape));
    }
  }
  kernels::cast(master, flat_);
}

const Tensor& ComputeWeights::weight(size_t index) const {
  MT_CHECK(index < views_.size(), "compute weight ", index,
           " requested before ComputeWeights::refresh() (", views_.size(), " bound)");
  return views_[index];
}

const Tensor& ComputeWeights::master(size_t index) const {
  return store_.params().at(index).value;
}

Tensor& ComputeWeights::grad(size_t index) const {
  return store_.params().at(index).grad;
}

}  // namespace megatron
