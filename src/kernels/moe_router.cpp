// The MoE router's kernels (contract: kernels/moe_router.h): argument checks, then the
// device's backend.
#include "kernels/moe_router.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// Checks logits f32 or f64 [N, E] (contiguous); returns E.
int64_t check_logits(const Tensor& logits, const char* what) {
  check_defined(logits, what);
  MT_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::F64, what,
           " must be f32 or f64 (the router dtype), got ", logits.describe());
  check_contiguous(logits, what);
  MT_CHECK(logits.dim() == 2, what, " must be [N, E], got ", logits.describe());
  return logits.size(1);
}

void check_dlogits(const Tensor& dlogits, const Tensor& logits, const char* what) {
  check_dtype(dlogits, logits.dtype(), what);
  check_contiguous(dlogits, what);
  check_shape(dlogits, logits.shape(), what);
}

void check_params(const MoeTopkParams& p, int64_t experts) {
  MT_CHECK(p.topk >= 1 && p.topk <= experts, "moe top-k: k = ", p.topk, " of ", experts,
           " experts");
  if (p.num_groups > 0) {
    MT_CHECK(experts % p.num_groups == 0 && p.group_topk >= 1 && p.group_topk <= p.num_groups &&
                 p.topk % p.group_topk == 0 && p.topk / p.group_topk <= experts / p.num_groups,
             "moe top-k: ", p.num_groups, " groups, ", p.group_topk, " chosen, k = ", p.topk,
             " do not fit ", experts, " experts");
  }
  MT_CHECK(!p.pre_softmax || !p.sigmoid, "moe top-k: pre-softmax applies to softmax scores");
}

void check_topk_tensor(const Tensor& t, DType dtype, int64_t n, int64_t k, const char* what) {
  check_dtype(t, dtype, what);
  check_contiguous(t, what);
  check_shape(t, {n, k}, what);
}

}  // namespace

void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopkParams& p,
                      Tensor& indices, Tensor& probs) {
  const int64_t e = check_logits(logits, "moe_topk_forward logits");
  check_params(p, e);
  const int64_t n = logits.size(0);
  check_topk_tensor(indices, DType::I32, n, p.topk, "moe_topk_forward indices");
  check_topk_tensor(probs, DType::F32, n, p.topk, "moe_topk_forward probs");
  if (expert_bias.defined()) {
    MT_CHECK(p.sigmoid, "moe_topk_forward: the expert bias applies to sigmoid scores");
    check_dtype(expert_bias, DType::F32, "moe_topk_forward expert_bias");
    check_shape(expert_bias, {e}, "moe_topk_forward expert_bias");
  }
  const Device device = operand_device("moe_topk_forward", {&logits, &indices, &probs});
  if (expert_bias.defined()) operand_device("moe_topk_forward", {&logits, &expert_bias});
  MT_DISPATCH(device, moe_topk_forward, logits, expert_bias, p, indices, probs);
}

void moe_topk_weights(const Tensor& logits, const Tensor& indices, const MoeTopkParams& p,
                      Tensor& probs) {
  const int64_t e = check_logits(logits, "moe_topk_weights logits");
  check_params(p, e);
  MT_CHECK(p.num_groups == 0, "moe_topk_weights: groups only change the choice");
  const int64_t n = logits.size(0);
  check_topk_tensor(indices, DType::I32, n, p.topk, "moe_topk_weights indices");
  check_topk_tensor(probs, DType::F32, n, p.topk, "moe_topk_weights probs");
  const Device device = operand_device("moe_topk_weights", {&logits, &indices, &probs});
  MT_DISPATCH(device, moe_topk_weights, logits, indices, p, probs);
}

void moe_topk_backward(const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                       const MoeTopkParams& p, Tensor& dlogits) {
  const int64_t e = check_logits(logits, "moe_topk_backward logits");
  check_params(p, e);
  const int64_t n = logits.size(0);
  check_topk_tensor(dprobs, DType::F32, n, p.topk, "moe_topk_backward dprobs");
  check_topk_tensor(indices, DType::I32, n, p.topk, "moe_topk_backward indices");
  check_dlogits(dlogits, logits, "moe_topk_backward dlogits");
  const Device device = operand_device("moe_topk_backward", {&dprobs, &logits, &indices, &dlogits});
  MT_DISPATCH(device, moe_topk_backward, dprobs, logits, indices, p, dlogits);
}

