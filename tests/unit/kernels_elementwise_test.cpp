// cast / copy / fill / scale / axpy / sum_squares / weighted_sum / has_inf_or_nan / count_zeros.
// Casts are checked bit for bit: bf16 against hand-derived encodings (ties to even, NaN, inf,
// subnormals), f16 against the F16C hardware instructions as an independent reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <immintrin.h>
#include <omp.h>

#include <bit>
#include <cstring>
#include <random>

#include "kernel_test_util.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;
using ::testing::HasSubstr;

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint16_t> cast_bits(const std::vector<float>& in, DType to) {
  Tensor src = Tensor::from_vector(in, {int64_t(in.size())});
  Tensor dst = Tensor::empty({int64_t(in.size())}, to);
  kernels::cast(src, dst);
  const auto raw = dst.as_dtype(DType::BF16).to_vector<bf16>();  // any 16-bit type: raw bits
  std::vector<uint16_t> bits;
  for (bf16 b : raw) bits.push_back(b.bits);
  return bits;
}

TEST(Cast, F32ToBf16RoundsToNearestEven) {
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000u, 0x3f80},  // 1.0 exact
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: tie, even neighbour is 1.0
      {0x3f818000u, 0x3f82},  // 1 + 3·2^-8: tie, even neighbour is up
      {0x3f808001u, 0x3f81},  // just above the tie
      {0xbf80ffffu, 0xbf81},  // negative, rounds up in magnitude
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to +inf
      {0x7f800000u, 0x7f80},  // +inf
      {0xff800000u, 0xff80},  // -inf
      {0x00000001u, 0x0000},  // smallest subnormal rounds to +0
      {0x00018000u, 0x0002},  // subnormal tie, rounds to even
      {0x80000000u, 0x8000},  // -0
  };
  std::vector<float> in;
  for (auto [f, b] : cases) in.push_back(bits_to_float(f));
  const auto out = cast_bits(in, DType::BF16);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(out[i], cases[i].second) << std::hex << "input 0x" << cases[i].first;
}

TEST(Cast, NaNStaysNaN) {
  const std::vector<float> in = {bits_to_float(0x7fc00000u), bits_to_float(0x7f800001u),
                                 bits_to_float(0xffffffffu)};
  for (DType to : {DType::BF16, DType::F16}) {
    Tensor dst = Tensor::empty({3}, to);
    kernels::cast(Tensor::from_vector(in, {3}), dst);
    for (double v : to_double(dst)) EXPECT_TRUE(std::isnan(v)) << dtype_name(to);
    Tensor back = Tensor::empty({3}, DType::F32);
    kernels::cast(dst, back);
    for (float v : back.to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  }
}

__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(Cast, F16MatchesF16CInstructions) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  // Every f16 encoding widens exactly as the hardware does (NaNs: both NaN).
  Tensor h = Tensor::empty({65536}, DType::F16);
  for (uint32_t i = 0; i < 65536; ++i) h.data<f16>()[i].bits = uint16_t(i);
  Tensor w = Tensor::empty({65536}, DType::F32);
  kernels::cast(h, w);
  const auto wide = w.to_vector<float>();
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = hw_f16_to_f32(uint16_t(i));
    if (std::isnan(ref))
      EXPECT_TRUE(std::isnan(wide[i])) << i;
    else
      EXPECT_EQ(wide[i], ref) << "f16 bits " << i;
  }
  // Narrowing: random bit patterns over the whole f32 range, plus every f16 midpoint (ties)
  // and the subnormal / overflow boundaries.
  std::vector<float> in;
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) in.push_back(bits_to_float(gen()));
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    const float lo = hw_f16_to_f32(uint16_t(i)), hi = hw_f16_to_f32(uint16_t(i + 1));
    in.push_back((lo + hi) / 2);  // exact in f32: the tie between neighbours
    in.push_back(-(lo + hi) / 2);
  }
  for (float f : {65504.f, 65519.f, 65520.f, 1e-8f, 2.98e-8f, 2.9802322e-8f, 6.1035156e-5f})
    in.push_back(f);
  const auto out = cast_bits(in, DType::F16);
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t ref = hw_f32_to_f16(in[i]);
    const bool both_nan = (ref & 0x7c00) == 0x7c00 && (ref & 0x3ff) &&
                          (out[i] & 0x7c00) == 0x7c00 && (out[i] & 0x3ff);
    if (out[i] != ref && !both_nan && ++mismatches < 10)
      ADD_FAILURE() << std::hex << "f32 0x" << std::bit_cast<uint32_t>(in[i]) << ": got 0x"
                    << out[i] << ", F16C 0x" << ref;
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(Cast, Bf16AndF16RoundTripThroughF32) {
  // bf16 -> f16 -> f32 equals rounding the bf16 value to f16 once.
  Tensor b = random_tensor({37}, DType::BF16, 3, -100.0, 100.0);
  Tensor h = Tensor::empty({37}, DType::F16), f = Tensor::empty({37}, DType::F32);
  kernels::cast(b, h);
  kernels::cast(h, f);
  const auto bd = to_double(b);
  const auto fd = to_double(f);
  for (size_t i = 0; i < bd.size(); ++i) EXPECT_EQ(fd[i], double(float(f16(float(bd[i]))))) << i;
  Tensor wrong = Tensor::empty({36}, DType::F16);
  EXPECT_THROW(kernels::cast(b, wrong), Error);
}

