// GEMM through oneDNN's matmul primitive, with primitives cached per problem signature.
#pragma once

#include <string>

#include "kernels/gemm_problem.h"

namespace megatron::kernels::cpu {

// Runs p with oneDNN if oneDNN has an optimised (JIT) implementation for it and returns true;
// returns false without touching C when the only implementation is oneDNN's reference loop
// (e.g. bf16 on CPUs without AVX-512), so the caller can take another path.
bool onednn_matmul(const GemmProblem& p);

// The implementation oneDNN picks for p ("brg:avx512_core_amx_bf16", "gemm:jit", "ref:any"...),
// for benchmarks and docs.
std::string onednn_matmul_impl(const GemmProblem& p);

}  // namespace megatron::kernels::cpu
