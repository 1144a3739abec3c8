// TransformerLayer: attention and MLP blocks with residual connections, in one of three
// orders (TransformerConfig):
//   pre-LN (GPT-2, Megatron-LM):  h = x + drop(attn(LN1(x)) + b);  y = h + drop(mlp(LN2(h)) + b)
//     with apply_residual_connection_post_layernorm the residuals are LN1(x) and LN2(h).
//   post-LN (original BERT):      h = LN1(x + drop(attn(x) + b));  y = LN2(h + drop(mlp(h) + b))
// Bias + dropout + residual is one fused kernel. Hidden-dropout masks are keyed by
// (iteration, sample, layer, site) — identical on every TP rank, as the activations are
// replicated. With sequence parallelism (TransformerConfig::sequence_parallel) x, y, the
// LayerNorms, the dropouts and the residuals are this rank's sequence shard [s/t, b, h]; its
// masks are those of its global positions, so the run draws the same masks as at TP = 1.
// Parameter names ("<prefix>layers.<i>."):
//   pre-LN:  input_layernorm, self_attention.*, post_attention_layernorm, mlp.*
//   post-LN: self_attention.*, post_attention_layernorm, mlp.*, post_mlp_layernorm
// On the layers TransformerConfig::is_moe_layer selects, mlp.* is a mixture of experts
// (model/moe_layer.h) instead of the dense MLP; its output has no separate bias.
#pragma once

#include "model/attention.h"
#include "model/layer_norm.h"
#include "model/mlp.h"
#include "model/moe_layer.h"

namespace megatron {

class TransformerLayer {
 public:
  struct Ctx {
    LayerNorm::Ctx first_ln, second_ln;
    ParallelAttention::Ctx attention;
    ParallelMLP::Ctx mlp;
    MoeLayer::Ctx moe;              // on a MoE layer, instead of mlp
    Tensor attention_dropout_mask;  // u8 [s·b, h] or undefined
    Tensor mlp_dropout_mask;        // u8 [s·b, h] or undefined
  };

  // Layer `layer_number` (0-based, global) of the stack: parameters "<prefix>layers.<i>.", a
  // mixture of experts where TransformerConfig::is_moe_layer says.
  TransformerLayer(int layer_number, const TransformerConfig& config, const ParallelState& ps,
                   ParameterStore& store, const ComputeWeights& weights);
  // A layer outside the stack (multi-token prediction's, model/multi_token_prediction.h):
  // parameters named "<prefix><name>" (prefix ends in '.'), dropout keyed by `layer_number`
  // (past the stack's), its MLP a mixture of experts when `moe`.
  TransformerLayer(int layer_number, const std::string& prefix, bool moe,
                   const TransformerConfig& config, const ParallelState& ps, ParameterStore& store,
                   const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] → y [s, b, h] (both [s/t, b, h] with sequence parallelism). pad_mask and
  // workspace as ParallelAttention::forward.
  Tensor forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask, const DropoutScope& scope,
                 Arena& arena, Arena& workspace) const;
  // Incremental (inference) forward of a pre-LN layer: x [s_new, b, h], row r at positions
  // [cache_rows.starts[r], + s_new) of cache row cache_rows.slots[r], attention over the KV cache
  // `kv` (ParallelAttention::forward_cached); no dropout, nothing kept. Everything, y included,
  // goes to `arena`.
  Tensor forward_cached(const Tensor& x, LayerKv& kv, const CacheRows& cache_rows,
                        Arena& arena) const;
  // dy [s, b, h] → dx [s, b, h]. dy is consumed: its memory may be reused for dx.
  // loss_scale: the scale of the main loss's gradient (the loss scale / the micro-batches),
  // which a MoE layer's router losses take for theirs (MoeRouter::backward).
  Tensor backward(const Ctx& ctx, Tensor dy, float loss_scale, Arena& arena) const;
  // A MoE layer's router losses of the micro-batch run in `ctx` (zeros on a dense layer, or
  // out of training).
  MoeLosses moe_losses(const Ctx& ctx) const;

 private:
  Tensor draw_hidden_mask(DropoutSite site, const Tensor& x, const DropoutScope& scope,
                          Arena& arena) const;
  Tensor forward_pre_ln(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                        const DropoutScope& scope, Arena& arena, Arena& workspace) const;
  Tensor forward_post_ln(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                         const DropoutScope& scope, Arena& arena, Arena& workspace) const;
  Tensor backward_pre_ln(const Ctx& ctx, Tensor dy, float loss_scale, Arena& arena) const;
  Tensor backward_post_ln(const Ctx& ctx, Tensor dy, float loss_scale, Arena& arena) const;
  // The MLP block (dense or MoE): x → its output, without the dense MLP's output bias. What the
  // backward recomputes (--recompute-modules moe_act) goes to `workspace`, not kept.
  Tensor mlp_forward(Ctx& ctx, const Tensor& x, bool train, Arena& arena, Arena& workspace) const;
  Tensor mlp_backward(const Ctx& ctx, const Tensor& dout, float loss_scale, Arena& arena) const;
  const Tensor& mlp_output_bias() const;
  Tensor& mlp_output_bias_grad() const;

  int layer_number_;
  int64_t sequence_rank_;    // the TP rank with sequence parallelism (which shard), else 0
  int64_t sequence_shards_;  // t with sequence parallelism, else 1
  int cp_size_, cp_rank_;    // the context-parallel layout of the local sequence
  TransformerConfig config_;
  LayerNorm first_ln_;
  ParallelAttention attention_;
  LayerNorm second_ln_;
  std::optional<ParallelMLP> mlp_;  // a dense layer's
  std::optional<MoeLayer> moe_;     // a MoE layer's
  mutable Tensor no_bias_;          // undefined: the MoE output's bias
};

}  // namespace megatron
