// The GEMM shapes of one GPT-2 transformer layer's linear products, shared by
// `megatron bench --mode kernels` and bench/bench_gemm.cpp so both measure the same set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::cli {

// C[M, N] = op(A) · op(B) with op(A) [M, K], op(B) [K, N], as kernels::gemm takes them.
struct GemmShape {
  std::string name;  // "qkv.fwd", "fc2.dW", ...
  int64_t m, n, k;
  bool trans_a, trans_b;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// For each linear layer y = x Wᵀ of a GPT layer (QKV h→3h, proj h→h, fc1 h→f, fc2 f→h) over
// `tokens` rows: forward Y = X·Wᵀ, input gradient dX = dY·W, weight gradient dW = dYᵀ·X.
std::vector<GemmShape> gpt_layer_gemm_shapes(int64_t tokens, int64_t hidden, int64_t ffn);

}  // namespace megatron::cli
