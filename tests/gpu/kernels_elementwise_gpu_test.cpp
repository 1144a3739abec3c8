// cast / copy / fill / scale / axpy / sum_squares / has_inf_or_nan / count_zeros / weighted_sum on
// the GPU against the CPU twin. Bit for bit where both do the same arithmetic (cast, copy, fill,
// scale); axpy within one rounding (the CPU compiler may or may not fuse the multiply-add); the f64
// reductions within a few f64 roundings, and bit-identical from run to run on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "gpu_test_util.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

using gpu_test::bits_to_float;
using gpu_test::float_dtypes;
using gpu_test::on_cpu;
using gpu_test::on_gpu;
using gpu_test::random_tensor;
using gpu_test::same_bits;
using gpu_test::to_double;

// f32 inputs that exercise every rounding path: ties to even both ways, subnormals of f16 and
// bf16, overflow to inf, infinities, NaNs with payloads and signs, zeros; then random bit
// patterns (all exponents, NaNs included) and random values near 1.
Tensor f32_cast_inputs(int64_t random_count, uint64_t seed) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf80ffffu,
      0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x00000001u, 0x00018000u, 0x7fc00000u, 0x7f800001u,
      0xffffffffu, 0xff812345u, 0x7fbfffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x38800000u,
      0x387fffffu, 0x33000000u, 0x33000001u, 0x337fffffu, 0x33800000u, 0x35000000u, 0x35001000u,
      0x3a802000u, 0x3a803000u, 0x00800000u, 0x007fffffu, 0x80400000u};
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < random_count; ++i) bits.push_back(uint32_t(gen()));
  std::uniform_real_distribution<float> near_one(-2.f, 2.f);
  for (int64_t i = 0; i < random_count; ++i) {
    const float f = near_one(gen);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bits.push_back(u);
  }
  std::vector<float> values;
  for (uint32_t u : bits) values.push_back(bits_to_float(u));
  return Tensor::from_vector(values, {int64_t(values.size())});
}

// Every 16-bit encoding, as a bf16 or f16 tensor [65536].
Tensor every_16_bit_value(DType dtype) {
  Tensor t = Tensor::empty({65536}, dtype);
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (uint32_t i = 0; i < 65536; ++i) p[i] = uint16_t(i);
  return t;
}

void expect_cast_matches(const Tensor& src, DType to) {
  Tensor cpu = Tensor::empty(src.shape(), to);
  kernels::cast(src, cpu);
  Tensor gpu = Tensor::empty(src.shape(), to, gpu_test::gpu());
  kernels::cast(on_gpu(src), gpu);
  EXPECT_TRUE(same_bits(gpu, cpu)) << dtype_name(src.dtype()) << " -> " << dtype_name(to);
}

TEST(GpuCast, EveryDtypePairBitExact) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Tensor f32 = f32_cast_inputs(100003, 1);
  for (DType to : float_dtypes()) expect_cast_matches(f32, to);
  for (DType from : {DType::BF16, DType::F16}) {
    const Tensor all = every_16_bit_value(from);  // NaNs, infs, subnormals included
    for (DType to : float_dtypes()) expect_cast_matches(all, to);
  }
  // Random values of every dtype, odd length.
  for (DType from : float_dtypes())
    for (DType to : float_dtypes()) expect_cast_matches(random_tensor({3, 1001}, from, 2), to);
}

TEST(GpuCast, EmptyTensor) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  Tensor dst = Tensor::empty({0}, DType::BF16, gpu_test::gpu());
  kernels::cast(Tensor::empty({0}, DType::F32, gpu_test::gpu()), dst);
  EXPECT_EQ(dst.numel(), 0);
}

// A strided source view (made by `view` from a base tensor) copied into a contiguous tensor,
// and a contiguous source copied into a strided destination view; both against the CPU.
template <typename View>
void check_copy(const Tensor& base, View view, const char* what) {
  SCOPED_TRACE(::testing::Message()
               << what << " " << base.describe() << " " << dtype_name(base.dtype()));
  const Tensor base_gpu = on_gpu(base);
  // strided -> contiguous
  const Tensor src_cpu = view(base);
  Tensor dst_cpu = Tensor::empty(src_cpu.shape(), base.dtype());
  kernels::copy(src_cpu, dst_cpu);
  Tensor dst_gpu = Tensor::empty(src_cpu.shape(), base.dtype(), gpu_test::gpu());
  kernels::copy(view(base_gpu), dst_gpu);
  EXPECT_TRUE(same_bits(dst_gpu, dst_cpu));
  EXPECT_TRUE(same_bits(dst_gpu, src_cpu.clone()));  // the host's own strided copy agrees
  // contiguous -> strided (elements outside the view keep their values)
  Tensor into_cpu = Tensor::zeros(base.shape(), base.dtype());
  Tensor into_cpu_view = view(into_cpu);
  kernels::copy(dst_cpu, into_cpu_view);
  Tensor into_gpu = Tensor::zeros(base.shape(), base.dtype(), gpu_test::gpu());
  Tensor into_gpu_view = view(into_gpu);
  kernels::copy(dst_gpu, into_gpu_view);
  EXPECT_TRUE(same_bits(into_gpu, into_cpu));
}

