#include "parallel/compute_weights.h"

#include "kernels/elementwise.h"

namespace megatron {

ComputeWeights::ComputeWeights(ParameterStore& store, DType dtype) : store_(store), dtype_(dtype) {
  MT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "compute dtype ", dtype_name(dtype),
           " is not supported; expected f32 or bf16");
}

void ComputeWeights::refresh() {
  Tensor& values = store_.flat_values();
  MT_CHECK(values.defined(), "ComputeWeights::refresh() before ParameterStore::allocate()");
  auto& params = store_.params();
  if (values.dtype() == dtype_) {  // the values themselves
    views_.clear();
    for (const Parameter& p : params) views_.push_back(p.value);
    f32_copies_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      if (f32_copies_[i].defined()) kernels::cast(params[i].value, f32_copies_[i]);
    return;
  }
  MT_CHECK(values.dtype() == DType::F32, "compute dtype ", dtype_name(dtype_),
           " cannot be derived from parameter values in ", dtype_name(values.dtype()));
  if (!flat_.defined() || flat_.numel() != values.numel() || flat_.device() != values.device()) {
    flat_ = Tensor::empty({values.numel()}, dtype_, values.device());
    views_.clear();
    for (const Parameter& p : params) {
      const int64_t n = shape_numel(p.local_shape);
      views_.push_back(flat_.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape));
    }
  }
  kernels::cast(values, flat_);
}

const Tensor& ComputeWeights::weight(size_t index) const {
  MT_CHECK(index < views_.size(), "compute weight ", index,
           " requested before ComputeWeights::refresh() (", views_.size(), " bound)");
  return views_[index];
}

const Tensor& ComputeWeights::master(size_t index) const {
  const Tensor& value = store_.params().at(index).value;
  if (value.dtype() == DType::F32) return value;
  MT_CHECK(index < f32_copies_.size(), "f32 weight ", index,
           " requested before ComputeWeights::refresh()");
  Tensor& copy = f32_copies_[index];
  if (!copy.defined()) {
    copy = Tensor::empty(value.shape(), DType::F32, value.device());
    kernels::cast(value, copy);
  }
  return copy;
}

Tensor& ComputeWeights::grad(size_t index) const {
  return store_.params().at(index).grad;
}

}  // namespace megatron
