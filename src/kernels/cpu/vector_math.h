// exp and GeLU's sigmoid written as straight-line float arithmetic, so that the compiler
// vectorises the loops that call them (glibc's expf/tanhf are scalar calls unless the whole
// program is built with -ffast-math, which would also break NaN/inf handling elsewhere).
// Softmax, cross-entropy and GeLU were 5-20x slower than their memory traffic with them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace megatron::kernels::cpu {

// e^x with ~1 ulp error for x in [-87.3, 88] (Cephes expf: x = n·ln2 + r, |r| <= ln2/2,
// degree-6 polynomial for e^r, then scale by 2^n through the exponent bits). Returns 0 below
// -87.3 (true value < 2^-126, and e^-inf = 0 as softmax needs) and saturates at e^88 ≈ 1.65e38
// above 88 (never reached by the kernels, which subtract the row max first). NaN stays NaN.
inline float exp_approx(float x) {
  // Clamp with compares: fminf/fmaxf are library calls that stop vectorisation.
  const float lo = x < -87.3f ? -87.3f : x;
  const float xc = lo > 88.f ? 88.f : lo;
  // n = round(x / ln2) by the 1.5·2^23 trick (adding it leaves no fraction bits); floorf and
  // nearbyintf would be library calls again.
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = xc - n * 0.693359375f;  // ln2 split in two so n·ln2 is exact enough
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  const float y = er * scale;
  return x < -87.3f ? 0.f : (x != x ? x : y);
}

// GeLU (tanh approximation) in sigmoid form: ½(1 + tanh z) = σ(2z) = 1 / (1 + e^{−2z}), which
// has no cancellation where tanh z ≈ −1.
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// σ(2z) for z = √(2/π)(u + 0.044715u³).
inline float gelu_sigmoid(float u) {
  const float z = kGeluSqrt2OverPi * (u + kGeluCubic * u * u * u);
  return 1.f / (1.f + exp_approx(-2.f * z));
}

inline float gelu(float u) {
  return u * gelu_sigmoid(u);
}

// gelu'(u) = s + 2·u·s·(1 − s)·√(2/π)·(1 + 3·0.044715·u²), s = σ(2z).
inline float gelu_grad(float u) {
  const float s = gelu_sigmoid(u);
  return s + 2.f * u * s * (1.f - s) * kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * u * u);
}

// GeLU, exact form: gelu(u) = u·Φ(u), Φ(u) = ½·erfc(−u/√2). Φ comes from the upper tail
// Q(|u|) = ½·erfc(|u|/√2), with erfc(a) = t·exp(−a² + P(t)), t = 1/(1 + a/2), a degree-9
// Chebyshev fit of fractional error < 1.2e-7 for every a >= 0 (Press et al., Numerical Recipes,
// "erfcc"): unlike 1 + erf(u/√2) it keeps its relative accuracy in the negative tail, and it is
// straight-line arithmetic around exp_approx, so the loops vectorise (std::erf does not).
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // φ(0) = 1/√(2π)

// Φ(u) given e = exp_approx(−u²/2), which gelu_erf_grad reuses for φ(u).
inline float normal_cdf(float u, float a, float e) {
  const float t = 1.f / (1.f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // exp(−a² + p) = exp(−a²)·exp(p): e = exp(−u²/2) = exp(−a²) is shared with φ.
  const float q = 0.5f * t * e * exp_approx(p);  // Q(|u|) = ½·erfc(a)
  return u >= 0.f ? 1.f - q : q;
}

inline float gelu_erf(float u) {
  const float a = (u < 0.f ? -u : u) * kInvSqrt2;
  return u * normal_cdf(u, a, exp_approx(-a * a));
}

// gelu'(u) = Φ(u) + u·φ(u), φ(u) = e^{−u²/2}/√(2π).
inline float gelu_erf_grad(float u) {
  const float a = (u < 0.f ? -u : u) * kInvSqrt2;
  const float e = exp_approx(-a * a);
  return normal_cdf(u, a, e) + u * e * kInvSqrt2Pi;
}

// max over j < n of value(j) (−inf when n = 0). A `reduction(max)` loop is not vectorised
// unless NaNs are ruled out (maxps differs from std::max on NaN), so this keeps 16 running
// maxima updated with selects, which is. NaN values are skipped, as std::max would.
template <typename Value>
inline float max_reduce(int64_t n, Value&& value) {
  constexpr int64_t kLanes = 16;
  float acc[kLanes];
  for (float& a : acc) a = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) {
      const float v = value(j + l);
      acc[l] = v > acc[l] ? v : acc[l];
    }
  }
  float m = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) {
    const float v = value(j);
    m = v > m ? v : m;
  }
  for (float a : acc) m = a > m ? a : m;
  return m;
}

}  // namespace megatron::kernels::cpu