void moe_aux_loss_stats(const Tensor& logits, int64_t topk, bool sigmoid, int64_t groups,
                        Tensor& counts, Tensor& score_sums) {
  const int64_t e = check_logits(logits, "moe_aux_loss_stats logits");
  MT_CHECK(topk >= 1 && topk <= e, "moe_aux_loss_stats: k = ", topk, " of ", e, " experts");
  MT_CHECK(groups >= 1 && logits.size(0) % groups == 0, "moe_aux_loss_stats: ", logits.size(0),
           " tokens in ", groups, " groups");
  check_topk_tensor(counts, logits.dtype(), groups, e, "moe_aux_loss_stats counts");
  check_topk_tensor(score_sums, logits.dtype(), groups, e, "moe_aux_loss_stats score_sums");
  const Device device = operand_device("moe_aux_loss_stats", {&logits, &counts, &score_sums});
  MT_DISPATCH(device, moe_aux_loss_stats, logits, topk, sigmoid, groups, counts, score_sums);
}

void moe_aux_loss_backward(const Tensor& logits, const Tensor& weights, bool sigmoid,
                           Tensor& dlogits) {
  const int64_t e = check_logits(logits, "moe_aux_loss_backward logits");
  check_dtype(weights, logits.dtype(), "moe_aux_loss_backward weights");
  check_contiguous(weights, "moe_aux_loss_backward weights");
  MT_CHECK(weights.dim() == 2 && weights.size(1) == e && weights.size(0) >= 1 &&
               logits.size(0) % weights.size(0) == 0,
           "moe_aux_loss_backward weights must be [groups, ", e, "] with groups dividing ",
           logits.size(0), " tokens, got ", weights.describe());
  check_dlogits(dlogits, logits, "moe_aux_loss_backward dlogits");
  const Device device = operand_device("moe_aux_loss_backward", {&logits, &weights, &dlogits});
  MT_DISPATCH(device, moe_aux_loss_backward, logits, weights, sigmoid, dlogits);
}

double moe_z_loss_sum(const Tensor& logits) {
  check_logits(logits, "moe_z_loss_sum logits");
  const Device device = operand_device("moe_z_loss_sum", {&logits});
  return MT_DISPATCH(device, moe_z_loss_sum, logits);
}

void moe_z_loss_backward(const Tensor& logits, double scale, Tensor& dlogits) {
  check_logits(logits, "moe_z_loss_backward logits");
  check_dlogits(dlogits, logits, "moe_z_loss_backward dlogits");
  const Device device = operand_device("moe_z_loss_backward", {&logits, &dlogits});
  MT_DISPATCH(device, moe_z_loss_backward, logits, scale, dlogits);
}

void moe_expert_bias_update(const Tensor& tokens_per_expert, float rate, Tensor& expert_bias) {
  check_defined(tokens_per_expert, "moe_expert_bias_update tokens_per_expert");
  check_dtype(tokens_per_expert, DType::F32, "moe_expert_bias_update tokens_per_expert");
  check_contiguous(tokens_per_expert, "moe_expert_bias_update tokens_per_expert");
  MT_CHECK(tokens_per_expert.dim() == 2,
           "moe_expert_bias_update tokens_per_expert must be [R, E], got ",
           tokens_per_expert.describe());
  check_dtype(expert_bias, DType::F32, "moe_expert_bias_update expert_bias");
  check_contiguous(expert_bias, "moe_expert_bias_update expert_bias");
  check_shape(expert_bias, tokens_per_expert.shape(), "moe_expert_bias_update expert_bias");
  const Device device =
      operand_device("moe_expert_bias_update", {&tokens_per_expert, &expert_bias});
  MT_DISPATCH(device, moe_expert_bias_update, tokens_per_expert, rate, expert_bias);
}

}  // namespace megatron::kernels
