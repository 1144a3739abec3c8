// YaRN RoPE scaling (kernels/yarn_rope.h) through the rotary kernel against PyTorch float64
// (tools/reference/yarn_reference.py, tests/data/yarn_rope): four cases with odd pair counts
// (5, 11, 3, 7) — every regime of the frequency ramp, unrounded correction bounds, bounds that
// meet (the 0.001 guard), concentration factors other than 1 and DeepSeek-V3's (1), positions
// past the original context — compare the cos/sin tables (the rotation of unit pairs), the
// rotation of random rows in f32 and bf16, and the inverse (backward), which must give m² x;
// plus Megatron-Core's mscale formula and the argument checks.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/source_dir.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "kernel_test_util.h"
#include "kernels/rotary.h"

namespace megatron {
namespace {

using test::from_double;
using test::to_double;

struct YarnCase {
  kernels::RotaryParams params;
  int64_t start = 0;
  Tensor x, y, cos, sin;  // f32 from the golden file
  double concentration = 1;
};

std::vector<YarnCase> load_cases() {
  const SafetensorsReader file(testing::source_dir() + "/tests/data/yarn_rope/golden.safetensors");
  std::vector<YarnCase> cases;
  for (int k = 0; file.contains("case" + std::to_string(k) + ".x"); ++k) {
    const std::string name = "case" + std::to_string(k) + ".";
    const std::vector<double> v = to_double(file.get(name + "params"));
    YarnCase c;
    c.params = {.rotary_dim = int64_t(v[0]), .base = float(v[1])};
    c.params.yarn = kernels::YarnRopeScaling{.factor = float(v[2]),
                                             .original_max_position_embeddings = float(v[3]),
                                             .beta_fast = float(v[4]),
                                             .beta_slow = float(v[5]),
                                             .mscale = float(v[6]),
                                             .mscale_all_dim = float(v[7]),
                                             .round_to_int = v[8] != 0};
    c.start = int64_t(v[9]);
    c.x = file.get(name + "x").clone();
    c.y = file.get(name + "y").clone();
    c.cos = file.get(name + "cos").clone();
    c.sin = file.get(name + "sin").clone();
    // Megatron-Core's concentration factor, from its published formula (0.1 a ln F + 1).
    auto mscale = [&](double a) { return v[2] <= 1 ? 1.0 : 0.1 * a * std::log(v[2]) + 1.0; };
    c.concentration = mscale(v[6]) / mscale(v[7]);
    cases.push_back(std::move(c));
  }
  return cases;
}

// f32 angles: |Δθ| <= |θ|·2^-23 plus the frequencies' own rounding, so the case at positions
// past 4090 gets a larger absolute tolerance.
double angle_atol(const YarnCase& c) {
  return c.start > 1000 ? 2e-3 : 2e-5;
}

TEST(YarnRope, CosSinTablesMatchPytorch) {
  const std::vector<YarnCase> cases = load_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const YarnCase& c : cases) {
    SCOPED_TRACE("r=" + std::to_string(c.params.rotary_dim));
    const int64_t s = c.cos.size(0), half = c.params.rotary_dim / 2;
    // Row (i, j) is the unit pair j: its rotation is (m cos θ_ij, m sin θ_ij) in channels
    // (j, j + r/2).
    std::vector<double> unit(size_t(s * half * c.params.rotary_dim), 0.0);
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < half; ++j) unit[size_t((i * half + j) * c.params.rotary_dim + j)] = 1;
    Tensor t = from_double(unit, {s, half, c.params.rotary_dim}, DType::F32);
    kernels::rotary_embedding(t, c.start, c.params, false, t);
    const std::vector<double> rotated = to_double(t);
    std::vector<double> cos_t, sin_t;
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const size_t row = size_t((i * half + j) * c.params.rotary_dim);
        cos_t.push_back(rotated[row + size_t(j)]);
        sin_t.push_back(rotated[row + size_t(j + half)]);
      }
    EXPECT_CLOSE(cos_t, to_double(c.cos), angle_atol(c), 1e-5);
    EXPECT_CLOSE(sin_t, to_double(c.sin), angle_atol(c), 1e-5);
  }
}

class YarnRopeTest : public ::testing::TestWithParam<DType> {};

TEST_P(YarnRopeTest, RotationAndItsInverseMatchPytorch) {
  const DType dt = GetParam();
  const double rtol = dt == DType::BF16 ? 2 * test::kBf16Eps : 1e-5;
  for (const YarnCase& c : load_cases()) {
    SCOPED_TRACE("r=" + std::to_string(c.params.rotary_dim));
    const Tensor x = from_double(to_double(c.x), c.x.shape(), dt);
    Tensor y = Tensor::empty(c.x.shape(), dt);
    kernels::rotary_embedding(x, c.start, c.params, false, y);
    // bf16's input rounding (2^-9 of |x| <= 2) also moves the outputs: the absolute term.
    const double atol = dt == DType::BF16 ? 4 * test::kBf16Eps : angle_atol(c);
    EXPECT_CLOSE(to_double(y), to_double(c.y), atol, rtol);
    // The backward rotation of the golden output: m·R(−θ)·m·R(θ) x = m² x.
    const Tensor golden_y = from_double(to_double(c.y), c.y.shape(), dt);
    Tensor back = Tensor::empty(c.x.shape(), dt);
    kernels::rotary_embedding(golden_y, c.start, c.params, true, back);
    std::vector<double> expected = to_double(c.x);
    for (double& e : expected) e *= c.concentration * c.concentration;
    EXPECT_CLOSE(to_double(back), expected, atol, rtol);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, YarnRopeTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(YarnRope, MscaleIsMegatronsFormula) {
  EXPECT_EQ(kernels::yarn_mscale(1.0, 0.7), 1.0);  // no extension, no temperature
  EXPECT_EQ(kernels::yarn_mscale(0.5, 0.7), 1.0);
  EXPECT_NEAR(kernels::yarn_mscale(40.0, 1.0), 1.3688879454113936, 1e-15);
  EXPECT_NEAR(kernels::yarn_mscale(40.0, 0.0), 1.0, 1e-15);
}

TEST(YarnRope, RejectsAnotherScalingBesideIt) {
  kernels::RotaryParams p{.rotary_dim = 8, .base = 10000.0f};
  p.yarn = kernels::YarnRopeScaling{.factor = 4.0f};
  Tensor x = Tensor::zeros({3, 2, 8}, DType::F32);
  p.seq_interpolation_factor = 2.0f;
  EXPECT_THROW(kernels::rotary_embedding(x, 0, p, false, x), Error);
  p.seq_interpolation_factor = 1.0f;
  p.llama3 = {8.0f, 1.0f, 4.0f, 8192.0f};
  EXPECT_THROW(kernels::rotary_embedding(x, 0, p, false, x), Error);
  p.llama3 = {};
  p.yarn->beta_slow = 0.0f;
  EXPECT_THROW(kernels::rotary_embedding(x, 0, p, false, x), Error);
  p.yarn->beta_slow = 1.0f;
  EXPECT_NO_THROW(kernels::rotary_embedding(x, 0, p, false, x));
}

}  // namespace
}  // namespace megatron
