// Process-wide GEMM options that change numerics, read by the GEMM backends.
//
// allow_tf32: f32 GEMMs may multiply in TF32 (10-bit mantissa inputs, f32 accumulation) on GPUs
// that have it (CUDA backend: CUBLAS_COMPUTE_32F_FAST_TF32). Off by default, so f32 stays f32
// (PyTorch's torch.backends.cuda.matmul.allow_tf32 default). The CPU backends ignore it.
// bf16 GEMMs are unaffected. Device-free; safe to call from any thread.
#pragma once

namespace megatron::kernels {

void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace megatron::kernels
