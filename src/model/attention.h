// ParallelAttention: multi-head (or grouped-query) self-attention split by heads across the
// tensor-parallel group (Megatron-LM §3, fig. 3b).
//
//   x [s, b, h] ─QkvProjection─→ qkv [s, b, groups/t, q + 2, d]   (per KV group: its q query
//                                  heads, its key, its value; q = 1 without GQA; see
//                                  model/qkv_projection.h for g < t)
//   [--qk-layernorm: each Q and K head normalised, in place (model/qk_layernorm.h)]
//   [RoPE on Q and K, in place, positions from the cache length when decoding]
//   scores[b, heads/t, s, s] = Q Kᵀ (query head i of a group uses the group's K and V);
//   probs = softmax(scores / √d + mask) in f32 (causal, or a key-padding mask); probs dropped
//   out (masks keyed by global head); context [s, b, heads/t · d] = probs V
//   ─RowParallel (input_is_parallel)─→ out [s, b, h]
// With sequence parallelism x and out are this rank's sequence shard [s/t, b, h]: the QKV
// projection all-gathers x (so attention, and RoPE's positions, cover the whole sequence) and
// the output projection reduce-scatters back to the shard.
// Selective recompute (--recompute-granularity selective, Korthikanti et al. 2022 §5): the
// attention core — scores = QKᵀ, softmax, dropout — keeps nothing for backward but Q, K, V
// (already kept) and the dropout keys; backward recomputes the probabilities and the mask with
// the same kernels from the same inputs, so the result is bit-identical to keeping them, and
// the [b, heads/t, s, s] buffers of a layer live only during its forward and its backward.
// Fused attention (--use-flash-attn / --attention-backend flash, kernels/flash_attention.h):
// the core runs as one kernel that keeps only the log-sum-exp of each query row (f32
// [b, heads/t, s]) instead of the probabilities and the mask; its backward recomputes them
// tile by tile. Same function, the same dropout mask; results equal to f32 rounding. Selective
// recompute has nothing left to recompute then.
// Context parallelism (--context-parallel-size c > 1, docs/parallelism.md): x is this rank's
// local sequence (two chunks, parallel/context_parallel_layout.h); RoPE rotates each chunk at
// its own positions and the core is the context-parallel attention of the layer's
// --cp-comm-type (parallel/context_parallel_attention.h: the K/V ring, an all-gather of K/V,
// or Ulysses all-to-alls), built on the fused kernel whatever --use-flash-attn says (equal to
// the unfused core to f32 rounding). Causal attention only.
// Multi-latent attention (--multi-latent-attention, model/mla_projection.h): the projection is
// MLA's, its qkv the multi-head layout above with d = qk_head_dim + qk_pos_emb_head_dim and the
// values zero-padded to d; RoPE rotates the last qk_pos_emb_head_dim channels of Q and K (whatever
// --position-embedding-type says, as Megatron-Core), the softmax scale is Megatron-Core's
// (TransformerConfig::softmax_scale), and the output projection takes the first v_head_dim
// channels of each context head. Every core (unfused, fused, ring) runs unchanged.
// DeepSeek sparse attention (--experimental-attention-variant dsa, with MLA; model/dsa_indexer.h):
// the lightning indexer scores every key for every query from the whole sequence's hidden state
// and MLA's query latent (all-gathered with sequence parallelism; replicated on every TP rank,
// so every rank selects the same keys), each query keeps its top --dsa-indexer-topk causal keys
// (kernels/sparse_attention.h, topk_key_mask) and the unfused core masks the others in its
// softmax (a per-query key mask, shared by the heads; exact, and what every later step —
// dropout, selective recompute, backward — sees). The fused kernel takes no such mask: with
// DSA the core is the unfused one whatever --use-flash-attn says. Training with
// --dsa-indexer-loss-coeff c > 0 adds the indexer's KL loss: the target is the main attention's
// probabilities of the detached Q and K (dense causal, or the sparse ones with
// --dsa-indexer-use-sparse-loss) summed over all heads (all-reduced over TP) and normalised;
// loss = c · mean over queries of KL(target ‖ softmax(indexer scores)). Its gradient reaches the
// indexer's parameters only, scaled as the LM loss's (Ctx::indexer_grad_scale: the micro-batch's
// grad_scale, Megatron's DSAIndexerLossAutoScaler). Context parallelism is refused.
// --recompute-modules mla_up_proj (MLA only, Megatron-Core's qkv_up_checkpoint): the down
// projections' outputs are kept; the norms, up projections, RoPE (and the QK LayerNorm) run
// in `workspace`, so Q, K and V of the core die with the forward and the backward computes
// them again from the latents (all-gathers included with sequence parallelism).
// Heads are ordered group-major (head = group · q + i), as Megatron-Core and HF's repeat_kv.
// The output projection's bias is NOT added: the layer fuses it with dropout and the residual.
// Q, K, V and the context are strided per-head views, multiplied with batched GEMMs with no
// layout copies: for a fixed query index i within a group, (b, group) has the uniform stride
// (q + 2)·d in qkv, so one batched GEMM per i covers every group.
#pragma once

