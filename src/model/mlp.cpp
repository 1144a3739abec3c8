#include "model/mlp.h"

#include "kernels/gelu.h"
#include "kernels/squared_relu.h"
#include "kernels/swiglu.h"
#include "parallel/local_linear.h"

namespace megatron {

ParallelMLP::ParallelMLP(const std::string& prefix, const TransformerConfig& config,
                         const ParallelState& ps, ParameterStore& store,
                         const ComputeWeights& weights, const MlpShape& shape)
    : swiglu_(config.arch.swiglu),
      squared_relu_(config.arch.squared_relu),
      bias_(config.arch.add_bias_linear),
      gelu_(config.gelu),
      dense_h_to_4h_({.name = prefix + "." + shape.fc1,
                      .input_size = config.hidden_size,
                      .output_size = (config.arch.swiglu ? 2 : 1) *
                                     (shape.ffn > 0 ? shape.ffn : config.ffn_size()),
                      .bias = config.arch.add_bias_linear,
                      .skip_bias_add = !config.arch.swiglu,
                      .sequence_parallel = config.sequence_parallel,
                      .init_std = config.hidden_init_std(),
                      .stacked_blocks = config.arch.swiglu ? 2 : 1},
                     ps, store, weights),
      dense_4h_to_h_({.name = prefix + "." + shape.fc2,
                      .input_size = shape.ffn > 0 ? shape.ffn : config.ffn_size(),
                      .output_size = config.hidden_size,
                      .bias = config.arch.add_bias_linear,
                      .input_is_parallel = true,
                      .skip_bias_add = true,
                      .sequence_parallel = config.sequence_parallel,
                      .init_std = config.output_layer_init_std()},
                     ps, store, weights) {}

void ParallelMLP::init_weights(ParameterStore& store, uint64_t seed) const {
  dense_h_to_4h_.init_weights(store, seed);
  dense_4h_to_h_.init_weights(store, seed);
}

const Tensor& ParallelMLP::output_bias() const {
  return bias_ ? dense_4h_to_h_.bias() : no_bias_;
}

Tensor& ParallelMLP::output_bias_grad() const {
  return bias_ ? dense_4h_to_h_.bias_grad() : no_bias_;
}

Tensor ParallelMLP::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  Tensor u = dense_h_to_4h_.forward(ctx.dense_h_to_4h, x, arena);  // [s, b, (2·)ffn/t]
  const int64_t width = u.size(-1), ffn_local = swiglu_ ? width / 2 : width;
  ctx.pre_activation = u.view({-1, width});
  Tensor g = arena.alloc(with_last(u.shape(), ffn_local), u.dtype());  // [s, b, ffn/t]
  Tensor g2 = g.view({-1, ffn_local});
  if (swiglu_)
    kernels::swiglu_forward(ctx.pre_activation, g2);
  else if (squared_relu_)
    kernels::bias_squared_relu_forward(ctx.pre_activation, bias_ ? dense_h_to_4h_.bias() : no_bias_,
                                       g2);
  else
    kernels::bias_gelu_forward(ctx.pre_activation, bias_ ? dense_h_to_4h_.bias() : no_bias_, g2,
                               gelu_);
  return dense_4h_to_h_.forward(ctx.dense_4h_to_h, g, arena);
}

Tensor ParallelMLP::backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const {
  Tensor dg = dense_4h_to_h_.backward(ctx.dense_4h_to_h, dout, arena);  // [s, b, ffn/t]
  Tensor du = arena.alloc(with_last(dg.shape(), ctx.pre_activation.size(1)), dg.dtype());
  Tensor du2 = du.view(ctx.pre_activation.shape());
  const Tensor dg2 = dg.view({-1, dg.size(-1)});
  if (swiglu_)
    kernels::swiglu_backward(dg2, ctx.pre_activation, du2);
  else if (squared_relu_)
    kernels::bias_squared_relu_backward(dg2, ctx.pre_activation,
                                        bias_ ? dense_h_to_4h_.bias() : no_bias_, du2,
                                        bias_ ? dense_h_to_4h_.bias_grad() : no_bias_);
  else
    kernels::bias_gelu_backward(dg2, ctx.pre_activation, bias_ ? dense_h_to_4h_.bias() : no_bias_,
                                du2, bias_ ? dense_h_to_4h_.bias_grad() : no_bias_, gelu_);
  return dense_h_to_4h_.backward(ctx.dense_h_to_4h, du, arena);
}

}  // namespace megatron
