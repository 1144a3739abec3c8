// Pinned staging for host-to-device uploads (contract: kernels/cuda/staged_upload.h).
#include "kernels/cuda/staged_upload.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "core/cuda/cuda_context.h"

namespace megatron::kernels::cuda {

namespace {

// Never freed: it lives as long as the process, and freeing pinned memory at exit could race
// CUDA's own teardown.
class Staging {
 public:
  static Staging& instance() {
    static Staging* staging = new Staging();
    return *staging;
  }

  void upload(void* dst, const void* src, size_t bytes) {
    // First: it makes the bound GPU current on this thread, which the event below belongs to.
    const cudaStream_t stream = megatron::cuda::compute_stream();
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (s.pending) MT_CUDA_CHECK(cudaEventSynchronize(s.copied));
    s.pending = false;
    if (s.capacity < bytes) {  // grows geometrically: a few reallocations per slot in all
      const size_t capacity = std::max({bytes, 2 * s.capacity, size_t(64) << 10});
      if (s.host) MT_CUDA_CHECK(cudaFreeHost(s.host));
      s.host = nullptr;
      s.capacity = 0;
      MT_CUDA_CHECK(cudaMallocHost(&s.host, capacity));
      s.capacity = capacity;
    }
    if (!s.copied) MT_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    std::memcpy(s.host, src, bytes);
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream));
    MT_CUDA_CHECK(cudaEventRecord(s.copied, stream));
    s.pending = true;
  }

 private:
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t copied = nullptr;
    bool pending = false;  // a copy from this slot was queued and may not have run yet
  };
  std::mutex mutex_;
  std::array<Slot, 8> slots_;
  size_t next_ = 0;
};

}  // namespace

void staged_upload(void* dst, const void* src, size_t bytes) {
  Staging::instance().upload(dst, src, bytes);
}

}  // namespace megatron::kernels::cuda
