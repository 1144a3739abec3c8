// cuBLASLt, opened with dlopen() on the first CUDA GEMM instead of linked into the binary.
//
// Why: mapping libcublasLt costs every process ~150 MB of resident memory and ~0.15 s of
// start-up, CPU-only runs and every MPI rank included, although only kernels/cuda/gemm.cu uses
// it. The binary links no cuBLASLt; cublasLt.h still gives the types and the function
// signatures, so each entry point below keeps its exact C type (decltype of the declaration).
//
// Where from: the library CMake found at configure time (MEGATRON_CUBLASLT_PATH, an absolute
// path), then the soname libcublasLt.so.<CUBLAS_VER_MAJOR of the headers> through the dynamic
// loader's search (LD_LIBRARY_PATH, the binary's RUNPATH, ld.so.cache). Once opened it stays
// open for the life of the process (as the cuBLASLt handle does: see gemm.cu).
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

// Every cuBLASLt function megatron calls. Add one here to call it through cublaslt().
#define MEGATRON_CUBLASLT_FUNCTIONS(X)    \
  X(cublasLtCreate)                       \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoConfigGetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)

namespace megatron::kernels::cuda {

// One pointer per function, named as the C function: cublaslt().cublasLtMatmul(...).
struct CublasLtApi {
#define MEGATRON_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  MEGATRON_CUBLASLT_FUNCTIONS(MEGATRON_CUBLASLT_MEMBER)
#undef MEGATRON_CUBLASLT_MEMBER
};

// The process's cuBLASLt, opened on the first call (thread-safe) from the configured path, then
// the soname. Throws megatron::Error naming every path tried, why each failed, and the fix; a
// failed load is retried by the next call.
const CublasLtApi& cublaslt();

// Opens the first of `candidates` (paths or sonames, in order) that dlopen() accepts and
// resolves every function of MEGATRON_CUBLASLT_FUNCTIONS in it. Throws megatron::Error when
// none opens (naming each candidate with dlerror's reason) or when the opened library lacks a
// function (naming the library and the function; it is then closed again). cublaslt() is this
// with the default candidates, called once.
CublasLtApi load_cublaslt(const std::vector<std::string>& candidates);

}  // namespace megatron::kernels::cuda
