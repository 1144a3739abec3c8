#include "parallel/row_parallel_linear.h"

#include "kernels/bias_add.h"
#include "parallel/local_linear.h"
#include "parallel/mappings.h"

namespace megatron {

RowParallelLinear::RowParallelLinear(const RowParallelLinearConfig& config, const ParallelState& ps,
                                     ParameterStore& store, const ComputeWeights& weights)
    : config_(config), tp_(ps.tp), weights_(weights) {
  MT_CHECK(config.input_size % ps.tp_size == 0, config.name, ": input size ", config.input_size,
           " is not divisible by the tensor-model-parallel size ", ps.tp_size);
  weight_index_ = store.add({config.name + ".weight", {config.output_size, config.input_size}, 1});
  if (config.bias)
    bias_index_ = store.add({.name = config.name + ".bias",
                             .full_shape = {config.output_size},
                             .partition_dim = -1,
                             .weight_decay = false,
                             .sequence_parallel = config.sequence_parallel});
}

void RowParallelLinear::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, config_.init_std);
  if (config_.bias) init_constant(store.params()[bias_index_], 0.0f);
}

Tensor RowParallelLinear::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  const Tensor& w = weights_.weight(weight_index_);  // [out, in/t]
  const int64_t in_local = w.size(1);
  MT_CHECK(x.size(-1) == (config_.input_is_parallel ? in_local : config_.input_size), config_.name,
           ": input ", x.describe(), " has the wrong last dimension (expected ",
           config_.input_is_parallel ? in_local : config_.input_size, ")");
  Tensor x_local = config_.input_is_parallel ? x : ScatterToTpRegion::forward(*tp_, x, arena);
  ctx.input = x_local.view({-1, in_local});  // [N, in/t]
  Tensor y = local_linear_forward(ctx.input, w, arena)
                 .view(with_last(x.shape(), config_.output_size));  // [..., out], partial sums
  if (config_.sequence_parallel)
    y = ReduceScatterToSequenceParallelRegion::forward(*tp_, y, arena);  // [s/t, ..., out]
  else
    ReduceFromTpRegion::forward(*tp_, y);
  if (config_.bias && !config_.skip_bias_add) {
    Tensor y2 = y.view({-1, config_.output_size});
    kernels::bias_add_forward(y2, bias());
  }
  return y;
}

Tensor RowParallelLinear::backward(const Ctx& ctx, const Tensor& dy, Arena& arena) const {
  const Tensor& w = weights_.weight(weight_index_);  // [out, in/t]
  if (config_.bias && !config_.skip_bias_add)
    kernels::bias_add_backward(dy.view({-1, config_.output_size}), bias_grad());
  const Tensor dy_full = config_.sequence_parallel
                             ? ReduceScatterToSequenceParallelRegion::backward(*tp_, dy, arena)
                             : ReduceFromTpRegion::backward(dy);
  Tensor dx = local_linear_backward(dy_full.view({-1, config_.output_size}), ctx.input, w,
                                    weights_.grad(weight_index_), arena)
                  .view(with_last(dy_full.shape(), w.size(1)));  // [..., in/t]
  return config_.input_is_parallel ? dx : ScatterToTpRegion::backward(*tp_, dx, arena);
}

const Tensor& RowParallelLinear::bias() const {
  MT_CHECK(config_.bias, config_.name, " has no bias");
  return weights_.weight(bias_index_);
}

Tensor& RowParallelLinear::bias_grad() const {
  MT_CHECK(config_.bias, config_.name, " has no bias");
  return weights_.grad(bias_index_);
}

}  // namespace megatron
