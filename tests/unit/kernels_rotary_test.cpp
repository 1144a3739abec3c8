// Rotary embedding against a double-precision loop of the published formula (RoFormer,
// rotate-half pairing), on a strided view into a fused [s, b, heads, 3, d] buffer, in place
// and out of place, with a partial rotary dim, an interpolation factor and positions far past
// a training length, Llama 3's frequency scaling (all three of its regimes) and the interleaved
// pairing (--rotary-interleaved: channels 2j and 2j + 1, the RoFormer paper's); the inverse
// (backward) against the adjoint identity ⟨R x, w⟩ = ⟨x, Rᵀ w⟩.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/rotary.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

// Llama 3.1's rescaled frequency, in double (Meta's reference apply_scaling).
double llama3_frequency(double freq, const kernels::Llama3RopeScaling& l) {
  const double pi = 3.14159265358979323846;
  const double wavelen = 2 * pi / freq;
  const double low_wavelen = l.original_max_position_embeddings / l.low_freq_factor;
  const double high_wavelen = l.original_max_position_embeddings / l.high_freq_factor;
  if (wavelen < high_wavelen) return freq;
  if (wavelen > low_wavelen) return freq / l.factor;
  const double smooth = (l.original_max_position_embeddings / wavelen - l.low_freq_factor) /
                        (double(l.high_freq_factor) - l.low_freq_factor);
  return (1 - smooth) * freq / l.factor + smooth * freq;
}

// x [s, m, d] (rows of m per position, contiguous) rotated at positions start + i, in double:
// θ_j = (p / f) · base^(−2j/r) (rescaled with p.llama3), pair j = channels (j, j + r/2), or
// (2j, 2j + 1) with p.interleaved.
std::vector<double> reference(const std::vector<double>& x, int64_t s, int64_t m, int64_t d,
                              int64_t start, const kernels::RotaryParams& p, double sign) {
  std::vector<double> y = x;
  const int64_t half = p.rotary_dim / 2;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t k = 0; k < m; ++k)
      for (int64_t j = 0; j < half; ++j) {
        double freq = std::pow(double(p.base), -2.0 * double(j) / double(p.rotary_dim));
        if (p.llama3.enabled()) freq = llama3_frequency(freq, p.llama3);
        const double theta = double(start + i) / double(p.seq_interpolation_factor) * freq;
        const double c = std::cos(theta), sn = sign * std::sin(theta);
        const size_t o = size_t((i * m + k) * d);
        const size_t lo = o + size_t(p.interleaved ? 2 * j : j);
        const size_t hi = o + size_t(p.interleaved ? 2 * j + 1 : j + half);
        const double a = x[lo], b = x[hi];
        y[lo] = a * c - b * sn;
        y[hi] = b * c + a * sn;
      }
  return y;
}

// The [s, b·heads, d] view of slot `slot` (0 = Q, 1 = K) of qkv [s, b, heads, 3, d].
Tensor slot_view(const Tensor& qkv, int64_t slot) {
  const int64_t s = qkv.size(0), b = qkv.size(1), hd = qkv.size(2), d = qkv.size(4);
  return Tensor(qkv.storage(), qkv.offset() + slot * d, {s, b, hd, d},
                {b * hd * 3 * d, hd * 3 * d, 3 * d, 1}, qkv.dtype());
}

struct Case {
  int64_t start;
  int64_t rotary_dim;
  float factor;
  double atol;  // f32 angles: |Δθ| <= |θ|·2^-23, so far positions get a larger tolerance
};

class RotaryTest : public ::testing::TestWithParam<DType> {};

TEST_P(RotaryTest, InPlaceOnQkvViewMatchesFormula) {
  const DType dt = GetParam();
  const int64_t s = 7, b = 3, heads = 5, d = 12;
  for (const Case& c : {Case{0, 12, 1.0f, 1e-5}, Case{3, 8, 1.0f, 1e-5}, Case{17, 12, 4.0f, 1e-5},
                        Case{4093, 12, 1.0f, 2e-3}}) {
    SCOPED_TRACE("start=" + std::to_string(c.start) + " r=" + std::to_string(c.rotary_dim));
    const kernels::RotaryParams p{.rotary_dim = c.rotary_dim,
                                  .base = 10000.0f,
                                  .seq_interpolation_factor = c.factor,
                                  .llama3 = {}};
    Tensor qkv = random_tensor({s, b, heads, 3, d}, dt, 11, -2.0, 2.0);
    const Tensor before = qkv.clone();
    Tensor q = slot_view(qkv, 0);
    kernels::rotary_embedding(q, c.start, p, false, q);
    const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-5;
    const auto expected =
        reference(to_double(slot_view(before, 0)), s, b * heads, d, c.start, p, 1.0);
    EXPECT_CLOSE(to_double(q), expected, c.atol, rtol);
    // K and V are untouched.
    EXPECT_EQ(to_double(slot_view(qkv, 1)), to_double(slot_view(before, 1)));
  }
}

