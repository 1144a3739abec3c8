// Memory-bound kernels at GPT-2 small sizes (tokens T = b·s = 2 · 1024, h = 768, ffn = 3072,
// 12 heads, vocab 50304), each reporting GB/s of compulsory traffic (every operand read or
// written once), next to the copy bandwidth they are judged against: memcpy of an L3-sized
// (8 MB) and a DRAM-sized (256 MB) buffer.
//
//   OMP_NUM_THREADS=2 build/bench/bench_kernels --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>

#include "core/tensor.h"
#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rotary.h"
#include "kernels/softmax.h"
#include "kernels/swiglu.h"

namespace megatron {
namespace {

constexpr int64_t kBatch = 2, kSeq = 1024, kTokens = kBatch * kSeq, kHidden = 768, kFfn = 3072,
                  kHeads = 12, kVocab = 50304;

Tensor filled(const Shape& shape, DType dtype, float value) {
  Tensor t = Tensor::empty(shape, dtype);
  kernels::fill(t, value);
  return t;
}

// Registers `name` running body() per iteration and reporting bytes/iteration as GB/s.
void add(const std::string& name, double bytes, std::function<void()> body) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [bytes, body](benchmark::State& state) {
                                 for (auto _ : state) body();
                                 state.counters["GB/s"] = benchmark::Counter(
                                     bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
                               })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

void register_copy() {
  for (int64_t mb : {8, 256}) {
    auto src = std::make_shared<Tensor>(filled({mb << 18}, DType::F32, 1.f));
    auto dst = std::make_shared<Tensor>(filled({mb << 18}, DType::F32, 0.f));
    add("copy/memcpy_" + std::to_string(mb) + "MB", 2.0 * double(src->nbytes()), [src, dst] {
      std::memcpy(dst->raw_data(), src->raw_data(), src->nbytes());
      benchmark::ClobberMemory();
    });
  }
}

void register_dtype(DType dt) {
  const std::string d = std::string(dtype_name(dt)) + "/";
  const double e = double(dtype_size(dt));  // bytes per activation element
  const double th = double(kTokens * kHidden), tf = double(kTokens * kFfn);

  // LayerNorm [T, h]: forward reads x, writes y; backward reads dy, x, writes dx.
  auto x = std::make_shared<Tensor>(filled({kTokens, kHidden}, dt, 0.3f));
  auto y = std::make_shared<Tensor>(filled({kTokens, kHidden}, dt, 0.f));
  auto gamma = std::make_shared<Tensor>(filled({kHidden}, DType::F32, 1.f));
  auto beta = std::make_shared<Tensor>(filled({kHidden}, DType::F32, 0.f));
  auto mean = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 0.f));
  auto rstd = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 0.f));
  add(d + "layernorm_fwd", 2 * th * e,
      [=] { kernels::layernorm_forward(*x, *gamma, *beta, 1e-5f, *y, *mean, *rstd); });
  auto dgamma = std::make_shared<Tensor>(filled({kHidden}, DType::F32, 0.f));
  auto dbeta = std::make_shared<Tensor>(filled({kHidden}, DType::F32, 0.f));
  auto dx = std::make_shared<Tensor>(filled({kTokens, kHidden}, dt, 0.f));
  add(d + "layernorm_bwd", 3 * th * e,
      [=] { kernels::layernorm_backward(*y, *x, *gamma, *mean, *rstd, *dx, *dgamma, *dbeta); });

  // Llama's kernels: RMSNorm [T, h] (as LayerNorm, without β); RoPE in place on [T, h] as
  // 64-channel heads (reads and writes each element once); SwiGLU on [T, 2·ffn] → [T, ffn].
  add(d + "rmsnorm_fwd", 2 * th * e,
      [=] { kernels::rmsnorm_forward(*x, *gamma, 1e-5f, *y, *rstd); });
  add(d + "rmsnorm_bwd", 3 * th * e,
      [=] { kernels::rmsnorm_backward(*y, *x, *gamma, *rstd, *dx, *dgamma); });
  auto heads = std::make_shared<Tensor>(x->view({kTokens, kHidden / 64, 64}));
  add(d + "rotary_fwd", 2 * th * e, [=] {
    kernels::rotary_embedding(
        *heads, 0,
        {.rotary_dim = 64, .base = 10000.0f, .seq_interpolation_factor = 1.0f, .llama3 = {}}, false,
        *heads);
  });
  auto gate_up = std::make_shared<Tensor>(filled({kTokens, 2 * kFfn}, dt, 0.3f));
  auto dgate_up = std::make_shared<Tensor>(filled({kTokens, 2 * kFfn}, dt, 0.f));
  auto swiglu_out = std::make_shared<Tensor>(filled({kTokens, kFfn}, dt, 0.f));
  add(d + "swiglu_fwd", 3 * tf * e, [=] { kernels::swiglu_forward(*gate_up, *swiglu_out); });
  add(d + "swiglu_bwd", 5 * tf * e,
      [=] { kernels::swiglu_backward(*swiglu_out, *gate_up, *dgate_up); });

  // Bias + GeLU [T, ffn].
  auto xf = std::make_shared<Tensor>(filled({kTokens, kFfn}, dt, 0.3f));
  auto yf = std::make_shared<Tensor>(filled({kTokens, kFfn}, dt, 0.f));
  auto bf = std::make_shared<Tensor>(filled({kFfn}, dt, 0.1f));
  auto dbf = std::make_shared<Tensor>(filled({kFfn}, DType::F32, 0.f));
  add(d + "bias_gelu_fwd", 2 * tf * e,
      [=] { kernels::bias_gelu_forward(*xf, *bf, *yf, kernels::GeluForm::kErf); });
  add(d + "bias_gelu_bwd", 3 * tf * e,
      [=] { kernels::bias_gelu_backward(*yf, *xf, *bf, *yf, *dbf, kernels::GeluForm::kErf); });

  // Dropout on [T, h] with a u8 mask; bias-dropout-add reads x, residual, mask, writes y.
  std::vector<kernels::MaskRow> rows;
  for (int64_t r = 0; r < kTokens; ++r) rows.push_back({uint64_t(r), 0});
  auto mask = std::make_shared<Tensor>(Tensor::zeros({kTokens, kHidden}, DType::U8));
  kernels::dropout_mask(7, rows, 0.1f, *mask);
  if (dt == DType::F32)
    add("mask/dropout_mask", th, [=] { kernels::dropout_mask(7, rows, 0.1f, *mask); });
  add(d + "dropout_fwd", 2 * th * e + th, [=] { kernels::dropout_forward(*x, *mask, 0.1f, *y); });
  auto bh = std::make_shared<Tensor>(filled({kHidden}, dt, 0.1f));
  add(d + "bias_dropout_add_fwd", 3 * th * e + th,
      [=] { kernels::bias_dropout_add_forward(*x, *bh, *x, *mask, 0.1f, *y); });
  auto dbh = std::make_shared<Tensor>(filled({kHidden}, DType::F32, 0.f));
  add(d + "bias_dropout_add_bwd", 2 * th * e + th,
      [=] { kernels::bias_dropout_add_backward(*x, *mask, 0.1f, *dx, *dbh); });

  // Causal softmax over [b, heads, s, s].
  const double ss = double(kBatch * kHeads * kSeq * kSeq);
  auto scores = std::make_shared<Tensor>(filled({kBatch, kHeads, kSeq, kSeq}, dt, 0.5f));
  auto probs = std::make_shared<Tensor>(filled({kBatch, kHeads, kSeq, kSeq}, dt, 0.f));
  add(d + "softmax_fwd", 2 * ss * e,
      [=] { kernels::scaled_masked_softmax_forward(*scores, 0.125f, true, Tensor(), *probs); });
  add(d + "softmax_bwd", 3 * ss * e,
      [=] { kernels::scaled_masked_softmax_backward(*scores, *probs, 0.125f, *scores); });

  // Cross-entropy over [T, V] logits: max pass, sum-exp pass, backward in place.
  const double tv = double(kTokens * kVocab);
  auto logits = std::make_shared<Tensor>(filled({kTokens, kVocab}, dt, 0.25f));
  auto targets = std::make_shared<Tensor>(Tensor::zeros({kTokens}, DType::I32));
  auto mx = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 0.f));
  auto se = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 0.f));
  auto tl = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 0.f));
  auto dloss = std::make_shared<Tensor>(filled({kTokens}, DType::F32, 1.f));
  add(d + "ce_row_max", tv * e, [=] { kernels::cross_entropy_row_max(*logits, kVocab, *mx); });
  add(d + "ce_sum_exp", tv * e,
      [=] { kernels::cross_entropy_sum_exp_target(*logits, *targets, 0, kVocab, *mx, *se, *tl); });
  add(d + "ce_backward", 2 * tv * e, [=] {
    kernels::cross_entropy_backward(*logits, *targets, 0, kVocab, *mx, *se, *dloss, *logits);
  });

  // Embedding [V, h] table, T ids (reads T rows, writes T rows).
  auto table = std::make_shared<Tensor>(filled({kVocab, kHidden}, dt, 0.2f));
  std::vector<int32_t> id_values;
  for (int64_t r = 0; r < kTokens; ++r) id_values.push_back(int32_t((r * 7919) % kVocab));
  auto ids = std::make_shared<Tensor>(Tensor::from_vector(id_values, {kTokens}));
  add(d + "embedding_fwd", 2 * th * e, [=] { kernels::embedding_forward(*ids, *table, 0, *y); });
  auto dtable = std::make_shared<Tensor>(filled({kVocab, kHidden}, DType::F32, 0.f));
  add(d + "embedding_bwd", th * e + 2 * th * 4,
      [=] { kernels::embedding_backward(*x, *ids, 0, *dtable); });
}

