#include "parallel/column_parallel_linear.h"

#include "kernels/bias_add.h"
#include "parallel/local_linear.h"
#include "parallel/mappings.h"

namespace megatron {

ColumnParallelLinear::ColumnParallelLinear(const ColumnParallelLinearConfig& config,
                                           const ParallelState& ps, ParameterStore& store,
                                           const ComputeWeights& weights)
    : config_(config), tp_(ps.tp), weights_(weights) {
  MT_CHECK(config.output_size % ps.tp_size == 0, config.name, ": output size ", config.output_size,
           " is not divisible by the tensor-model-parallel size ", ps.tp_size);
  weight_index_ = store.add({config.name + ".weight", {config.output_size, config.input_size}, 0});
  if (config.bias) bias_index_ = store.add({config.name + ".bias", {config.output_size}, 0, false});
}

void ColumnParallelLinear::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, config_.init_std);
  if (config_.bias) init_constant(store.params()[bias_index_], 0.0f);
}

Tensor ColumnParallelLinear::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  MT_CHECK(x.size(-1) == config_.input_size, config_.name, ": input ", x.describe(),
           " must have last dimension ", config_.input_size);
  const Tensor& w = weights_.weight(weight_index_);                       // [out/t, in]
  ctx.input = CopyToTpRegion::forward(x).view({-1, config_.input_size});  // [N, in]
  Tensor y = local_linear_forward(ctx.input, w, arena);                   // [N, out/t]
  if (config_.bias && !config_.skip_bias_add) kernels::bias_add_forward(y, bias());
  y = y.view(with_last(x.shape(), w.size(0)));
  return config_.gather_output ? GatherFromTpRegion::forward(*tp_, y, arena) : y;
}

Tensor ColumnParallelLinear::backward(const Ctx& ctx, const Tensor& dy, Arena& arena) const {
  const Tensor& w = weights_.weight(weight_index_);  // [out/t, in]
  Tensor dy_local = config_.gather_output ? GatherFromTpRegion::backward(*tp_, dy, arena) : dy;
  Tensor dy2 = dy_local.view({-1, w.size(0)});  // [N, out/t]
  if (config_.bias && !config_.skip_bias_add) kernels::bias_add_backward(dy2, bias_grad());
  Tensor dx = local_linear_backward(dy2, ctx.input, w, weights_.grad(weight_index_), arena);
  CopyToTpRegion::backward(*tp_, dx);
  return dx.view(with_last(dy.shape(), config_.input_size));
}

const Tensor& ColumnParallelLinear::bias() const {
  MT_CHECK(config_.bias, config_.name, " has no bias");
  return weights_.weight(bias_index_);
}

Tensor& ColumnParallelLinear::bias_grad() const {
  MT_CHECK(config_.bias, config_.name, " has no bias");
  return weights_.grad(bias_index_);
}

}  // namespace megatron
