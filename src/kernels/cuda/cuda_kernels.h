// The CUDA backend's entry points (the list: kernels/backend_kernels.inc), called only by
// kernels/<concept>.cpp after it validated the operands (see kernels/dispatch.h).
// Operands are device tensors of the current GPU. Every launch goes on this process's compute
// stream (core/cuda/cuda_context.h); nothing here synchronises the host except the kernels that
// return a host value (sum_squares, has_inf_or_nan, count_zeros, weighted_sum,
// first_out_of_range, sample_candidates).
// Implementations live in kernels/cuda/<concept>.cu; built only with MEGATRON_CUDA.
#pragma once

#define MEGATRON_KERNEL_BACKEND cuda
#include "kernels/backend_kernels.inc"
#undef MEGATRON_KERNEL_BACKEND