class ElementwiseTest : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseTest, FillScaleAxpy) {
  const DType dt = GetParam();
  const double rtol = dt == DType::F32 ? 1e-7 : dt == DType::BF16 ? test::kBf16Eps : 1.0 / 2048;
  Tensor t = Tensor::empty({5, 3}, dt);
  kernels::fill(t, 1.5f);
  EXPECT_EQ(to_double(t), std::vector<double>(15, 1.5));
  Tensor x = random_tensor({5, 3}, dt, 1);
  const auto xd = to_double(x);
  kernels::scale(x, -3.f);
  std::vector<double> expected(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) expected[i] = -3 * xd[i];
  EXPECT_CLOSE(to_double(x), expected, 0.0 + 1e-30, rtol);
  // axpy into every destination dtype (e.g. bf16 gradients into f32 main gradients).
  for (DType yt : {DType::F32, DType::BF16, DType::F16}) {
    Tensor y = random_tensor({5, 3}, yt, 2);
    const auto yd = to_double(y), x2 = to_double(x);
    kernels::axpy(0.5f, x, y);
    std::vector<double> e(yd.size());
    for (size_t i = 0; i < yd.size(); ++i) e[i] = yd[i] + 0.5 * x2[i];
    const double yrtol = yt == DType::F32 ? 1e-6 : yt == DType::BF16 ? test::kBf16Eps : 1.0 / 2048;
    EXPECT_CLOSE(to_double(y), e, 1e-6, yrtol) << dtype_name(yt);
  }
}

TEST_P(ElementwiseTest, SumSquaresAndInfNaN) {
  const DType dt = GetParam();
  const int64_t n = 100000 + 17;  // several reduction chunks
  Tensor x = random_tensor({n}, dt, 5, -2.0, 2.0);
  double expected = 0;
  for (double v : to_double(x)) expected += v * v;
  EXPECT_NEAR(kernels::sum_squares(x), expected, 1e-9 * expected);
  EXPECT_FALSE(kernels::has_inf_or_nan(x));
  const auto xd = to_double(x);
  for (double bad : {double(INFINITY), -double(INFINITY), std::nan("")}) {
    auto v = xd;
    v[n - 3] = bad;
    EXPECT_TRUE(kernels::has_inf_or_nan(from_double(v, {n}, dt))) << bad;
  }
  // Large finite values are not inf.
  auto big = xd;
  big[0] = dt == DType::F16 ? 65504.0 : 3e38;
  EXPECT_FALSE(kernels::has_inf_or_nan(from_double(big, {n}, dt)));
}

TEST_P(ElementwiseTest, CountZeros) {
  const DType dt = GetParam();
  const int64_t n = 100000 + 17;
  auto v = to_double(random_tensor({n}, dt, 6, 1.0, 2.0));  // no zeros
  EXPECT_EQ(kernels::count_zeros(from_double(v, {n}, dt)), 0);
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; i += 7, ++zeros) v[size_t(i)] = (i % 2) ? 0.0 : -0.0;
  // Tiny values are not zeros: 1e-30 (normal in f32 and bf16), f16's smallest subnormal.
  v[1] = dt == DType::F16 ? 6e-8 : 1e-30;
  EXPECT_EQ(kernels::count_zeros(from_double(v, {n}, dt)), zeros);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ElementwiseTest,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Elementwise, RejectsIntegerTensors) {
  Tensor i = Tensor::zeros({3}, DType::I32);
  EXPECT_THROW(kernels::fill(i, 1.f), Error);
  EXPECT_THROW(kernels::sum_squares(i), Error);
}

// The message of the Error fn throws ("" and a test failure when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

