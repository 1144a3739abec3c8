#include "model/transformer_layer.h"

#include "kernels/dropout.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

std::string layer_prefix(const TransformerConfig& c, int i) {
  return c.name_prefix + "layers." + std::to_string(i) + ".";
}
bool pre_ln(const TransformerConfig& c) {
  return c.layernorm_order == LayerNormOrder::kPreLayerNorm;
}
Tensor rows(const Tensor& t) {
  return t.view({-1, t.size(-1)});
}  // [..., h] → [N, h]
// An upper bound of what two LayerNorm forwards of x [N, h] allocate (per norm: the output,
// rstd, mean and a 1 + γ vector, each rounded up to the arena's alignment).
size_t two_norm_outputs_bytes(const Tensor& x) {
  const size_t n = size_t(x.numel() / x.size(-1)), h = size_t(x.size(-1)), align = 256;
  return 2 * (n * h * dtype_size(x.dtype()) + 2 * n * 4 + h * 4 + 4 * align);
}

}  // namespace

TransformerLayer::TransformerLayer(int layer_number, const TransformerConfig& config,
                                   const ParallelState& ps, ParameterStore& store,
                                   const ComputeWeights& weights,
                                   std::shared_ptr<Arena> norm_outputs)
    : TransformerLayer(layer_number, layer_prefix(config, layer_number),
                       config.is_moe_layer(layer_number), config, ps, store, weights,
                       std::move(norm_outputs)) {}

TransformerLayer::TransformerLayer(int layer_number, const std::string& prefix, bool moe,
                                   const TransformerConfig& config, const ParallelState& ps,
                                   ParameterStore& store, const ComputeWeights& weights,
                                   std::shared_ptr<Arena> norm_outputs)
    : layer_number_(layer_number),
      sequence_rank_(config.sequence_parallel ? ps.tp_rank : 0),
      sequence_shards_(config.sequence_parallel ? ps.tp_size : 1),
      cp_size_(ps.cp_size),
      cp_rank_(ps.cp_rank),
      config_(config),
      first_ln_(prefix + (pre_ln(config) ? "input_layernorm" : "post_attention_layernorm"),
                config.hidden_size, config.layernorm_epsilon, store, weights,
                transformer_norm_options(config)),
      attention_(prefix + "self_attention", layer_number, config, ps, store, weights),
      second_ln_(prefix + (pre_ln(config) ? "post_attention_layernorm" : "post_mlp_layernorm"),
                 config.hidden_size, config.layernorm_epsilon, store, weights,
                 transformer_norm_options(config)) {
  if (moe)
    moe_.emplace(prefix + "mlp", config, ps, store, weights);
  else
    mlp_.emplace(prefix + "mlp", config, ps, store, weights);
  if (config.recompute_layernorm)
    norm_outputs_ =
        norm_outputs ? std::move(norm_outputs) : std::make_shared<Arena>(store.device());
}

void TransformerLayer::init_weights(ParameterStore& store, uint64_t seed) const {
  first_ln_.init_weights(store);
  attention_.init_weights(store, seed);
  second_ln_.init_weights(store);
  if (moe_)
    moe_->init_weights(store, seed);
  else
    mlp_->init_weights(store, seed);
}

bool TransformerLayer::recomputes_mlp_block() const {
  return moe_ ? config_.recompute_moe : config_.recompute_mlp;
}

Tensor TransformerLayer::mlp_forward(Ctx& ctx, const Tensor& x, bool train, Arena& arena,
                                     Arena& workspace) const {
  // A recomputed block keeps only its input; its context's tensors die with `workspace`.
  Arena& kept = recomputes_mlp_block() ? workspace : arena;
  if (recomputes_mlp_block()) ctx.mlp_input = x;
  return moe_ ? moe_->forward(ctx.moe, x, train, kept, &workspace)
              : mlp_->forward(ctx.mlp, x, kept);
}

