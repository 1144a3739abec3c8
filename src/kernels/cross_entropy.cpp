// Vocab-sharded cross-entropy pieces (contract: kernels/cross_entropy.h): argument checks, then
// the device's backend.
#include "kernels/cross_entropy.h"

#include <limits>

#include "kernels/dispatch.h"
#include "kernels/indexing.h"

namespace megatron::kernels {

namespace {

// Checks logits [N, V_local] and valid_cols; returns N.
int64_t check_logits(const Tensor& logits, int64_t valid_cols, const char* kernel) {
  check_float_contiguous(logits, kernel);
  MT_CHECK(logits.dim() == 2, kernel, ": logits must be [N, V_local], got ", logits.describe());
  MT_CHECK(valid_cols >= 0 && valid_cols <= logits.size(1), kernel, ": valid_cols ", valid_cols,
           " must be in [0, V_local = ", logits.size(1), "]");
  return logits.size(0);
}

void check_stat(const Tensor& t, int64_t n, const char* what) {
  check_shape(t, {n}, what);
  check_dtype(t, DType::F32, what);
  check_contiguous(t, what);
}

void check_targets(const Tensor& targets, int64_t n, const char* what) {
  check_shape(targets, {n}, what);
  check_dtype(targets, DType::I32, what);
  check_contiguous(targets, what);
}

}  // namespace

void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max) {
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_row_max logits");
  check_stat(row_max, n, "cross_entropy_row_max row_max");
  const Device device = operand_device("cross_entropy_row_max", {&logits, &row_max});
  MT_DISPATCH(device, cross_entropy_row_max, logits, valid_cols, row_max);
}

void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit) {
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_sum_exp_target logits");
  check_targets(targets, n, "cross_entropy_sum_exp_target targets");
  check_stat(row_max, n, "cross_entropy_sum_exp_target row_max");
  check_stat(sum_exp, n, "cross_entropy_sum_exp_target sum_exp");
  check_stat(target_logit, n, "cross_entropy_sum_exp_target target_logit");
  const Device device = operand_device("cross_entropy_sum_exp_target",
                                       {&logits, &targets, &row_max, &sum_exp, &target_logit});
  // Targets are global vocabulary ids: a negative one is bad input, not another shard's.
  const int64_t bad =
      first_out_of_range(targets, 0, int64_t(std::numeric_limits<int32_t>::max()) + 1);
  MT_CHECK(bad < 0, "cross_entropy target ", bad, " is ",
           targets.slice(0, bad, bad + 1).to_vector<int32_t>()[0], ", expected a vocabulary id");
  MT_DISPATCH(device, cross_entropy_sum_exp_target, logits, targets, vocab_start, valid_cols,
              row_max, sum_exp, target_logit);
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss) {
  check_defined(row_max, "cross_entropy_loss row_max");
  MT_CHECK(row_max.dim() == 1, "cross_entropy_loss row_max must be [N], got ", row_max.describe());
  const int64_t n = row_max.size(0);
  check_stat(row_max, n, "cross_entropy_loss row_max");
  check_stat(sum_exp, n, "cross_entropy_loss sum_exp");
  check_stat(target_logit, n, "cross_entropy_loss target_logit");
  check_stat(loss, n, "cross_entropy_loss loss");
  const Device device =
      operand_device("cross_entropy_loss", {&row_max, &sum_exp, &target_logit, &loss});
  MT_DISPATCH(device, cross_entropy_loss, row_max, sum_exp, target_logit, loss);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid_cols, const Tensor& row_max, const Tensor& sum_exp,
                            const Tensor& dloss, Tensor& dlogits) {
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_backward logits");
  check_targets(targets, n, "cross_entropy_backward targets");
  check_stat(row_max, n, "cross_entropy_backward row_max");
  check_stat(sum_exp, n, "cross_entropy_backward sum_exp");
  check_stat(dloss, n, "cross_entropy_backward dloss");
  check_shape(dlogits, logits.shape(), "cross_entropy_backward dlogits");
  check_dtype(dlogits, logits.dtype(), "cross_entropy_backward dlogits");
  check_contiguous(dlogits, "cross_entropy_backward dlogits");
  const Device device = operand_device("cross_entropy_backward",
                                       {&logits, &targets, &row_max, &sum_exp, &dloss, &dlogits});
  MT_DISPATCH(device, cross_entropy_backward, logits, targets, vocab_start, valid_cols, row_max,
              sum_exp, dloss, dlogits);
}

}  // namespace megatron::kernels
