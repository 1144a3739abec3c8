// Embedding gather / scatter-add over a vocab-sharded table on CPU (contract:
// kernels/embedding.h, checked by kernels/embedding.cpp).
#include <algorithm>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const int64_t n = ids.numel(), v = table.size(0), c = table.size(1);
  dispatch_float(table.dtype(), "embedding_forward table", [&](auto tag) {
    using T = decltype(tag);
    const int32_t* id = ids.data<int32_t>();  // [N]
    const T* tb = table.data<T>();            // [V_local, C]
    T* o = out.data<T>();                     // [N, C]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t local = int64_t(id[r]) - vocab_start;
      if (local >= 0 && local < v)
        std::copy(tb + local * c, tb + (local + 1) * c, o + r * c);
      else
        std::fill(o + r * c, o + (r + 1) * c, from_f32<T>(0.f));
    }
  });
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start,
                        Tensor& dtable) {
  const int64_t n = ids.numel(), v = dtable.size(0), c = dtable.size(1);
  dispatch_float(dout.dtype(), "embedding_backward dout", [&](auto tag) {
    using T = decltype(tag);
    const int32_t* id = ids.data<int32_t>();  // [N]
    const T* g = dout.data<T>();              // [N, C]
    float* dt = dtable.data<float>();         // [V_local, C]
    // Threads own disjoint column blocks and walk the tokens in order: no races on repeated
    // ids and the same summation order for any thread count (deterministic).
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(c, j0 + kBlock);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t local = int64_t(id[r]) - vocab_start;
        if (local < 0 || local >= v) continue;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) dt[local * c + j] += to_f32(g[r * c + j]);
      }
    }
  });
}

}  // namespace megatron::kernels::cpu
