// The CPU backend's entry points (the list: kernels/backend_kernels.inc), called only by
// kernels/<concept>.cpp after it validated the operands (see kernels/dispatch.h).
// Operands are host tensors. Implementations: OpenMP loops vectorised for AVX2/AVX-512, and
// oneDNN/OpenBLAS for GEMM; each lives in kernels/cpu/<concept>.cpp.
#pragma once

#define MEGATRON_KERNEL_BACKEND cpu
#include "kernels/backend_kernels.inc"
#undef MEGATRON_KERNEL_BACKEND
