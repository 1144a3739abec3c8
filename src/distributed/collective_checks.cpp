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

void check_peer_rank(int r, int size, const char* op, const char* what) {
  MT_CHECK(r >= 0 && r < size, op, ": ", what, " rank ", r, " is outside the group of size ", size,
           " (expected 0..", size - 1, ")");
}

void check_split_color(int color) {
  MT_CHECK(color >= 0, "split: color must be >= 0, got ", color);
}

}  // namespace megatron
