// The fused attention's CUDA kernels against their CPU twin: the cases, the operands and the
// error bounds shared by tests/gpu/kernels_flash_attention_gpu_test.cpp (on a GPU) and
// tests/simt/flash_attention_simt_test.cpp (the same kernels on the CPU under a SIMT emulator).
//
// The CPU twin is checked against a double-precision attention (kernels_flash_attention_test).
// f32 runs on CUDA cores and must equal the CPU to f32 rounding: that checks the masks, the
// dropout draws, the online softmax and the three backward kernels' indexing. bf16 and f16 run
// on tensor cores and are compared with the CPU twin in f32 on the same (exactly widened)
// values, within the error their roundings allow (expect_matches_cpu_twin).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_test_compare.h"
#include "kernels/flash_attention.h"

namespace megatron::flash_test {

using gpu_test::close;
using gpu_test::from_double;
using gpu_test::random_tensor;
using gpu_test::to_double;
using gpu_test::unit_roundoff;

struct Case {
  int64_t s, b, groups, q, d;
  bool causal, pad;
  float dropout;
};

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << "s " << c.s << " b " << c.b << " groups " << c.groups << " q " << c.q << " d " << c.d
     << " causal " << c.causal << " pad " << c.pad << " dropout " << c.dropout;
  return os.str();
}

// Every code path of the kernels: one key, tiles crossed (64, 65, 130, 200 positions), head
// dimensions padded to 16 (8, 40, 72) or not (64, 128), 256 (tile 32 for the f32 forward and
// every backward), GQA (q 2, 3), padding with a fully padded batch entry, dropout.
const std::vector<Case> kCases = {
    {1, 1, 1, 1, 8, true, false, 0.0f},     {37, 2, 2, 1, 8, true, false, 0.0f},
    {37, 2, 1, 3, 40, false, true, 0.0f},   {130, 2, 2, 2, 64, true, false, 0.0f},
    {130, 2, 1, 2, 72, false, true, 0.0f},  {65, 1, 3, 1, 128, true, false, 0.0f},
    {200, 1, 1, 1, 64, true, true, 0.0f},   {70, 1, 1, 2, 256, true, false, 0.0f},
    {37, 2, 1, 2, 8, true, false, 0.3f},    {130, 2, 2, 1, 64, false, true, 0.1f},
    {129, 1, 1, 1, 128, true, false, 0.5f}, {64, 2, 2, 2, 72, true, true, 0.2f},
};

// The operands of one case on the host, as values of dtype dt. Not copyable: params points
// at rows.
struct Operands {
  Operands(const Case& c, DType dt, uint64_t seed);
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;

  Tensor qkv, dout;  // [s, b, G, q + 2, d], [s, b, H·d]
  std::vector<kernels::MaskRow> rows;
  kernels::FlashAttentionParams params;
};

inline Operands::Operands(const Case& c, DType dt, uint64_t seed) {
  const int64_t H = c.groups * c.q;
  qkv = random_tensor({c.s, c.b, c.groups, c.q + 2, c.d}, dt, seed, -2.0, 2.0);
  dout = random_tensor({c.s, c.b, H * c.d}, dt, seed + 1, -1.0, 1.0);
  kernels::FlashAttentionParams& p = params;
  p.queries_per_group = c.q;
  p.scale = 1.0f / std::sqrt(float(c.d));
  p.causal = c.causal;
  if (c.pad) {
    // Batch entry 0 pads a few keys (one inside each tile), entry 1 (if any) every key.
    std::vector<uint8_t> pad(size_t(c.b * c.s), 0);
    for (int64_t j = 3; j < c.s; j += 61) pad[size_t(j)] = 1;
    for (int64_t j = 0; c.b > 1 && j < c.s; ++j) pad[size_t(c.s + j)] = 1;
    p.pad_mask = Tensor::from_vector(pad, {c.b, c.s});
  }
  if (c.dropout > 0.0f) {
    for (int64_t nh = 0; nh < c.b * H; ++nh)
      for (int64_t t = 0; t < c.s; ++t)  // the counter bases of attention_dropout_rows
        rows.push_back({0x9E3779B97F4A7C15ull * uint64_t(nh + 1), uint64_t(t * c.s)});
    p.dropout_p = c.dropout;
    p.seed = 1234;
    p.dropout_rows = &rows;
  }
}

