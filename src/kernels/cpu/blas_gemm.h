// f32 and f64 GEMM through OpenBLAS (cblas_sgemm, cblas_dgemm).
#pragma once

#include <string>

#include "kernels/gemm_problem.h"

namespace megatron::kernels::cpu {

// True when OpenBLAS's selected kernel can run on this CPU. OPENBLAS_CORETYPE forces a core
// (the project sets SkylakeX because Debian's 0.3.21 misdetects recent Xeons), and a forced
// AVX-512 core on a CPU without AVX-512 (e.g. an AMD EPYC VM) dies with SIGILL inside sgemm.
bool blas_usable();

// The OpenBLAS core in use ("Haswell", "Zen", "SkylakeX", ...).
std::string blas_core_name();

// A sentence for the log when OpenBLAS runs older kernels than this CPU can (an AVX2 core such
// as "Haswell" on an AVX-512 CPU, usually forced by OPENBLAS_CORETYPE: f32 GEMMs about half as
// fast, bench/RESULTS.md), else "".
std::string blas_core_note();

// Runs an f32 problem (ab_dtype = c_dtype = F32) one batch entry after another. Requires
// blas_usable().
void blas_sgemm(const GemmProblem& p);
// The same for an f64 problem (ab_dtype = c_dtype = F64). Requires blas_usable().
void blas_dgemm(const GemmProblem& p);

}  // namespace megatron::kernels::cpu
