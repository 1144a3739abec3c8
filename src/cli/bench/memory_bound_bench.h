// The memory-bound kernels of `megatron bench --mode kernels`: every kernel of a transformer
// layer that is not a GEMM, at the layer's shapes (tokens T = b·s, hidden h, ffn f, heads,
// vocabulary V), each reported as GB/s of compulsory traffic — every operand read or written
// once — and as a share of the copy bandwidth measured in the same run, the floor such a kernel
// is judged against (DESIGN: performance method, "bytes / bandwidth").
#pragma once

#include "cli/bench/kernel_bench.h"
#include "core/device.h"
#include "core/dtype.h"

namespace megatron::cli {

// LayerNorm, RMSNorm, RoPE, SwiGLU, bias + GeLU, dropout, bias-dropout-add, causal softmax,
// the cross-entropy's passes and the embedding, on activations of dtype `dt` (f32 or bf16).
void print_memory_bound_kernels(const KernelBenchOptions& options, DType dt, Device device,
                                double copy_gbps);
// The passes over the flat f32 buffers of options.flat_buffer_elements parameters: AdamW, the
// cast to bf16, axpy, the gradient norm's sum of squares, the inf/NaN check.
void print_flat_buffer_kernels(const KernelBenchOptions& options, Device device, double copy_gbps);

}  // namespace megatron::cli
