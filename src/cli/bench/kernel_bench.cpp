// `megatron bench --mode kernels` (see kernel_bench.h). Each figure is the mean rate over
// repeated calls after one warm-up call (which also builds oneDNN's cached primitive or
// cuBLASLt's plan). On a GPU the timed region ends with a device synchronisation, so the
// figures are of finished work, not of queued launches.
#include "cli/bench/kernel_bench.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "cli/bench/gemm_shapes.h"
#include "cli/bench/memory_bound_bench.h"
#include "cli/bench/seconds_per_call.h"
#include "cli/setup/device_setup.h"
#include "core/device_runtime.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"

namespace megatron::cli {

namespace {

// GFLOP/s of kernels::gemm on shape s with A, B of dtype ab and an f32 C, all on `device`.
double gemm_gflops(const GemmShape& s, DType ab, double min_time, Device device) {
  Tensor a = Tensor::empty(s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k}, ab, device);
  Tensor b = Tensor::empty(s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n}, ab, device);
  Tensor c = Tensor::zeros({s.m, s.n}, DType::F32, device);
  kernels::fill(a, 0.5f);
  kernels::fill(b, 0.5f);
  const double t =
      seconds_per_call([&] { kernels::gemm(a, s.trans_a, b, s.trans_b, c); }, min_time, device);
  return s.flops() / t * 1e-9;
}

// Read + write bandwidth of a copy of `mb` MiB within the device's memory.
double copy_gbps(int64_t mb, double min_time, Device device) {
  const size_t bytes = size_t(mb) << 20;
  Tensor src = Tensor::zeros({int64_t(bytes)}, DType::U8, device);
  Tensor dst = Tensor::zeros({int64_t(bytes)}, DType::U8, device);
  const double t = seconds_per_call(
      [&] { copy_bytes(dst.raw_data(), device, src.raw_data(), device, bytes); }, min_time, device);
  return 2.0 * double(bytes) / t * 1e-9;  // read + write
}

// Forward and forward + backward GFLOP/s of the fused causal attention of b sequences of s
// tokens, `heads` heads of d, operands of dtype dt (MHA, no dropout). FLOPs by FlashAttention's
// count, which PyTorch's benchmarks of scaled_dot_product_attention use too: the forward's two
// products 4·b·heads·s²·d, halved by the causal mask, the backward 2.5 times that. (The
// backward here recomputes more than that, for determinism; the count is the work's, not the
// kernels'.)
struct AttentionRates {
  double forward, forward_backward;
};
AttentionRates attention_gflops(int64_t b, int64_t s, int64_t heads, int64_t d, DType dt,
                                double min_time, Device device) {
  Tensor qkv = Tensor::empty({s, b, heads, 3, d}, dt, device);
  Tensor dout = Tensor::empty({s, b, heads * d}, dt, device);
  Tensor out = Tensor::empty({s, b, heads * d}, dt, device);
  Tensor lse = Tensor::empty({b, heads, s}, DType::F32, device);
  Tensor dqkv = Tensor::empty(qkv.shape(), dt, device);
  kernels::fill(qkv, 0.5f);
  kernels::fill(dout, 0.25f);
  kernels::FlashAttentionParams p;
  p.scale = 1.0f / std::sqrt(float(d));
  p.causal = true;
  const double forward = seconds_per_call(
      [&] { kernels::flash_attention_forward(qkv, p, out, lse); }, min_time, device);
  const double both = seconds_per_call(
      [&] {
        kernels::flash_attention_forward(qkv, p, out, lse);
        kernels::flash_attention_backward(qkv, out, lse, dout, p, dqkv);
      },
      min_time, device);
  const double forward_flops = 4.0 * double(b * heads) * double(s) * double(s) * double(d) / 2;
  return {forward_flops / forward * 1e-9, 3.5 * forward_flops / both * 1e-9};
}

}  // namespace