#include <optional>
#include <string>

#include "kernels/flash_attention.h"
#include "kernels/rotary.h"
#include "model/dsa_indexer.h"
#include "model/kv_cache.h"
#include "model/mla_projection.h"
#include "model/qk_layernorm.h"
#include "model/qkv_projection.h"
#include "model/transformer_config.h"
#include "parallel/context_parallel_attention.h"
#include "parallel/random.h"
#include "parallel/row_parallel_linear.h"

namespace megatron {

class ParallelAttention {
 public:
  struct Ctx {
    QkvProjection::Ctx qkv_linear;
    MlaProjection::Ctx mla;  // --multi-latent-attention instead of qkv_linear
    QkLayerNorm::Ctx qk_norm;
    Tensor qkv;           // [s, b, groups/t, q + 2, d], Q and K after RoPE
    Tensor pad_mask;      // u8 [b, s] or undefined
    DropoutScope scope;   // the attention dropout's keys (selective recompute redraws the mask)
    Tensor probs;         // [b, heads/t, s, s] before dropout; undefined with selective recompute
    Tensor dropout_mask;  // u8 [b·heads/t·s, s] or undefined (no dropout, selective recompute)
    Tensor context;       // fused attention: [s, b, heads/t · d], the core's output
    Tensor lse;           // fused attention: f32 [b, heads/t, s]
    ContextParallelAttention::Ctx cp;  // context parallelism: what its exchange keeps
    RowParallelLinear::Ctx dense;
    // DSA: the indexer's state, the top-k key mask (u8 [b, s, s], 1 = key not attended), and
    // with its loss the loss's gradient w.r.t. the indexer's scores (f32 [b, s, s], for a
    // loss gradient of 1), the loss itself, and the scale its backward applies (the caller's).
    DsaIndexer::Ctx indexer;
    Tensor topk_mask;
    Tensor indexer_dscores;
    double indexer_loss = 0;
    float indexer_grad_scale = 0.0f;
  };

  // Registers "<prefix>.query_key_value.{weight,bias}" and "<prefix>.dense.{weight,bias}"
  // (biases as the config's add_bias_linear / add_qkv_bias say), and with --qk-layernorm
  // "<prefix>.{q,k}_layernorm.*"; with --multi-latent-attention MLA's projections
  // (model/mla_projection.h) instead of query_key_value.
  ParallelAttention(const std::string& prefix, int layer_number, const TransformerConfig& config,
                    const ParallelState& ps, ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] ([s/t, b, h] with sequence parallelism); pad_mask u8 [b, s] (1 = padding
  // key, s the whole sequence) for AttnMaskType::kPadding, else undefined → out shaped like x
  // without the dense bias. What backward needs goes to `arena`; the raw scores and the
  // dropped-out probabilities (and with selective recompute the probabilities and the mask),
  // dead when forward returns, go to `workspace` (may be the same arena). Backward re-derives
  // the dropped-out probabilities from the probabilities and mask (one element-wise pass),
  // which saves two [b, heads/t, s, s] buffers per layer.
  Tensor forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask, const DropoutScope& scope,
                 Arena& arena, Arena& workspace) const;
  // dout shaped like forward's out → dx shaped like x; accumulates the QKV and dense weight
  // gradients (the dense bias gradient is the caller's, via dense_bias_grad()).
  Tensor backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  // Incremental (inference) forward with a KV cache, causal attention only: x [s_new, b, h]
  // holds, for each row r of the step, positions [start_r, start_r + s_new) of cache row
  // slot_r (rows.starts / rows.slots); their keys and values (keys after RoPE at those
  // positions) are written into that row of `kv` ([B, groups/t, max_s, d]) and its queries
  // attend to its positions [0, start_r + s_new) (Sq ≤ Sk). The projections run batched over
  // all rows, the attention core batched over each run of rows in consecutive cache rows: at
  // one start with the causal mask, or (decode, s_new = 1) at different starts over the run's
  // longest keys with each row's later keys masked out (the cache is zeroed at allocation, so
  // they are finite). No dropout, nothing kept for a backward; every temporary goes to `arena`.
  // → out [s_new, b, h] without the dense bias.
  Tensor forward_cached(const Tensor& x, LayerKv& kv, const CacheRows& rows, Arena& arena) const;

  // Whether the layer is DSA's (model/dsa_indexer.h).
  bool sparse() const { return indexer_.has_value(); }

  // Undefined without linear biases (--disable-bias-linear).
  const Tensor& dense_bias() const;
  Tensor& dense_bias_grad() const;

