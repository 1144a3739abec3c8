#include "parallel/context_parallel_layout.h"

#include "core/error.h"
#include "kernels/elementwise.h"

namespace megatron {

ContextParallelLayout ContextParallelLayout::of(int64_t seq, int cp_size, int cp_rank) {
  MT_CHECK(cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size, "context-parallel rank ", cp_rank,
           " of ", cp_size);
  MT_REQUIRE(cp_size == 1 || (seq > 0 && seq % (2 * cp_size) == 0), "--seq-length ", seq,
             " must be divisible by 2 x --context-parallel-size = ", 2 * cp_size,
             " (each sequence is cut into that many chunks); choose a multiple of ", 2 * cp_size);
  return {seq, cp_size, cp_rank};
}

ContextParallelLayout ContextParallelLayout::of_local(int64_t local_seq, int cp_size, int cp_rank) {
  return of(local_seq * cp_size, cp_size, cp_rank);
}

int64_t ContextParallelLayout::position(int64_t i) const {
  if (cp_size == 1) return i;
  const int64_t c = chunk();
  return i < c ? chunk_begin(0) + i : chunk_begin(1) + (i - c);
}

void ContextParallelLayout::take_local(const Tensor& full, Tensor& local) const {
  MT_CHECK(full.dim() == 2 && full.size(1) == seq, "take_local: expected [b, ", seq, "], got ",
           full.describe());
  check_shape(local, {full.size(0), local_seq()}, "take_local: local");
  if (cp_size == 1) {
    kernels::copy(full, local);
    return;
  }
  const int64_t c = chunk();
  for (int k = 0; k < 2; ++k) {
    Tensor dst = local.slice(1, k * c, (k + 1) * c);
    kernels::copy(full.slice(1, chunk_begin(k), chunk_begin(k) + c), dst);
  }
}

}  // namespace megatron
