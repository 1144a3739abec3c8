#include "model/bert_binary_head.h"

#include "kernels/bias_add.h"
#include "kernels/bias_tanh.h"
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
      pooler_weight_(
          store.add({"pooler.dense.weight", {config.hidden_size, config.hidden_size}, -1, true})),
      pooler_bias_(store.add({"pooler.dense.bias", {config.hidden_size}, -1, false})),
      binary_weight_(store.add({"binary_head.weight", {kClasses, config.hidden_size}, -1, true})),
      binary_bias_(store.add({"binary_head.bias", {kClasses}, -1, false})) {}

void BertBinaryHead::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[pooler_weight_], seed, config_.init_method_std);
  init_constant(store.params()[pooler_bias_], 0.0f);
  init_normal(store.params()[binary_weight_], seed, config_.init_method_std);
  init_constant(store.params()[binary_bias_], 0.0f);
}

Tensor BertBinaryHead::forward(Ctx& ctx, const Tensor& hidden, Arena& arena) const {
  const int64_t b = hidden.size(1), h = config_.hidden_size;
  ctx.cls = arena.alloc({b, h}, DType::F32);  // [b, h]
  const Tensor cls = hidden.select(0, 0);     // [b, h], compute dtype
  if (cls.dtype() == DType::F32)
    ctx.cls.copy_from(cls);
  else
    kernels::cast(cls, ctx.cls);
  ctx.pooled = arena.alloc({b, h}, DType::F32);  // [b, h]
  kernels::gemm(ctx.cls, false, weights_.master(pooler_weight_), true, ctx.pooled);
  kernels::bias_tanh_forward(ctx.pooled, weights_.master(pooler_bias_), ctx.pooled);
  ctx.logits = arena.alloc({b, kClasses}, DType::F32);  // [b, 2]
  kernels::gemm(ctx.pooled, false, weights_.master(binary_weight_), true, ctx.logits);
  kernels::bias_add_forward(ctx.logits, weights_.master(binary_bias_));
  return ctx.logits;
}

float BertBinaryHead::loss(Ctx& ctx, const Tensor& labels, Arena& arena) const {
  const int64_t b = ctx.logits.size(0);
  check_shape(labels, {b}, "BERT sentence-order labels");
  check_dtype(labels, DType::I32, "BERT sentence-order labels");
  const int64_t bad = kernels::first_out_of_range(labels, 0, kClasses);
  MT_CHECK(bad < 0, "BERT sentence-order label ", element_value<int32_t>(labels, bad),
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

void BertBinaryHead::backward(const Ctx& ctx, float grad_scale, Tensor& dhidden,
                              Arena& arena) const {
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
  kernels::bias_tanh_backward(dpooled, ctx.pooled, dpooled, weights_.grad(pooler_bias_));
  kernels::gemm(dpooled, true, ctx.cls, false, weights_.grad(pooler_weight_), 1.0f, 1.0f);
  Tensor dcls = arena.alloc({b, h}, DType::F32);  // [b, h]
  kernels::gemm(dpooled, false, weights_.master(pooler_weight_), false, dcls);
  Tensor dcls_rows = dhidden.select(0, 0);  // [b, h], contiguous rows of position 0
  kernels::axpy(1.0f, dcls, dcls_rows);
}

}  // namespace megatron
