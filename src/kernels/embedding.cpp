// Embedding gather / scatter-add (contract: kernels/embedding.h): argument checks, then the
// device's backend.
#include "kernels/embedding.h"

#include <limits>

#include "kernels/dispatch.h"
#include "kernels/indexing.h"

namespace megatron::kernels {

namespace {

// Checks ids [N] i32; returns N.
int64_t check_embedding_ids(const Tensor& ids, const char* what) {
  check_i32_contiguous(ids, what);
  MT_CHECK(ids.dim() == 1, what, " must be [N], got ", ids.describe());
  return ids.numel();
}

// Every id >= 0 (a global vocabulary id), checked on the ids' device by first_out_of_range (so
// call it after operand_device); only a bad id is copied to the host, to name its value.
void check_ids_nonnegative(const Tensor& ids, const char* what) {
  const int64_t i = first_out_of_range(ids, 0, int64_t(std::numeric_limits<int32_t>::max()) + 1);
  MT_CHECK(i < 0, what, "[", i, "] is ", ids.slice(0, i, i + 1).to_vector<int32_t>()[0],
           ", expected a vocabulary id >= 0");
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const int64_t n = check_embedding_ids(ids, "embedding_forward ids");
  check_float_contiguous(table, "embedding_forward table");
  MT_CHECK(table.dim() == 2, "embedding_forward table must be [V_local, C], got ",
           table.describe());
  const int64_t c = table.size(1);
  check_shape(out, {n, c}, "embedding_forward out");
  check_dtype(out, table.dtype(), "embedding_forward out");
  check_contiguous(out, "embedding_forward out");
  const Device device = operand_device("embedding_forward", {&ids, &table, &out});
  check_ids_nonnegative(ids, "embedding_forward ids");
  MT_DISPATCH(device, embedding_forward, ids, table, vocab_start, out);
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start,
                        Tensor& dtable) {
  const int64_t n = check_embedding_ids(ids, "embedding_backward ids");
  check_defined(dtable, "embedding_backward dtable");
  check_dtype(dtable, DType::F32, "embedding_backward dtable");
  check_contiguous(dtable, "embedding_backward dtable");
  MT_CHECK(dtable.dim() == 2, "embedding_backward dtable must be [V_local, C], got ",
           dtable.describe());
  const int64_t c = dtable.size(1);
  check_float_contiguous(dout, "embedding_backward dout");
  check_shape(dout, {n, c}, "embedding_backward dout");
  const Device device = operand_device("embedding_backward", {&dout, &ids, &dtable});
  check_ids_nonnegative(ids, "embedding_backward ids");
  MT_DISPATCH(device, embedding_backward, dout, ids, vocab_start, dtable);
}

}  // namespace megatron::kernels
