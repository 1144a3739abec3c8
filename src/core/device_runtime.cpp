#include "core/device_runtime.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#ifdef MEGATRON_CUDA
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_context.h"
#endif

namespace megatron {

namespace {

#ifndef MEGATRON_CUDA
[[noreturn]] void no_cuda(const char* what) {
  MT_THROW(what,
           ": CUDA memory needs a binary built with CUDA (cmake -DMEGATRON_CUDA=ON, "
           "nvcc required); use --device cpu on this build");
}
#endif

size_t align64(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

}  // namespace

bool cuda_built() {
#ifdef MEGATRON_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef MEGATRON_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

Device default_device(int local_rank) {
  const int gpus = cuda_device_count();
  return gpus > 0 ? Device::cuda(local_rank % gpus) : Device::CPU;
}

void use_device(Device device) {
  if (device.is_cpu()) return;
#ifdef MEGATRON_CUDA
  cuda::bind_device(device.index);
#else
  no_cuda("use_device");
#endif
}

void* device_allocate(size_t bytes, Device device) {
  if (bytes == 0) return nullptr;
  if (device.is_cpu()) {
    // 64-byte alignment: one cache line, and what AVX-512 loads and oneDNN prefer.
    void* p = std::aligned_alloc(64, align64(bytes));
    MT_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
#ifdef MEGATRON_CUDA
  return cuda::CachingAllocator::instance().allocate(bytes, device.index);
#else
  no_cuda("device_allocate");
#endif
}

void device_free(void* p, Device device) {
  if (p == nullptr) return;
  if (device.is_cpu()) return std::free(p);
#ifdef MEGATRON_CUDA
  cuda::CachingAllocator::instance().release(p);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
#ifdef MEGATRON_CUDA
  cuda::copy_async(dst, src, bytes, /*host_involved=*/dst_device.is_cpu() || src_device.is_cpu());
#else
  no_cuda("copy_bytes");
#endif
}

void zero_bytes(void* p, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(p, 0, bytes);
    return;
  }
#ifdef MEGATRON_CUDA
  cuda::zero_async(p, bytes);
#else
  no_cuda("zero_bytes");
#endif
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
#ifdef MEGATRON_CUDA
  cuda::synchronize_compute();
#endif
}

}  // namespace megatron
