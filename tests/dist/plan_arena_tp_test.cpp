// The planner's megatron-cpp activation accounting (plan/activation_memory.h) against the arenas
// of a real GPT at TP = world size (1, 2, 4), with and without sequence parallelism, under no,
// full and selective recompute: one training step, then GptModel::activation_bytes() (this
// rank's arena and scratch high-water marks) must equal the prediction to the byte. The
// single-process cases (TP 1) are in tests/unit/plan_memory_test.cpp.
#include <gtest/gtest.h>

#include "model/gpt_model.h"
#include "plan/activation_memory.h"
#include "plan/layout.h"
#include "tp_test_util.h"

namespace megatron::plan {
namespace {

struct TpArenaCase {
  bool sequence_parallel;
  Recompute recompute;
  bool bf16;
  bool llama;  // GQA (2 groups of 4 heads), head dim 24, SwiGLU, RMSNorm, RoPE, no biases, untied
};

void expect_tp_arenas_predicted(const TpArenaCase& k) {
  const int t = test::world_size();
  GptConfig gc;
  gc.num_layers = 2;
  gc.hidden_size = 64;
  gc.num_attention_heads = 4;
  gc.ffn_hidden_size = k.llama ? 96 : 0;
  gc.vocab_size = 1000;
  gc.padded_vocab_size = 1024;
  gc.max_position_embeddings = 24;
  gc.seq_length = 24;  // divisible by every TP size tested
  gc.hidden_dropout = gc.attention_dropout = 0.1f;
  gc.recompute_activations = k.recompute == Recompute::kFull;
  gc.selective_recompute = k.recompute == Recompute::kSelective;
  gc.sequence_parallel = k.sequence_parallel;
  gc.compute_dtype = k.bf16 ? DType::BF16 : DType::F32;
  if (k.llama) {
    gc.arch.num_query_groups = 2;
    gc.arch.kv_channels = 24;
    gc.arch.swiglu = true;
    gc.arch.normalization = Normalization::kRMSNorm;
    gc.arch.position_embedding = PositionEmbedding::kRope;
    gc.arch.add_bias_linear = false;
    gc.arch.untie_embeddings_and_output_weights = true;
  }
  ParallelState ps = test::tp_world_state();
  ParameterStore store(ps.tp_rank, ps.tp_size);
  GptModel model(gc, ps, store);
  store.allocate();
  model.init_weights(7);
  const int64_t b = 3, s = gc.seq_length;
  std::vector<int32_t> ids(size_t(b * s));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 37 % gc.vocab_size);
  GptBatch batch{Tensor::from_vector(ids, {b, s}), Tensor::from_vector(ids, {b, s}),
                 Tensor::from_vector(std::vector<float>(size_t(b * s), 1.0f), {b, s}), 0, 0};
  model.forward_backward(batch, 1.0f, 11);

  ModelSpec m;
  m.num_layers = gc.num_layers;
  m.hidden_size = gc.hidden_size;
  m.num_attention_heads = gc.num_attention_heads;
  m.ffn_hidden_size = gc.ffn_hidden_size;
  m.seq_length = s;
  m.vocab_size = gc.vocab_size;
  m.hidden_dropout = m.attention_dropout = gc.hidden_dropout;
  if (k.llama) {
    m.num_query_groups = 2;
    m.kv_channels = 24;
    m.swiglu = true;
    m.rmsnorm = true;
    m.learned_position_embeddings = false;
    m.add_bias_linear = false;
    m.untie_embeddings_and_output_weights = true;
  }
  Layout l;
  l.tensor_parallel = t;
  l.micro_batch = b;
  l.sequence_parallel = k.sequence_parallel;
  l.recompute = k.recompute;
  l.precision = k.bf16 ? Precision::kBf16 : Precision::kFp32;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(a.first_stage + a.workspace, double(model.activation_bytes()));
}

TEST(PlanArenaTensorParallel, GptPredictsTheArenasExactly) {
  const int t = test::world_size();
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;  // sequence parallelism needs TP > 1
    for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
      for (bool bf16 : {false, true}) {
        for (bool llama : {false, true}) {
          if (llama && 2 % t != 0) continue;  // its 2 KV groups split over TP (validate_layout)
          SCOPED_TRACE(::testing::Message() << "TP " << t << " SP " << sp << " recompute "
                                            << int(rc) << " bf16 " << bf16 << " llama " << llama);
          expect_tp_arenas_predicted({sp, rc, bf16, llama});
        }
      }
    }
  }
}

}  // namespace
}  // namespace megatron::plan
