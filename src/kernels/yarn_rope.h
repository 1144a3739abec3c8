// YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models")
// as Megatron-Core's YarnRotaryEmbedding defines it: RoPE's inverse frequencies blended, per
// rotation pair, between the interpolated ones (divided by the scaling factor F) and the
// original ("extrapolated") ones, and cos/sin multiplied by a concentration factor.
//
// For rotary dim r, base b and pair j < r/2, with ω_j = 1 / b^(2j/r) (f32, as RoPE's):
//   correction dim  c(β) = r · ln(L / (2π β)) / (2 ln b)            (double; L = original context)
//   ramp bounds     lo = c(beta_fast), hi = c(beta_slow), rounded outwards (floor, ceil) unless
//                   round_to_int is off, then clamped to lo >= 0, hi <= r − 1; hi += 0.001 when
//                   they meet (no division by zero)
//   ramp_j          clamp((j − lo) / (hi − lo), 0, 1)               (f32)
//   mask_j          1 − ramp_j: 1 keeps ω_j (high frequencies), 0 interpolates it
//   ω'_j            ω_j / F · (1 − mask_j) + ω_j · mask_j           (f32, Megatron's order)
// and cos θ, sin θ of θ_j = p · ω'_j are both multiplied by
//   concentration = mscale(F, mscale) / mscale(F, mscale_all_dim),
//   mscale(F, m) = 0.1 · m · ln F + 1 for F > 1, else 1.
// (Multi-latent attention also multiplies its softmax scale by mscale(F, mscale_all_dim)²:
// TransformerConfig::softmax_scale.) The rotation by m·R(θ) stays linear, and its adjoint is
// m·R(−θ), so the inverse (backward) rotation uses the same scaled cos and −sin.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace megatron::kernels {

// Megatron-LM's --rotary-scaling-factor, --mscale, --mscale-all-dim and (for
// --position-embedding-type yarn) --yarn-original-max-position-embeddings, --yarn-beta-fast,
// --yarn-beta-slow, --[no-]yarn-correction-range-round-to-int; the defaults are
// YarnRotaryEmbedding's (multi-latent attention always uses them for the last four).
struct YarnRopeScaling {
  float factor = 1.0f;  // F (1: no extension, RoPE's frequencies and concentration factor 1)
  float original_max_position_embeddings = 4096.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 1.0f;
  float mscale_all_dim = 0.0f;
  bool round_to_int = true;
  bool operator==(const YarnRopeScaling&) const = default;
};

// mscale(F, m) of the contract above, in double (Megatron's Python floats).
double yarn_mscale(double factor, double mscale);

// What the rotation kernels need, worked out once on the host from YarnRopeScaling.
struct YarnTerms {
  float factor = 1.0f;     // F
  float ramp_low = 0.0f;   // lo
  float ramp_span = 1.0f;  // hi − lo
  float concentration = 1.0f;
};

// The terms for rotary dim r and base b.
YarnTerms yarn_terms(const YarnRopeScaling& s, int64_t rotary_dim, float base);

// ω'_j from ω_j = 1 / base_pow, base_pow = b^(2j/r); shared by the CPU and CUDA kernels.
MT_HOST_DEVICE inline float yarn_inv_freq(float base_pow, int64_t j, const YarnTerms& t) {
  const float extrapolated = 1.0f / base_pow;
  const float interpolated = 1.0f / (t.factor * base_pow);
  float ramp = (float(j) - t.ramp_low) / t.ramp_span;
  ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
  const float mask = 1.0f - ramp;
  return interpolated * (1.0f - mask) + extrapolated * mask;
}

}  // namespace megatron::kernels
