// Sinkhorn-normalised expert choice (Megatron-Core's --moe-router-load-balancing-type sinkhorn,
// S-BASE; moe_utils.py: sinkhorn). The router's exp(logits) over the micro-batch are scaled
// by a factor per token (rows) and per expert (columns) until every expert's column sums to
// about 1/E of the total mass and every token's row to 1/N: the balanced assignment of tokens
// to experts. Each token then takes its top k of the scaled scores. Only the choice comes from
// here; the weights are the unbalanced scores' (kernels/moe_router.h, moe_topk_weights).
//
//   logits   f32 [N, E]  one row per token
//   indices  i32 [N, k]  each token's experts, in decreasing order of the normalised score,
//                        ties to the lower index
//
// The iteration, in double precision (Megatron's runs in fp32; double keeps the CPU and CUDA
// twins' choices equal and away from rounding): cost = exp(logits), d0 [N] = 1, d1 [E] = 1;
// repeat  d0 = 1/N / (cost·d1 + 1e-8),  d1 = 1/E / (costᵀ·d0 + 1e-8)  until the mean of
// |d1 − d1 of the previous pass| is at most 1e-4 (Megatron's tolerance); the normalised scores
// are d0[n]·cost[n, e]·d1[e]. The sums run in index order on both twins.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace megatron::kernels {

// Megatron's sinkhorn tolerance on the mean change of the column factors.
constexpr double kSinkhornTolerance = 1e-4;

void moe_sinkhorn_topk(const Tensor& logits, int64_t topk, Tensor& indices);

}  // namespace megatron::kernels
