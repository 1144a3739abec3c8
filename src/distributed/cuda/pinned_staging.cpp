#include "distributed/cuda/pinned_staging.h"

#include <algorithm>

#include "core/cuda/cuda_context.h"

namespace megatron::cuda {

PinnedStaging& PinnedStaging::instance() {
  static PinnedStaging* staging = new PinnedStaging;  // never destroyed, see the header
  return *staging;
}

void* PinnedStaging::reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  // Doubling keeps the number of cudaMallocHost calls logarithmic in the working size.
  const size_t grown = std::max(bytes, 2 * capacity_);
  const size_t rounded = (grown + 4095) / 4096 * 4096;
  if (data_ != nullptr) {
    MT_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    capacity_ = 0;
  }
  void* p = nullptr;
  const cudaError_t status = cudaMallocHost(&p, rounded);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    MT_THROW("cannot allocate ", rounded, " bytes of page-locked host memory to stage a CUDA ",
             "tensor for MPI: ", cudaGetErrorString(status),
             " (use --distributed-backend nccl, or raise the locked-memory limit)");
  }
  data_ = p;
  capacity_ = rounded;
  return data_;
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  const cudaStream_t stream = compute_stream();
  // cudaMemcpy2D refuses pitches above the device's memPitch (2^31 - 1 bytes on current GPUs);
  // beyond that, one copy per row.
  constexpr size_t kMaxPitch = (size_t(1) << 31) - 1;
  if (rows == 1 || dst_pitch > kMaxPitch || src_pitch > kMaxPitch) {
    for (size_t r = 0; r < rows; ++r) {
      MT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + r * dst_pitch,
                                    static_cast<const char*>(src) + r * src_pitch, row_bytes,
                                    cudaMemcpyDefault, stream));
    }
  } else {
    MT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                    cudaMemcpyDefault, stream));
  }
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace megatron::cuda