TEST(GpuCopy, StridedViewsOfEveryElementSize) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  std::vector<Tensor> bases;
  for (DType dt : float_dtypes()) bases.push_back(random_tensor({5, 7, 9, 11}, dt, 3));
  {
    std::vector<int64_t> v(5 * 7 * 9 * 11);
    for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i) * 7919 - 100000;
    bases.push_back(Tensor::from_vector(v, {5, 7, 9, 11}));  // i64
    std::vector<int32_t> w(v.begin(), v.end());
    bases.push_back(Tensor::from_vector(w, {5, 7, 9, 11}));  // i32
    std::vector<uint8_t> u(v.size());
    for (size_t i = 0; i < u.size(); ++i) u[i] = uint8_t(i * 31);
    bases.push_back(Tensor::from_vector(u, {5, 7, 9, 11}));  // u8
  }
  for (const Tensor& base : bases) {
    check_copy(
        base, [](const Tensor& t) { return t.transpose(0, 1); }, "transpose(0,1)");
    check_copy(
        base, [](const Tensor& t) { return t.transpose(1, 3); }, "transpose(1,3)");
    check_copy(
        base, [](const Tensor& t) { return t.slice(3, 2, 9).slice(1, 1, 6); }, "slices");
    check_copy(
        base, [](const Tensor& t) { return t.select(2, 4).transpose(0, 2); }, "select+transpose");
    check_copy(
        base, [](const Tensor& t) { return t.slice(0, 1, 2); }, "contiguous slice");
    check_copy(
        base, [](const Tensor& t) { return t.slice(2, 3, 4).slice(3, 5, 6); }, "unit dims");
    check_copy(
        base, [](const Tensor& t) { return t; }, "contiguous");
  }
}

// Seven dimensions that cannot be merged (every other one transposed).
TEST(GpuCopy, SevenUnmergeableDimensions) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Tensor base = random_tensor({2, 3, 2, 3, 2, 3, 5}, DType::F32, 4);
  check_copy(
      base, [](const Tensor& t) { return t.transpose(0, 1).transpose(2, 3).transpose(4, 5); },
      "7-d transposes");
}

TEST(GpuFill, EveryDtypeBitExact) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : float_dtypes())
    for (float value : {0.f, -0.f, 0.1f, -3.75f, 70000.f, 1e-6f, INFINITY, NAN}) {
      Tensor cpu = Tensor::empty({1001}, dt);
      kernels::fill(cpu, value);
      Tensor gpu = Tensor::empty({1001}, dt, gpu_test::gpu());
      kernels::fill(gpu, value);
      EXPECT_TRUE(same_bits(gpu, cpu)) << dtype_name(dt) << " value " << value;
    }
}

TEST(GpuScale, EveryDtypeBitExact) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : float_dtypes())
    for (float factor : {0.5f, 1.f / 3.f, -7.25f, 0.f}) {
      const Tensor x = random_tensor({100003}, dt, 5, -4.0, 4.0);
      Tensor cpu = x.clone();
      kernels::scale(cpu, factor);
      Tensor gpu = on_gpu(x);
      kernels::scale(gpu, factor);
      EXPECT_TRUE(same_bits(gpu, cpu)) << dtype_name(dt) << " factor " << factor;
    }
}

// y + alpha·x is rounded once on the GPU (fma); the CPU build may round the product first. The
// two sums differ by at most one f32 rounding of alpha·x, and rounding them to y's dtype may
// then land on neighbouring values: one ulp of the result.
TEST(GpuAxpy, EveryDtypePairWithinOneRounding) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const float alpha = -0.3f;
  for (DType xd : float_dtypes())
    for (DType yd : float_dtypes()) {
      const Tensor x = random_tensor({3, 33335}, xd, 6), y0 = random_tensor({3, 33335}, yd, 7);
      Tensor cpu = y0.clone();
      kernels::axpy(alpha, x, cpu);
      Tensor gpu = on_gpu(y0);
      kernels::axpy(alpha, on_gpu(x), gpu);
      const std::vector<double> xv = to_double(x), e = to_double(cpu);
      std::vector<double> tol(e.size());
      const double u = gpu_test::unit_roundoff(yd);
      for (size_t i = 0; i < e.size(); ++i)
        tol[i] = std::ldexp(1.0, -24) * std::abs(alpha * xv[i]) * (1 + 2 * u) +
                 2 * u * std::abs(e[i]) + 1e-45;
      EXPECT_TRUE(gpu_test::within(to_double(gpu), e, tol))
          << dtype_name(xd) << " -> " << dtype_name(yd);
    }
}