Tensor TransformerLayer::mlp_backward(const Ctx& ctx, const Tensor& dout, float loss_scale,
                                      Arena& arena) const {
  if (ctx.mlp_input.defined()) {  // re-run the block's forward (training: the backward's)
    Ctx again;
    if (moe_) {
      moe_->forward(again.moe, ctx.mlp_input, true, arena, &arena);
      return moe_->backward(again.moe, dout, loss_scale, arena);
    }
    mlp_->forward(again.mlp, ctx.mlp_input, arena);
    return mlp_->backward(again.mlp, dout, arena);
  }
  return moe_ ? moe_->backward(ctx.moe, dout, loss_scale, arena)
              : mlp_->backward(ctx.mlp, dout, arena);
}

const Tensor& TransformerLayer::mlp_output_bias() const {
  return moe_ ? no_bias_ : mlp_->output_bias();
}

Tensor& TransformerLayer::mlp_output_bias_grad() const {
  return moe_ ? no_bias_ : mlp_->output_bias_grad();
}

MoeLosses TransformerLayer::moe_losses(const Ctx& ctx) const {
  return moe_ ? ctx.moe.router.losses : MoeLosses{};
}

Tensor TransformerLayer::draw_hidden_mask(DropoutSite site, const Tensor& x,
                                          const DropoutScope& scope, Arena& arena) const {
  if (!scope.enabled || config_.hidden_dropout <= 0.0f) return Tensor();
  const int64_t s = x.size(0), b = x.size(1), h = x.size(2);
  Tensor mask = arena.alloc({s * b, h}, DType::U8);  // [s·b, h]
  // A sequence shard [s/t, b, h] starts at local position sequence_rank_·s/t; a
  // context-parallel rank's local positions are its chunks of the sequence.
  const ContextParallelLayout layout =
      ContextParallelLayout::of_local(s * sequence_shards_, cp_size_, cp_rank_);
  kernels::dropout_mask(
      scope.seed,
      hidden_dropout_rows(scope, layer_number_, site, s, b, h, sequence_rank_ * s, layout),
      config_.hidden_dropout, mask);
  return mask;
}

Tensor TransformerLayer::forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                                 const DropoutScope& scope, Arena& arena, Arena& workspace) const {
  MT_CHECK(x.dim() == 3 && x.size(2) == config_.hidden_size, "transformer layer ", layer_number_,
           ": input must be [s, b, ", config_.hidden_size, "], got ", x.describe());
  ctx.attention_dropout_mask = draw_hidden_mask(DropoutSite::kAttentionOutput, x, scope, arena);
  ctx.mlp_dropout_mask = draw_hidden_mask(DropoutSite::kMlpOutput, x, scope, arena);
  return pre_ln(config_) ? forward_pre_ln(ctx, x, pad_mask, scope, arena, workspace)
                         : forward_post_ln(ctx, x, pad_mask, scope, arena, workspace);
}

Tensor TransformerLayer::backward(const Ctx& ctx, Tensor dy, float loss_scale, Arena& arena) const {
  if (ctx.first_ln_output.defined()) {
    Ctx refilled = ctx;
    refill_norm_outputs(refilled);
    return backward_pre_ln(refilled, dy, loss_scale, arena);
  }
  return pre_ln(config_) ? backward_pre_ln(ctx, dy, loss_scale, arena)
                         : backward_post_ln(ctx, dy, loss_scale, arena);
}

void TransformerLayer::refill_norm_outputs(Ctx& ctx) const {
  norm_outputs_->reset();
  const Tensor x = ctx.first_ln.input.view(ctx.first_ln_output.shape());
  const Tensor h = ctx.second_ln.input.view(ctx.second_ln_output.shape());
  const Tensor ln1 = first_ln_.forward(ctx.first_ln, x, *norm_outputs_);
  const Tensor ln2 = second_ln_.forward(ctx.second_ln, h, *norm_outputs_);
  MT_CHECK(ln1.raw_data() == ctx.first_ln_output.raw_data() &&
               ln2.raw_data() == ctx.second_ln_output.raw_data(),
           "transformer layer ", layer_number_,
           ": the norm-output slot (--recompute-modules layernorm) was refilled at other "
           "addresses than its forward's (it grew between the forward and the backward: "
           "micro-batches of different shapes)");
}

