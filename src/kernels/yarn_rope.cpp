// YaRN's host-side terms (contract: kernels/yarn_rope.h).
#include "kernels/yarn_rope.h"

#include <algorithm>
#include <cmath>

namespace megatron::kernels {

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

namespace {

// The rotation pair whose wavelength makes `rotations` turns over the original context.
double yarn_correction_dim(double rotations, int64_t rotary_dim, double base, double context) {
  const double two_pi = 6.283185307179586;
  return double(rotary_dim) * std::log(context / (rotations * two_pi)) / (2.0 * std::log(base));
}

}  // namespace

YarnTerms yarn_terms(const YarnRopeScaling& s, int64_t rotary_dim, float base) {
  const double context = s.original_max_position_embeddings;
  double low = yarn_correction_dim(s.beta_fast, rotary_dim, base, context);
  double high = yarn_correction_dim(s.beta_slow, rotary_dim, base, context);
  if (s.round_to_int) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rotary_dim - 1));
  if (low == high) high += 0.001;
  return {.factor = s.factor,
          .ramp_low = float(low),
          .ramp_span = float(high - low),
          .concentration =
              float(yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim))};
}

}  // namespace megatron::kernels
