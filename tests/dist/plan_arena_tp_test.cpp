// The planner's megatron-cpp activation accounting (plan/activation_memory.h) against the arenas
// of a real GPT at TP = world size (1, 2, 4), with and without sequence parallelism, under no,
// full and selective recompute: one training step, then GptModel::activation_bytes() (this
// rank's arena and scratch high-water marks) must equal the prediction to the byte; and three
// pipeline stages of it with sequence parallelism, stage by stage; and a real BERT likewise, in
// each LayerNorm order, with its parameters per rank. The single-process cases (TP 1) are in
// tests/unit/plan_memory_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "../common/plan_arena_harness.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"
#include "plan/activation_memory.h"
#include "plan/layout.h"
#include "plan/parameter_count.h"
#include "tp_test_util.h"

namespace megatron::plan {
namespace {

struct TpArenaCase {
  bool sequence_parallel;
  Recompute recompute;
  bool bf16;
  bool llama;  // GQA (2 groups of 4 heads), head dim 24, SwiGLU, RMSNorm, RoPE, no biases, untied
  bool flash = false;  // the fused attention (model/attention.h)
  // --recompute-modules layernorm / mlp (with `recompute` kSelective or kNone: core_attn or not)
  bool recompute_layernorm = false, recompute_mlp = false;
};

void expect_tp_arenas_predicted(const TpArenaCase& k) {
  const int t = test::world_size();
  GptConfig gc = arena_gpt_config(2, k.llama);
  gc.recompute_activations = k.recompute == Recompute::kFull;
  gc.selective_recompute = k.recompute == Recompute::kSelective;
  gc.sequence_parallel = k.sequence_parallel;
  gc.compute_dtype = k.bf16 ? DType::BF16 : DType::F32;
  gc.flash_attention = k.flash;
  gc.recompute_layernorm = k.recompute_layernorm;
  gc.recompute_mlp = k.recompute_mlp;
  ParallelState ps = test::tp_world_state();
  ParameterStore store(ps.tp_rank, ps.tp_size);
  GptModel model(gc, ps, store);
  store.allocate();
  model.init_weights(7);
  const int64_t b = 3;
  model.forward_backward(arena_batch(gc, b), 1.0f, 11);

  const ModelSpec m = arena_model_spec(gc);
  Layout l;
  l.tensor_parallel = t;
  l.micro_batch = b;
  l.sequence_parallel = k.sequence_parallel;
  l.recompute = k.recompute;
  l.precision = k.bf16 ? Precision::kBf16 : Precision::kFp32;
  l.flash_attention = k.flash;
  l.recompute_layernorm = k.recompute_layernorm;
  l.recompute_mlp = k.recompute_mlp;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(a.first_stage + a.workspace, double(model.activation_bytes()));
}

// Selective recompute of the norms' outputs (the norm-output slot) and of the dense MLP, alone
// and together, with and without the attention core's, with and without SP.
TEST(PlanArenaTensorParallel, RecomputeModulesGptPredictsTheArenasExactly) {
  const int t = test::world_size();
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    for (Recompute rc : {Recompute::kNone, Recompute::kSelective})
      for (int modules : {1, 2, 3}) {
        const bool layernorm = modules & 1, mlp = modules & 2;
        for (bool llama : {false, true}) {
          if (llama && 2 % t != 0) continue;
          SCOPED_TRACE(::testing::Message() << "TP " << t << " SP " << sp << " core_attn "
                                            << (rc == Recompute::kSelective) << " layernorm "
                                            << layernorm << " mlp " << mlp << " llama " << llama);
          TpArenaCase k{sp, rc, false, llama};
          k.recompute_layernorm = layernorm;
          k.recompute_mlp = mlp;
          expect_tp_arenas_predicted(k);
        }
      }
  }
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

// The fused attention keeps only the log-sum-exp of the core, with and without SP.
TEST(PlanArenaTensorParallel, FlashAttentionGptPredictsTheArenasExactly) {
  const int t = test::world_size();
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
      const bool llama = 2 % t == 0;
      SCOPED_TRACE(::testing::Message()
                   << "TP " << t << " SP " << sp << " recompute " << int(rc) << " llama " << llama);
      expect_tp_arenas_predicted({sp, rc, /*bf16=*/rc == Recompute::kFull, llama, true});
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
    GptConfig gc = arena_gpt_config(3, /*llama=*/false);
    gc.recompute_activations = rc == Recompute::kFull;
    gc.selective_recompute = rc == Recompute::kSelective;
    gc.sequence_parallel = true;
    const int64_t b = 2, s = gc.seq_length;
    const ThreeStages run = run_three_stages(gc, test::tp_world_state(), b);
    const auto& stages = run.stages;
    const auto& ctxs = run.ctxs;
    const ModelSpec m = arena_model_spec(gc);
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

// The elements of the parameters a rank registers as sequence-parallel: those whose gradients
// reduce_sequence_parallel_gradients all-reduces over TP (optim/grad_reduction.h).
double sequence_parallel_elements(const ParameterStore& store) {
  double n = 0;
  for (const Parameter& p : store.params())
    if (p.spec.sequence_parallel) n += double(p.grad.numel());
  return n;
}

// megatron-cpp's BERT at TP = world size in the LayerNorm order `order`, with or without
// sequence parallelism (the last stage all-gathers the final hidden states before its
// replicated heads), under recompute `rc`: one training step of the whole model, then two
// one-layer stages in this process, each stage context against the planner's per-rank peak
// less the executor's two buffers (the sequence shard with SP); and each ParameterStore (whole,
// first and last stage) against the planner's parameters per rank and, with SP, its
// sequence-parallel gradients (post-LN: the embedding LayerNorm on the first stage instead of
// the final one on the last).
void expect_bert_arenas_predicted(NormOrder order, bool sp, Recompute rc, bool bf16) {
  const int t = test::world_size();
  SCOPED_TRACE(::testing::Message() << norm_order_name(order) << " TP " << t << " SP " << sp
                                    << " recompute " << int(rc) << " bf16 " << bf16);
  BertConfig bc = arena_bert_config(2, /*dropout=*/true, order);
  bc.recompute_activations = rc == Recompute::kFull;
  bc.selective_recompute = rc == Recompute::kSelective;
  bc.sequence_parallel = sp;
  bc.compute_dtype = bf16 ? DType::BF16 : DType::F32;
  const ParallelState ps = test::tp_world_state();
  const int64_t b = 2;
  ParameterStore store(ps.tp_rank, ps.tp_size);
  BertModel whole(bc, ps, store);
  store.allocate();
  whole.init_weights(7);
  whole.forward_backward(arena_bert_batch(bc, b), 1.0f, 3);

  const ModelSpec m = arena_bert_spec(bc);
  Layout l;
  l.tensor_parallel = t;
  l.micro_batch = b;
  l.sequence_parallel = sp;
  l.recompute = rc;
  l.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(a.first_stage + a.workspace, double(whole.activation_bytes()));
  EXPECT_DOUBLE_EQ(count_parameters(m, l).first_stage_rank, double(store.flat_values().numel()));
  const SequenceParallelGradients g =
      sequence_parallel_gradients(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(g.first_stage_rank, sp ? sequence_parallel_elements(store) : 0.0);
  EXPECT_DOUBLE_EQ(g.last_stage_rank, g.first_stage_rank);

  const TwoBertStages run = run_two_bert_stages(bc, ps, b);
  l.pipeline_parallel = 2;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory staged = activation_memory(m, l, Implementation::kMegatronCpp);
  const double buffer =
      double(shape_numel(run.stages[0]->stage_activation_shape(b))) * (bf16 ? 2 : 4);
  EXPECT_DOUBLE_EQ(buffer,
                   double(bc.seq_length / (sp ? t : 1) * b * bc.hidden_size) * (bf16 ? 2 : 4));
  EXPECT_DOUBLE_EQ(staged.first_stage,
                   double(run.stages[0]->stage_activation_bytes(*run.ctxs[0])) + 2 * buffer);
  EXPECT_DOUBLE_EQ(staged.last_stage,
                   double(run.stages[1]->stage_activation_bytes(*run.ctxs[1])) + 2 * buffer);
  for (const auto& stage : run.stages)
    EXPECT_DOUBLE_EQ(staged.workspace, double(stage->activation_bytes()));
  const ParameterCounts c = count_parameters(m, l);
  EXPECT_DOUBLE_EQ(c.first_stage_rank, double(run.stores[0]->flat_values().numel()));
  EXPECT_DOUBLE_EQ(c.last_stage_rank, double(run.stores[1]->flat_values().numel()));
  const SequenceParallelGradients staged_g =
      sequence_parallel_gradients(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(staged_g.first_stage_rank,
                   sp ? sequence_parallel_elements(*run.stores[0]) : 0.0);
  EXPECT_DOUBLE_EQ(staged_g.last_stage_rank, sp ? sequence_parallel_elements(*run.stores[1]) : 0.0);
}

// Every case of one order: SP off and on, no / full / selective recompute, f32 and bf16. One
// test per order, as 12 cases (each a step of the whole model and of its two stages) at TP 4 on
// a loaded machine take a good part of the per-test watchdog (300 s).
void expect_bert_arenas_predicted(NormOrder order) {
  const int t = test::world_size();
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;  // sequence parallelism needs TP > 1
    for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective})
      for (bool bf16 : {false, true}) expect_bert_arenas_predicted(order, sp, rc, bf16);
  }
}

TEST(PlanArenaTensorParallel, BertPredictsTheArenasExactly) {
  expect_bert_arenas_predicted(NormOrder::kPre);
}

TEST(PlanArenaTensorParallel, PostLnBertPredictsTheArenasExactly) {
  expect_bert_arenas_predicted(NormOrder::kPost);
}

// Residuals from the norms differ from pre-LN in the layers' backward scratch only (two input
// gradients of the shard): without and with SP, no and full recompute (which re-runs the layer
// in the scratch), f32 and bf16.
TEST(PlanArenaTensorParallel, ResidualFromNormBertPredictsTheArenasExactly) {
  const int t = test::world_size();
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    expect_bert_arenas_predicted(NormOrder::kPreResidualFromNorm, sp, Recompute::kNone, sp);
    expect_bert_arenas_predicted(NormOrder::kPreResidualFromNorm, sp, Recompute::kFull, !sp);
  }
}

}  // namespace
}  // namespace megatron::plan
