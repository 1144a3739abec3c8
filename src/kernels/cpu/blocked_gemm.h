// The built-in f32 GEMM: what kernels::gemm runs on CPUs when the build has neither OpenBLAS
// nor oneDNN (cmake/MegatronDependencies.cmake), e.g. on a GPU machine whose image has no
// Debian -dev packages, where the CPU only runs reference twins and small models.
//
// A plain cache-blocked GEMM in the GotoBLAS shape: panels of op(A) (kMC × kKC) and op(B)
// (kKC × kNC) are packed into contiguous, zero-padded micro-panels, and a register-tiled
// micro-kernel (kMR rows × two SIMD vectors of columns, GCC vector extensions, so AVX-512 or
// AVX2 follow -march) accumulates each kMR × kNR tile of C in registers over one kKC slice.
// OpenMP threads share out the (batch entry, row block, column block) tiles of C; each thread
// packs its own panels, so threads never synchronise. It reaches a good fraction of the
// FMA peak on large problems, but it is no BLAS: no assembly, no prefetching, no tuning per CPU.
#pragma once

#include "kernels/gemm_problem.h"

namespace megatron::kernels::cpu {

// Runs p (ab_dtype = c_dtype = F32, any transposes, row strides, batch strides, alpha, beta;
// beta = 0 never reads C, so C may hold NaN) for every batch entry. Accumulates in f32.
void blocked_sgemm(const GemmProblem& p);

}  // namespace megatron::kernels::cpu
