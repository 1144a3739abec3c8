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

namespace {
int64_t checked_row_total(std::span<const int64_t> rows, int group_size, const char* which) {
  MT_CHECK(int64_t(rows.size()) == group_size, "all_to_all_v: ", rows.size(), " ", which,
           " counts for a group of ", group_size, " (one per rank)");
  int64_t total = 0;
  for (const int64_t r : rows) {
    MT_CHECK(r >= 0, "all_to_all_v: negative ", which, " count ", r);
    total += r;
  }
  return total;
}
}  // namespace

int64_t check_all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, const Tensor& out,
                           std::span<const int64_t> recv_rows, int group_size) {
  check_comm_tensor(in, "all_to_all_v", "input");
  check_comm_tensor(out, "all_to_all_v", "output");
  MT_CHECK(in.dtype() == out.dtype(), "all_to_all_v: input ", in.describe(), " and output ",
           out.describe(), " must have the same dtype");
  MT_CHECK(in.device() == out.device(), "all_to_all_v: input is on ", in.device().str(),
           " and output on ", out.device().str(),
           "; both tensors of one call must be on the same device");
  MT_CHECK(in.dim() >= 1 && out.dim() == in.dim(), "all_to_all_v: input ", in.describe(),
           " and output ", out.describe(), " need the same number (>= 1) of dimensions");
  int64_t row_elements = 1;
  for (int64_t d = 1; d < in.dim(); ++d) {
    MT_CHECK(in.shape()[size_t(d)] == out.shape()[size_t(d)], "all_to_all_v: input ", in.describe(),
             " and output ", out.describe(), " differ past dim 0");
    row_elements *= in.shape()[size_t(d)];
  }
  const int64_t sent = checked_row_total(send_rows, group_size, "send");
  const int64_t received = checked_row_total(recv_rows, group_size, "receive");
  MT_CHECK(in.shape()[0] == sent, "all_to_all_v: input ", in.describe(), " must have the ", sent,
           " rows of the send counts");
  MT_CHECK(out.shape()[0] == received, "all_to_all_v: output ", out.describe(), " must have the ",
           received, " rows of the receive counts");
  return row_elements;
}

void check_peer_rank(int r, int size, const char* op, const char* what) {
  MT_CHECK(r >= 0 && r < size, op, ": ", what, " rank ", r, " is outside the group of size ", size,
           " (expected 0..", size - 1, ")");
}

void check_split_color(int color) {
  MT_CHECK(color >= 0, "split: color must be >= 0, got ", color);
}

}  // namespace megatron
