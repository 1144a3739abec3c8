// The kernels of DeepSeek sparse attention (DSA; model/dsa_indexer.h) that no other kernel
// covers: each query's top-k keys under the indexer's scores, and the indexer's KL loss against
// the main attention's distribution. The sparse attention itself is the masked softmax
// (kernels/softmax.h) with the top-k mask as its per-query key mask.
//
// Causal throughout, as DSA: with Sq queries and Sk keys, query i sees keys
// j <= i + (Sk − Sq) (its `visible` keys).
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// The lightning indexer's scores from its per-head products (DeepSeek-V3.2; Megatron-Core's
// index scores): with act = ReLU (or the identity when relu is false),
//   scores[b, i, j] = Σ_h weights[i, b, h] · act(raw[b, h, i, j])
//   raw f32 [B, H, Sq, Sk] (q·kᵀ per indexer head), weights f32 [Sq, B, H], scores f32 [B, Sq, Sk]
void index_scores(const Tensor& raw, const Tensor& weights, bool relu, Tensor& scores);
// Its backward (both outputs written):
//   draw[b, h, i, j]   = dscores[b, i, j] · weights[i, b, h] · act'(raw[b, h, i, j])
//   dweights[i, b, h]  = Σ_j dscores[b, i, j] · act(raw[b, h, i, j])
void index_scores_backward(const Tensor& dscores, const Tensor& raw, const Tensor& weights,
                           bool relu, Tensor& draw, Tensor& dweights);

// The keys each query attends to: its k visible keys of largest score, every visible key when
// it has no more than k. Order: score descending, ties to the smaller key index (so the choice
// is one set, the same on every backend and rank).
//   scores f32 [B, Sq, Sk] (the indexer's), k >= 1
//   mask   u8  [B, Sq, Sk] (written): 0 = selected, 1 = not (invisible keys are 1)
void topk_key_mask(const Tensor& scores, int64_t k, Tensor& mask);

// The indexer's KL loss per query (DeepSeek-V3.2 §2.1; Megatron-Core's indexer loss) and its
// gradient w.r.t. the scores. Over a query's valid keys V (visible, and selected by key_mask
// when it is defined: the sparse loss), with the target t (the head-summed main attention
// probabilities, ≥ 0) normalised over the row, t̂ = t / max(Σ_j t_j, 1e-10), and the indexer's
// distribution p = softmax over V of the scores:
//   kl[b, i]          = Σ_{j∈V} t̂_j · (log max(t̂_j, 1e-10) − log p_j)
//   dscores[b, i, j]  = p_j · Σ_{j'∈V} t̂_j' − t̂_j for j ∈ V, 0 elsewhere (d kl / d scores)
//   scores, target f32 [B, Sq, Sk]; key_mask u8 [B, Sq, Sk] (1 = excluded) or undefined;
//   kl f32 [B, Sq], dscores f32 [B, Sq, Sk] (written). A row without a valid key is 0.
void indexer_kl(const Tensor& scores, const Tensor& target, const Tensor& key_mask, Tensor& kl,
                Tensor& dscores);

}  // namespace megatron::kernels