Tensor TransformerLayer::forward_pre_ln(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                                        const DropoutScope& scope, Arena& arena,
                                        Arena& workspace) const {
  const float p = config_.hidden_dropout;
  const bool ln_residual = config_.apply_residual_connection_post_layernorm;
  // --recompute-modules layernorm (training): the norms' outputs go to the slot, not kept.
  const bool slot_norms = norm_outputs_ && scope.enabled;
  if (slot_norms) {
    // One block big enough for both norms, so every fill lands at the same addresses.
    const size_t bytes = two_norm_outputs_bytes(x);
    if (norm_outputs_->capacity() < bytes) *norm_outputs_ = Arena(norm_outputs_->device(), bytes);
    norm_outputs_->reset();
  }
  Arena& norms = slot_norms ? *norm_outputs_ : arena;
  Tensor ln1 = first_ln_.forward(ctx.first_ln, x, norms);
  Tensor attn = attention_.forward(ctx.attention, ln1, pad_mask, scope, arena, workspace);
  Tensor h = arena.alloc(x.shape(), x.dtype());  // [s, b, h]
  Tensor h2 = rows(h);
  kernels::bias_dropout_add_forward(rows(attn), attention_.dense_bias(),
                                    rows(ln_residual ? ln1 : x), ctx.attention_dropout_mask, p, h2);
  Tensor ln2 = second_ln_.forward(ctx.second_ln, h, norms);
  if (slot_norms) {
    ctx.first_ln_output = ln1;
    ctx.second_ln_output = ln2;
  }
  Tensor mlp = mlp_forward(ctx, ln2, scope.enabled, arena, workspace);
  Tensor y = arena.alloc(x.shape(), x.dtype());
  Tensor y2 = rows(y);
  kernels::bias_dropout_add_forward(rows(mlp), mlp_output_bias(), rows(ln_residual ? ln2 : h),
                                    ctx.mlp_dropout_mask, p, y2);
  return y;
}

Tensor TransformerLayer::forward_cached(const Tensor& x, LayerKv& kv, const CacheRows& cache_rows,
                                        Arena& arena) const {
  MT_CHECK(pre_ln(config_), "incremental decoding supports pre-LayerNorm layers (GPT) only");
  MT_CHECK(!config_.sequence_parallel,
           "incremental decoding runs without sequence parallelism (a training option)");
  MT_CHECK(x.dim() == 3 && x.size(2) == config_.hidden_size, "transformer layer ", layer_number_,
           ": input must be [s, b, ", config_.hidden_size, "], got ", x.describe());
  const bool ln_residual = config_.apply_residual_connection_post_layernorm;
  Ctx ctx;  // discarded: no backward
  Tensor ln1 = first_ln_.forward(ctx.first_ln, x, arena);
  Tensor attn = attention_.forward_cached(ln1, kv, cache_rows, arena);
  Tensor h = arena.alloc(x.shape(), x.dtype());  // [s, b, h]
  Tensor h2 = rows(h);
  kernels::bias_dropout_add_forward(rows(attn), attention_.dense_bias(),
                                    rows(ln_residual ? ln1 : x), Tensor(), 0.0f, h2);
  Tensor ln2 = second_ln_.forward(ctx.second_ln, h, arena);
  Tensor mlp = mlp_forward(ctx, ln2, false, arena, arena);
  Tensor y = arena.alloc(x.shape(), x.dtype());
  Tensor y2 = rows(y);
  kernels::bias_dropout_add_forward(rows(mlp), mlp_output_bias(), rows(ln_residual ? ln2 : h),
                                    Tensor(), 0.0f, y2);
  return y;
}

