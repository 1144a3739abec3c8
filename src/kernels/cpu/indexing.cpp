// Index kernels on CPU (contract: kernels/indexing.h, checked by kernels/indexing.cpp).
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void fill_positions(Tensor& ids, int64_t batch, int64_t start) {
  int32_t* p = ids.data<int32_t>();  // [s · b], seq-major
  const int64_t n = ids.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = int32_t(start + i / batch);
}

int64_t first_out_of_range(const Tensor& ids, int64_t lo, int64_t hi) {
  const int32_t* p = ids.data<int32_t>();  // [N]
  const int64_t n = ids.numel();
  // The first hit of each chunk, then the first chunk with a hit: the lowest index overall.
  const int64_t chunks = reduction_chunks(n);
  std::vector<int64_t> first(size_t(chunks), -1);  // [chunks]
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    for (int64_t i = n * k / chunks; i < n * (k + 1) / chunks; ++i)
      if (p[i] < lo || p[i] >= hi) {
        first[size_t(k)] = i;
        break;
      }
  }
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

}  // namespace megatron::kernels::cpu
