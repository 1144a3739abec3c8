#include "parallel/column_parallel_linear.h"

#include "kernels/bias_add.h"
#include "parallel/local_linear.h"
#include "parallel/mappings.h"

namespace megatron {

ColumnParallelLinear::ColumnParallelLinear(const ColumnParallelLinearConfig& config,
                                           const ParallelState& ps, ParameterStore& store,
                                           const ComputeWeights& weights)
    : config_(config), tp_(ps.tp), weights_(weights) {
  const int64_t k = config.stacked_blocks;
  MT_CHECK(k >= 1 && config.output_size % (k * ps.tp_size) == 0, config.name, ": output size ",
           config.output_size, " is not divisible by ", k,
           " stacked blocks x the tensor-model-parallel size ", ps.tp_size);
  MT_CHECK(!(config.sequence_parallel && config.gather_output), config.name,
           ": gather_output leaves the sequence-parallel region; it takes no sequence shard");
  if (k == 1) {
    weight_index_ =
        store.add({config.name + ".weight", {config.output_size, config.input_size}, 0});
    if (config.bias)
      bias_index_ = store.add({config.name + ".bias", {config.output_size}, 0, false});
  } else {
    const int64_t block = config.output_size / k;
    weight_index_ = store.add({config.name + ".weight", {k, block, config.input_size}, 1});
    if (config.bias) bias_index_ = store.add({config.name + ".bias", {k, block}, 1, false});
  }
}

Tensor ColumnParallelLinear::weight() const {
  return weights_.weight(weight_index_).view({-1, config_.input_size});
}

Tensor ColumnParallelLinear::weight_grad() const {
  return weights_.grad(weight_index_).view({-1, config_.input_size});
}

void ColumnParallelLinear::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, config_.init_std);
  if (config_.bias) init_constant(store.params()[bias_index_], 0.0f);
}

Tensor ColumnParallelLinear::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  MT_CHECK(x.size(-1) == config_.input_size, config_.name, ": input ", x.describe(),
           " must have last dimension ", config_.input_size);
  const Tensor w = weight();  // [out/t, in]
  const Tensor full = TpRegionInput::forward(*tp_, x, config_.sequence_parallel, arena);
  ctx.input = full.view({-1, config_.input_size});       // [N, in]
  Tensor y = local_linear_forward(ctx.input, w, arena);  // [N, out/t]
  if (config_.bias && !config_.skip_bias_add) kernels::bias_add_forward(y, bias().flatten());
  y = y.view(with_last(full.shape(), w.size(0)));
  return config_.gather_output ? GatherFromTpRegion::forward(*tp_, y, arena) : y;
}

Tensor ColumnParallelLinear::backward(const Ctx& ctx, const Tensor& dy, Arena& arena) const {
  const Tensor w = weight();  // [out/t, in]
  Tensor dy_local = config_.gather_output ? GatherFromTpRegion::backward(*tp_, dy, arena) : dy;
  Tensor dy2 = dy_local.view({-1, w.size(0)});  // [N, out/t]
  if (config_.bias && !config_.skip_bias_add) {
    Tensor db = bias_grad().flatten();
    kernels::bias_add_backward(dy2, db);
  }
  Tensor dw = weight_grad();
  Tensor dx = local_linear_backward(dy2, ctx.input, w, dw, arena)
                  .view(with_last(dy_local.shape(), config_.input_size));
  return TpRegionInput::backward(*tp_, dx, config_.sequence_parallel, arena);
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
