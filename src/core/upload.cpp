#include "core/upload.h"

#include <cstring>

#include "core/device_runtime.h"

namespace megatron {

namespace {
constexpr size_t kAlign = 64;  // every view starts on a cache line (and an element boundary)
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

std::vector<Tensor> upload(const std::vector<Tensor>& tensors, Arena& arena) {
  const Device device = arena.device();
  std::vector<Tensor> out = tensors;
  std::vector<size_t> offsets(tensors.size(), 0);
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || t.device() == device) continue;
    MT_CHECK(t.device().is_cpu(), "upload: ", t.describe(), " lives on ", t.device().str(),
             "; only host tensors can be uploaded to ", device.str());
    offsets[i] = total;
    total += align_up(t.nbytes());
  }
  if (total == 0) return out;

  // Pack on the host (any strides), then one copy into one device block.
  thread_local std::vector<char> staging;
  if (staging.size() < total) staging.resize(total);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || t.device() == device) continue;
    Tensor packed = Tensor::from_blob(staging.data() + offsets[i], t.shape(), t.dtype());
    packed.copy_from(t);
  }
  Tensor block = arena.alloc({int64_t(total)}, DType::U8);
  copy_bytes(block.raw_data(), device, staging.data(), Device::CPU, total);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || t.device() == device) continue;
    const int64_t element_offset =
        (block.offset() + int64_t(offsets[i])) / int64_t(dtype_size(t.dtype()));
    out[i] = Tensor(block.storage(), element_offset, t.shape(), contiguous_strides(t.shape()),
                    t.dtype());
  }
  return out;
}

}  // namespace megatron
