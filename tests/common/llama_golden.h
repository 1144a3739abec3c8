// The PyTorch Llama-family golden fixtures (tests/data/llama_tiny: LlamaForCausalLM, 2 layers,
// h 128, 8 heads, 2 KV groups, untied; tests/data/qwen2_tiny: Qwen2ForCausalLM with q/k/v
// biases; tests/data/qwen3_tiny: Qwen3ForCausalLM, GQA with the per-head QK RMSNorm; written by
// tools/reference/llama_reference.py): loading one into a GptModel at any
// TP rank, with the HF gradients mapped into our layout.
#pragma once

#include <memory>
#include <string>

#include "../common/gpt2_golden.h"
#include "convert/hf_llama.h"
#include "optim/grad_reduction.h"

namespace megatron::testing {

struct LlamaGolden {
  std::unique_ptr<SafetensorsReader> file;
  GptConfig config;
  HfDirectory hf;
  GptBatch batch;
  TensorMap hf_grads;   // HF name -> gradient
  TensorMap our_grads;  // our name -> gradient (vocabulary rows padded with zeros)
};

// `fixture`: "llama_tiny", "qwen2_tiny" or "qwen3_tiny"; `padded_vocab`: rows of our vocabulary
// tables.
inline LlamaGolden load_llama_golden(const std::string& fixture, int64_t padded_vocab) {
  LlamaGolden g;
  const std::string dir = source_dir() + "/tests/data/" + fixture;
  g.file = std::make_unique<SafetensorsReader>(dir + "/golden.safetensors");
  g.hf = read_hf_directory(dir + "/hf");
  g.config = gpt_config_from_hf_llama(g.hf.config, padded_vocab);
  g.batch.tokens = g.file->get("input_ids");
  g.batch.labels = g.file->get("labels");
  g.batch.loss_mask = g.file->get("loss_mask");
  g.config.seq_length = int(g.batch.tokens.size(1));
  for (const std::string& name : g.file->names())
    if (name.rfind("grad.", 0) == 0) g.hf_grads[name.substr(5)] = g.file->get(name);
  g.our_grads = gpt_tensors_from_hf_llama(g.hf_grads, g.config);
  return g;
}

// A GptModel for (ps.tp_rank of ps.tp_size) holding the fixture's weights, on `device`.
struct LlamaFromFixture {
  ParameterStore store;
  std::unique_ptr<GptModel> model;
  LlamaFromFixture(const LlamaGolden& g, const ParallelState& ps, bool recompute = false,
                   Device device = Device::CPU)
      : store(ps.tp_rank, ps.tp_size, device) {
    GptConfig c = g.config;
    c.recompute_activations = recompute;
    model = std::make_unique<GptModel>(c, ps, store);
    store.allocate();
    assign_from_full_tensors(gpt_tensors_from_hf_llama(g.hf.tensors, c), store);
    model->refresh_compute_weights();
  }
};

// Logits (≤ 1e-4), loss and every gradient slice of this rank (≤ 1e-3 relative) against the
// fixture, with the model on `device`.
inline void expect_matches_llama_golden(const LlamaGolden& g, const ParallelState& ps,
                                        bool recompute = false, Device device = Device::CPU) {
  LlamaFromFixture m(g, ps, recompute, device);
  Tensor logits = m.model->forward_logits(g.batch.tokens);
  EXPECT_LE(max_relative_error(logits, g.file->get("logits")), 1e-4);
  m.store.zero_grads();
  const double loss = m.model->forward_backward(g.batch, 1.0f, 1234);
  // TP-partial gradients (the QK norms' at TP > 1) are whole once summed, as the trainer does.
  reduce_sequence_parallel_gradients(m.store, ps, nullptr, 0, m.store.params().size());
  const double expected = g.file->get("loss").data<double>()[0];
  EXPECT_NEAR(loss, expected, 1e-4 * expected);
  ASSERT_EQ(m.store.params().size(), g.our_grads.size());
  for (const Parameter& p : m.store.params()) {
    SCOPED_TRACE(p.spec.name);
    EXPECT_LE(max_relative_error(p.grad.to(Device::CPU),
                                 local_slice(p, g.our_grads.at(p.spec.name)).clone()),
              1e-3);
  }
}

}  // namespace megatron::testing
