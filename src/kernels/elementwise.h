// Small whole-buffer kernels: cast, copy, fill, scale, axpy, sum of squares, weighted sum,
// inf/NaN check, zero count.
#pragma once

#include "core/arena.h"
#include "core/tensor.h"

namespace megatron::kernels {

// dst = src converted (f32 <-> bf16 <-> f16, round to nearest even). Same shape, contiguous.
// f64 (the MoE router's --moe-router-dtype fp64) converts to and from f32 only.
void cast(const Tensor& src, Tensor& dst);
// dst = src, same shape and dtype (any dtype), any strides on either side: the strided copy of
// every device (Tensor::copy_from copies contiguous bytes between devices).
void copy(const Tensor& src, Tensor& dst);
// A contiguous copy of `src` (any strides) allocated in `arena`: moves a tensor out of a scratch
// arena that is about to be reset.
Tensor copy_into(Arena& arena, const Tensor& src);
void fill(Tensor& t, float value);                   // f32 / bf16 / f16
void scale(Tensor& t, float factor);                 // t *= factor
void axpy(float alpha, const Tensor& x, Tensor& y);  // y += alpha·x (same shape)
// Σ x² accumulated in f64 (the caller takes sqrt after reducing across ranks).
double sum_squares(const Tensor& t);
bool has_inf_or_nan(const Tensor& t);
// The number of elements equal to zero (+0 or −0): Megatron's --log-num-zeros-in-grad.
int64_t count_zeros(const Tensor& t);

// values [N] f32, weights [N] f32, contiguous, one shape (any, e.g. [s, b]; per-token losses
// and the loss mask):
// (Σ values·weights, Σ weights), accumulated in f64 in an order that depends only on N, so the
// result is bit-identical from run to run and between thread counts.
struct WeightedSum {
  double weighted = 0.0;
  double weights = 0.0;
};
WeightedSum weighted_sum(const Tensor& values, const Tensor& weights);

}  // namespace megatron::kernels
