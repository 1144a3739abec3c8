#include "model/layer_norm.h"

#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

namespace megatron {

NormOptions transformer_norm_options(const TransformerConfig& config) {
  return {.kind = config.arch.normalization,
          .zero_centered_gamma = config.arch.apply_layernorm_1p,
          .sequence_parallel = config.sequence_parallel};
}

LayerNorm::LayerNorm(const std::string& name, int64_t hidden, float eps, ParameterStore& store,
                     const ComputeWeights& weights, NormOptions options)
    : hidden_(hidden), eps_(eps), options_(options), weights_(weights) {
  auto spec = [&](const char* suffix) {
    return ParamSpec{.name = name + suffix,
                     .full_shape = {hidden},
                     .partition_dim = -1,
                     .weight_decay = false,
                     .sequence_parallel = options_.sequence_parallel};
  };
  weight_index_ = store.add(spec(".weight"));
  if (options_.kind == Normalization::kLayerNorm) bias_index_ = store.add(spec(".bias"));
}

void LayerNorm::init_weights(ParameterStore& store) const {
  init_constant(store.params()[weight_index_], options_.zero_centered_gamma ? 0.0f : 1.0f);
  if (options_.kind == Normalization::kLayerNorm) init_constant(store.params()[bias_index_], 0.0f);
}

Tensor LayerNorm::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  MT_CHECK(x.size(-1) == hidden_, "LayerNorm: input ", x.describe(), " must end in ", hidden_);
  ctx.input = x.view({-1, hidden_});  // [N, h]
  const int64_t n = ctx.input.size(0);
  ctx.rstd = arena.alloc({n}, DType::F32);
  ctx.gamma = weights_.master(weight_index_);
  if (options_.zero_centered_gamma) {
    Tensor gamma = arena.alloc({hidden_}, DType::F32);  // 1 + weight
    kernels::fill(gamma, 1.0f);
    kernels::axpy(1.0f, ctx.gamma, gamma);
    ctx.gamma = gamma;
  }
  Tensor y = arena.alloc({n, hidden_}, x.dtype());  // [N, h]
  if (options_.kind == Normalization::kRMSNorm) {
    kernels::rmsnorm_forward(ctx.input, ctx.gamma, eps_, y, ctx.rstd);
    return y.view(x.shape());
  }
  ctx.mean = arena.alloc({n}, DType::F32);
  kernels::layernorm_forward(ctx.input, ctx.gamma, weights_.master(bias_index_), eps_, y, ctx.mean,
                             ctx.rstd);
  return y.view(x.shape());
}

void LayerNorm::backward(const Ctx& ctx, const Tensor& dy, Tensor& dx, float beta_dx) const {
  Tensor dx2 = dx.view({-1, hidden_});
  if (options_.kind == Normalization::kRMSNorm) {
    kernels::rmsnorm_backward(dy.view({-1, hidden_}), ctx.input, ctx.gamma, ctx.rstd, dx2,
                              weights_.grad(weight_index_), beta_dx);
    return;
  }
  kernels::layernorm_backward(dy.view({-1, hidden_}), ctx.input, ctx.gamma, ctx.mean, ctx.rstd, dx2,
                              weights_.grad(weight_index_), weights_.grad(bias_index_), beta_dx);
}

}  // namespace megatron
