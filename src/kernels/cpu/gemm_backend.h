// Which backend kernels::gemm runs for a problem, in words, for `megatron bench` and the
// benchmarks (e.g. to confirm that bf16 reaches oneDNN's AMX kernel on Sapphire Rapids).
#pragma once

#include <string>

#include "kernels/gemm_problem.h"

namespace megatron::kernels::cpu {

// What a build without OpenBLAS and oneDNN (or a problem without a oneDNN JIT kernel) runs for
// f32: kernels/cpu/blocked_gemm.h.
inline constexpr const char* kBlockedGemmName = "built-in blocked GEMM";

// "OpenBLAS (Haswell)", "oneDNN gemm:jit", "oneDNN brg:avx512_core_amx_bf16",
// "bf16 widened to f32, then OpenBLAS (Zen)", "bf16 widened to f32, then built-in blocked GEMM"...
std::string gemm_backend_name(const GemmProblem& p);

// A warning for the log when the GEMM library runs slower kernels than this CPU allows
// (blas_gemm.h's blas_core_note), else "".
std::string gemm_library_note();

}  // namespace megatron::kernels::cpu
