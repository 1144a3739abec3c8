// Page-locked host memory through which MpiCommunicator moves CUDA tensors (D2H, MPI on host
// memory, H2D) when MPI itself cannot read device memory. Built only with MEGATRON_CUDA.
//
// One buffer per process, grown on demand (at least doubling, never shrunk) and reused by every
// call, so a step pays cudaMallocHost only while the buffer grows to its working size, never per
// call. MpiCommunicator bounds what one call stages at a time (kStagingPieceBytes), so the buffer
// stays at most that large whatever the tensor size. The buffer is deliberately never freed: a
// static destructor would run after the CUDA runtime has begun shutting down; the process's exit
// returns it.
#pragma once

#include <cstddef>
#include <mutex>

namespace megatron::cuda {

class PinnedStaging {
 public:
  static PinnedStaging& instance();

  // At least `bytes` of page-locked host memory (64-byte aligned); valid until the next reserve.
  // Hold lock() from reserve until the last use of the memory.
  void* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

 private:
  PinnedStaging() = default;
  std::mutex mutex_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Copies `rows` rows of `row_bytes` bytes each from src (rows `src_pitch` bytes apart) to dst
// (rows `dst_pitch` bytes apart), between device memory and page-locked host memory in either
// direction, on the compute stream (so it is ordered after the kernels that wrote the source);
// returns when the copy is done, so host memory may be read or reused at once.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows);

}  // namespace megatron::cuda
