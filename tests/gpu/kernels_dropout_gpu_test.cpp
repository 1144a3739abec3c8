// Dropout on the GPU against its CPU twin. Masks must be BIT-IDENTICAL to the CPU's (that is
// what makes a GPU run draw the same masks as a CPU run, at any TP size): every probability,
// unaligned and > 2^32 counter bases, row counts on both sides of the inline-parameter limit,
// and many calls queued back to back from one reused host vector (the pinned staging of the row
// keys). The apply kernels: dropout forward/backward bit for bit (one multiply and a select),
// bias-dropout-add forward/backward to rounding, dbias accumulated deterministically.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "core/philox.h"
#include "gpu_test_compare.h"
#include "kernels/dropout.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;
using kernels::MaskRow;

// Row keys with counter bases of every alignment: 0, unaligned, aligned, past 2^32 (Philox
// counter word 1), large.
std::vector<MaskRow> make_rows(int64_t n, uint64_t salt) {
  std::vector<MaskRow> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    uint64_t base;
    switch (r % 5) {
      case 0:
        base = 0;
        break;
      case 1:
        base = uint64_t(r) * 7 + 1;
        break;
      case 2:
        base = uint64_t(r) * 64;
        break;
      case 3:
        base = (uint64_t(1) << 32) - 2 + uint64_t(r % 4);
        break;
      default:
        base = (uint64_t(r) << 40) + 3;
        break;
    }
    rows[size_t(r)] = {philox_key({salt, uint64_t(r)}), base};
  }
  return rows;
}

Tensor cpu_mask(uint64_t seed, const std::vector<MaskRow>& rows, int64_t cols, float p) {
  Tensor m = Tensor::empty({int64_t(rows.size()), cols}, DType::U8);
  kernels::dropout_mask(seed, rows, p, m);
  return m;
}

TEST(DropoutMaskGpu, BitIdenticalToCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  // Rows: 1..64 travel in the kernel's parameters, 65 and more through the staging copy.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 1}, {3, 13}, {17, 17}, {64, 129}, {65, 33}, {1000, 11 * 3}, {97, 2053}, {13, 4}};
  uint64_t salt = 1;
  for (float p : {0.f, 1e-7f, 0.1f, 0.25f, 1.f / 3, 0.5f, 0.9f, 0.999f})
    for (auto [n, cols] : sizes) {
      SCOPED_TRACE("p=" + std::to_string(p) + " rows=" + std::to_string(n) +
                   " cols=" + std::to_string(cols));
      const std::vector<MaskRow> rows = make_rows(n, salt++);
      const uint64_t seed = 0x1234567890abcdefull + salt;
      Tensor g = Tensor::empty({n, cols}, DType::U8, gpu());
      kernels::dropout_mask(seed, rows, p, g);
      EXPECT_TRUE(gpu_test::bit_equal(g, cpu_mask(seed, rows, cols, p)));
    }
}

TEST(DropoutMaskGpu, ManyQueuedCallsFromOneReusedHostVector) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  // More calls than staging slots, no synchronisation in between, and the host vector rewritten
  // right after each call: each mask must still see its own keys.
  const int64_t calls = 21, n = 300, cols = 37;
  const float p = 0.3f;
  std::vector<MaskRow> rows;
  std::vector<Tensor> gpu_masks, cpu_masks;
  for (int64_t k = 0; k < calls; ++k) {
    rows = make_rows(n + k, 1000 + uint64_t(k));  // sizes vary: slots grow
    gpu_masks.push_back(Tensor::empty({n + k, cols}, DType::U8, gpu()));
    kernels::dropout_mask(77, rows, p, gpu_masks.back());
    cpu_masks.push_back(cpu_mask(77, rows, cols, p));
    for (MaskRow& r : rows) r = {~r.key, r.counter_base + 1};  // clobber the host keys
  }
  for (int64_t k = 0; k < calls; ++k)
    EXPECT_TRUE(gpu_test::bit_equal(gpu_masks[size_t(k)], cpu_masks[size_t(k)])) << "call " << k;
}

class DropoutApplyGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(DropoutApplyGpuTest, ForwardAndBackwardMatchCpuBitForBit) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const float p = 0.3f;
  // x [2, 3, 5, 7] with a mask [30, 7] of the same numel; and a large flat case.
  for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{4133, 17}}) {
    const int64_t cols = shape.back(), n = shape_numel(shape) / cols;
    const Tensor mask = cpu_mask(5, make_rows(n, 9), cols, p);
    const Tensor x = random_tensor(shape, dt, 3, -4.0, 4.0);
    Tensor y_ref = Tensor::empty(shape, gpu_test::cpu_dtype(dt));
    kernels::dropout_forward(for_cpu(x), mask, p, y_ref);
    Tensor dx_ref = Tensor::empty(shape, gpu_test::cpu_dtype(dt));
    kernels::dropout_backward(for_cpu(x), mask, p, dx_ref);

    const Tensor xg = on_gpu(x), mg = on_gpu(mask);
    Tensor y = Tensor::empty(shape, dt, gpu()), dx = Tensor::empty(shape, dt, gpu());
    MT_GPU_KERNEL(dt, dropout_forward, xg, mg, p, y);
    MT_GPU_KERNEL(dt, dropout_backward, xg, mg, p, dx);
    if (dt == DType::F16) {
      EXPECT_TRUE(close(y, y_ref, gpu_test::out_atol(dt), out_rtol(dt)));
      EXPECT_TRUE(close(dx, dx_ref, gpu_test::out_atol(dt), out_rtol(dt)));
    } else {
      EXPECT_TRUE(gpu_test::bit_equal(y, y_ref));
      EXPECT_TRUE(gpu_test::bit_equal(dx, dx_ref));
    }
  }
}

TEST_P(DropoutApplyGpuTest, BiasDropoutAddMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  const float p = 0.4f;
  uint64_t seed = 11;
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{7, 13}, {4133, 17}, {33, 1031}})
    for (bool with_bias : {true, false})
      for (bool with_mask : {true, false}) {
        SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c) +
                     " bias=" + std::to_string(with_bias) + " mask=" + std::to_string(with_mask));
        const Tensor x = random_tensor({n, c}, dt, seed++);
        const Tensor bias = with_bias ? random_tensor({c}, dt, seed++) : Tensor();
        const Tensor res = random_tensor({n, c}, dt, seed++);
        const Tensor mask = with_mask ? cpu_mask(9, make_rows(n, seed++), c, p) : Tensor();

        Tensor y_ref = Tensor::empty({n, c}, ct);
        kernels::bias_dropout_add_forward(for_cpu(x), for_cpu(bias), for_cpu(res), mask, p, y_ref);
        const Tensor xg = on_gpu(x), bg = on_gpu(bias), rg = on_gpu(res), mg = on_gpu(mask);
        Tensor y = Tensor::empty({n, c}, dt, gpu());
        MT_GPU_KERNEL(dt, bias_dropout_add_forward, xg, bg, rg, mg, p, y);
        EXPECT_TRUE(close(y, y_ref, 1e-6, out_rtol(dt)));

        // Backward: dbias only where there is a bias (as the model calls it).
        const Tensor dy = random_tensor({n, c}, dt, seed++);
        const Tensor dbias0 = with_bias ? random_tensor({c}, DType::F32, seed++) : Tensor();
        Tensor dx_ref = Tensor::empty({n, c}, ct),
               dbias_ref = with_bias ? dbias0.clone() : Tensor();
        kernels::bias_dropout_add_backward(for_cpu(dy), mask, p, dx_ref, dbias_ref);
        const Tensor dyg = on_gpu(dy);
        Tensor dx = Tensor::empty({n, c}, dt, gpu()), dbias = on_gpu(dbias0);
        MT_GPU_KERNEL(dt, bias_dropout_add_backward, dyg, mg, p, dx, dbias);
        if (dt == DType::F16)
          EXPECT_TRUE(close(dx, dx_ref, gpu_test::out_atol(dt), out_rtol(dt)));
        else
          EXPECT_TRUE(gpu_test::bit_equal(dx, dx_ref));  // one multiply and a select
        if (!with_bias) continue;
        EXPECT_TRUE(close(dbias, dbias_ref, gpu_test::sum_atol(n) * 2, 1e-5));  // |g| <= 1/(1-p)
        Tensor dx2 = Tensor::empty({n, c}, dt, gpu()), dbias2 = on_gpu(dbias0);
        MT_GPU_KERNEL(dt, bias_dropout_add_backward, dyg, mg, p, dx2, dbias2);
        EXPECT_TRUE(gpu_test::bit_equal(dbias2, dbias));
      }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DropoutApplyGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