void register_whole_buffer() {
  const int64_t n = 16 << 20;  // 16M parameters
  auto p = std::make_shared<Tensor>(filled({n}, DType::F32, 0.1f));
  auto g = std::make_shared<Tensor>(filled({n}, DType::F32, 0.01f));
  auto m = std::make_shared<Tensor>(filled({n}, DType::F32, 0.f));
  auto v = std::make_shared<Tensor>(filled({n}, DType::F32, 0.f));
  add("f32/adamw", 7.0 * 4 * double(n), [=] {
    kernels::adamw_update(*p, *g, *m, *v, {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10});
  });
  auto h = std::make_shared<Tensor>(filled({n}, DType::BF16, 0.f));
  add("f32/cast_to_bf16", 6.0 * double(n), [=] { kernels::cast(*p, *h); });
  add("f32/axpy", 12.0 * double(n), [=] { kernels::axpy(0.5f, *g, *m); });
  add("f32/sum_squares", 4.0 * double(n),
      [=] { benchmark::DoNotOptimize(kernels::sum_squares(*g)); });
  add("f32/has_inf_or_nan", 4.0 * double(n),
      [=] { benchmark::DoNotOptimize(kernels::has_inf_or_nan(*g)); });
}

}  // namespace
}  // namespace megatron

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  megatron::register_copy();
  megatron::register_dtype(megatron::DType::F32);
  megatron::register_dtype(megatron::DType::BF16);
  megatron::register_whole_buffer();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
