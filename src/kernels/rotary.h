// Rotary position embedding (RoFormer, Su et al. 2021) in the "rotate-half" convention of
// Megatron-Core and HuggingFace Llama: channel j of the rotated part is paired with channel
// j + r/2 (not with its neighbour), r = rotary_dim.
//
//   x, y [s, ..., d]: dim 0 is the sequence position, the last dim (stride 1) a head's
//   channels, the 1 to 3 dims between (batch, groups, heads) may have any strides — Q and K
//   are views into the fused QKV buffer. f32 or bf16, one dtype; y may be x (in place).
//   Row i is at position p = position_start + i; with interpolation factor f and, for
//   j < r/2, θ_j = (p / f) · base^(−2j/r), all in f32 (Megatron's fp32 angles):
//     y[j]       = x[j] · cos θ_j − x[j + r/2] · sin θ_j
//     y[j + r/2] = x[j + r/2] · cos θ_j + x[j] · sin θ_j
//   Channels j >= r pass through unchanged (--rotary-percent < 1).
//   inverse = true rotates by −θ: the backward, since the rotation is orthogonal
//   (dx = Rᵀ dy = R(−θ) dy).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace megatron::kernels {

struct RotaryParams {
  int64_t rotary_dim = 0;                 // r: even, 2 <= r <= d
  float base = 10000.0f;                  // --rotary-base (HF rope_theta)
  float seq_interpolation_factor = 1.0f;  // --rotary-seq-len-interpolation-factor
};

void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y);

}  // namespace megatron::kernels
