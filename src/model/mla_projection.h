// MlaProjection: the query/key/value projections of multi-latent attention (DeepSeek-V2, Liu et
// al. 2024 §2.1; Megatron-Core's MLASelfAttention), producing the attention core's input in
// ParallelAttention's multi-head layout (model/qkv_projection.h with groups = heads, q = 1).
// With rq = --q-lora-rank, r = --kv-lora-rank, dn = --qk-head-dim, dr = --qk-pos-emb-head-dim,
// dv = --v-head-dim, D = dn + dr, heads a (a/t per TP rank):
//
//   queries   x [s, b, h] ─linear_q_down_proj [rq, h]─→ ─q_layernorm [rq]─→
//             ─linear_q_up_proj [a·D, rq] (column-parallel)─→ q [s, b, a/t, D]
//             (without --q-lora-rank: ─linear_q_proj [a·D, h] (column-parallel)─→ q)
//   keys,     x ─linear_kv_down_proj [r + dr, h]─→ [latent r | k_rope dr]
//   values    latent ─kv_layernorm [r]─→ ─linear_kv_up_proj [a·(dn + dv), r] (column-parallel)─→
//             per head [k_content dn | v dv]
//   output    qkv [s, b, a/t, 3, D]: Q = q; K = [k_content | k_rope] (k_rope, one per
//             position, copied into every head); V = [v | 0] (zero-padded from dv to D, so the
//             attention core — unfused, fused, ring — runs with one head size; the attention
//             keeps the first dv channels of each context head, model/attention.h).
// RoPE is not applied here: the attention rotates the last dr channels of Q and K (as it rotates
// a whole head for --position-embedding-type rope), at the positions of the sequence, a
// context-parallel chunk or a decoding step.
// The down projections and the norms are replicated (Megatron-Core's "duplicated" TELinear):
// every rank computes them on its input — the whole sequence, or with sequence parallelism its
// shard [s/t, b, h] (the up projections all-gather their normalised latents, the shared k_rope
// is all-gathered along the sequence). Their gradients are whole on every rank without sequence
// parallelism (the up projections' input gradients are all-reduced, so is k_rope's, which every
// rank's heads touch); with it each rank's cover its shard, and the parameters are registered
// TP-partial (ParamSpec::sequence_parallel), summed over TP once per step.
// Parameter names under the prefix (".self_attention"): Megatron-Core's (linear_q_down_proj,
// q_layernorm, linear_q_up_proj or linear_q_proj, linear_kv_down_proj, kv_layernorm,
// linear_kv_up_proj); no biases, as Megatron-Core.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/layer_norm.h"
#include "model/transformer_config.h"
#include "parallel/column_parallel_linear.h"

namespace megatron {

class MlaProjection {
 public:
  struct Ctx {
    Tensor input;  // x [N, h] (N = this rank's positions × batch)
    // The down projections' outputs, the up projections' inputs: the query latent [N, rq]
    // (with --q-lora-rank), the key-value latent [N, r] and the rope key [s_l, b, dr] (this
    // rank's positions).
    Tensor q_latent, kv_latent, k_rope;
    LayerNorm::Ctx q_norm, kv_norm;         // inputs: the latents [N, rq], [N, r]
    ColumnParallelLinear::Ctx q_up, kv_up;  // q_up: linear_q_up_proj or linear_q_proj
  };

  MlaProjection(const std::string& prefix, const TransformerConfig& config, const ParallelState& ps,
                ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] (a shard [s/t, b, h] with sequence parallelism) → qkv [s, b, a/t, 3, D] over
  // the whole sequence (layout above): down, then up.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // The down projections of x: ctx.input, q_latent, kv_latent, k_rope.
  void down(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // From the down projections' outputs in ctx: the norms, the up projections (all-gathers
  // with sequence parallelism) and the assembly → qkv. --recompute-modules mla_up_proj runs
  // this in the forward's workspace and again in the backward (model/attention.h).
  Tensor up(Ctx& ctx, Arena& arena) const;
  // The whole sequence's query latent after q_layernorm [s·b, rq] (x [s·b, h] without
  // --q-lora-rank): the input of the query up projection, which DSA's indexer also reads.
  const Tensor& query_input(const Ctx& ctx) const { return ctx.q_up.input; }
  // dqkv shaped like the output (V's padding channels ignored) → dx shaped like x, all-reduced
  // (reduce-scattered) over TP; accumulates every projection's and norm's gradients.
  Tensor backward(const Ctx& ctx, const Tensor& dqkv, Arena& arena) const;

 private:
  MlaOptions mla_;
  int64_t hidden_, heads_local_, head_dim_;  // head_dim_ = D
  bool sequence_parallel_;
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  float init_std_;
  size_t q_down_index_ = 0, kv_down_index_ = 0;
  std::optional<LayerNorm> q_norm_;  // with --q-lora-rank
  LayerNorm kv_norm_;
  ColumnParallelLinear q_up_;  // linear_q_up_proj, or linear_q_proj without --q-lora-rank
  ColumnParallelLinear kv_up_;
};

}  // namespace megatron
