#include "parallel/parameter.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/elementwise.h"

namespace megatron {

void ParameterStore::set_expert_grid(int ep_rank, int ep_size, int etp_rank, int etp_size) {
  MT_CHECK(params_.empty(), "ParameterStore::set_expert_grid after parameters were registered");
  MT_CHECK(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size && etp_size >= 1 && etp_rank >= 0 &&
               etp_rank < etp_size,
           "ParameterStore::set_expert_grid: EP rank ", ep_rank, " of ", ep_size, ", ETP rank ",
           etp_rank, " of ", etp_size);
  ep_rank_ = ep_rank;
  ep_size_ = ep_size;
  etp_rank_ = etp_rank;
  etp_size_ = etp_size;
}

size_t ParameterStore::add(const ParamSpec& spec) {
  MT_CHECK(!flat_values_.defined(), "parameter '", spec.name, "' registered after allocate()");
  MT_CHECK(index_.count(spec.name) == 0, "parameter '", spec.name, "' registered twice");
  Parameter p;
  p.spec = spec;
  p.local_shape = spec.full_shape;
  // An expert parameter's tensor split is the etp group's (the TP group's by default).
  const int split_size = spec.expert && etp_size_ > 0 ? etp_size_ : tp_size_;
  const int split_rank = spec.expert && etp_size_ > 0 ? etp_rank_ : tp_rank_;
  if (spec.expert) {
    MT_CHECK(!spec.full_shape.empty() && spec.partition_dim != 0, "expert parameter '", spec.name,
             "': dim 0 counts the experts and cannot be its tensor-parallel dimension");
    const int64_t experts = spec.full_shape[0];
    MT_CHECK(experts % ep_size_ == 0, "expert parameter '", spec.name, "': its ", experts,
             " experts are not divisible by the expert-model-parallel size ", ep_size_);
    p.local_shape[0] = experts / ep_size_;
    p.expert_start = int64_t(ep_rank_) * (experts / ep_size_);
    has_experts_ = true;
  }
  if (spec.partition_dim >= 0) {
    MT_CHECK(spec.partition_dim < int(spec.full_shape.size()), "parameter '", spec.name,
             "': partition dim ", spec.partition_dim, " out of range for shape ",
             shape_str(spec.full_shape));
    int64_t full = spec.full_shape[spec.partition_dim];
    MT_CHECK(full % split_size == 0, "parameter '", spec.name, "': dimension ", spec.partition_dim,
             " of size ", full, " is not divisible by the ", spec.expert ? "expert-" : "",
             "tensor-model-parallel size ", split_size);
    p.local_shape[spec.partition_dim] = full / split_size;
    p.local_start = int64_t(split_rank) * (full / split_size);
  }
  params_.push_back(std::move(p));
  index_[spec.name] = params_.size() - 1;
  return params_.size() - 1;
}

size_t ParameterStore::add_buffer(const BufferSpec& spec) {
  MT_CHECK(index_.count(spec.name) == 0, "buffer '", spec.name, "' has a parameter's name");
  for (const Buffer& b : buffers_)
    MT_CHECK(b.spec.name != spec.name, "buffer '", spec.name, "' registered twice");
  buffers_.push_back({spec, Tensor::zeros(spec.shape, DType::F32, device_)});
  return buffers_.size() - 1;
}

void ParameterStore::copy_buffers_from(const ParameterStore& other) {
  for (const Buffer& b : other.buffers()) buffers_[add_buffer(b.spec)].value.copy_from(b.value);
}

bool ParameterStore::contains_persistent_buffer(const std::string& name) const {
  for (const Buffer& b : buffers_)
    if (b.spec.persistent && b.spec.name == name) return true;
  return false;
}

void ParameterStore::allocate(int64_t pad_values_to, DType value_dtype,
                              int64_t pad_expert_values_to) {
  MT_CHECK(!flat_values_.defined(), "ParameterStore::allocate() called twice");
  MT_CHECK(pad_values_to >= 1 && pad_expert_values_to >= 0,
           "ParameterStore::allocate: padding multiples ", pad_values_to, " and ",
           pad_expert_values_to, " must be at least 1 and 0");
  MT_CHECK(value_dtype == DType::F32 || value_dtype == DType::BF16, "parameter values in ",
           dtype_name(value_dtype), " are not supported; expected f32 or bf16");
  auto round_up = [](int64_t n, int64_t multiple) {
    return (n + multiple - 1) / multiple * multiple;
  };
  // The dense parameters, then the expert ones: each kind one range of the flat space.
  int64_t total = 0;
  for (const bool experts : {false, true}) {
    if (experts) {
      dense_part_ = {0, total};
      if (has_experts_ && pad_expert_values_to > 0) total = round_up(total, pad_values_to);
      expert_part_.begin = total;
    }
    for (Parameter& p : params_) {
      if (p.spec.expert != experts) continue;
      p.flat_offset = total;
      total += shape_numel(p.local_shape);
    }
  }
  expert_part_.end = total;
  // Each part's shards are whole blocks of the allocation.
  const int64_t padded =
      pad_expert_values_to > 0
          ? std::max(round_up(dense_part_.end, pad_values_to),
                     expert_part_.begin +
                         round_up(expert_part_.end - expert_part_.begin, pad_expert_values_to))
          : round_up(total, pad_values_to);
  padded_values_ = Tensor::zeros({padded}, value_dtype, device_);
  flat_values_ = padded_values_.slice(0, 0, total);
  flat_grads_ = Tensor::zeros({total}, DType::F32, device_);
  for (Parameter& p : params_) {
    int64_t n = shape_numel(p.local_shape);
    p.value = flat_values_.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape);
    p.grad = flat_grads_.slice(0, p.flat_offset, p.flat_offset + n).view(p.local_shape);
  }
}

