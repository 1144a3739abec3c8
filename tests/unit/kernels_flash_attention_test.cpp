// The fused attention (kernels/flash_attention.h) against a double-precision attention written
// out here: the forward (out, lse) and the gradients of Q, K and V, at sizes that cross the
// kernel's 64-row tiles, with GQA, causal and padding masks (a batch entry whose every key is
// padding must give zeros), and attention dropout whose mask comes from kernels::dropout_mask
// over the same rows — so the fused kernel must keep exactly the elements the unfused path
// keeps.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/dropout.h"
#include "kernels/flash_attention.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

struct Case {
  int64_t s, b, groups, q, d;
  bool causal, pad;
  float dropout;
};

// What the double attention needs of a case, and what it gives.
struct Reference {
  std::vector<double> out, lse, dqkv;
};

// qkv [s, b, G, q + 2, d], dout [s, b, H·d], keep [b·H·s, s] (empty: no dropout).
Reference reference(const Case& c, const std::vector<double>& qkv, const std::vector<double>& dout,
                    const std::vector<uint8_t>& pad, const std::vector<uint8_t>& keep,
                    double scale) {
  const int64_t s = c.s, b = c.b, G = c.groups, q = c.q, d = c.d, H = G * q;
  auto at = [&](int64_t t, int64_t n, int64_t g, int64_t slot) {
    return size_t((((t * b + n) * G + g) * (q + 2) + slot) * d);
  };
  auto out_at = [&](int64_t t, int64_t n, int64_t h) { return size_t(((t * b + n) * H + h) * d); };
  Reference r;
  r.out.assign(size_t(s * b * H * d), 0.0);
  r.lse.assign(size_t(b * H * s), -INFINITY);
  r.dqkv.assign(qkv.size(), 0.0);
  const double keep_scale = 1.0 / (1.0 - double(c.dropout));
  for (int64_t n = 0; n < b; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / q, i = h % q;
      // P [s, s] (undropped), Z the dropout factors.
      std::vector<double> P(size_t(s * s), 0.0), Z(size_t(s * s), 1.0);
      for (int64_t t = 0; t < s; ++t) {
        auto visible = [&](int64_t j) {
          return !(c.causal && j > t) && !(c.pad && pad[size_t(n * s + j)]);
        };
        std::vector<double> score(size_t(s), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < s; ++j) {
          if (!visible(j)) continue;
          double dot = 0;
          for (int64_t k = 0; k < d; ++k)
            dot += qkv[at(t, n, g, i) + size_t(k)] * qkv[at(j, n, g, q) + size_t(k)];
          score[size_t(j)] = scale * dot;
          mx = std::max(mx, score[size_t(j)]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < s; ++j)
          if (visible(j)) sum += std::exp(score[size_t(j)] - mx);
        r.lse[size_t((n * H + h) * s + t)] = mx + std::log(sum);
        for (int64_t j = 0; j < s; ++j) {
          if (visible(j)) P[size_t(t * s + j)] = std::exp(score[size_t(j)] - mx) / sum;
          if (!keep.empty())
            Z[size_t(t * s + j)] = keep[size_t(((n * H + h) * s + t) * s + j)] ? keep_scale : 0.0;
        }
      }
      // out = (P ⊙ Z) V; dV = (P ⊙ Z)ᵀ dout; dP = (dout Vᵀ) ⊙ Z;
      // dS = P ⊙ (dP − Σ_j P dP) · scale; dQ = dS K; dK = dSᵀ Q.
      for (int64_t t = 0; t < s; ++t) {
        std::vector<double> dP(size_t(s), 0.0);
        double row_term = 0;
        for (int64_t j = 0; j < s; ++j) {
          const double pd = P[size_t(t * s + j)] * Z[size_t(t * s + j)];
          double dpd = 0;
          for (int64_t k = 0; k < d; ++k) {
            r.out[out_at(t, n, h) + size_t(k)] += pd * qkv[at(j, n, g, q + 1) + size_t(k)];
            r.dqkv[at(j, n, g, q + 1) + size_t(k)] += pd * dout[out_at(t, n, h) + size_t(k)];
            dpd += dout[out_at(t, n, h) + size_t(k)] * qkv[at(j, n, g, q + 1) + size_t(k)];
          }
          dP[size_t(j)] = dpd * Z[size_t(t * s + j)];
          row_term += P[size_t(t * s + j)] * dP[size_t(j)];
        }
        for (int64_t j = 0; j < s; ++j) {
          const double ds = P[size_t(t * s + j)] * (dP[size_t(j)] - row_term) * scale;
          for (int64_t k = 0; k < d; ++k) {
            r.dqkv[at(t, n, g, i) + size_t(k)] += ds * qkv[at(j, n, g, q) + size_t(k)];
            r.dqkv[at(j, n, g, q) + size_t(k)] += ds * qkv[at(t, n, g, i) + size_t(k)];
          }
        }
      }
    }
  return r;
}

void check_case(const Case& c, DType dt, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "s " << c.s << " b " << c.b << " groups " << c.groups << " q "
                                  << c.q << " d " << c.d << " causal " << c.causal << " pad "
                                  << c.pad << " dropout " << c.dropout << " " << dtype_name(dt));
  const int64_t H = c.groups * c.q;
  const Tensor qkv = random_tensor({c.s, c.b, c.groups, c.q + 2, c.d}, dt, seed, -2.0, 2.0);
  const Tensor dout = random_tensor({c.s, c.b, H * c.d}, dt, seed + 1);
  // Padding: batch entry 0 pads a few keys (one inside each tile), entry 1 (if any) every key.
  std::vector<uint8_t> pad(size_t(c.b * c.s), 0);
  for (int64_t j = 3; j < c.s; j += 61) pad[size_t(j)] = 1;
  for (int64_t j = 0; c.b > 1 && j < c.s; ++j) pad[size_t(c.s + j)] = 1;
  std::vector<kernels::MaskRow> rows;
  std::vector<uint8_t> keep;
  if (c.dropout > 0) {
    for (int64_t nh = 0; nh < c.b * H; ++nh)
      for (int64_t t = 0; t < c.s; ++t)
        rows.push_back({0x9E3779B97F4A7C15ull * uint64_t(nh + 1), uint64_t(t * c.s)});
    Tensor mask = Tensor::empty({c.b * H * c.s, c.s}, DType::U8);
    kernels::dropout_mask(1234, rows, c.dropout, mask);
    keep = mask.to_vector<uint8_t>();
  }
  kernels::FlashAttentionParams p;
  p.queries_per_group = c.q;
  p.scale = 1.0f / std::sqrt(float(c.d));
  p.causal = c.causal;
  if (c.pad) p.pad_mask = Tensor::from_vector(pad, {c.b, c.s});
  p.dropout_p = c.dropout;
  p.seed = 1234;
  p.dropout_rows = &rows;

  Tensor out = Tensor::empty({c.s, c.b, H * c.d}, dt);
  Tensor lse = Tensor::empty({c.b, H, c.s}, DType::F32);
  kernels::flash_attention_forward(qkv, p, out, lse);
  Tensor dqkv = Tensor::empty(qkv.shape(), dt);
  kernels::flash_attention_backward(qkv, out, lse, dout, p, dqkv);

  const Reference want = reference(c, to_double(qkv), to_double(dout), pad, keep, double(p.scale));
  // f32: rounding of sums over s keys and d dimensions; bf16: one rounding of each result.
  const double rtol = dt == DType::BF16 ? 2 * test::kBf16Eps : 2e-5;
  const double atol = dt == DType::BF16 ? 2 * test::kBf16Eps : 2e-6;
  EXPECT_CLOSE(to_double(out), want.out, atol, rtol);
  // A fully masked row's lse is −inf on both sides (compared as a finite stand-in).
  auto finite = [](std::vector<double> v) {
    for (double& x : v) x = x == -INFINITY ? -1e30 : x;
    return v;
  };
  EXPECT_CLOSE(finite(to_double(lse)), finite(want.lse), 1e-5, 1e-6);
  EXPECT_CLOSE(to_double(dqkv), want.dqkv, 4 * atol, 4 * rtol);
}

class FlashAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionTest, MatchesDoubleAttentionWithMasksAndGroups) {
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (const Case& c :
       {Case{1, 1, 1, 1, 8, true, false, 0.0f}, Case{37, 2, 2, 1, 8, true, false, 0.0f},
        Case{37, 2, 1, 3, 16, false, true, 0.0f}, Case{130, 2, 2, 2, 8, true, false, 0.0f},
        Case{130, 2, 1, 2, 8, false, true, 0.0f}, Case{70, 1, 3, 1, 40, true, false, 0.0f}})
    check_case(c, dt, seed++);
}

TEST_P(FlashAttentionTest, KeepsExactlyTheUnfusedDropoutMask) {
  const DType dt = GetParam();
  uint64_t seed = 11;
  for (const Case& c :
       {Case{37, 2, 1, 2, 8, true, false, 0.3f}, Case{130, 2, 2, 1, 8, false, true, 0.1f},
        Case{129, 1, 1, 1, 16, true, false, 0.5f}})
    check_case(c, dt, seed++);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FlashAttention, RefusesWhatItCannotCompute) {
  const Tensor qkv = random_tensor({8, 1, 2, 3, 4}, DType::F32, 1);
  Tensor out = Tensor::empty({8, 1, 2 * 4}, DType::F32);
  Tensor lse = Tensor::empty({1, 2, 8}, DType::F32);
  kernels::FlashAttentionParams p;
  p.queries_per_group = 2;  // qkv holds q + 2 = 3 slots per group: one query head, not two
  EXPECT_THROW(kernels::flash_attention_forward(qkv, p, out, lse), Error);
  p.queries_per_group = 1;
  p.dropout_p = 0.1f;  // dropout without its mask rows
  EXPECT_THROW(kernels::flash_attention_forward(qkv, p, out, lse), Error);
  p.dropout_p = 0.0f;
  Tensor wrong_lse = Tensor::empty({1, 2, 8}, DType::BF16);
  EXPECT_THROW(kernels::flash_attention_forward(qkv, p, out, wrong_lse), Error);
  kernels::flash_attention_forward(qkv, p, out, lse);
}

}  // namespace
}  // namespace megatron
