// GEMM: C = alpha · op(A) · op(B) + beta · C, row-major, with op = identity or transpose.
//
// The three products of a linear layer y = x Wᵀ (W is [out, in]):
//   forward  Y[M,N]  = X[M,K] · W[N,K]ᵀ          gemm(X, false, W, true,  Y)
//   dX       dX[M,K] = dY[M,N] · W[N,K]          gemm(dY, false, W, false, dX)
//   dW      dW[N,K] += dY[M,N]ᵀ · X[M,K]         gemm(dY, true, X, false, dW, 1, 1)
// A and B share one dtype, f32 or bf16; C is f32 or bf16 (bf16 inputs always accumulate in
// f32). Or all three are f64, accumulated in f64 (the MoE router's --moe-router-dtype fp64; K = 0
// is refused for f64).
// Operands are 2-D row-major views whose rows may be strided (leading dimension = stride(0)); the
// inner stride must be 1. An empty C (M, N or batch 0) is left alone; K = 0 sets C = beta·C (zeros
// when beta = 0, C unread) — both handled by the dispatch layer (kernels/gemm.cpp), never by a
// backend. Choice of backend (oneDNN, OpenBLAS) per dtype and shape is the implementation's
// business and documented in docs/kernels.md.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
          float alpha = 1.0f, float beta = 0.0f);

// Batched: a [batch, ...], b [batch, ...], c [batch, M, N]; each batch entry as gemm().
// Every operand is a 3-D view with inner stride 1 (batch and row strides free), so attention
// can multiply per-head slices of [b, heads, s, d] tensors without copies.
void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                  float alpha = 1.0f, float beta = 0.0f);

}  // namespace megatron::kernels
