// Peak activation memory of one training micro-batch with each of Megatron's --recompute-modules
// regions (docs/model.md "Activation recompute"), alone and in the MoE CI configs' combination,
// against keeping every activation: GptModel::activation_bytes() (the arenas' high-water marks
// and the norm-output slot) after one forward_backward, in one process (TP 1).
// The model is a small DeepSeek-style one: multi-latent attention, the first layer dense and the
// others mixtures of experts with a shared expert, SwiGLU, RMSNorm, f32, no dropout (as the CI
// configs). Usage: recompute_memory [SEQ_LENGTH] [MICRO_BATCH] (default 512 2).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/parallel_state.h"
#include "distributed/solo_communicator.h"
#include "model/gpt_model.h"

namespace {

using megatron::GptConfig;

GptConfig bench_config(int64_t seq) {
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 1024;
  c.vocab_size = 1024;
  c.padded_vocab_size = 1024;
  c.max_position_embeddings = seq;
  c.seq_length = seq;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  c.arch.position_embedding = megatron::PositionEmbedding::kRope;
  c.arch.normalization = megatron::Normalization::kRMSNorm;
  c.arch.swiglu = true;
  c.arch.add_bias_linear = false;
  c.arch.mla.enabled = true;
  c.arch.mla.q_lora_rank = 128;
  c.arch.mla.kv_lora_rank = 64;
  c.arch.mla.qk_head_dim = 64;
  c.arch.mla.qk_pos_emb_head_dim = 32;
  c.arch.mla.v_head_dim = 64;
  c.arch.moe.num_experts = 8;
  c.arch.moe.topk = 2;
  c.arch.moe.ffn_hidden_size = 256;
  c.arch.moe.shared_expert_ffn = 256;
  c.arch.moe.layer_freq = "([0]+[1]*3)";
  return c;
}

struct Row {
  const char* modules;
  void (*set)(GptConfig&);
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t seq = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t b = argc > 2 ? std::atoll(argv[2]) : 2;
  const Row rows[] = {
      {"(none)", [](GptConfig&) {}},
      {"core_attn", [](GptConfig& c) { c.selective_recompute = true; }},
      {"layernorm", [](GptConfig& c) { c.recompute_layernorm = true; }},
      {"mla_up_proj", [](GptConfig& c) { c.recompute_mla_up_proj = true; }},
      {"mlp", [](GptConfig& c) { c.recompute_mlp = true; }},
      {"moe", [](GptConfig& c) { c.recompute_moe = true; }},
      {"shared_experts", [](GptConfig& c) { c.recompute_shared_experts = true; }},
      {"moe_act", [](GptConfig& c) { c.recompute_moe_act = true; }},
      {"layernorm mla_up_proj mlp moe_act",
       [](GptConfig& c) {
         c.recompute_layernorm = c.recompute_mla_up_proj = c.recompute_mlp = true;
         c.recompute_moe_act = true;
       }},
      {"core_attn layernorm mla_up_proj mlp moe",
       [](GptConfig& c) {
         c.selective_recompute = c.recompute_layernorm = c.recompute_mla_up_proj = true;
         c.recompute_mlp = c.recompute_moe = true;
       }},
  };
  std::vector<int32_t> tokens(size_t(b * seq)), labels(size_t(b * seq));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t((i * 7 + 3) % 1024);
    labels[i] = int32_t((i * 11 + 5) % 1024);
  }
  const megatron::GptBatch batch{
      megatron::Tensor::from_vector(tokens, {b, seq}),
      megatron::Tensor::from_vector(labels, {b, seq}),
      megatron::Tensor::from_vector(std::vector<float>(tokens.size(), 1.0f), {b, seq}), 0, 1};
  std::printf("sequence %lld, micro-batch %lld: 4 layers (1 dense, 3 MoE), MLA, f32\n",
              (long long)seq, (long long)b);
  std::printf("| --recompute-modules | activation MiB | vs none |\n|---|---|---|\n");
  double none = 0;
  for (const Row& row : rows) {
    GptConfig c = bench_config(seq);
    row.set(c);
    megatron::ParallelState ps =
        megatron::ParallelState::create(std::make_shared<megatron::SoloCommunicator>(), 1, 1);
    megatron::ParameterStore store(0, 1);
    megatron::GptModel model(c, ps, store);
    store.allocate();
    model.init_weights(7);
    model.forward_backward(batch, 1.0f, 11);
    const double mib = double(model.activation_bytes()) / (1024.0 * 1024.0);
    if (none == 0) none = mib;
    std::printf("| %s | %.1f | %+.1f%% |\n", row.modules, mib, 100.0 * (mib - none) / none);
  }
  return 0;
}
