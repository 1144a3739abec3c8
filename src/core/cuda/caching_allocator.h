// CachingAllocator: GPU memory for Storage without a cudaMalloc per step.
//
// Requests are rounded up to a size class (multiples of 512 B below 1 MiB, of 2 MiB above) and
// served from a free list of that class; a released block goes back on its list, never to the
// driver. Reuse is stream-ordered: all work that touches a block is queued on the compute stream
// (collectives end with the compute stream waiting for them, cuda_context.h), so a block freed
// by the host may be handed to the next allocation at once — any kernel using the new owner is
// queued after every kernel of the old one. When cudaMalloc fails, the cache is emptied
// (after a device synchronize) and the request retried once; a second failure is an Error
// with the sizes involved. Thread-safe. Built only with MEGATRON_CUDA.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace megatron::cuda {

class CachingAllocator {
 public:
  static CachingAllocator& instance();

  void* allocate(size_t bytes, int device);
  void release(void* p);
  void empty_cache();  // returns every cached (free) block to the driver

  struct Stats {
    size_t in_use = 0;  // bytes of live blocks (rounded sizes)
    size_t cached = 0;  // bytes of free blocks kept for reuse
    size_t peak_in_use = 0;
    size_t peak_reserved = 0;       // peak of in_use + cached (what the driver gave)
    size_t live_blocks = 0;         // live allocations
    size_t driver_allocations = 0;  // cudaMalloc calls so far
  };
  Stats stats() const;

  static size_t size_class(size_t bytes);

 private:
  CachingAllocator() = default;
  void empty_cache_locked();

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, size_t> live_;     // block -> size class
  Stats stats_;
};

}  // namespace megatron::cuda
