// `megatron bench --mode kernels`: GEMM throughput at one transformer layer's shapes against
// the machine's measured GEMM ceiling per dtype, copy bandwidth, the fused attention's
// (kernels/flash_attention.h) throughput at the layer's attention shape, and the memory-bound
// kernels against the copy bandwidth (cli/bench/memory_bound_bench.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron::cli {

struct KernelBenchOptions {
  int64_t tokens = 2048;      // rows of the activations, b·s
  int64_t hidden = 768;       // h
  int64_t ffn = 3072;         // 4h in GPT-2
  int64_t seq_length = 1024;  // s of the attention: b = tokens / s sequences
  int64_t heads = 12;         // attention heads, of hidden / heads each
  int64_t vocab = 50304;      // logits' columns of the cross-entropy, embedding rows
  int64_t flat_buffer_elements = int64_t(16) << 20;  // AdamW and the norms' flat buffer
  int64_t ceiling_size = 4096;                       // the ceiling is a square GEMM of this size
  int64_t copy_mb = 256;  // memcpy size for the bandwidth figure (beyond the L3 cache)
  double min_time = 0.5;  // seconds each measurement runs for (at least 2 calls)
  std::vector<std::string> dtypes = {"f32", "bf16"};
  std::string device = "cpu";  // cpu, cuda, cuda:N (select_device)
};

// Measures and prints the table; returns the process exit code.
int run_kernel_bench(const KernelBenchOptions& options);

}  // namespace megatron::cli
