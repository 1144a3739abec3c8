// Dropout masks from Philox, and the kernels that apply them.
//
// A mask is a u8 tensor [rows, cols], 1 = keep. Row r draws from the stream
// (seed, rows[r].key) at counters rows[r].counter_base + c, and keeps element c when
// uniform >= p. The caller (parallel/random) chooses keys and counter bases from logical
// positions, which is what makes masks independent of TP size and micro-batch split.
// Kept elements are scaled by 1 / (1 - p).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron::kernels {

struct MaskRow {
  uint64_t key;
  uint64_t counter_base;
};

void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask);

// y = x ⊙ mask / (1 - p). x, y same shape and dtype; mask u8 of the same numel.
void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y);
// dx = dy ⊙ mask / (1 - p).
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

// y = residual + dropout(x + bias). x, residual, y [N, C]; bias [C] or undefined (no bias);
// mask [N, C] u8 or undefined (no dropout, p ignored).
void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y);
// dx = dropout'(dy) (written); dbias [C] f32 += Σ_rows dx when bias is defined. The residual's
// gradient is dy itself, so the caller reuses dy.
void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias);

}  // namespace megatron::kernels