Parameter& ParameterStore::get(const std::string& name) {
  auto it = index_.find(name);
  MT_CHECK(it != index_.end(), "no parameter named '", name, "'");
  return params_[it->second];
}

const Parameter& ParameterStore::get(const std::string& name) const {
  auto it = index_.find(name);
  MT_CHECK(it != index_.end(), "no parameter named '", name, "'");
  return params_[it->second];
}

void ParameterStore::set_stage_tie(const std::string& name, StageTie tie) {
  MT_CHECK(!flat_values_.defined(), "parameter '", name, "' tied after allocate()");
  get(name).spec.stage_tie = tie;
}

void ParameterStore::zero_grads() {
  kernels::fill(flat_grads_, 0.0f);
}

std::vector<std::pair<int64_t, int64_t>> ParameterStore::norm_ranges(bool experts) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const int split_rank = experts && etp_size_ > 0 ? etp_rank_ : tp_rank_;
  for (const Parameter& p : params_) {
    if (p.spec.expert != experts) continue;
    if (p.replicated() && split_rank != 0) continue;
    if (p.spec.stage_tie == StageTie::kCopy) continue;
    const int64_t begin = p.flat_offset, end = begin + shape_numel(p.local_shape);
    if (begin == end) continue;
    if (!ranges.empty() && ranges.back().second == begin)
      ranges.back().second = end;
    else
      ranges.emplace_back(begin, end);
  }
  return ranges;
}

int64_t full_element_index(const Parameter& p, int64_t local) {
  const Shape& ls = p.local_shape;
  const Shape& fs = p.spec.full_shape;
  int64_t full = 0, stride = 1;
  for (int64_t d = int64_t(ls.size()) - 1; d >= 0; --d) {
    int64_t i = local % ls[d];
    local /= ls[d];
    if (d == p.spec.partition_dim) i += p.local_start;
    if (d == 0 && p.spec.expert) i += p.expert_start;
    full += i * stride;
    stride *= fs[d];
  }
  return full;
}

uint64_t parameter_stream_key(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: a stable id from the logical name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return philox_key({h});
}

Tensor values_on_host_f32(const Tensor& values) {
  if (values.device().is_cpu() && values.dtype() == DType::F32) return values;
  Tensor host = values.to(Device::CPU);
  if (host.dtype() == DType::F32) return host;
  Tensor converted = Tensor::empty(host.shape(), DType::F32);
  kernels::cast(host, converted);
  return converted;
}

void assign_values_from_host_f32(Tensor& values, const Tensor& host) {
  MT_CHECK(host.device().is_cpu() && host.dtype() == DType::F32 && host.shape() == values.shape(),
           "assign_values_from_host_f32: ", host.describe(), " for values ", values.describe());
  if (values.device().is_cpu()) {
    if (host.raw_data() != values.raw_data()) kernels::cast(host, values);  // else: its own buffer
    return;
  }
  // Converted on the host, then one transfer of the values' bytes.
  Tensor converted = host;
  if (values.dtype() != DType::F32) {
    converted = Tensor::empty(host.shape(), values.dtype());
    kernels::cast(host, converted);
  }
  values.copy_from(converted);
}

void init_normal(Parameter& p, uint64_t seed, float std) {
  PhiloxStream stream(seed, parameter_stream_key(p.spec.name));
  // Drawn on the host in f32 (in place for a host f32 store), then one copy to the store.
  const bool in_place = p.value.device().is_cpu() && p.value.dtype() == DType::F32;
  Tensor host = in_place ? p.value : Tensor::empty(p.local_shape, DType::F32);
  float* v = host.data<float>();
  const int64_t n = host.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = std * stream.normal(uint64_t(full_element_index(p, i)));
  assign_values_from_host_f32(p.value, host);
}

void init_constant(Parameter& p, float value) {
  kernels::fill(p.value, value);
}

}  // namespace megatron
