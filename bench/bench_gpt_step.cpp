// One GPT micro-batch (forward + backward) at TP = 1, f32 and bf16, with and without
// activation recompute. Counters: tokens/s and model TFLOP/s by Megatron's formula
// 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) (96 instead of 72 with recompute), per iteration of
// one micro-batch. Args: {layers, hidden, heads, seq, batch, bf16, recompute}.
#include <benchmark/benchmark.h>

#include <memory>

#include "distributed/parallel_state.h"
#include "distributed/solo_communicator.h"
#include "model/gpt_model.h"

namespace megatron {
namespace {

void BM_GptStep(benchmark::State& state) {
  GptConfig c;
  c.num_layers = int(state.range(0));
  c.hidden_size = int(state.range(1));
  c.num_attention_heads = int(state.range(2));
  c.seq_length = c.max_position_embeddings = int(state.range(3));
  const int64_t b = state.range(4);
  c.compute_dtype = state.range(5) ? DType::BF16 : DType::F32;
  c.recompute_activations = state.range(6) != 0;
  c.vocab_size = 50257;
  c.padded_vocab_size = padded_vocab_size(c.vocab_size, 128, 1);
  ParallelState ps = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  ParameterStore store(0, 1);
  GptModel model(c, ps, store);
  store.allocate();
  model.init_weights(1);
  const int64_t s = c.seq_length;
  std::vector<int32_t> tokens(b * s);
  for (int64_t i = 0; i < b * s; ++i) tokens[i] = int32_t((i * 7919) % c.vocab_size);
  GptBatch batch{Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(tokens, {b, s}),
                 Tensor::from_vector(std::vector<float>(b * s, 1.0f), {b, s}), 0, 0};
  // Warm-up: sizes the arenas and creates the oneDNN primitives (JIT), one-time costs.
  model.forward_backward(batch, 1.0f, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.forward_backward(batch, 1.0f, 1));
    ++batch.iteration;
  }
  const double h = c.hidden_size, L = c.num_layers, V = double(c.padded_vocab_size);
  const double flops = (c.recompute_activations ? 96.0 : 72.0) * double(b) * double(s) * L * h * h *
                       (1 + double(s) / (6 * h) + V / (12 * L * h));
  state.counters["tokens/s"] =
      benchmark::Counter(double(b * s), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["act_MiB"] = double(model.activation_bytes()) / (1 << 20);
}

// A small model (quick profile) and GPT-2 small width with 2 layers, s = 256, b = 2.
BENCHMARK(BM_GptStep)
    ->ArgNames({"L", "h", "heads", "s", "b", "bf16", "recompute"})
    ->Args({2, 256, 8, 128, 4, 0, 0})
    ->Args({2, 256, 8, 128, 4, 1, 0})
    ->Args({2, 768, 12, 256, 2, 0, 0})
    ->Args({2, 768, 12, 256, 2, 1, 0})
    ->Args({2, 768, 12, 256, 2, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace megatron

BENCHMARK_MAIN();
