#include "model/classification_head.h"

#include "kernels/bias_add.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/indexing.h"

namespace megatron {

ClassificationHead::ClassificationHead(const ClassificationHeadConfig& config,
                                       ParameterStore& store, const ComputeWeights& weights)
    : config_(config),
      weights_(weights),
      weight_(store.add({config.name + ".weight", {config.outputs, config.hidden_size}, -1, true})),
      bias_(store.add({config.name + ".bias", {config.outputs}, -1, false})) {
  MT_CHECK(
      config.outputs >= 1 && config.choices >= 1 && (config.choices == 1 || config.outputs == 1),
      config.name,
      ": a head has outputs >= 1 per row, and multiple choice (choices = ", config.choices,
      ") one output per row (got ", config.outputs, ")");
}

void ClassificationHead::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_], seed, config_.init_std);
  init_constant(store.params()[bias_], 0.0f);
}

Tensor ClassificationHead::forward(Ctx& ctx, const Tensor& pooled, const DropoutScope& scope,
                                   Arena& arena) const {
  const int64_t n = pooled.size(0), h = config_.hidden_size;
  const std::string what = config_.name + " input";
  check_shape(pooled, {n, h}, what.c_str());
  check_dtype(pooled, DType::F32, what.c_str());
  MT_CHECK(n % config_.choices == 0, config_.name, ": ", n, " rows are not whole questions of ",
           config_.choices, " choices");
  ctx.input = arena.alloc({n, h}, DType::F32);
  if (scope.enabled && config_.dropout > 0) {
    ctx.mask = arena.alloc({n, h}, DType::U8);
    kernels::dropout_mask(scope.seed,
                          hidden_dropout_rows(scope, 0, DropoutSite::kClassificationHead, 1, n, h),
                          config_.dropout, ctx.mask);
    kernels::dropout_forward(pooled, ctx.mask, config_.dropout, ctx.input);
  } else {
    ctx.mask = Tensor();
    ctx.input.copy_from(pooled);
  }
  Tensor scores = arena.alloc({n, config_.outputs}, DType::F32);  // [n, outputs]
  kernels::gemm(ctx.input, false, weights_.master(weight_), true, scores);
  kernels::bias_add_forward(scores, weights_.master(bias_));
  ctx.logits = scores.view({n / config_.choices, classes()});
  return ctx.logits;
}

float ClassificationHead::loss(Ctx& ctx, const Tensor& labels, Arena& arena) const {
  const int64_t b = ctx.logits.size(0), c = classes();
  const std::string what = config_.name + " labels";
  check_shape(labels, {b}, what.c_str());
  check_dtype(labels, DType::I32, what.c_str());
  const int64_t bad = kernels::first_out_of_range(labels, 0, c);
  MT_REQUIRE(bad < 0, config_.name, " label ", element_value<int32_t>(labels, bad),
             " is not in [0, ", c, ")");
  ctx.labels = labels;
  ctx.row_max = arena.alloc({b}, DType::F32);
  ctx.sum_exp = arena.alloc({b}, DType::F32);
  Tensor target_logit = arena.alloc({b}, DType::F32), losses = arena.alloc({b}, DType::F32);
  kernels::cross_entropy_row_max(ctx.logits, c, ctx.row_max);
  kernels::cross_entropy_sum_exp_target(ctx.logits, labels, 0, c, ctx.row_max, ctx.sum_exp,
                                        target_logit);
  kernels::cross_entropy_loss(ctx.row_max, ctx.sum_exp, target_logit, losses);
  Tensor ones = arena.alloc({b}, DType::F32);  // [b]
  kernels::fill(ones, 1.0f);
  return float(kernels::weighted_sum(losses, ones).weighted / double(b));
}

Tensor ClassificationHead::backward(const Ctx& ctx, float grad_scale, Arena& arena) const {
  const int64_t b = ctx.logits.size(0), c = classes(), n = ctx.input.size(0);
  const int64_t h = config_.hidden_size;
  Tensor dloss = arena.alloc({b}, DType::F32);  // [b]
  kernels::fill(dloss, float(double(grad_scale) / double(b)));
  Tensor dlogits = arena.alloc({b, c}, DType::F32);  // [b, c] = [n, outputs]
  kernels::cross_entropy_backward(ctx.logits, ctx.labels, 0, c, ctx.row_max, ctx.sum_exp, dloss,
                                  dlogits);
  const Tensor dscores = dlogits.view({n, config_.outputs});
  kernels::bias_add_backward(dscores, weights_.grad(bias_));
  kernels::gemm(dscores, true, ctx.input, false, weights_.grad(weight_), 1.0f, 1.0f);
  Tensor dpooled = arena.alloc({n, h}, DType::F32);  // [n, h]
  kernels::gemm(dscores, false, weights_.master(weight_), false, dpooled);
  if (ctx.mask.defined()) kernels::dropout_backward(dpooled, ctx.mask, config_.dropout, dpooled);
  return dpooled;
}

}  // namespace megatron
