#include "parallel/full_tensors.h"

#include <sstream>

#include "kernels/elementwise.h"

namespace megatron {

Tensor local_slice(const Parameter& p, const Tensor& full) {
  MT_CHECK(full.shape() == p.spec.full_shape, "parameter '", p.spec.name, "': full tensor ",
           full.describe(), ", expected shape ", shape_str(p.spec.full_shape));
  // An expert parameter's experts (dim 0) first: all of them at expert-parallel size 1.
  const Tensor mine =
      p.spec.expert ? full.slice(0, p.expert_start, p.expert_start + p.local_shape[0]) : full;
  if (p.replicated()) return mine;
  const int d = p.spec.partition_dim;
  return mine.slice(d, p.local_start, p.local_start + p.local_shape[d]);
}

namespace {

// The persistent buffer named `name`, or nullptr.
const Buffer* persistent_buffer(const ParameterStore& store, const std::string& name) {
  for (const Buffer& b : store.buffers())
    if (b.spec.persistent && b.spec.name == name) return &b;
  return nullptr;
}

}  // namespace

void assign_from_full_tensors(const std::map<std::string, Tensor>& full, ParameterStore& store) {
  std::ostringstream problems;
  int count = 0;
  for (const Parameter& p : store.params()) {
    auto it = full.find(p.spec.name);
    if (it == full.end()) {
      problems << "\n  " << p.spec.name << ": missing (model shape " << shape_str(p.spec.full_shape)
               << ")";
      ++count;
    } else if (it->second.shape() != p.spec.full_shape || it->second.dtype() != DType::F32) {
      problems << "\n  " << p.spec.name << ": given " << it->second.describe()
               << ", model shape f32" << shape_str(p.spec.full_shape);
      ++count;
    }
  }
  for (const auto& [name, t] : full) {
    if (store.contains(name)) continue;
    if (const Buffer* b = persistent_buffer(store, name)) {
      if (t.shape() != b->spec.shape || t.dtype() != DType::F32) {
        problems << "\n  " << name << ": given " << t.describe() << ", buffer shape f32"
                 << shape_str(b->spec.shape);
        ++count;
      }
      continue;
    }
    problems << "\n  " << name << ": not a model parameter or persistent buffer";
    ++count;
  }
  MT_CHECK(count == 0, "weights do not match the model (", count, " problem", count == 1 ? "" : "s",
           "):", problems.str());
  for (Parameter& p : store.params()) {
    const Tensor slice = local_slice(p, full.at(p.spec.name));
    if (slice.device() == p.value.device())
      kernels::copy(slice, p.value);
    else  // between devices only contiguous bytes move: gather a strided slice first
      p.value.copy_from(slice.is_contiguous() ? slice : slice.clone());
  }
  for (Buffer& b : store.buffers()) {
    auto it = full.find(b.spec.name);
    if (b.spec.persistent && it != full.end()) b.value.copy_from(it->second);
  }
}

}  // namespace megatron
