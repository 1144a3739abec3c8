// The PyTorch golden fixture of Megatron-Core's Nemotron-style model variants (tests/data/
// gpt_variants, written by tools/reference/gpt_variants_reference.py): a 2-layer GPT with
// --apply-layernorm-1p, --squared-relu, --qk-layernorm (LayerNorm, with biases), RoPE on half of
// each head with --rotary-interleaved, GQA (4 heads, 2 KV groups), linear biases and an untied
// output layer, weights in our names. Loads into a GptModel at any TP rank and compares.
#pragma once

#include <memory>
#include <string>

#include "../common/gpt2_golden.h"
#include "optim/grad_reduction.h"

namespace megatron::testing {

// The tiny GPT the PyTorch reference scripts share (gpt_variants, mla and mup_reference.py):
// 2 layers, hidden 32, 4 heads, vocabulary 64, 16 positions, no dropout.
inline GptConfig tiny_reference_gpt(int64_t ffn_hidden_size) {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = ffn_hidden_size;
  c.vocab_size = 64;
  c.padded_vocab_size = 64;
  c.max_position_embeddings = 16;
  c.seq_length = 16;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  c.layernorm_epsilon = 1e-5f;
  return c;
}

// The shape of the reference script's model (its constants).
inline GptConfig gpt_variants_config() {
  GptConfig c = tiny_reference_gpt(48);
  ArchitectureOptions& a = c.arch;
  a.position_embedding = PositionEmbedding::kRope;
  a.rotary_percent = 0.5f;
  a.rotary_interleaved = true;
  a.num_query_groups = 2;
  a.apply_layernorm_1p = true;
  a.squared_relu = true;
  a.qk_layernorm = true;
  a.untie_embeddings_and_output_weights = true;
  return c;
}

struct GptVariantsGolden {
  std::unique_ptr<SafetensorsReader> file;
  GptConfig config = gpt_variants_config();
  GptBatch batch;
  TensorMap weights;  // our name -> full tensor
};

// A fixture of this form (weights "w.<name>", the batch, logits, loss, "grad.<name>") in
// tests/data/<dir>/golden.safetensors, for the model `config` (also tests/common/mla_golden.h).
inline GptVariantsGolden load_golden_fixture(const std::string& dir, const GptConfig& config) {
  GptVariantsGolden g;
  g.config = config;
  g.file = std::make_unique<SafetensorsReader>(source_dir() + "/tests/data/" + dir +
                                               "/golden.safetensors");
  g.batch.tokens = g.file->get("input_ids");
  g.batch.labels = g.file->get("labels");
  g.batch.loss_mask = g.file->get("loss_mask");
  for (const std::string& name : g.file->names())
    if (name.rfind("w.", 0) == 0) g.weights[name.substr(2)] = g.file->get(name);
  return g;
}

inline GptVariantsGolden load_gpt_variants_golden() {
  return load_golden_fixture("gpt_variants", gpt_variants_config());
}

// Logits (<= 1e-4), loss and every gradient slice of this rank (<= 1e-3 relative) against the
// fixture, with the options `adjust` sets on the config (recompute, flash attention, ...), the
// model on `device`.
template <typename Adjust>
void expect_matches_gpt_variants_golden(const GptVariantsGolden& g, const ParallelState& ps,
                                        Adjust adjust, Device device = Device::CPU) {
  GptConfig c = g.config;
  adjust(c);
  ParameterStore store(ps.tp_rank, ps.tp_size, device);
  GptModel model(c, ps, store);
  store.allocate();
  assign_from_full_tensors(g.weights, store);
  model.refresh_compute_weights();
  EXPECT_LE(max_relative_error(model.forward_logits(g.batch.tokens), g.file->get("logits")), 1e-4);
  store.zero_grads();
  const double loss = model.forward_backward(g.batch, 1.0f, 1234);
  reduce_sequence_parallel_gradients(store, ps, nullptr, 0, store.params().size());
  const double expected = g.file->get("loss").data<double>()[0];
  EXPECT_NEAR(loss, expected, 1e-5 * expected);
  ASSERT_EQ(store.params().size(), g.weights.size());
  for (const Parameter& p : store.params()) {
    SCOPED_TRACE(p.spec.name);
    EXPECT_LE(max_relative_error(p.grad.to(Device::CPU),
                                 local_slice(p, g.file->get("grad." + p.spec.name)).clone()),
              1e-3);
  }
}

}  // namespace megatron::testing