TEST_P(RotaryTest, OutOfPlaceAndInverseIsTheAdjoint) {
  const DType dt = GetParam();
  const int64_t s = 9, m = 4, d = 10;
  const kernels::RotaryParams p{
      .rotary_dim = 6, .base = 500000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}};
  Tensor x = random_tensor({s, m, d}, dt, 21), w = random_tensor({s, m, d}, dt, 22);
  Tensor y = Tensor::empty({s, m, d}, dt), wt = Tensor::empty({s, m, d}, dt);
  kernels::rotary_embedding(x, 5, p, false, y);
  kernels::rotary_embedding(w, 5, p, true, wt);
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-5;
  EXPECT_CLOSE(to_double(y), reference(to_double(x), s, m, d, 5, p, 1.0), 1e-5, rtol);
  EXPECT_CLOSE(to_double(wt), reference(to_double(w), s, m, d, 5, p, -1.0), 1e-5, rtol);
  EXPECT_NEAR(test::dot(to_double(y), to_double(w)), test::dot(to_double(x), to_double(wt)),
              dt == DType::BF16 ? 0.1 : 1e-4);
}

// r = 12, base 10^4: wavelengths 6.3, 29, 135, 628, 2920 and 13600 against Llama 3's bounds
// 8192/4 = 2048 and 8192/1: four channels pairs kept, one smoothed, one divided by the factor.
TEST_P(RotaryTest, Llama3ScalingMatchesTheFormulaInEveryRegime) {
  const DType dt = GetParam();
  const int64_t s = 6, m = 4, d = 12;
  kernels::RotaryParams p{
      .rotary_dim = 12, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}};
  p.llama3 = {8.0f, 1.0f, 4.0f, 8192.0f};
  for (const int64_t start : {int64_t(0), int64_t(9000)}) {
    SCOPED_TRACE("start=" + std::to_string(start));
    const Tensor x = random_tensor({s, m, d}, dt, 31);
    Tensor y = Tensor::empty(x.shape(), dt);
    kernels::rotary_embedding(x, start, p, false, y);
    const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-5;
    EXPECT_CLOSE(to_double(y), reference(to_double(x), s, m, d, start, p, 1.0),
                 start > 0 ? 5e-3 : 1e-5, rtol);
  }
  // Without the scaling the far positions differ: the test sees the rule.
  const Tensor x = random_tensor({s, m, d}, dt, 31);
  Tensor scaled = Tensor::empty(x.shape(), dt), plain = Tensor::empty(x.shape(), dt);
  kernels::rotary_embedding(x, 9000, p, false, scaled);
  kernels::RotaryParams unscaled = p;
  unscaled.llama3 = {};
  kernels::rotary_embedding(x, 9000, unscaled, false, plain);
  EXPECT_NE(to_double(scaled), to_double(plain));
}

TEST_P(RotaryTest, InterleavedPairsNeighbouringChannels) {
  const DType dt = GetParam();
  const int64_t s = 5, m = 3, d = 12;
  kernels::RotaryParams p{
      .rotary_dim = 8, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}};
  p.interleaved = true;
  const Tensor x = random_tensor({s, m, d}, dt, 41);
  Tensor y = Tensor::empty(x.shape(), dt), back = Tensor::empty(x.shape(), dt);
  kernels::rotary_embedding(x, 3, p, false, y);
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-5;
  EXPECT_CLOSE(to_double(y), reference(to_double(x), s, m, d, 3, p, 1.0), 1e-5, rtol);
  kernels::rotary_embedding(y, 3, p, true, back);  // the inverse, on the same pairs
  EXPECT_CLOSE(to_double(back), reference(to_double(y), s, m, d, 3, p, -1.0), 1e-5, rtol);
  // The rotate-half pairing gives another result: the test sees the layout.
  kernels::RotaryParams half = p;
  half.interleaved = false;
  Tensor other = Tensor::empty(x.shape(), dt);
  kernels::rotary_embedding(x, 3, half, false, other);
  EXPECT_NE(to_double(y), to_double(other));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RotaryTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Rotary, RejectsOddOrOversizedRotaryDim) {
  Tensor x = Tensor::zeros({2, 3, 8}, DType::F32);
  for (int64_t r : {0, 5, 10}) {
    try {
      kernels::rotary_embedding(
          x, 0, {.rotary_dim = r, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}},
          false, x);
      ADD_FAILURE() << "no error for rotary dim " << r;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("--rotary-percent"), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace megatron