 private:
  struct CoreProbs {
    Tensor probs;         // [b, heads/t, s, s] before dropout
    Tensor dropout_mask;  // u8 [b·heads/t·s, s] or undefined
  };
  // softmax(Q Kᵀ / √d + mask) of qkv [s, b, gl, q + 2, d] and its dropout mask (drawn when
  // scope.enabled), both in `arena`; the raw scores go to `workspace`. Scores and probabilities
  // in `dtype`: qkv's, or f32 (DSA's indexer loss, from bf16 Q and K as Megatron's fp32 target).
  CoreProbs core_probs(const Tensor& qkv, DType dtype, const Tensor& pad_mask,
                       const DropoutScope& scope, Arena& arena, Arena& workspace) const;
  // probs ⊙ mask / (1 − p), in `arena` (probs itself without dropout).
  Tensor dropped_probs(const CoreProbs& core, Arena& arena) const;
  // dqkv [s, b, gl, q + 2, d] (w.r.t. the attention core's Q, K, V) back through RoPE, the QK
  // LayerNorm and the projection → dx.
  Tensor qkv_backward(const Ctx& ctx, Tensor& dqkv, Arena& arena) const;
  // RoPE on the Q and K views of qkv [s, b, gl, q + 2, d] (inverse: its backward), in place.
  void rotate_qk(Tensor& qkv, int64_t position_start, bool inverse) const;
  // rotate_qk of the training sequence qkv [s, b, gl, q + 2, d]: positions from 0, or on a
  // context-parallel rank those of its two chunks.
  void rotate_local_qk(Tensor& qkv, bool inverse) const;
  // The context-parallel attention's parameters for a local sequence of `seq` positions.
  CpAttentionParams cp_params(int64_t seq, const DropoutScope& scope) const;
  // x → qkv [s, b, gl, q + 2, d] through the QKV projection or MLA's, keeping in ctx what its
  // backward (qkv_backward) needs.
  Tensor project(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // MLA from the latents in ctx.mla: up projections, QK LayerNorm, RoPE → qkv (the core's Q
  // and K rotated), everything in `arena`.
  Tensor mla_up_and_rope(Ctx& ctx, Arena& arena) const;
  // backward from a ctx whose qkv is the forward's (kept or recomputed).
  Tensor backward_from_qkv(const Ctx& ctx, const Tensor& dout, Arena& arena) const;
  // The output projection of the core's context [s, b, heads/t · d] (MLA: the first
  // value_dim_ channels of each head taken first) and its backward → dcontext shaped like
  // the context (MLA: zeros in the padding channels).
  Tensor dense_forward(RowParallelLinear::Ctx& ctx, const Tensor& context, Arena& arena) const;
  Tensor dense_backward(const RowParallelLinear::Ctx& ctx, const Tensor& dout, Arena& arena) const;
  // DSA: the indexer's scores of the whole sequence (x: the layer's input, a shard with
  // sequence parallelism), the top-k key mask, and when training with the indexer loss the
  // loss and its gradient, into ctx.
  void select_keys(Ctx& ctx, const Tensor& x, const DropoutScope& scope, Arena& arena,
                   Arena& workspace) const;
  // The indexer's KL loss against the head-summed main attention (model comment above) of
  // scores f32 [b, s, s] → ctx.indexer_loss and ctx.indexer_dscores.
  void indexer_loss(Ctx& ctx, const Tensor& scores, Arena& arena, Arena& workspace) const;
  // The softmax's key mask: the padding mask, or DSA's top-k mask.
  const Tensor& key_mask(const Ctx& ctx) const { return indexer_ ? ctx.topk_mask : ctx.pad_mask; }
  // The fused kernel's parameters for this layer; `dropout_rows` receives the mask rows.
  kernels::FlashAttentionParams flash_params(int64_t batch, int64_t seq, const Tensor& pad_mask,
                                             const DropoutScope& scope,
                                             std::vector<kernels::MaskRow>& dropout_rows) const;

  int layer_number_;
  int64_t heads_local_, groups_local_, queries_, head_dim_, value_dim_, head_begin_;
  float scale_;  // the softmax scale (TransformerConfig::softmax_scale)
  float dropout_p_;
  AttnMaskType mask_type_;
  bool rope_;
  int64_t rope_offset_;  // the first rotated channel of a head: 0, or MLA's RoPE part
  bool dense_bias_, selective_recompute_, recompute_mla_up_, flash_attention_;
  int cp_size_, cp_rank_;
  std::optional<ContextParallelAttention> cp_;  // with --context-parallel-size > 1
  kernels::RotaryParams rotary_;
  mutable Tensor no_bias_;  // undefined: the dense "bias" without linear biases
  std::optional<QkvProjection> query_key_value_;  // without MLA
  std::optional<MlaProjection> mla_;              // --multi-latent-attention
  std::optional<QkLayerNorm> qk_norm_;            // --qk-layernorm
  std::optional<DsaIndexer> indexer_;             // --experimental-attention-variant dsa
  DsaOptions dsa_;
  bool sequence_parallel_;
  std::shared_ptr<Communicator> tp_;
  RowParallelLinear dense_;
};

}  // namespace megatron
