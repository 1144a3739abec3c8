// GemmProblem: one (possibly batched) row-major GEMM described by raw pointers and strides,
// the common currency of the GEMM backends (CPU: oneDNN, OpenBLAS; CUDA: cuBLASLt) behind
// kernels::gemm. kernels/gemm.cpp builds it from validated tensors; the pointers are on the
// device the backend runs on. Backends only ever get batch, m, n, k >= 1: kernels/gemm.cpp
// returns early for an empty C and does K = 0 (C = beta · C) itself.
//   C[b] (M×N, row stride ldc) = alpha · op(A[b]) · op(B[b]) + beta · C[b],  b < batch
//   A[b] is M×K (K×M when trans_a) with row stride lda; B[b] is K×N (N×K when trans_b).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace megatron::kernels {

struct GemmProblem {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;                  // row strides, elements
  int64_t batch_a = 0, batch_b = 0, batch_c = 0;      // batch strides, elements
  DType ab_dtype = DType::F32, c_dtype = DType::F32;  // A and B share one dtype
  float alpha = 1.f, beta = 0.f;
};

}  // namespace megatron::kernels