struct Results {
  Tensor out, lse, dqkv;
};

// The fused attention on the operands' device through the public contract (f16: the CUDA
// backend directly); on the host, the CPU twin.
inline Results run(const Tensor& qkv, const Tensor& dout, const kernels::FlashAttentionParams& p,
                   DType dt, Device device) {
  const int64_t s = qkv.size(0), b = qkv.size(1), H = qkv.size(2) * p.queries_per_group;
  Results r;
  r.out = Tensor::empty({s, b, H * qkv.size(4)}, dt, device);
  r.lse = Tensor::empty({b, H, s}, DType::F32, device);
  r.dqkv = Tensor::empty(qkv.shape(), dt, device);
  MT_GPU_KERNEL(dt, flash_attention_forward, qkv, p, r.out, r.lse);
  MT_GPU_KERNEL(dt, flash_attention_backward, qkv, r.out, r.lse, dout, p, r.dqkv);
  return r;
}

inline Tensor widened(const Tensor& t) {
  return from_double(to_double(t), t.shape(), DType::F32);
}

inline double max_abs(const Tensor& t) {
  double m = 0.0;
  for (double v : to_double(t)) m = std::max(m, std::abs(v));
  return m;
}

// got (the CUDA kernels, dtype dt) against want (the CPU twin in f32 on the same values).
inline void expect_matches_cpu_twin(const Results& got, const Results& want, const Case& c,
                                    DType dt) {
  // A fully masked row's lse is −inf on both sides (close() accepts equal infinities).
  if (dt == DType::F32) {
    // Both within the CPU test's bounds of the exact attention (out 2e-6 + 2e-5·|x|, lse
    // 1e-5 + 1e-6·|x|, gradients 8e-6 + 8e-5·|x|), so within twice them of each other.
    EXPECT_TRUE(close(got.out, want.out, 4e-6, 4e-5));
    EXPECT_TRUE(close(got.lse, want.lse, 2e-5, 2e-6));
    EXPECT_TRUE(close(got.dqkv, want.dqkv, 1.6e-5, 1.6e-4));
    return;
  }
  // 16-bit operands, u the dtype's unit roundoff. out = Σ_j (P_j z_j) v_j with P_j z_j rounded
  // to the dtype before the product: |error| <= u·Σ_j P_j z_j |v_j| <= u·keep_scale·max|v|
  // (Σ P = 1, |v| <= 2), plus out's own rounding, u·|out|. lse: the same f32 scores from
  // exact products (a 16-bit product is exact in f32), summed by the tensor cores, whose f32
  // additions need not round to nearest: each of the d additions errs by at most 2^-23 of a
  // partial sum <= Σ|q·k| <= 4d, and the score is scaled by 1/√d: <= 4·d^1.5·2^-23.
  // Gradients: every term has one factor rounded (P z or dS, relative u) and the result is
  // rounded once: the rounding errors of a sum of mixed-sign terms stay a few u of the
  // largest gradient, while any wrong tile, row or mask is O(the gradient) itself.
  const double u = unit_roundoff(dt), keep_scale = 1.0 / (1.0 - double(c.dropout));
  EXPECT_TRUE(close(got.out, want.out, 2.0 * u * keep_scale * 2.0 + 4e-6, u + 4e-5));
  EXPECT_TRUE(close(got.lse, want.lse, 4.0 * std::pow(double(c.d), 1.5) * 0x1p-23 + 2e-5, 2e-6));
  EXPECT_TRUE(close(got.dqkv, want.dqkv, 8.0 * u * max_abs(want.dqkv), 2.0 * u));
}

}  // namespace megatron::flash_test