int run_kernel_bench(const KernelBenchOptions& o) {
  MT_REQUIRE(o.tokens > 0 && o.hidden > 0 && o.ffn > 0 && o.ceiling_size > 0 && o.copy_mb > 0 &&
                 o.seq_length > 0 && o.heads > 0 && o.vocab > 0 && o.flat_buffer_elements > 0,
             "bench sizes must be positive");
  MT_REQUIRE(o.tokens % o.seq_length == 0, "bench --seq-length ", o.seq_length,
             " does not divide --tokens ", o.tokens,
             ": the attention runs tokens / s whole sequences");
  MT_REQUIRE(o.hidden % o.heads == 0, "bench --num-attention-heads ", o.heads,
             " does not divide --hidden-size ", o.hidden);
  const Device device = select_device(o.device);
  std::printf(
      "megatron bench --mode kernels on %s: %d OpenMP threads, tokens %lld, hidden %lld, ffn "
      "%lld\n",
      device.str().c_str(), omp_get_max_threads(), (long long)o.tokens, (long long)o.hidden,
      (long long)o.ffn);
  const double copy = copy_gbps(o.copy_mb, o.min_time, device);
  std::printf("copy bandwidth (%lld MB, read + write): %.1f GB/s\n", (long long)o.copy_mb, copy);
  const std::vector<GemmShape> shapes = gpt_layer_gemm_shapes(o.tokens, o.hidden, o.ffn);
  for (const std::string& name : o.dtypes) {
    const DType dt = dtype_from_name(name);
    MT_REQUIRE(dt == DType::F32 || dt == DType::BF16 || (dt == DType::F16 && device.is_cuda()),
               "bench --dtype '", name, "': expected f32 or bf16 (or f16 on a GPU)");
    // The ceiling is measured before and after the shapes and the better figure kept: on a
    // shared machine the load changes during the run, and a ceiling is what the machine can
    // do, not what it did once.
    const int64_t n = o.ceiling_size;
    const GemmShape square{"ceiling", n, n, n, false, false};
    const double before = gemm_gflops(square, dt, o.min_time, device);
    std::vector<double> rates;
    double flops = 0, seconds = 0;
    for (const GemmShape& s : shapes) {
      rates.push_back(gemm_gflops(s, dt, o.min_time, device));
      flops += s.flops();
      seconds += s.flops() / (rates.back() * 1e9);
    }
    const double after = gemm_gflops(square, dt, o.min_time, device);
    const double ceiling = std::max(before, after);
    kernels::GemmProblem p;
    p.m = p.n = p.k = p.lda = p.ldb = p.ldc = n;
    p.ab_dtype = dt;
    std::printf("\n%s GEMM ceiling (%lld^3): %.1f GFLOP/s (before %.1f, after %.1f); backend: %s\n",
                name.c_str(), (long long)n, ceiling, before, after,
                device.is_cuda() ? "cuBLASLt" : kernels::cpu::gemm_backend_name(p).c_str());
    std::printf("  %-10s %6s %6s %6s %10s %12s\n", "shape", "M", "N", "K", "GFLOP/s", "% ceiling");
    for (size_t i = 0; i < shapes.size(); ++i) {
      const GemmShape& s = shapes[i];
      std::printf("  %-10s %6lld %6lld %6lld %10.1f %11.0f%%\n", s.name.c_str(), (long long)s.m,
                  (long long)s.n, (long long)s.k, rates[i], 100.0 * rates[i] / ceiling);
    }
    const double layer = flops / seconds * 1e-9;
    std::printf("  %-10s %27.1f %11.0f%%\n", "layer", layer, 100.0 * layer / ceiling);
    const int64_t b = o.tokens / o.seq_length, d = o.hidden / o.heads;
    const AttentionRates a = attention_gflops(b, o.seq_length, o.heads, d, dt, o.min_time, device);
    std::printf(
        "  fused attention %s (b %lld, s %lld, heads %lld, d %lld, causal): forward %.1f GFLOP/s "
        "(%.0f%%), forward+backward %.1f GFLOP/s (%.0f%%)\n",
        name.c_str(), (long long)b, (long long)o.seq_length, (long long)o.heads, (long long)d,
        a.forward, 100.0 * a.forward / ceiling, a.forward_backward,
        100.0 * a.forward_backward / ceiling);
    print_memory_bound_kernels(o, dt, device, copy);
  }
  print_flat_buffer_kernels(o, device, copy);
  return 0;
}

}  // namespace megatron::cli
