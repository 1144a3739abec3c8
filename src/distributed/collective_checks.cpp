#include "distributed/collective_checks.h"

namespace megatron {

void check_comm_tensor(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  MT_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous, got ", t.describe());
}

void check_chunked_dim0(const Tensor& chunk, const char* chunk_name, const Tensor& whole,
                        const char* whole_name, int group_size, const char* op) {
  MT_CHECK(chunk.dtype() == whole.dtype(), op, ": ", chunk_name, " ", chunk.describe(), " and ",
           whole_name, " ", whole.describe(), " must have the same dtype");
  MT_CHECK(chunk.device() == whole.device(), op, ": ", chunk_name, " is on ", chunk.device().str(),
           " and ", whole_name, " on ", whole.device().str(),
           "; both tensors of one call must be on the same device");
  MT_CHECK(chunk.dim() >= 1, op, ": tensors need at least one dimension, got ", chunk.describe());
  Shape expected = chunk.shape();
  expected[0] *= group_size;
  MT_CHECK(whole.shape() == expected, op, ": ", whole_name, " must have shape ",
           shape_str(expected), " (group size ", group_size, " x ", chunk_name, " ",
           shape_str(chunk.shape()), " along dim 0), got ", shape_str(whole.shape()));
}

void check_nonblocking_reduction(const Tensor& t, const char* op) {
  const DType d = t.dtype();
  MT_CHECK(d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64, op,
           ": reduces f32, f64, i32 or i64 tensors, got ", t.describe(),
           "; reduce 16-bit floats with the blocking all_reduce / reduce_scatter");
}

void check_scatter_counts(const Tensor& t, std::span<const int64_t> counts, int group_size,
                          const char* op) {
  MT_CHECK(int64_t(counts.size()) == group_size, op, ": ", counts.size(), " counts for a group of ",
           group_size, " (one per rank)");
  int64_t total = 0;
  for (const int64_t c : counts) {
    MT_CHECK(c >= 0, op, ": negative count ", c);
    total += c;
  }
  MT_CHECK(t.dim() == 1 && t.numel() == total, op, ": the tensor must be 1-D with the ", total,
           " elements of the counts, got ", t.describe());
}

void check_peer_rank(int r, int size, const char* op, const char* what) {
  MT_CHECK(r >= 0 && r < size, op, ": ", what, " rank ", r, " is outside the group of size ", size,
           " (expected 0..", size - 1, ")");
}

void check_split_color(int color) {
  MT_CHECK(color >= 0, "split: color must be >= 0, got ", color);
}

}  // namespace megatron