// Σx² in f64 over element counts around the reduction's block sizes, every dtype.
TEST(GpuSumSquares, MatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : float_dtypes())
    for (int64_t n : {int64_t(1), int64_t(255), int64_t(2049), int64_t(100003),
                      int64_t(2) * 1024 * 2048 + 13}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n " << n);
      const Tensor x = random_tensor({n}, dt, uint64_t(n), -3.0, 3.0);
      const double cpu = kernels::sum_squares(x);
      const Tensor g = on_gpu(x);
      const double gpu = kernels::sum_squares(g);
      // Both sum n exact squares (each below 2^4) in f64: error <= n·2^-52·Σ on each side.
      EXPECT_NEAR(gpu, cpu, 2.0 * double(n) * std::ldexp(1.0, -52) * cpu + 1e-300);
      for (int run = 0; run < 2; ++run) EXPECT_EQ(kernels::sum_squares(g), gpu);  // same bits
    }
  // Exact small case.
  const Tensor t = on_gpu(Tensor::from_vector<float>({1.f, -2.f, 3.f}, {3}));
  EXPECT_EQ(kernels::sum_squares(t), 14.0);
}

TEST(GpuHasInfOrNan, FindsEverySpecialAnywhere) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 100003;
  for (DType dt : float_dtypes()) {
    const Tensor clean = random_tensor({n}, dt, 8, -60000.0, 60000.0);  // finite in f16 too
    EXPECT_FALSE(kernels::has_inf_or_nan(on_gpu(clean))) << dtype_name(dt);
    EXPECT_EQ(kernels::has_inf_or_nan(on_gpu(clean)), kernels::has_inf_or_nan(clean));
    for (int64_t at : {int64_t(0), int64_t(1), n / 2 + 1, n - 1})
      for (float special : {INFINITY, -INFINITY, NAN}) {
        Tensor dirty = clean.clone();
        std::vector<double> v = to_double(dirty);
        v[size_t(at)] = special;
        dirty = gpu_test::from_double(v, {n}, dt);
        EXPECT_TRUE(kernels::has_inf_or_nan(on_gpu(dirty)))
            << dtype_name(dt) << " special " << special << " at " << at;
        EXPECT_TRUE(kernels::has_inf_or_nan(dirty));
      }
  }
}

TEST(GpuCountZeros, MatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 1000003;
  for (DType dt : float_dtypes()) {
    std::vector<double> v = to_double(random_tensor({n}, dt, 9, -3.0, 3.0));
    for (int64_t i = 0; i < n; i += 13) v[size_t(i)] = (i % 2) ? 0.0 : -0.0;
    const Tensor x = gpu_test::from_double(v, {n}, dt);
    EXPECT_EQ(kernels::count_zeros(on_gpu(x)), kernels::count_zeros(x)) << dtype_name(dt);
    EXPECT_GE(kernels::count_zeros(x), (n + 12) / 13) << dtype_name(dt);
  }
}

TEST(GpuWeightedSum, MatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (int64_t n : {int64_t(1), int64_t(511), int64_t(20011), int64_t(1) << 22}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const Tensor values = random_tensor({n}, DType::F32, uint64_t(n), 0.0, 12.0);
    std::vector<float> mask(static_cast<size_t>(n));
    std::mt19937_64 gen(uint64_t(n) + 1);
    for (float& m : mask) m = float(gen() % 4 != 0);  // a loss mask: 0 or 1
    const Tensor weights = Tensor::from_vector(mask, {n});
    const kernels::WeightedSum cpu = kernels::weighted_sum(values, weights);
    const Tensor vg = on_gpu(values), wg = on_gpu(weights);
    const kernels::WeightedSum gpu = kernels::weighted_sum(vg, wg);
    EXPECT_NEAR(gpu.weighted, cpu.weighted,
                2.0 * double(n) * std::ldexp(1.0, -52) * std::abs(cpu.weighted) + 1e-300);
    EXPECT_EQ(gpu.weights, cpu.weights);  // integers below 2^53: exact in any order
    for (int run = 0; run < 2; ++run) {
      const kernels::WeightedSum again = kernels::weighted_sum(vg, wg);
      EXPECT_EQ(again.weighted, gpu.weighted);
      EXPECT_EQ(again.weights, gpu.weights);
    }
  }
}

}  // namespace
}  // namespace megatron