Tensor TransformerLayer::backward_pre_ln(const Ctx& ctx, Tensor dy, float loss_scale,
                                         Arena& arena) const {
  const float p = config_.hidden_dropout;
  const bool ln_residual = config_.apply_residual_connection_post_layernorm;
  // MLP block: y = r2 + drop(mlp(LN2(h)) + b), r2 = h (or LN2(h)).
  Tensor dmlp = arena.alloc(dy.shape(), dy.dtype());
  Tensor dmlp2 = rows(dmlp);
  kernels::bias_dropout_add_backward(rows(dy), ctx.mlp_dropout_mask, p, dmlp2,
                                     mlp_output_bias_grad());
  Tensor dln2 = mlp_backward(ctx, dmlp, loss_scale, arena);
  Tensor dh;  // [s, b, h]
  if (ln_residual) {
    kernels::axpy(1.0f, dy, dln2);
    dh = arena.alloc(dy.shape(), dy.dtype());
    second_ln_.backward(ctx.second_ln, dln2, dh, 0.0f);
  } else {
    dh = dy;  // the residual's gradient; LN2's input gradient is added in place
    second_ln_.backward(ctx.second_ln, dln2, dh, 1.0f);
  }
  // Attention block: h = r1 + drop(attn(LN1(x)) + b), r1 = x (or LN1(x)).
  Tensor dattn = arena.alloc(dy.shape(), dy.dtype());
  Tensor dattn2 = rows(dattn);
  kernels::bias_dropout_add_backward(rows(dh), ctx.attention_dropout_mask, p, dattn2,
                                     attention_.dense_bias_grad());
  Tensor dln1 = attention_.backward(ctx.attention, dattn, arena);
  if (ln_residual) {
    kernels::axpy(1.0f, dh, dln1);
    Tensor dx = arena.alloc(dy.shape(), dy.dtype());
    first_ln_.backward(ctx.first_ln, dln1, dx, 0.0f);
    return dx;
  }
  first_ln_.backward(ctx.first_ln, dln1, dh, 1.0f);
  return dh;
}

Tensor TransformerLayer::forward_post_ln(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                                         const DropoutScope& scope, Arena& arena,
                                         Arena& workspace) const {
  const float p = config_.hidden_dropout;
  Tensor attn = attention_.forward(ctx.attention, x, pad_mask, scope, arena, workspace);
  Tensor h = arena.alloc(x.shape(), x.dtype());
  Tensor h2 = rows(h);
  kernels::bias_dropout_add_forward(rows(attn), attention_.dense_bias(), rows(x),
                                    ctx.attention_dropout_mask, p, h2);
  Tensor ln1 = first_ln_.forward(ctx.first_ln, h, arena);
  Tensor mlp = mlp_forward(ctx, ln1, scope.enabled, arena, workspace);
  Tensor h_mlp = arena.alloc(x.shape(), x.dtype());
  Tensor h_mlp2 = rows(h_mlp);
  kernels::bias_dropout_add_forward(rows(mlp), mlp_output_bias(), rows(ln1), ctx.mlp_dropout_mask,
                                    p, h_mlp2);
  return second_ln_.forward(ctx.second_ln, h_mlp, arena);
}

Tensor TransformerLayer::backward_post_ln(const Ctx& ctx, Tensor dy, float loss_scale,
                                          Arena& arena) const {
  const float p = config_.hidden_dropout;
  Tensor dh_mlp = arena.alloc(dy.shape(), dy.dtype());
  second_ln_.backward(ctx.second_ln, dy, dh_mlp, 0.0f);
  Tensor dmlp = dy;  // dy is dead: reuse its memory
  Tensor dmlp2 = rows(dmlp);
  kernels::bias_dropout_add_backward(rows(dh_mlp), ctx.mlp_dropout_mask, p, dmlp2,
                                     mlp_output_bias_grad());
  Tensor dln1 = mlp_backward(ctx, dmlp, loss_scale, arena);
  kernels::axpy(1.0f, dh_mlp, dln1);  // residual from LN1's output
  Tensor dh = arena.alloc(dy.shape(), dy.dtype());
  first_ln_.backward(ctx.first_ln, dln1, dh, 0.0f);
  Tensor dattn = dh_mlp;  // dead after the axpy above: reuse its memory
  Tensor dattn2 = rows(dattn);
  kernels::bias_dropout_add_backward(rows(dh), ctx.attention_dropout_mask, p, dattn2,
                                     attention_.dense_bias_grad());
  Tensor dx = attention_.backward(ctx.attention, dattn, arena);
  kernels::axpy(1.0f, dh, dx);  // residual from x
  return dx;
}

}  // namespace megatron
