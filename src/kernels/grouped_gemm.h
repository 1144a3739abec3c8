// Grouped GEMM: one call multiplies G consecutive row groups of variable size by G weight
// matrices, e.g. every local expert's tokens by that expert's weights (model/moe_layer.h).
//   x [M, K] (rows: group 0's group_rows[0] rows, then group 1's, ...; Σ group_rows = M)
//   w [G, N, K] with trans_w (y_g = x_g·w_gᵀ, the linear layer's forward), or [G, K, N]
//     without (y_g = x_g·w_g, the input gradient of a linear layer with w [G, K, N] = [out, in])
//   y [M, N] (=)
//   dw [G, N, K] f32 (+=): dw_g += dy_gᵀ·x_g, the weight gradient.
// Operands as kernels::gemm (f32 or bf16, y in x's dtype); an empty group is skipped (its dw
// stays). Each group is one GEMM of the device's backend (oneDNN/OpenBLAS, cuBLASLt): the
// per-group loop is on the host, over groups, never over tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron::kernels {

void grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w,
                  const std::vector<int64_t>& group_rows, Tensor& y);
void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x,
                              const std::vector<int64_t>& group_rows, Tensor& dw);
// The per-group bias: y_g[n, :] += bias[g] (bias [G, N], y's dtype) and its gradient
// dbias[g] += Σ_n dy_g[n, :] (f32 [G, N]).
void grouped_bias_add(Tensor& y, const Tensor& bias, const std::vector<int64_t>& group_rows);
void grouped_bias_add_backward(const Tensor& dy, const std::vector<int64_t>& group_rows,
                               Tensor& dbias);

}  // namespace megatron::kernels
