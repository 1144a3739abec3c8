// GEMM throughput (GFLOP/s) at the GPT-2 small layer shapes (tokens = b·s = 2048, h = 768,
// ffn = 3072), f32 and bf16, next to the ceilings they are judged against: a large square GEMM
// in the same dtype through the same kernels::gemm entry point. Backend-specific entries
// (OpenBLAS, oneDNN) measure the choices documented in docs/kernels.md.
//
//   OMP_NUM_THREADS=2 build/bench/bench_gemm --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include "cli/bench/gemm_shapes.h"
#include "core/tensor.h"
#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/gemm.h"

namespace megatron {
namespace {

enum class Backend { Dispatch, OpenBlas, OneDnn };

// Contiguous operands for shape s filled with small values (their value does not change the
// speed; zeros could, via denormal or sparsity shortcuts, so use 0.5).
struct Operands {
  Tensor a, b, c;
  Operands(const cli::GemmShape& s, DType ab, DType cd) {
    a = Tensor::empty(s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k}, ab);
    b = Tensor::empty(s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n}, ab);
    c = Tensor::zeros({s.m, s.n}, cd);
    for (Tensor* t : {&a, &b}) {
      if (ab == DType::F32)
        std::fill(t->data<float>(), t->data<float>() + t->numel(), 0.5f);
      else
        std::fill(t->data<bf16>(), t->data<bf16>() + t->numel(), bf16(0.5f));
    }
  }
};

kernels::GemmProblem problem(const cli::GemmShape& s, Operands& o) {
  kernels::GemmProblem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.trans_a = s.trans_a, p.trans_b = s.trans_b;
  p.a = o.a.raw_data(), p.b = o.b.raw_data(), p.c = o.c.raw_data();
  p.lda = o.a.size(1), p.ldb = o.b.size(1), p.ldc = o.c.size(1);
  p.ab_dtype = o.a.dtype(), p.c_dtype = o.c.dtype();
  return p;
}

void run_gemm(benchmark::State& state, cli::GemmShape s, DType ab, Backend backend) {
  Operands o(s, ab, DType::F32);
  const kernels::GemmProblem p = problem(s, o);
  if (backend == Backend::OpenBlas && !kernels::cpu::blas_usable()) {
    state.SkipWithError("OpenBLAS core cannot run on this CPU (OPENBLAS_CORETYPE)");
    return;
  }
  if (backend == Backend::OneDnn) {
    const std::string impl = kernels::cpu::onednn_matmul_impl(p);
    state.SetLabel(impl);
    if (impl == "none" || impl.rfind("ref", 0) == 0) {
      state.SkipWithError("oneDNN has no JIT kernel here");
      return;
    }
  }
  for (auto _ : state) {
    switch (backend) {
      case Backend::Dispatch:
        kernels::gemm(o.a, s.trans_a, o.b, s.trans_b, o.c);
        break;
      case Backend::OpenBlas:
        kernels::cpu::blas_sgemm(p);
        break;
      case Backend::OneDnn:
        kernels::cpu::onednn_matmul(p);
        break;
    }
    benchmark::DoNotOptimize(o.c.raw_data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const cli::GemmShape ceiling{"ceiling.4096", 4096, 4096, 4096, false, false};
  const struct {
    const char* name;
    DType dtype;
    Backend backend;
  } variants[] = {{"f32", DType::F32, Backend::Dispatch},
                  {"bf16", DType::BF16, Backend::Dispatch},
                  {"f32_openblas", DType::F32, Backend::OpenBlas},
                  {"f32_onednn", DType::F32, Backend::OneDnn},
                  {"bf16_onednn", DType::BF16, Backend::OneDnn}};
  std::vector<cli::GemmShape> shapes = {ceiling};
  for (const auto& s : cli::gpt_layer_gemm_shapes(2048, 768, 3072)) shapes.push_back(s);
  // Shape-major order: the variants of one shape run back to back, so they see the same load
  // on a shared machine and their ratio is meaningful.
  for (const auto& s : shapes)
    for (const auto& v : variants)
      benchmark::RegisterBenchmark(("gemm/" + std::string(v.name) + "/" + s.name).c_str(), run_gemm,
                                   s, v.dtype, v.backend)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
}

}  // namespace
}  // namespace megatron

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  megatron::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
