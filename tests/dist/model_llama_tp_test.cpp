// Llama-family GPT under tensor parallelism (run at world size 1, 2 and 4):
//  * against PyTorch: the HF fixture (8 heads, 2 KV groups) imported into each rank's slices
//    gives PyTorch's logits and loss, and every gradient slice matches, at TP = 2 (KV groups
//    split) and TP = 4 (fewer groups than ranks: KV replicated), with and without recompute;
//  * layout invariance: a randomly initialised Llama-style model (RoPE, RMSNorm, SwiGLU, GQA,
//    untied head, no biases, dropout on) at TP = world size computes the loss and gradients of
//    the TP = 1 model built in the same process from the same seed — also with sequence
//    parallelism (RoPE at global positions, RMSNorm on sequence shards), selective recompute
//    and the fused attention.
#include <gtest/gtest.h>

#include "../common/gpt_variants_golden.h"
#include "../common/llama_golden.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"
#include "optim/grad_reduction.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(LlamaPytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tp=" << tp << " recompute=" << recompute);
      ParallelState ps = ParallelState::create(test::world(), tp, 1);
      const LlamaGolden g = load_llama_golden("llama_tiny", 128);
      expect_matches_llama_golden(g, ps, recompute);
    }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

TEST(LlamaPytorchGoldenDist, Qwen2TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {  // 4 heads, 2 KV groups: split at TP 2, replicated at TP 4
    if (test::world_size() % tp != 0) continue;
    ran = true;
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    const LlamaGolden g = load_llama_golden("qwen2_tiny", 128);
    expect_matches_llama_golden(g, ParallelState::create(test::world(), tp, 1));
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

// The QK norms' gains are replicated but each rank normalises its own heads: their gradients
// are whole only once summed over TP (at TP 4 the 2 KV groups are replicated, too).
TEST(LlamaPytorchGoldenDist, Qwen3QkNormTensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    const LlamaGolden g = load_llama_golden("qwen3_tiny", 128);
    expect_matches_llama_golden(g, ParallelState::create(test::world(), tp, 1));
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

// Nemotron-style variants (--apply-layernorm-1p, --squared-relu, --qk-layernorm with LayerNorm
// biases, --rotary-interleaved, GQA 4 heads / 2 groups: split at TP 2, replicated at TP 4),
// with and without sequence parallelism.
TEST(LlamaPytorchGoldenDist, NemotronStyleVariantsTensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    const GptVariantsGolden g = load_gpt_variants_golden();
    for (bool sp : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tp=" << tp << " sp=" << sp);
      expect_matches_gpt_variants_golden(g, ParallelState::create(test::world(), tp, 1),
                                         [&](GptConfig& c) { c.sequence_parallel = sp; });
    }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

GptConfig llama_config(int64_t groups, bool recompute) {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 8;
  c.ffn_hidden_size = 96;
  c.vocab_size = 1000;
  c.padded_vocab_size = padded_vocab_size(1000, 128, 4);
  c.max_position_embeddings = 64;
  c.seq_length = 32;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.layernorm_epsilon = 1e-6f;
  c.recompute_activations = recompute;
  c.arch.position_embedding = PositionEmbedding::kRope;
  c.arch.rotary_base = 500000.0f;
  c.arch.rotary_percent = 0.5f;
  c.arch.normalization = Normalization::kRMSNorm;
  c.arch.swiglu = true;
  c.arch.num_query_groups = groups;
  c.arch.kv_channels = 16;  // 8 heads of 16 channels on h = 64
  c.arch.add_bias_linear = false;
  c.arch.add_qkv_bias = true;
  c.arch.untie_embeddings_and_output_weights = true;
  return c;
}

// The TP = world model optionally with sequence parallelism and selective recompute (the
// TP = 1 model without either).
void check_llama_matches_tp1(int64_t groups, bool recompute, bool sequence_parallel = false,
                             bool selective = false, bool flash = false) {
  const GptConfig c = llama_config(groups, recompute);
  GptConfig tp_config = c;
  tp_config.sequence_parallel = sequence_parallel;
  tp_config.selective_recompute = selective;
  tp_config.flash_attention = flash;
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store(tp.tp_rank, tp.tp_size), dense_store(0, 1);
  GptModel tp_model(tp_config, tp, tp_store), dense_model(c, dense, dense_store);
  tp_store.allocate();
  dense_store.allocate();
  tp_model.init_weights(17);
  dense_model.init_weights(17);

  const int64_t b = 2, s = c.seq_length;
  std::vector<int32_t> tokens(size_t(b * s)), labels(size_t(b * s));
  std::vector<float> mask(size_t(b * s));
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[size_t(i)] = int32_t((i * 7919 + 13) % c.vocab_size);
    labels[size_t(i)] = int32_t((i * 104729 + 7) % c.vocab_size);
    mask[size_t(i)] = i % 7 == 3 ? 0.0f : 1.0f;
  }
  const GptBatch batch{Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(labels, {b, s}),
                       Tensor::from_vector(mask, {b, s}), 6, 3};
  const float tp_loss = tp_model.forward_backward(batch, 1.0f, 2024);
  const float dense_loss = dense_model.forward_backward(batch, 1.0f, 2024);
  reduce_sequence_parallel_gradients(tp_store, tp);
  EXPECT_NEAR(tp_loss, dense_loss, 1e-5 * dense_loss);
  test::expect_grads_match_dense(*tp.tp, tp_store, dense_store, 1e-5);
}

// KV-cache decoding (RoPE positions from the cache length) at TP = world size gives each rank
// the TP = 1 model's logits for its vocabulary shard, with KV groups split and replicated.
void check_llama_decoding_matches_tp1(int64_t groups) {
  const GptConfig c = llama_config(groups, false);
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store(tp.tp_rank, tp.tp_size), dense_store(0, 1);
  GptModel tp_model(c, tp, tp_store), dense_model(c, dense, dense_store);
  tp_store.allocate();
  dense_store.allocate();
  tp_model.init_weights(5);
  dense_model.init_weights(5);
  InferenceCtx tp_ctx = tp_model.make_inference_ctx(2, 12),
               dense_ctx = dense_model.make_inference_ctx(2, 12);
  const int64_t shard = c.padded_vocab_size / tp.tp_size;
  auto tokens = [](int64_t s, int32_t base) {
    std::vector<int32_t> ids(size_t(2 * s));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((base + 31 * i) % 1000);
    return Tensor::from_vector(ids, {2, s});
  };
  for (int64_t step = 0; step < 5; ++step) {
    const Tensor ids = step == 0 ? tokens(6, 11) : tokens(1, int32_t(100 + step));
    const Tensor local = tp_model.forward_step(tp_ctx, ids).to(Device::CPU);  // [b, V/t]
    const Tensor full = dense_model.forward_step(dense_ctx, ids).to(Device::CPU);
    EXPECT_LE(
        test::rel_error(
            local, full.slice(1, tp_model.vocab_start(), tp_model.vocab_start() + shard).clone()),
        1e-5)
        << "step " << step;
  }
}

TEST(LlamaTensorParallelTest, KvCacheDecodingEqualsTp1) {
  check_llama_decoding_matches_tp1(4);  // split at TP 2 and 4
  check_llama_decoding_matches_tp1(1);  // replicated
}

TEST(LlamaTensorParallelTest, GroupsSplitLossAndGradientsEqualTp1) {
  check_llama_matches_tp1(4, false);  // 4 groups: split at TP 2 and 4
}

TEST(LlamaTensorParallelTest, GroupsReplicatedLossAndGradientsEqualTp1) {
  check_llama_matches_tp1(1, false);  // 1 group (multi-query): replicated at TP 2 and 4
}

TEST(LlamaTensorParallelTest, WithRecomputeLossAndGradientsEqualTp1) {
  check_llama_matches_tp1(2, true);
}

TEST(LlamaTensorParallelTest, WithFlashAttentionLossAndGradientsEqualTp1) {
  // The fused attention (GQA, RoPE) at TP = world size against the unfused TP = 1 model.
  check_llama_matches_tp1(4, false, false, false, true);  // groups split
  check_llama_matches_tp1(1, false, false, true, true);   // replicated; selective is moot
}

TEST(LlamaTensorParallelTest, WithSequenceParallelismLossAndGradientsEqualTp1) {
  if (test::world_size() == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  check_llama_matches_tp1(4, false, true);        // KV groups split
  check_llama_matches_tp1(1, false, true, true);  // replicated, selective recompute
  check_llama_matches_tp1(2, true, true);         // full recompute
}

}  // namespace
}  // namespace megatron
