// The mixture-of-experts router's numeric primitives (model/moe_router.h): top-k routing with
// its score function, Switch Transformer's load-balancing loss and the router z-loss, each
// with its gradient with respect to the router logits, and the expert bias's update.
// Megatron-Core's semantics (moe_utils.py: topk_routing_with_score_function,
// compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func, z_loss_func,
// get_updated_expert_bias).
//
//   logits   T [N, E]    one row per token (tokens in [s, b] order: token n = i·b + j)
//   indices  i32 [N, k]  each token's experts, in decreasing order of the selection score
//   probs    f32 [N, k]  their weights
//   dlogits  T [N, E]    gradients ACCUMULATE (+=) into it
// T, the router dtype, is f32 or f64 (--moe-router-dtype fp64): every computation inside a row
// is in double either way, so the dtype decides what the logits (the GEMM's output) and their
// gradients hold; the losses' statistics and gradient weights share it. The weights (probs)
// are f32 for the experts, rounded once from double.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace megatron::kernels {

struct MoeTopkParams {
  int64_t topk = 1;
  // The score function: softmax over the experts (false) or an independent sigmoid (true).
  bool sigmoid = false;
  // Softmax only: softmax over all E experts, then the top k of those probabilities (true), or
  // the top k logits, then a softmax over those k (false).
  bool pre_softmax = false;
  // Group-limited routing (0: off): the experts are num_groups consecutive groups; a token may
  // use only the group_topk groups of the largest sums of their top topk/group_topk scores.
  int64_t num_groups = 0, group_topk = 0;
  // The chosen weights × this (Megatron's --moe-router-topk-scaling-factor; 1: none).
  float scaling_factor = 1.0f;
};

// Top-k routing. The selection score is the softmax probability (pre_softmax), the logit
// (post-softmax), or the sigmoid plus expert_bias[e] (sigmoid; expert_bias f32 [E] or
// undefined: the aux-loss-free balancing bias, which changes the choice but not the weights).
// The weights: softmax — the chosen probabilities, or the softmax over the chosen logits;
// sigmoid — the chosen sigmoids divided by their sum (plus 1e-20) when k > 1. Then ×
// scaling_factor. Ties pick the lower expert index first.
void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopkParams& p,
                      Tensor& indices, Tensor& probs);
// The weights moe_topk_forward gives the experts `indices` i32 [N, k] chosen elsewhere
// (Megatron's precomputed_indices; the sinkhorn choice, kernels/moe_sinkhorn.h) → probs.
// No groups, no bias: they only change the choice.
void moe_topk_weights(const Tensor& logits, const Tensor& indices, const MoeTopkParams& p,
                      Tensor& probs);
// dlogits += ∂(Σ dprobs · probs)/∂logits, for dprobs f32 [N, k] and the forward's indices.
void moe_topk_backward(const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                       const MoeTopkParams& p, Tensor& dlogits);

// The load-balancing loss's statistics. Its scores are q = softmax(logits) (softmax) or
// sigmoid(logits) / Σ_e sigmoid(logits) (sigmoid), its routing the top `topk` of q per token
// (no groups, no bias). Tokens fall in `groups` groups, token n in group n mod groups (one
// group: the micro-batch's loss; groups = b: the per-sequence loss of rows in [s, b] order).
// Writes counts T [groups, E] = the number of the group's tokens routed to e, and
// score_sums T [groups, E] = Σ over the group's tokens of q[n, e]. The loss is then
// E / (k·T²) · Σ_ge score_sums·counts / groups, T = tokens per group (model/moe_router.cpp).
void moe_aux_loss_stats(const Tensor& logits, int64_t topk, bool sigmoid, int64_t groups,
                        Tensor& counts, Tensor& score_sums);
// dlogits += ∂(Σ_n Σ_e weights[n mod groups, e] · q[n, e])/∂logits, weights T [groups, E]:
// the loss's gradient with weights = coefficient × E / (k·T²·groups) × counts.
void moe_aux_loss_backward(const Tensor& logits, const Tensor& weights, bool sigmoid,
                           Tensor& dlogits);

// The router z-loss's sum Σ_n logsumexp(logits[n])² (the loss is its mean × coefficient).
double moe_z_loss_sum(const Tensor& logits);
// dlogits += scale · 2·logsumexp(logits[n])·softmax(logits[n]) (scale = coefficient / N × the
// backward's scale).
void moe_z_loss_backward(const Tensor& logits, double scale, Tensor& dlogits);

// Aux-loss-free load balancing's bias update (DeepSeek-V3; Megatron's get_updated_expert_bias),
// once per training step. Per row r (one MoE layer's router) of tokens_per_expert f32 [R, E],
// the tokens it routed to each expert during the step, summed over the data-parallel ranks:
//   expert_bias[r, e] += rate · sign(mean_e' tokens[r, e'] − tokens[r, e])     (f32 [R, E])
// in f32 (sign 0: unchanged), so an expert that received fewer tokens than the average gains
// `rate` and one that received more loses it. The counts are integers, summed exactly (in
// double) for the mean; the comparison is the exact one while they stay below 2^24.
void moe_expert_bias_update(const Tensor& tokens_per_expert, float rate, Tensor& expert_bias);

}  // namespace megatron::kernels
