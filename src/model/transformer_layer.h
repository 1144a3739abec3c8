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
//
// Selective recompute of the layer's own regions (--recompute-modules, TransformerConfig):
//   layernorm  (pre-LN) the two LayerNorms run into the norm-output slot, an arena shared by the
//              layers of a stack that holds one layer's LayerNorm outputs: each forward
//              overwrites it, each backward refills it first (LN1(x), LN2(h) from the kept
//              x and h) before anything reads it. The consumers (attention, MLP, MoE) keep
//              views of the slot, so the refill must land at the same addresses: the slot is
//              reset before every fill and filled by the same allocations of the same shapes
//              (checked). Megatron-Core refills the discarded output's storage the same way.
//   mlp        a dense layer's MLP runs in `workspace`; backward re-runs it from its input.
//   moe        a MoE layer's whole MoeLayer::forward (router, dispatch, experts, combine, the
//              shared expert) runs in `workspace`; backward re-runs it from its input. The
//              router losses are the forward's (a value in Ctx); the expert-bias token counts
//              are taken in the backward only (MoeLayer::backward), so they are counted once.
// Inside the modules: core_attn and mla_up_proj (model/attention.h), moe_act and
// shared_experts (model/moe_layer.h). Regions recomputed in backward run their collectives
// again (the sequence all-gathers, the expert exchange): every rank of the group recomputes
// the same layers in the same order.
#pragma once

#include <memory>

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
    // --recompute-modules layernorm: the LayerNorms' outputs in the norm-output slot (their
    // contents overwritten by later layers, refilled by backward); undefined otherwise.
    Tensor first_ln_output, second_ln_output;
    // --recompute-modules mlp / moe: the MLP block's input [s, b, h] (the MLP's or the
    // MoE's Ctx then holds dead workspace views; backward re-runs the block from here).
    Tensor mlp_input;
  };

  // Layer `layer_number` (0-based, global) of the stack: parameters "<prefix>layers.<i>.", a
  // mixture of experts where TransformerConfig::is_moe_layer says.
  // `norm_outputs`: the norm-output slot the stack's layers share (--recompute-modules
  // layernorm; see above); null: the layer makes its own.
  TransformerLayer(int layer_number, const TransformerConfig& config, const ParallelState& ps,
                   ParameterStore& store, const ComputeWeights& weights,
                   std::shared_ptr<Arena> norm_outputs = nullptr);
  // A layer outside the stack (multi-token prediction's, model/multi_token_prediction.h):
  // parameters named "<prefix><name>" (prefix ends in '.'), dropout keyed by `layer_number`
  // (past the stack's), its MLP a mixture of experts when `moe`.
  TransformerLayer(int layer_number, const std::string& prefix, bool moe,
                   const TransformerConfig& config, const ParallelState& ps, ParameterStore& store,
                   const ComputeWeights& weights, std::shared_ptr<Arena> norm_outputs = nullptr);

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
  // --recompute-modules layernorm: LN1(x) and LN2(h) into the norm-output slot again, at the
  // forward's addresses, with their LayerNorm contexts into `ctx`.
  void refill_norm_outputs(Ctx& ctx) const;
  Tensor backward_post_ln(const Ctx& ctx, Tensor dy, float loss_scale, Arena& arena) const;
  // The MLP block (dense or MoE): x → its output, without the dense MLP's output bias. What the
  // backward recomputes (--recompute-modules mlp, moe, moe_act, shared_experts) goes to
  // `workspace`, not kept.
  Tensor mlp_forward(Ctx& ctx, const Tensor& x, bool train, Arena& arena, Arena& workspace) const;
  // Whether the MLP block is recomputed whole (--recompute-modules mlp on a dense layer, moe
  // on a MoE layer).
  bool recomputes_mlp_block() const;
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
  std::optional<ParallelMLP> mlp_;       // a dense layer's
  std::optional<MoeLayer> moe_;          // a MoE layer's
  mutable Tensor no_bias_;               // undefined: the MoE output's bias
  std::shared_ptr<Arena> norm_outputs_;  // the norm-output slot (--recompute-modules layernorm)
};

}  // namespace megatron
