// DsaIndexer: the lightning indexer of DeepSeek sparse attention (DeepSeek-V3.2; Megatron-Core's
// DSAIndexer), which scores every key for every query so that the attention keeps each query's
// top-k keys (model/attention.h). With H = --dsa-indexer-n-heads, D = --dsa-indexer-head-dim,
// dr = --qk-pos-emb-head-dim, over the whole sequence (s positions, b samples):
//
//   queries  qr [s, b, rq] (MLA's normalised query latent; x without --q-lora-rank)
//            ─linear_wq_b [H·D, rq]─→ q [s, b, H, D]
//   keys     x [s, b, h] ─linear_wk [D, h]─→ ─k_norm (LayerNorm [D])─→ k [s, b, D]
//   RoPE     on the FIRST dr channels of every q head and of k (Megatron puts the indexer's
//            rotated part first, MLA's last), at positions 0..s-1
//   weights  x ─linear_weights_proj [H, h]─→ w [s, b, H] · H^-½ · D^-½
//   scores   [b, i, j] = Σ_h w[i, b, h] · relu(q[i, b, h] · k[j, b])   (f32; relu optional)
//
// Megatron's Hadamard rotation of q and k (--dsa-indexer-rotate-activation, on by default) is
// orthogonal and applied to both, so q·k, and everything the indexer computes, is the same
// without it (TransformerConfig checks the head dim is a power of two, where it is orthogonal).
// The products run in f32 on q and k in the layouts the batched GEMMs want ([b, H, s, D],
// [b, s, D]), as Megatron's einsum on q.float() and k.float().
// The inputs are detached (Megatron's x.detach(), qr.detach()): the indexer learns from its KL
// loss only (kernels/sparse_attention.h, indexer_kl), and its backward sends nothing to x or qr.
// Its parameters are replicated on every tensor-parallel rank (Megatron's "duplicated"
// linears), which all compute the same scores from the same whole-sequence inputs, so their
// gradients are the same on every rank. Names under the prefix (".core_attention.indexer"):
// linear_wq_b, linear_wk, k_norm, linear_weights_proj, as Megatron-Core; no biases.
#pragma once

#include <string>

#include "kernels/rotary.h"
#include "model/layer_norm.h"
#include "model/transformer_config.h"

namespace megatron {

class DsaIndexer {
 public:
  struct Ctx {
    Tensor x, qr;           // [N, h], [N, rq] (N = s·b, whole sequence): the linears' inputs
    LayerNorm::Ctx k_norm;  // input: x·linear_wkᵀ [N, D]
    Tensor q, k;            // f32 [b, H, s, D], f32 [b, s, D] after RoPE
    Tensor weights;         // f32 [s, b, H], scaled
    Tensor raw;             // f32 [b, H, s, s]: q·kᵀ per head, before the ReLU
  };

  DsaIndexer(const std::string& prefix, const TransformerConfig& config, ParameterStore& store,
             const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h], qr [s, b, rq] (the whole sequence, compute dtype) → scores f32 [b, s, s]
  // (every key's; the caller masks the causal ones). What backward needs goes to ctx, in
  // `arena`.
  Tensor forward(Ctx& ctx, const Tensor& x, const Tensor& qr, Arena& arena) const;
  // dscores f32 [b, s, s] (d loss / d scores) → accumulates the four parameters' gradients.
  void backward(const Ctx& ctx, const Tensor& dscores, Arena& arena) const;

 private:
  int64_t hidden_, q_input_, heads_, head_dim_;
  bool relu_;
  float init_std_, weight_scale_;
  kernels::RotaryParams rotary_;
  const ComputeWeights& weights_;
  size_t wq_index_, wk_index_, weights_proj_index_;
  LayerNorm k_norm_;
};

}  // namespace megatron