// A contiguous tensor of random bytes (any dtype; floats may be NaN patterns, which a copy
// must move bit for bit all the same).
Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 gen(seed);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(gen());
  return t;
}

// Address of element (i, j) of a 2-D view, from its strides: the naive reference.
const uint8_t* element(const Tensor& t, int64_t i, int64_t j) {
  return static_cast<const uint8_t*>(t.raw_data()) +
         (i * t.stride(0) + j * t.stride(1)) * int64_t(dtype_size(t.dtype()));
}

// Every element of dst equals the one of src at the same index, bit for bit.
void expect_same_elements(const Tensor& src, const Tensor& dst) {
  ASSERT_EQ(src.shape(), dst.shape());
  const size_t es = dtype_size(src.dtype());
  for (int64_t i = 0; i < src.size(0); ++i)
    for (int64_t j = 0; j < src.size(1); ++j)
      ASSERT_EQ(std::memcmp(element(src, i, j), element(dst, i, j), es), 0)
          << dtype_name(src.dtype()) << " at [" << i << ", " << j << "]";
}

class CopyTest : public ::testing::TestWithParam<DType> {};

TEST_P(CopyTest, AnyStridesEitherSide) {
  const DType dt = GetParam();
  const Tensor src = random_bytes({13, 17}, dt, 1);
  // contiguous -> contiguous
  Tensor dst = Tensor::empty({13, 17}, dt);
  kernels::copy(src, dst);
  expect_same_elements(src, dst);
  // contiguous -> transposed view of a [17, 13] buffer
  Tensor buffer = Tensor::empty({17, 13}, dt);
  Tensor dst_t = buffer.transpose(0, 1);  // [13, 17], strides [1, 13]
  kernels::copy(src, dst_t);
  expect_same_elements(src, dst_t);
  // strided column slice -> row-strided slice of a wider buffer
  const Tensor wide = random_bytes({13, 23}, dt, 2);
  const Tensor src_s = wide.slice(1, 3, 20);  // [13, 17], row stride 23
  Tensor big = random_bytes({15, 19}, dt, 3);
  Tensor dst_s = big.slice(0, 1, 14).slice(1, 2, 19);  // [13, 17], row stride 19
  const Tensor big_before = big.clone();
  kernels::copy(src_s, dst_s);
  expect_same_elements(src_s, dst_s);
  // Elements of big outside the view are untouched.
  for (int64_t i = 0; i < 15; ++i)
    for (int64_t j = 0; j < 19; ++j)
      if (i < 1 || i >= 14 || j < 2) {
        ASSERT_EQ(std::memcmp(element(big, i, j), element(big_before, i, j), dtype_size(dt)), 0)
            << "outside the view at [" << i << ", " << j << "]";
      }
  // transposed source -> contiguous
  const Tensor src_t = random_bytes({17, 13}, dt, 4).transpose(0, 1);
  Tensor dst_c = Tensor::empty({13, 17}, dt);
  kernels::copy(src_t, dst_c);
  expect_same_elements(src_t, dst_c);
}

TEST_P(CopyTest, ThreeDimensionalPermutedAndEmpty) {
  const DType dt = GetParam();
  const Tensor src = random_bytes({3, 5, 7}, dt, 5).transpose(0, 2);  // [7, 5, 3]
  Tensor dst = Tensor::empty({7, 5, 3}, dt);
  kernels::copy(src, dst);
  for (int64_t k = 0; k < 7; ++k) expect_same_elements(src.select(0, k), dst.select(0, k));
  Tensor empty_src = Tensor::empty({0, 13}, dt), empty_dst = Tensor::empty({0, 13}, dt);
  kernels::copy(empty_src, empty_dst);  // nothing to do, no error
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CopyTest,
                         ::testing::Values(DType::F32, DType::F64, DType::BF16, DType::F16,
                                           DType::I32, DType::I64, DType::U8),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Copy, RejectsMismatchedOperands) {
  Tensor a = Tensor::zeros({13, 17}, DType::F32);
  Tensor wrong_dtype = Tensor::zeros({13, 17}, DType::BF16);
  EXPECT_THAT(error_of([&] { kernels::copy(a, wrong_dtype); }),
              HasSubstr("copy dst has dtype bf16, expected f32"));
  Tensor wrong_shape = Tensor::zeros({17, 13}, DType::F32);
  EXPECT_THAT(error_of([&] { kernels::copy(a, wrong_shape); }),
              HasSubstr("copy dst has shape [17, 13], expected [13, 17]"));
  Tensor undefined;
  EXPECT_THAT(error_of([&] { kernels::copy(undefined, a); }), HasSubstr("copy src is undefined"));
  EXPECT_THAT(error_of([&] { kernels::copy(a, undefined); }), HasSubstr("copy dst is undefined"));
}

