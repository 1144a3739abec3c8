#include "model/bert_binary_head.h"

#include "kernels/bias_add.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/indexing.h"

namespace megatron {

namespace {
constexpr int64_t kClasses = 2;  // in order / swapped
}

BertBinaryHead::BertBinaryHead(const BertConfig& config, ParameterStore& store,
                               const ComputeWeights& weights)
    : config_(config),
      weights_(weights),
      binary_weight_(store.add({"binary_head.weight", {kClasses, config.hidden_size}, -1, true})),
      binary_bias_(store.add({"binary_head.bias", {kClasses}, -1, false})) {}

void BertBinaryHead::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[binary_weight_], seed, config_.init_method_std);
  init_constant(store.params()[binary_bias_], 0.0f);
}

Tensor BertBinaryHead::forward(Ctx& ctx, const Tensor& pooled, Arena& arena) const {
  const int64_t b = pooled.size(0);
  check_shape(pooled, {b, config_.hidden_size}, "BERT sentence-order head input");
  check_dtype(pooled, DType::F32, "BERT sentence-order head input");
  ctx.pooled = pooled;
  ctx.logits = arena.alloc({b, kClasses}, DType::F32);  // [b, 2]
  kernels::gemm(pooled, false, weights_.master(binary_weight_), true, ctx.logits);
  kernels::bias_add_forward(ctx.logits, weights_.master(binary_bias_));
  return ctx.logits;
}

float BertBinaryHead::loss(Ctx& ctx, const Tensor& labels, Arena& arena) const {
  const int64_t b = ctx.logits.size(0);
  check_shape(labels, {b}, "BERT sentence-order labels");
  check_dtype(labels, DType::I32, "BERT sentence-order labels");
  const int64_t bad = kernels::first_out_of_range(labels, 0, kClasses);
  MT_REQUIRE(bad < 0, "BERT sentence-order label ", element_value<int32_t>(labels, bad),
             " is not 0 or 1");
  ctx.labels = labels;
  ctx.row_max = arena.alloc({b}, DType::F32);
  ctx.sum_exp = arena.alloc({b}, DType::F32);
  Tensor target_logit = arena.alloc({b}, DType::F32), losses = arena.alloc({b}, DType::F32);
  kernels::cross_entropy_row_max(ctx.logits, kClasses, ctx.row_max);
  kernels::cross_entropy_sum_exp_target(ctx.logits, labels, 0, kClasses, ctx.row_max, ctx.sum_exp,
                                        target_logit);
  kernels::cross_entropy_loss(ctx.row_max, ctx.sum_exp, target_logit, losses);
  Tensor ones = arena.alloc({b}, DType::F32);  // [b]
  kernels::fill(ones, 1.0f);
  return float(kernels::weighted_sum(losses, ones).weighted / double(b));
}

Tensor BertBinaryHead::backward(const Ctx& ctx, float grad_scale, Arena& arena) const {
  const int64_t b = ctx.logits.size(0), h = config_.hidden_size;
  Tensor dloss = arena.alloc({b}, DType::F32);  // [b]
  kernels::fill(dloss, float(double(grad_scale) / double(b)));
  Tensor dlogits = arena.alloc({b, kClasses}, DType::F32);  // [b, 2]
  kernels::cross_entropy_backward(ctx.logits, ctx.labels, 0, kClasses, ctx.row_max, ctx.sum_exp,
                                  dloss, dlogits);
  kernels::bias_add_backward(dlogits, weights_.grad(binary_bias_));
  kernels::gemm(dlogits, true, ctx.pooled, false, weights_.grad(binary_weight_), 1.0f, 1.0f);
  Tensor dpooled = arena.alloc({b, h}, DType::F32);  // [b, h]
  kernels::gemm(dlogits, false, weights_.master(binary_weight_), false, dpooled);
  return dpooled;
}

}  // namespace megatron
