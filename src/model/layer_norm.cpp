#include "model/layer_norm.h"

#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

namespace megatron {

LayerNorm::LayerNorm(const std::string& name, int64_t hidden, float eps, ParameterStore& store,
                     const ComputeWeights& weights, Normalization kind, bool sequence_parallel)
    : hidden_(hidden), eps_(eps), kind_(kind), weights_(weights) {
  auto spec = [&](const char* suffix) {
    return ParamSpec{.name = name + suffix,
                     .full_shape = {hidden},
                     .partition_dim = -1,
                     .weight_decay = false,
                     .sequence_parallel = sequence_parallel};
  };
  weight_index_ = store.add(spec(".weight"));
  if (kind_ == Normalization::kLayerNorm) bias_index_ = store.add(spec(".bias"));
}

void LayerNorm::init_weights(ParameterStore& store) const {
  init_constant(store.params()[weight_index_], 1.0f);
  if (kind_ == Normalization::kLayerNorm) init_constant(store.params()[bias_index_], 0.0f);
}

Tensor LayerNorm::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  MT_CHECK(x.size(-1) == hidden_, "LayerNorm: input ", x.describe(), " must end in ", hidden_);
  ctx.input = x.view({-1, hidden_});  // [N, h]
  const int64_t n = ctx.input.size(0);
  ctx.rstd = arena.alloc({n}, DType::F32);
  Tensor y = arena.alloc({n, hidden_}, x.dtype());  // [N, h]
  if (kind_ == Normalization::kRMSNorm) {
    kernels::rmsnorm_forward(ctx.input, weights_.master(weight_index_), eps_, y, ctx.rstd);
    return y.view(x.shape());
  }
  ctx.mean = arena.alloc({n}, DType::F32);
  kernels::layernorm_forward(ctx.input, weights_.master(weight_index_),
                             weights_.master(bias_index_), eps_, y, ctx.mean, ctx.rstd);
  return y.view(x.shape());
}

void LayerNorm::backward(const Ctx& ctx, const Tensor& dy, Tensor& dx, float beta_dx) const {
  Tensor dx2 = dx.view({-1, hidden_});
  if (kind_ == Normalization::kRMSNorm) {
    kernels::rmsnorm_backward(dy.view({-1, hidden_}), ctx.input, weights_.master(weight_index_),
                              ctx.rstd, dx2, weights_.grad(weight_index_), beta_dx);
    return;
  }
  kernels::layernorm_backward(dy.view({-1, hidden_}), ctx.input, weights_.master(weight_index_),
                              ctx.mean, ctx.rstd, dx2, weights_.grad(weight_index_),
                              weights_.grad(bias_index_), beta_dx);
}

}  // namespace megatron