// (Σ v·w, Σ w) in double, in index order: the naive reference.
kernels::WeightedSum naive_weighted_sum(const std::vector<float>& v, const std::vector<float>& w) {
  kernels::WeightedSum s;
  for (size_t i = 0; i < v.size(); ++i) {
    s.weighted += double(v[i]) * double(w[i]);
    s.weights += double(w[i]);
  }
  return s;
}

TEST(WeightedSum, MatchesDoubleLoop) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> value(-3.f, 7.f), weight(0.f, 1.f);
  for (int64_t n : {0, 1, 13, 17, 4099, 100003}) {
    std::vector<float> v(static_cast<size_t>(n)), w(static_cast<size_t>(n));
    for (float& x : v) x = value(gen);
    for (float& x : w) x = weight(gen);
    const auto got =
        kernels::weighted_sum(Tensor::from_vector(v, {n}), Tensor::from_vector(w, {n}));
    const auto want = naive_weighted_sum(v, w);
    // Only the summation order differs: f64 rounding, far below f32's.
    EXPECT_NEAR(got.weighted, want.weighted, 1e-12 * (1 + std::abs(want.weighted))) << n;
    EXPECT_NEAR(got.weights, want.weights, 1e-12 * (1 + want.weights)) << n;
  }
}

TEST(WeightedSum, ExactForALossMask) {
  // Integer losses and a 0/1 mask: every partial sum is exact in f64, so any order is exact.
  const int64_t s = 17, b = 13;
  std::vector<float> loss(size_t(s * b)), mask(size_t(s * b));
  for (int64_t i = 0; i < s * b; ++i) {
    loss[size_t(i)] = float((i * 37) % 201 - 100);
    mask[size_t(i)] = (i % 3 == 0) ? 0.f : 1.f;
  }
  const auto got =
      kernels::weighted_sum(Tensor::from_vector(loss, {s, b}), Tensor::from_vector(mask, {s, b}));
  const auto want = naive_weighted_sum(loss, mask);
  EXPECT_EQ(got.weighted, want.weighted);
  EXPECT_EQ(got.weights, want.weights);
}

TEST(WeightedSum, BitIdenticalForAnyThreadCount) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  const int64_t n = 100003;
  std::vector<float> v(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  for (float& x : v) x = value(gen);
  for (float& x : w) x = value(gen) + 1.f;
  const Tensor vt = Tensor::from_vector(v, {n}), wt = Tensor::from_vector(w, {n});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = kernels::weighted_sum(vt, wt);
  omp_set_num_threads(3);
  const auto three = kernels::weighted_sum(vt, wt);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::bit_cast<uint64_t>(one.weighted), std::bit_cast<uint64_t>(three.weighted));
  EXPECT_EQ(std::bit_cast<uint64_t>(one.weights), std::bit_cast<uint64_t>(three.weights));
}

TEST(WeightedSum, RejectsBadOperands) {
  Tensor v = Tensor::zeros({13}, DType::F32), w = Tensor::zeros({13}, DType::F32);
  Tensor vb = Tensor::zeros({13}, DType::BF16);
  EXPECT_THAT(error_of([&] { kernels::weighted_sum(vb, w); }),
              HasSubstr("weighted_sum values has dtype bf16, expected f32"));
  Tensor wi = Tensor::zeros({13}, DType::I32);
  EXPECT_THAT(error_of([&] { kernels::weighted_sum(v, wi); }),
              HasSubstr("weighted_sum weights has dtype i32, expected f32"));
  Tensor w17 = Tensor::zeros({17}, DType::F32);
  EXPECT_THAT(error_of([&] { kernels::weighted_sum(v, w17); }),
              HasSubstr("weighted_sum weights has shape [17], expected [13]"));
  Tensor strided = Tensor::zeros({13, 2}, DType::F32).slice(1, 0, 1);  // [13, 1], row stride 2
  Tensor w131 = Tensor::zeros({13, 1}, DType::F32);
  EXPECT_THAT(error_of([&] { kernels::weighted_sum(strided, w131); }),
              HasSubstr("weighted_sum values must be contiguous"));
  Tensor undefined;
  EXPECT_THAT(error_of([&] { kernels::weighted_sum(v, undefined); }),
              HasSubstr("weighted_sum weights is undefined"));
}

}  // namespace
}  // namespace megatron
