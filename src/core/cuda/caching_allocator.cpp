#include "core/cuda/caching_allocator.h"

#include <algorithm>

#include "core/cuda/cuda_context.h"

namespace megatron::cuda {

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: Storage objects freed during static destruction may still return blocks.
  static CachingAllocator* allocator = new CachingAllocator();
  return *allocator;
}

size_t CachingAllocator::size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  const size_t unit = bytes < kSmallLimit ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

void* CachingAllocator::allocate(size_t bytes, int device) {
  MT_CHECK(device == bound_device(), "allocation on GPU ", device, ", but this process drives GPU ",
           bound_device());
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached -= cls;
  } else {
    if (cudaMalloc(&p, cls) != cudaSuccess) {
      (void)cudaGetLastError();
      empty_cache_locked();
      const cudaError_t status = cudaMalloc(&p, cls);
      if (status != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        (void)cudaMemGetInfo(&free_bytes, &total_bytes);
        MT_THROW("out of GPU memory allocating ", bytes, " bytes (", stats_.in_use >> 20,
                 " MiB in use by tensors, ", free_bytes >> 20, " of ", total_bytes >> 20,
                 " MiB free on the device): use a smaller --micro-batch-size, "
                 "--recompute-activations or more tensor-parallel ranks");
      }
    }
    ++stats_.driver_allocations;
  }
  live_[p] = cls;
  stats_.in_use += cls;
  if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.in_use + stats_.cached);
  return p;
}

void CachingAllocator::release(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  MT_CHECK(it != live_.end(), "CachingAllocator::release of a pointer it did not allocate");
  const size_t cls = it->second;
  live_.erase(it);
  free_[cls].push_back(p);
  stats_.in_use -= cls;
  stats_.cached += cls;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  // Blocks on the free lists may still be read by queued kernels of their previous owner.
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [cls, blocks] : free_)
    for (void* p : blocks) MT_CUDA_CHECK(cudaFree(p));
  free_.clear();
  stats_.cached = 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.live_blocks = live_.size();
  return s;
}

}  // namespace megatron::cuda
