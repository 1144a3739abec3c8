// Small whole-buffer kernels: cast, fill, scale, axpy, sum of squares, inf/NaN check.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// dst = src converted (f32 <-> bf16 <-> f16, round to nearest even). Same shape, contiguous.
void cast(const Tensor& src, Tensor& dst);
void fill(Tensor& t, float value);                   // f32 / bf16 / f16
void scale(Tensor& t, float factor);                 // t *= factor
void axpy(float alpha, const Tensor& x, Tensor& y);  // y += alpha·x (same shape)
// Σ x² accumulated in f64 (the caller takes sqrt after reducing across ranks).
double sum_squares(const Tensor& t);
bool has_inf_or_nan(const Tensor& t);

}  // namespace megatron::kernels
