#include "model/mlp.h"

#include "kernels/gelu.h"

namespace megatron {

ParallelMLP::ParallelMLP(const std::string& prefix, const TransformerConfig& config,
                         const ParallelState& ps, ParameterStore& store,
                         const ComputeWeights& weights)
    : dense_h_to_4h_({.name = prefix + ".dense_h_to_4h",
                      .input_size = config.hidden_size,
                      .output_size = config.ffn_size(),
                      .skip_bias_add = true,
                      .init_std = config.init_method_std},
                     ps, store, weights),
      dense_4h_to_h_({.name = prefix + ".dense_4h_to_h",
                      .input_size = config.ffn_size(),
                      .output_size = config.hidden_size,
                      .input_is_parallel = true,
                      .skip_bias_add = true,
                      .init_std = config.output_layer_init_std()},
                     ps, store, weights) {}

void ParallelMLP::init_weights(ParameterStore& store, uint64_t seed) const {
  dense_h_to_4h_.init_weights(store, seed);
  dense_4h_to_h_.init_weights(store, seed);
}

Tensor ParallelMLP::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  Tensor u = dense_h_to_4h_.forward(ctx.dense_h_to_4h, x, arena);  // [s, b, ffn/t]
  const int64_t ffn_local = u.size(-1);
  ctx.pre_activation = u.view({-1, ffn_local});
  Tensor g = arena.alloc(u.shape(), u.dtype());
  Tensor g2 = g.view({-1, ffn_local});
  kernels::bias_gelu_forward(ctx.pre_activation, dense_h_to_4h_.bias(), g2);
  return dense_4h_to_h_.forward(ctx.dense_4h_to_h, g, arena);
}

Tensor ParallelMLP::backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const {
  Tensor dg = dense_4h_to_h_.backward(ctx.dense_4h_to_h, dout, arena);  // [s, b, ffn/t]
  Tensor du = arena.alloc(dg.shape(), dg.dtype());
  Tensor du2 = du.view(ctx.pre_activation.shape());
  kernels::bias_gelu_backward(dg.view(ctx.pre_activation.shape()), ctx.pre_activation,
                              dense_h_to_4h_.bias(), du2, dense_h_to_4h_.bias_grad());
  return dense_h_to_4h_.backward(ctx.dense_h_to_4h, du, arena);
}

}  // namespace megatron
