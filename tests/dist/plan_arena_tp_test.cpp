// The planner's megatron-cpp activation accounting (plan/activation_memory.h) against the arenas
// of a real GPT at TP = world size (1, 2, 4), with and without sequence parallelism, under no,
// full and selective recompute: one training step, then GptModel::activation_bytes() (this
// rank's arena and scratch high-water marks) must equal the prediction to the byte; and three
// pipeline stages of it with sequence parallelism, stage by stage. The single-process cases
// (TP 1) are in tests/unit/plan_memory_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

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

// As PlanPipeline.MegatronCppStageArenasExactly (tests/unit/plan_memory_test.cpp), at
// TP = world size with sequence parallelism: three stages of one layer in this process, one
// micro-batch through all three. The first and last rank each hold two copies of the boundary
// tensor, the executor's buffers (GptModel::stage_activation_shape: the sequence shard).
TEST(PlanArenaTensorParallel, SequenceParallelStageArenasExactly) {
  const int t = test::world_size();
  if (t == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    SCOPED_TRACE(::testing::Message() << "recompute " << int(rc));
    GptConfig gc;
    gc.num_layers = 3;
    gc.hidden_size = 64;
    gc.num_attention_heads = 4;
    gc.vocab_size = 1000;
    gc.padded_vocab_size = 1024;
    gc.max_position_embeddings = 24;
    gc.seq_length = 24;
    gc.hidden_dropout = gc.attention_dropout = 0.1f;
    gc.recompute_activations = rc == Recompute::kFull;
    gc.selective_recompute = rc == Recompute::kSelective;
    gc.sequence_parallel = true;
    ParallelState ps = test::tp_world_state();
    std::vector<std::unique_ptr<ParameterStore>> stores;
    std::vector<std::unique_ptr<GptModel>> stages;
    for (int r = 0; r < 3; ++r) {
      stores.push_back(std::make_unique<ParameterStore>(ps.tp_rank, ps.tp_size));
      stages.push_back(
          std::make_unique<GptModel>(gc, ps, *stores.back(), stage_range(3, 3, r, 1, 0)));
      stores.back()->allocate();
      stages.back()->init_weights(7);
    }
    const int64_t b = 2, s = gc.seq_length;
    std::vector<int32_t> ids(size_t(b * s));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 37 % gc.vocab_size);
    GptBatch batch{Tensor::from_vector(ids, {b, s}), Tensor::from_vector(ids, {b, s}),
                   Tensor::from_vector(std::vector<float>(size_t(b * s), 1.0f), {b, s}), 0, 0};
    std::vector<GptModel::StageCtxPtr> ctxs;
    Tensor x;
    for (auto& stage : stages) {
      ctxs.push_back(stage->make_stage_ctx());
      x = stage->forward_stage(*ctxs.back(), batch, x, true, 11);
    }
    Tensor dx;
    for (int r = 2; r >= 0; --r) dx = stages[size_t(r)]->backward_stage(*ctxs[size_t(r)], dx, 1.0f);

    ModelSpec m;
    m.num_layers = gc.num_layers;
    m.hidden_size = gc.hidden_size;
    m.num_attention_heads = gc.num_attention_heads;
    m.seq_length = s;
    m.vocab_size = gc.vocab_size;
    m.hidden_dropout = m.attention_dropout = gc.hidden_dropout;
    Layout l;
    l.tensor_parallel = t;
    l.pipeline_parallel = 3;
    l.micro_batch = b;
    l.sequence_parallel = true;
    l.recompute = rc;
    validate_layout(m, l, Implementation::kMegatronCpp);
    const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
    const double buffer = double(shape_numel(stages[0]->stage_activation_shape(b))) * 4;
    EXPECT_DOUBLE_EQ(buffer, double(s / t * b * gc.hidden_size) * 4);
    EXPECT_DOUBLE_EQ(a.first_stage,
                     double(stages[0]->stage_activation_bytes(*ctxs[0])) + 2 * buffer);
    EXPECT_DOUBLE_EQ(a.last_stage,
                     double(stages[2]->stage_activation_bytes(*ctxs[2])) + 2 * buffer);
    for (const auto& stage : stages)
      EXPECT_DOUBLE_EQ(a.workspace, double(stage->activation_bytes()));
  }
}

}  // namespace
}  // namespace megatron::plan
