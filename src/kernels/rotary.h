// Rotary position embedding (RoFormer, Su et al. 2021) in the "rotate-half" convention of
// Megatron-Core and HuggingFace Llama: channel j of the rotated part is paired with channel
// j + r/2 (not with its neighbour), r = rotary_dim. With `interleaved` (Megatron's
// --rotary-interleaved, the RoFormer paper's and GPT-J's layout) pair j is channels (2j, 2j + 1)
// instead; below, write lo(j), hi(j) for the pair's channels: (j, j + r/2) or (2j, 2j + 1).
//
//   x, y [s, ..., d]: dim 0 is the sequence position, the last dim (stride 1) a head's
//   channels, the 1 to 3 dims between (batch, groups, heads) may have any strides — Q and K
//   are views into the fused QKV buffer. f32 or bf16, one dtype; y may be x (in place).
//   Row i is at position p = position_start + i; with interpolation factor f and, for
//   j < r/2, θ_j = (p / f) · ω_j, ω_j = base^(−2j/r) (rescaled by Llama 3's rule when
//   `llama3` is set, see Llama3RopeScaling; replaced by YaRN's blend, with cos and sin times its
//   concentration factor m, when `yarn` is set, see kernels/yarn_rope.h), all in f32
//   (Megatron's fp32 angles), m = 1 without YaRN:
//     y[lo(j)] = m · (x[lo(j)] · cos θ_j − x[hi(j)] · sin θ_j)
//     y[hi(j)] = m · (x[hi(j)] · cos θ_j + x[lo(j)] · sin θ_j)
//   Channels j >= r pass through unchanged (--rotary-percent < 1).
//   inverse = true rotates by −θ: the backward, since the rotation is orthogonal up to m
//   (dx = m · Rᵀ dy = m · R(−θ) dy).
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "kernels/host_device.h"
#include "kernels/yarn_rope.h"

namespace megatron::kernels {

// Llama 3.1's frequency-dependent RoPE scaling (Megatron's --use-rope-scaling with
// --rope-scaling-factor; HF rope_scaling {"rope_type": "llama3", ...}). With L the original
// context and wavelength λ = 2π/ω of a frequency ω:
//   λ < L / high_freq_factor  →  ω (high frequencies kept)
//   λ > L / low_freq_factor   →  ω / factor (low frequencies interpolated)
//   otherwise                 →  (1 − t) · ω / factor + t · ω,
//                                t = (L / λ − low_freq_factor) / (high_freq_factor −
//                                low_freq_factor)
// in f32, in HF's and Megatron-Core's order of operations.
struct Llama3RopeScaling {
  float factor = 0.0f;  // 0: off
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position_embeddings = 8192.0f;
  bool enabled() const { return factor > 0.0f; }
  bool operator==(const Llama3RopeScaling&) const = default;
};

// ω_j after Llama 3's rule (contract above); shared by the CPU and CUDA kernels.
MT_HOST_DEVICE inline float llama3_scaled_inv_freq(float inv_freq, float factor,
                                                   float low_freq_factor, float high_freq_factor,
                                                   float original_max_position_embeddings) {
  const float wavelen = 6.2831855f / inv_freq;  // 2π in f32, as torch promotes the scalar
  if (wavelen < original_max_position_embeddings / high_freq_factor) return inv_freq;
  if (wavelen > original_max_position_embeddings / low_freq_factor) return inv_freq / factor;
  const float t = (original_max_position_embeddings / wavelen - low_freq_factor) /
                  (high_freq_factor - low_freq_factor);
  return (1.0f - t) * inv_freq / factor + t * inv_freq;
}

struct RotaryParams {
  int64_t rotary_dim = 0;                              // r: even, 2 <= r <= d
  float base = 10000.0f;                               // --rotary-base (HF rope_theta)
  float seq_interpolation_factor = 1.0f;               // --rotary-seq-len-interpolation-factor
  Llama3RopeScaling llama3 = {};                       // --use-rope-scaling
  std::optional<YarnRopeScaling> yarn = std::nullopt;  // --position-embedding-type/--rope-type yarn
  bool interleaved = false;                            // --rotary-interleaved: pairs (2j, 2j + 1)
};

// The channels of rotation pair j (contract above); shared by the CPU and CUDA kernels.
MT_HOST_DEVICE inline int64_t rotary_pair_lo(int64_t j, int64_t half, bool interleaved) {
  (void)half;
  return interleaved ? 2 * j : j;
}
MT_HOST_DEVICE inline int64_t rotary_pair_hi(int64_t j, int64_t half, bool interleaved) {
  return interleaved ? 2 * j + 1 : j + half;
}

void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y);

}  // namespace megatron::kernels
