// Embedding gather / scatter-add over a vocab-sharded table on CPU (contract:
// kernels/embedding.h).
#include "kernels/embedding.h"

#include <algorithm>

#include "kernels/cpu/cpu_common.h"

namespace megatron::kernels {

namespace {

// Checks ids [N] i32 with every id >= 0; returns N.
int64_t check_ids(const Tensor& ids, const char* what) {
  check_dtype(ids, DType::I32, what);
  check_contiguous(ids, what);
  MT_CHECK(ids.dim() == 1, what, " must be [N], got ", ids.describe());
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    MT_CHECK(p[i] >= 0, what, "[", i, "] is ", p[i], ", expected a vocabulary id >= 0");
  return ids.numel();
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  cpu::require_cpu("embedding_forward", {&ids, &table, &out});
  const int64_t n = check_ids(ids, "embedding_forward ids");
  cpu::check_float_contiguous(table, "embedding_forward table");
  MT_CHECK(table.dim() == 2, "embedding_forward table must be [V_local, C], got ",
           table.describe());
  const int64_t v = table.size(0), c = table.size(1);
  check_shape(out, {n, c}, "embedding_forward out");
  check_dtype(out, table.dtype(), "embedding_forward out");
  check_contiguous(out, "embedding_forward out");
  cpu::dispatch_float(table.dtype(), "embedding_forward table", [&](auto tag) {
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
        std::fill(o + r * c, o + (r + 1) * c, cpu::from_f32<T>(0.f));
    }
  });
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start,
                        Tensor& dtable) {
  cpu::require_cpu("embedding_backward", {&dout, &ids, &dtable});
  const int64_t n = check_ids(ids, "embedding_backward ids");
  check_dtype(dtable, DType::F32, "embedding_backward dtable");
  check_contiguous(dtable, "embedding_backward dtable");
  MT_CHECK(dtable.dim() == 2, "embedding_backward dtable must be [V_local, C], got ",
           dtable.describe());
  const int64_t v = dtable.size(0), c = dtable.size(1);
  cpu::check_float_contiguous(dout, "embedding_backward dout");
  check_shape(dout, {n, c}, "embedding_backward dout");
  cpu::dispatch_float(dout.dtype(), "embedding_backward dout", [&](auto tag) {
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
        for (int64_t j = j0; j < j1; ++j) dt[local * c + j] += cpu::to_f32(g[r * c + j]);
      }
    }
  });
}

}  // namespace megatron::kernels
