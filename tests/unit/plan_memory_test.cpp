// The planner's parameter and memory accounting (plan/parameter_count.h, activation_memory.h,
// memory_estimate.h) against independently derived numbers: hand counts, the ParameterStore of
// real models, Megatron-LM's theoretical_memory_usage evaluated separately, Korthikanti et al.
// (2022) Table 2, and the arenas of GptModel / BertModel after a real training step.
#include <gtest/gtest.h>

#include "../common/plan_arena_harness.h"
#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"
#include "model_test_util.h"
#include "optim/distributed_optimizer.h"
#include "optim/optimizer.h"
#include "plan/layout.h"
#include "plan/memory_estimate.h"
#include "plan/pipeline_buffers.h"
#include "plan_test_models.h"

namespace megatron::plan {
namespace {

ModelSpec gpt2_small() {
  return gpt_spec(12, 768, 12, 1024, 50257);
}

Machine no_reserve() {
  Machine m;
  m.name = "test";
  m.memory_bytes = 1e12;
  return m;
}

TEST(PlanParameters, Gpt2SmallByHand) {
  // HF GPT-2 small has 124,439,808 parameters with V = 50257: wte 50257·768 + wpe 1024·768
  // + 12 layers x 7,087,872 + ln_f 1536, where a layer is two LayerNorms (2·1536), c_attn
  // 768·2304 + 2304, c_proj 768·768 + 768, c_fc 768·3072 + 3072, c_proj 3072·768 + 768.
  // Padding V to 50304 (multiple of 128) adds 47·768 = 36,096.
  const ParameterCounts c = count_parameters(gpt2_small(), Layout{});
  EXPECT_DOUBLE_EQ(c.layer_sharded + c.layer_replicated, 7087872.0);
  EXPECT_DOUBLE_EQ(c.total, 124475904.0);
  EXPECT_DOUBLE_EQ(c.first_stage_rank, 124475904.0);
  EXPECT_DOUBLE_EQ(c.last_stage_rank, 124475904.0);
  // HF GPT2Model's 148 named parameters: wte, wpe, 12 x (ln_1, attn.c_attn, attn.c_proj, ln_2,
  // mlp.c_fc, mlp.c_proj: a weight and a bias each), ln_f weight and bias.
  EXPECT_EQ(count_parameter_tensors(gpt2_small(), Layout{}).max_rank(), 148);
}

TEST(PlanParameters, TensorsPerPipelineStageByHand) {
  // PP 2, tied embeddings: the first stage holds wte, wpe and 6 layers (2 + 72), the last 6
  // layers, ln_f (2) and its copy of wte (1).
  Layout l;
  l.pipeline_parallel = 2;
  const ParameterTensors t = count_parameter_tensors(gpt2_small(), l);
  EXPECT_EQ(t.first_stage_rank, 74);
  EXPECT_EQ(t.last_stage_rank, 75);
}

// The stages hold what the split gives them: PP 2 with a first stage of 4 layers holds wte, wpe
// and 4 layers (2 + 48), the last 8 layers, ln_f and the copy of wte (96 + 3); with the
// embedding and the loss counted as layers (14 over PP 2: 6 layers each), 74 and 75 as evenly.
TEST(PlanParameters, TensorsPerPipelineStageFollowTheSplit) {
  Layout l;
  l.pipeline_parallel = 2;
  l.first_stage_layers = 4;
  ParameterTensors t = count_parameter_tensors(gpt2_small(), l);
  EXPECT_EQ(t.first_stage_rank, 50);
  EXPECT_EQ(t.last_stage_rank, 99);
  l.first_stage_layers = 0;
  l.account_for_embedding = l.account_for_loss = true;
  t = count_parameter_tensors(gpt2_small(), l);
  EXPECT_EQ(t.first_stage_rank, 74);
  EXPECT_EQ(t.last_stage_rank, 75);
  l.account_for_loss = false;  // 13 over 2 stages
  try {
    validate_layout(gpt2_small(), l, Implementation::kMegatronCpp);
    FAIL() << "13 layers accepted over 2 stages";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--account-for-*-in-pipeline-split) is not divisible by "
                               "--pipeline-model-parallel-size 2"),
              std::string::npos)
        << e.message();
  }
}

TEST(PlanParameters, TensorParallelShareByHand) {
  // TP 2: the word embedding pads to a multiple of 256 (50432 rows, 25216 per rank); per layer
  // the split part is (768·2304 + 2304 + 768·768 + 768·3072 + 3072 + 3072·768)/2 = 3,541,632
  // and the replicated part 2·1536 + 768 + 768 = 4,608; plus wpe 786,432 and ln_f 1,536:
  // 25216·768 + 786432 + 12·(3541632 + 4608) + 1536 = 62,708,736.
  Layout l;
  l.tensor_parallel = 2;
  const ParameterCounts c = count_parameters(gpt2_small(), l);
  EXPECT_DOUBLE_EQ(c.first_stage_rank, 62708736.0);
}

TEST(PlanParameters, MatchesTheParameterStoreOfRealModels) {
  ParallelState ps = test::solo_parallel_state();
  {
    GptConfig gc;
    gc.num_layers = 3;
    gc.hidden_size = 64;
    gc.num_attention_heads = 4;
    gc.vocab_size = 1000;
    gc.padded_vocab_size = 1024;
    gc.max_position_embeddings = 40;
    gc.seq_length = 32;
    ParameterStore store(0, 1);
    GptModel model(gc, ps, store);
    store.allocate();
    ModelSpec m = gpt_spec(3, 64, 4, 32, 1000);
    m.max_position_embeddings = 40;
    EXPECT_DOUBLE_EQ(count_parameters(m, Layout{}).total, double(store.flat_values().numel()));
  }
  // Mixture of experts (model/moe_layer.h): routed experts on some layers, with or without
  // biases, SwiGLU and a shared expert.
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "swiglu, shared expert, no biases" : "gelu, biases");
    GptConfig gc;
    gc.num_layers = 3;
    gc.hidden_size = 64;
    gc.num_attention_heads = 4;
    gc.vocab_size = 1000;
    gc.padded_vocab_size = 1024;
    gc.max_position_embeddings = 40;
    gc.seq_length = 32;
    gc.arch.swiglu = llama;
    gc.arch.add_bias_linear = !llama;
    MoeOptions& moe = gc.arch.moe;
    moe.num_experts = 6;
    moe.ffn_hidden_size = 40;
    moe.layer_freq = "[0,1,1]";
    moe.shared_expert_ffn = llama ? 24 : 0;
    ParameterStore store(0, 1);
    GptModel model(gc, ps, store);
    store.allocate();
    ModelSpec m = gpt_spec(3, 64, 4, 32, 1000);
    m.max_position_embeddings = 40;
    m.arch = gc.arch;
    EXPECT_DOUBLE_EQ(count_parameters(m, Layout{}).total, double(store.flat_values().numel()));
  }
  {
    BertConfig bc;
    bc.num_layers = 2;
    bc.hidden_size = 32;
    bc.num_attention_heads = 4;
    bc.vocab_size = 500;
    bc.padded_vocab_size = 512;
    bc.max_position_embeddings = 24;
    bc.seq_length = 16;
    ParameterStore store(0, 1);
    BertModel model(bc, ps, store);
    store.allocate();
    ModelSpec m;
    m.family = ModelFamily::kBert;
    m.num_layers = 2;
    m.hidden_size = 32;
    m.num_attention_heads = 4;
    m.seq_length = 16;
    m.max_position_embeddings = 24;
    m.vocab_size = 500;
    EXPECT_DOUBLE_EQ(count_parameters(m, Layout{}).total, double(store.flat_values().numel()));
  }
}

// Megatron-LM's theoretical_memory_usage for GPT-3 175B (L 96, h 12288, a 96, s 2048,
// V 51200), TP 8, PP 16, DP 8, micro-batch 1, global batch 1536, sequence parallelism,
// selective recompute, distributed optimizer — evaluated with an independent Python
// re-derivation of its formulas at test-writing time:
//   most loaded shard: (12h²·L/p + h·V)/t + (4h·L + 2h)/p = 1,437,894,144 parameters
//   weights + optimizer: that x (6 + 12/8) bytes = 10,784,206,080
//   activations: (sbh·(18 + 4f/h)·L + 8sb·p + sbh·p)·min(1, m/p)/t = 10,318,020,608 bytes
// and with the interleaved schedule (v 2, penalty 1 + 15/32): 15,154,592,768 bytes.
TEST(PlanMemory, MatchesMegatronTheoreticalMemoryUsage) {
  Layout l;
  l.tensor_parallel = 8;
  l.pipeline_parallel = 16;
  l.data_parallel = 8;
  l.micro_batch = 1;
  l.global_batch = 1536;
  l.sequence_parallel = true;
  l.recompute = Recompute::kSelective;
  l.distributed_optimizer = true;
  l.precision = Precision::kBf16;
  const ModelSpec m = gpt3_175b();
  const MemoryEstimate est = estimate_memory(m, l, no_reserve(), Implementation::kMegatronLm);
  EXPECT_DOUBLE_EQ(est.activations.first_stage, 10318020608.0);
  EXPECT_DOUBLE_EQ(est.bytes_per_parameter.total(), 6.0 + 12.0 / 8.0);
  // Parameters: this planner counts what Megatron's estimate leaves out — per layer the 7h/t
  // split biases (QKV 3h, fc1 4h) and the 2h replicated ones (projection, fc2), the position
  // embedding (2048·h, replicated) — and puts the final LayerNorm (2h) on the last stage
  // where Megatron spreads it as 2h/p over every stage.
  const double h = 12288, L = 96, t = 8, p = 16;
  const double extra = L / p * (7 * h / t + 2 * h) + 2048 * h - 2 * h / p;
  EXPECT_DOUBLE_EQ(est.first_stage.parameters, 1437894144.0 + extra);
  EXPECT_NEAR(est.first_stage.weights + est.first_stage.gradients + est.first_stage.optimizer,
              10784206080.0 + extra * 7.5, 1.0);

  l.virtual_stages = 2;
  EXPECT_DOUBLE_EQ(
      estimate_memory(m, l, no_reserve(), Implementation::kMegatronLm).activations.first_stage,
      15154592768.0);
}

// Same, PP 1 (the output layer's 4sbh(1 + V/h)/t counts) and PP 4 with fewer micro-batches
// than stages (m = 2 < p = 4: Megatron scales by m/p). Model L 24, h 2048, a 16, s 2048,
// V 50304, TP 2, micro-batch 4. Python values: 7,711,260,672 (PP 1) and 3,439,394,816 (PP 4);
// most-loaded parameters with PP 1, DP 4, no distributed optimizer: 655,691,776 (x 18 bytes).
TEST(PlanMemory, MatchesMegatronTheoreticalMemoryUsageOtherSchedules) {
  ModelSpec m = gpt_spec(24, 2048, 16, 2048, 50304);
  m.make_vocab_size_divisible_by = 64;  // keeps V = 50304 at TP 2, as in the Python check
  Layout l;
  l.tensor_parallel = 2;
  l.data_parallel = 4;
  l.micro_batch = 4;
  l.global_batch = 32;
  l.sequence_parallel = true;
  l.recompute = Recompute::kSelective;
  l.precision = Precision::kBf16;
  MemoryEstimate est = estimate_memory(m, l, no_reserve(), Implementation::kMegatronLm);
  EXPECT_DOUBLE_EQ(est.activations.first_stage, 7711260672.0);
  const double h = 2048, L = 24, t = 2;
  EXPECT_DOUBLE_EQ(est.first_stage.parameters, 655691776.0 + L * (7 * h / t + 2 * h) + 2048 * h);
  EXPECT_DOUBLE_EQ(est.bytes_per_parameter.total(), 18.0);

  l.pipeline_parallel = 4;
  l.data_parallel = 1;
  l.global_batch = 8;  // m = 2 micro-batches
  est = estimate_memory(m, l, no_reserve(), Implementation::kMegatronLm);
  EXPECT_DOUBLE_EQ(est.activations.first_stage, 3439394816.0);
}

// Korthikanti et al. (2022), Table 2, per layer in 16-bit: no parallelism sbh(34 + 5as/h);
// TP sbh(10 + 24/t + 5as/(ht)); TP + SP sbh/t·(34 + 5as/h); TP + selective sbh(10 + 24/t);
// TP + SP + selective 34·sbh/t; full recompute 2sbh.
TEST(PlanMemory, KorthikantiTable2PerLayer) {
  const ModelSpec m = gpt3_175b();
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  Layout l;
  l.precision = Precision::kBf16;
  auto per_layer = [&](Layout x) {
    return activation_memory(m, x, Implementation::kMegatronLm).per_layer;
  };
  EXPECT_DOUBLE_EQ(per_layer(l), sbh * (34 + 5 * a * s / h));
  l.tensor_parallel = 8;
  EXPECT_DOUBLE_EQ(per_layer(l), sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  l.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(per_layer(l), sbh / t * (34 + 5 * a * s / h));
  l.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(per_layer(l), 34 * sbh / t);
  l.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(per_layer(l), sbh * (10 + 24 / t));
  l.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(per_layer(l), 2 * sbh);
  // Block recompute of 3 of the 96 layers (no pipeline: one chunk): 3 layers keep 2sbh, the
  // other 93 the TP row's sbh(10 + 24/t + 5as/(ht)).
  l.recompute_block_layers = 3;
  EXPECT_DOUBLE_EQ(per_layer(l) * 96, 3 * 2 * sbh + 93 * sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  // ... and at PP 16 (chunks of 6 layers), 3 of each chunk: half the layers each way.
  l.pipeline_parallel = 16;
  EXPECT_DOUBLE_EQ(per_layer(l) * 6, 3 * 2 * sbh + 3 * sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  // fp32 activations: every element term takes 4 bytes, the dropout masks keep 1:
  // replicated 8 + 4 + 4 + 2, split 8 + 4 + 4 + 16 + 16, scores 4 + 1 + 4 → sbh(66 + 9as/h).
  Layout f32;
  EXPECT_DOUBLE_EQ(per_layer(f32), sbh * (66 + 9 * a * s / h));
}

// GptModel / BertModel report their arenas' high-water marks after a step
// (activation_bytes()); the megatron-cpp accounting must predict them to the byte.
struct ArenaCase {
  bool dropout;
  Recompute recompute;
  bool bf16;
  bool flash = false;    // the fused attention (model/attention.h)
  int block_layers = 0;  // full recompute of only this many first layers (block); 0: all
};

// The case's name in test listings (CTest names its tests by it).
void PrintTo(const ArenaCase& k, std::ostream* os) {
  const char* recompute[] = {"no recompute", "selective recompute", "full recompute"};
  *os << (k.dropout ? "dropout, " : "no dropout, ") << recompute[int(k.recompute)]
      << (k.block_layers > 0 ? " of the first " + std::to_string(k.block_layers) + " layers"
                             : std::string())
      << (k.bf16 ? ", bf16" : ", f32") << (k.flash ? ", flash attention" : "");
}

class PlanArena : public ::testing::TestWithParam<ArenaCase> {};

// Case k's recompute and compute dtype on a GptConfig or BertConfig.
template <typename ConfigT>
void apply_arena_case(const ArenaCase& k, ConfigT& c) {
  c.recompute_activations = k.recompute == Recompute::kFull;
  if (k.block_layers > 0) {
    c.recompute_method = RecomputeMethod::kBlock;
    c.recompute_num_layers = k.block_layers;
  }
  c.selective_recompute = k.recompute == Recompute::kSelective;
  c.compute_dtype = k.bf16 ? DType::BF16 : DType::F32;
  c.flash_attention = k.flash;
}

// The planner's prediction for `m` in case k at micro-batch b against the model that ran the
// step: its arena plus scratch (`activation_bytes`) and its parameter count (`parameters`).
void expect_arena_case_predicted(const ModelSpec& m, const ArenaCase& k, int64_t b,
                                 int64_t activation_bytes, const ParameterStore& store) {
  Layout l;
  l.micro_batch = b;
  l.recompute = k.recompute;
  l.recompute_block_layers = k.block_layers;
  l.precision = k.bf16 ? Precision::kBf16 : Precision::kFp32;
  l.flash_attention = k.flash;
  validate_layout(m, l, Implementation::kMegatronCpp);
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(a.first_stage + a.workspace, double(activation_bytes));
  EXPECT_DOUBLE_EQ(count_parameters(m, l).total, double(store.flat_values().numel()));
  EXPECT_EQ(count_parameter_tensors(m, l).max_rank(), int64_t(store.params().size()));
}

// One training step of a small GPT (with the Llama-family options: GQA with 2 of 4 heads'
// groups, head dim 24 != h/a, SwiGLU, RMSNorm, RoPE, no linear biases, an untied output layer),
// then the planner's prediction of its arenas and of its parameter count.
// Runs one forward + backward of `gc` under case k and checks the planner's prediction of its
// activation arena.
void expect_config_arenas_predicted(const ArenaCase& k, GptConfig gc) {
  apply_arena_case(k, gc);
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store(0, 1);
  GptModel model(gc, ps, store);
  store.allocate();
  model.init_weights(7);
  const int64_t b = 3;
  model.forward_backward(arena_batch(gc, b), 1.0f, 11);
  expect_arena_case_predicted(arena_model_spec(gc), k, b, model.activation_bytes(), store);
}

void expect_gpt_arenas_predicted(const ArenaCase& k, bool llama) {
  GptConfig gc = arena_gpt_config(3, llama);
  gc.hidden_dropout = gc.attention_dropout = k.dropout ? 0.1f : 0.0f;
  expect_config_arenas_predicted(k, gc);
}

TEST_P(PlanArena, GptPredictsTheArenasExactly) {
  expect_gpt_arenas_predicted(GetParam(), false);
}

TEST_P(PlanArena, LlamaGptPredictsTheArenasExactly) {
  expect_gpt_arenas_predicted(GetParam(), true);
}

// A small BERT in each LayerNorm order (pre-LN, pre-LN with residuals from the norms, post-LN:
// an embedding LayerNorm, no final one): its arenas after a step and its ParameterStore.
TEST_P(PlanArena, BertPredictsTheArenasExactly) {
  const ArenaCase k = GetParam();
  for (const NormOrder order : kBertNormOrders) {
    SCOPED_TRACE(norm_order_name(order));
    BertConfig bc = arena_bert_config(2, k.dropout, order);
    apply_arena_case(k, bc);
    ParallelState ps = test::solo_parallel_state();
    ParameterStore store(0, 1);
    BertModel model(bc, ps, store);
    store.allocate();
    model.init_weights(7);
    const int64_t b = 2;
    model.forward_backward(arena_bert_batch(bc, b), 1.0f, 3);
    expect_arena_case_predicted(arena_bert_spec(bc), k, b, model.activation_bytes(), store);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanArena,
                         ::testing::Values(ArenaCase{true, Recompute::kNone, false},
                                           ArenaCase{false, Recompute::kNone, false},
                                           ArenaCase{true, Recompute::kFull, false},
                                           ArenaCase{true, Recompute::kNone, true},
                                           ArenaCase{false, Recompute::kFull, true},
                                           ArenaCase{true, Recompute::kSelective, false},
                                           ArenaCase{false, Recompute::kSelective, true},
                                           ArenaCase{true, Recompute::kNone, false, true},
                                           ArenaCase{false, Recompute::kNone, true, true},
                                           ArenaCase{true, Recompute::kFull, true, true},
                                           ArenaCase{true, Recompute::kSelective, false, true},
                                           ArenaCase{true, Recompute::kFull, false, false, 1},
                                           ArenaCase{false, Recompute::kFull, true, false, 2}));

TEST(PlanMemory, BytesPerParameterByImplementation) {
  Layout l;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(l, Implementation::kMegatronCpp).total(), 16.0);
  l.precision = Precision::kBf16;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(l, Implementation::kMegatronCpp).total(), 18.0);
  EXPECT_DOUBLE_EQ(bytes_per_parameter(l, Implementation::kMegatronLm).total(), 18.0);
  l.distributed_optimizer = true;
  l.data_parallel = 4;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(l, Implementation::kMegatronLm).total(), 6.0 + 3.0);
  // The same bf16 parameters and fp32 gradients, and the master and moments sharded alike.
  EXPECT_DOUBLE_EQ(bytes_per_parameter(l, Implementation::kMegatronCpp).total(), 6.0 + 3.0);
  Layout fp16;
  fp16.precision = Precision::kFp16;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(fp16, Implementation::kMegatronLm2019).total(), 20.0);
  EXPECT_DOUBLE_EQ(bytes_per_parameter(fp16, Implementation::kMegatronCpp).total(), 22.0);
}

// megatron-cpp's distributed optimizer: what a DP rank's AdamW holds for a real model's
// parameters (optim/distributed_optimizer.h), against the planner's 8/d bytes per parameter
// ((8 + 4)/d with bf16 values: the fp32 master; (8 + 4 + 2)/d with fp16: the fp32 master and
// its f16 scratch; the gradients are reduced in place); the store's values and gradients; and
// the transient buffers of the step. The optimizer is the
// Trainer's, whatever the model: GPT and BERT alike. `store` holds bf16 values for kBf16.
void expect_distributed_optimizer_predicted(ParameterStore& store, const ModelSpec& m,
                                            Precision precision = Precision::kFp32) {
  const int64_t n = store.flat_values().numel();
  const int d = 2;
  ASSERT_EQ(n % d, 0);  // the planner's n/d is the shard size exactly then
  const DpShard shard = DpShard::of(n, d, 0);
  AdamWConfig config;
  config.f16_model_weights = precision == Precision::kFp16;
  AdamW adam(store, config, shard.range);
  double state_bytes = 0;
  for (const auto& [name, buffer] : adam.flat_buffers()) state_bytes += double(buffer.nbytes());
  if (adam.f16_scratch().defined()) state_bytes += double(adam.f16_scratch().nbytes());

  Layout l;
  l.data_parallel = d;
  l.distributed_optimizer = true;
  l.precision = precision;
  validate_layout(m, l, Implementation::kMegatronCpp);
  Machine mach;
  const MemoryEstimate est = estimate_memory(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(est.first_stage.parameters, double(n));
  EXPECT_DOUBLE_EQ(est.first_stage.optimizer, state_bytes);
  const double store_bytes =
      double(store.flat_values().nbytes()) + double(store.flat_grads().nbytes());
  EXPECT_DOUBLE_EQ(est.first_stage.weights + est.first_stage.gradients, store_bytes);
  EXPECT_DOUBLE_EQ(store_bytes, (precision == Precision::kBf16 ? 6.0 : 8.0) * double(n));
  // The ring reduce-scatter's receive buffer, as large as the one gradient bucket (all n
  // elements of this small model), which lies in one rank's shard; the all-gather of the values
  // writes in place and adds nothing.
  EXPECT_DOUBLE_EQ(est.first_stage.step_buffers, 4.0 * double(n));
}

TEST(PlanMemory, MegatronCppDistributedOptimizerMatchesItsShards) {
  GptConfig gc;
  gc.num_layers = 2;
  gc.hidden_size = 32;
  gc.num_attention_heads = 4;
  gc.vocab_size = 500;
  gc.padded_vocab_size = 512;
  gc.max_position_embeddings = 16;
  gc.seq_length = 16;
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store(0, 1);
  GptModel model(gc, ps, store);
  store.allocate();
  const ModelSpec m = arena_model_spec(gc);
  expect_distributed_optimizer_predicted(store, m);
  expect_distributed_optimizer_predicted(store, m, Precision::kFp16);
  ParameterStore bf16_store(0, 1);
  GptModel bf16_model(gc, ps, bf16_store);
  bf16_store.allocate(1, DType::BF16);
  expect_distributed_optimizer_predicted(bf16_store, m, Precision::kBf16);
}

TEST(PlanMemory, MegatronCppBertDistributedOptimizerMatchesItsShards) {
  const BertConfig bc = arena_bert_config(2, /*dropout=*/false);
  ParameterStore store(0, 1);
  BertModel model(bc, test::solo_parallel_state(), store);
  store.allocate();
  expect_distributed_optimizer_predicted(store, arena_bert_spec(bc));
}

// ---- Mixture of experts (model/moe_layer.h) ----

// A GPT of 4 layers (h 20, 4 heads, FFN 80, s 8, V 100 → 256 padded at TP 2) whose layers 0
// and 2 are MoE (--moe-layer-freq 2): 6 experts of width 14, top 2. On 12 ranks TP 2 x PP 2 x
// DP 3 with EP 3 and ETP 1: each rank holds 2 of the experts whole, ed = 12 / (1·3·2) = 2.
ModelSpec moe_spec() {
  ModelSpec m = gpt_spec(4, 20, 4, 8, 100);
  m.arch.moe.num_experts = 6;
  m.arch.moe.ffn_hidden_size = 14;
  m.arch.moe.topk = 2;
  m.arch.moe.layer_freq = "2";
  return m;
}
Layout moe_layout() {
  Layout l;
  l.tensor_parallel = 2;
  l.pipeline_parallel = 2;
  l.data_parallel = 3;
  l.expert_parallel = 3;
  l.expert_tensor_parallel = 1;
  l.global_batch = 6;
  l.sequence_parallel = true;  // (Megatron-LM's MoE layers need it with TP)
  return l;
}

TEST(PlanParameters, MoeExpertShardsByHand) {
  const ModelSpec m = moe_spec();
  const Layout l = moe_layout();
  validate_layout(m, l, Implementation::kMegatronLm);
  EXPECT_EQ(l.expert_data_parallel(), 2);
  const ParameterCounts c = count_parameters(m, l);
  // A MoE layer's experts: 6·(20·14 + 14 + 14·20) = 3444 in fc1 (weights, biases) and fc2
  // weights, 6·20 = 120 fc2 biases; averaged over the 4 layers (2 MoE): 1722 and 60.
  EXPECT_DOUBLE_EQ(c.layer_expert, 1722.0);
  EXPECT_DOUBLE_EQ(c.layer_expert_bias, 60.0);
  // The rest, averaged: dense QKV 20·60 + 60, projection 400, fc1 1600 + 80, fc2 1600 = 4940
  // split over TP, less half the MLP (3280) → 3300; replicated: two norms 80, projection and
  // fc2 biases 40 = 120, and half of (router 120 − the fc2 bias 20) → 170.
  EXPECT_DOUBLE_EQ(c.layer_sharded, 3300.0);
  EXPECT_DOUBLE_EQ(c.layer_replicated, 170.0);
  // Whole model: 2 dense layers of 5060, 2 MoE layers of 1660 + 120 + 3444 + 120 + 100 = 5444,
  // the padded embedding 256·20, positions 8·20, final norm 40.
  EXPECT_DOUBLE_EQ(c.total, 2 * 5060.0 + 2 * 5444.0 + 5120 + 160 + 40);
  // A stage of layers {0, 1} or {2, 3}: one MoE layer's 3444/(3·1) + 120/3 = 1188 experts; the
  // dense layer 2470 + 120, the MoE layer's rest 830 + 220; the first stage also the embedding
  // 5120/2 + 160.
  EXPECT_DOUBLE_EQ(c.stage_expert_rank, 1188.0);
  EXPECT_DOUBLE_EQ(c.first_stage_rank, 2590.0 + 1050.0 + 1188.0 + 2720.0);
  // With EP 1 and ETP = TP the experts split over TP as the dense MLP: 3444/2 + 120.
  Layout folded = l;
  folded.expert_parallel = 1;
  folded.expert_tensor_parallel = 0;
  EXPECT_DOUBLE_EQ(count_parameters(m, folded).stage_expert_rank, 1722.0 + 120.0);
  EXPECT_DOUBLE_EQ(count_parameters(m, folded).total, c.total);
}

TEST(PlanMemory, MoeOptimizerStateShardsOverExpertDataParallel) {
  // Megatron-LM bf16 with the distributed optimizer: 12 bytes of state per parameter, the dense
  // ones' over d·c = 3 ranks, the experts' over ed = 2.
  const ModelSpec m = moe_spec();
  Layout l = moe_layout();
  l.precision = Precision::kBf16;
  l.distributed_optimizer = true;
  const MemoryEstimate est = estimate_memory(m, l, no_reserve(), Implementation::kMegatronLm);
  EXPECT_DOUBLE_EQ(est.bytes_per_parameter.optimizer, 4.0);
  EXPECT_DOUBLE_EQ(est.bytes_per_parameter.expert_optimizer, 6.0);
  const double first = 7548, experts = 1188;
  EXPECT_DOUBLE_EQ(est.first_stage.parameters, first);
  EXPECT_DOUBLE_EQ(est.first_stage.expert_parameters, experts);
  EXPECT_DOUBLE_EQ(est.first_stage.weights, 2 * first);
  EXPECT_DOUBLE_EQ(est.first_stage.gradients, 4 * first);
  EXPECT_DOUBLE_EQ(est.first_stage.optimizer, (first - experts) * 4 + experts * 6);
  // megatron-cpp bf16: 8 + 4 bytes of moments and master, sharded the same way.
  const MemoryEstimate cpp = estimate_memory(m, l, no_reserve(), Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(cpp.first_stage.optimizer, (first - experts) * 4 + experts * 6);
}

TEST(PlanMemory, MegatronLmMoeActivationsByHand) {
  // One MoE layer (L 1), s 8, b 2, h 20, 4 heads, 6 experts of width 14, top 2, bf16, no
  // dropout, no parallelism: sbh = 320.
  ModelSpec m = gpt_spec(1, 20, 4, 8, 100);
  m.hidden_dropout = m.attention_dropout = 0;
  m.arch.moe.num_experts = 6;
  m.arch.moe.ffn_hidden_size = 14;
  m.arch.moe.topk = 2;
  Layout l;
  l.micro_batch = 2;
  l.precision = Precision::kBf16;
  const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronLm);
  // Norm inputs, QKV input and the MoE input 4·320·2 = 2560; Q, K, V and the projection input
  // 16·(40 + 20 + 20)·2 = 2560; scores 2·4·64·2 = 1024; the MoE: router logits and
  // probabilities 2·16·6·4 = 768, the 32 routed rows' expert inputs 32·20·2 = 1280, fc1 output
  // and activation 2·32·14·2 = 1792, the experts' outputs for the unpermute 1280.
  EXPECT_DOUBLE_EQ(a.per_layer, 2560.0 + 2560 + 1024 + 768 + 1280 + 1792 + 1280);
  EXPECT_DOUBLE_EQ(a.per_moe_layer, a.per_layer);
  EXPECT_DOUBLE_EQ(a.expert_rows, 32.0);
  // The alltoall dispatcher at EP 2 (world 2) adds its send and receive buffers, 2·32·20·2, to
  // the transient workspace; allgather the 2 ranks' tokens, 2·16·20·2.
  l.data_parallel = 2;
  l.expert_parallel = 2;
  l.dispatcher = TokenDispatcher::kAllToAll;
  const double base = a.workspace;
  EXPECT_DOUBLE_EQ(activation_memory(m, l, Implementation::kMegatronLm).workspace, base + 2560.0);
  l.dispatcher = TokenDispatcher::kAllGather;
  EXPECT_DOUBLE_EQ(activation_memory(m, l, Implementation::kMegatronLm).workspace, base + 1280.0);
}

// A real MoE GPT's arenas after one step (expert parallelism 1: every routed row stays on the
// rank, so the dropless routing's N·k rows are exact): the planner to the byte, and its
// parameter count and tensors against the ParameterStore. Mixed dense and MoE layers, the
// load-balancing statistics, a gated shared expert; and SwiGLU experts padded to a capacity.
TEST(PlanMemory, MegatronCppMoeArenasExactly) {
  for (const bool bf16 : {false, true})
    for (const bool capacity : {false, true}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") +
                   (capacity ? ", capacity, fp64 router" : ""));
      GptConfig gc = arena_gpt_config(3, /*llama=*/capacity);
      MoeOptions& moe = gc.arch.moe;
      moe.num_experts = 6;
      moe.ffn_hidden_size = 40;
      moe.topk = 2;
      if (capacity) {
        moe.capacity_factor = 1.5;
        moe.pad_to_capacity = true;
        moe.router_fp64 = true;  // the router's f64 copies and gradients
      } else {
        moe.layer_freq = "[1,0,1]";
        moe.aux_loss_coeff = 0.01;
        moe.seq_aux_loss_coeff = 0.001;
        moe.shared_expert_ffn = 32;
        moe.shared_expert_gate = true;
      }
      expect_config_arenas_predicted(ArenaCase{true, Recompute::kNone, bf16}, gc);
    }
}

// The pipeline executor's buffers over a rank's 1F1B schedule, p 2, m 4, counted by hand:
// rank 0 runs F0 F1 B0 F2 B1 F3 B2 B3 — two contexts; at B0 the copies of outputs 0 and 1 and
// the received gradient are alive (3). Rank 1 runs F0 B0 F1 B1 ... — one context; at F3 the
// three gradient copies sent so far, the input kept by the context and the one just received
// are alive (5), and at the end the four copies and the kept input (5).
TEST(PlanPipeline, BuffersOfOneFOneBByHand) {
  const PipelineRankPeak first = pipeline_rank_peak(2, 0, 1, 4, 0, {100.0}, 1.0);
  EXPECT_EQ(first.contexts, std::vector<int64_t>{2});
  EXPECT_EQ(first.peak_buffers, 3);
  EXPECT_DOUBLE_EQ(first.peak_bytes, 2 * 100.0 + 3);
  const PipelineRankPeak last = pipeline_rank_peak(2, 1, 1, 4, 0, {100.0}, 1.0);
  EXPECT_EQ(last.contexts, std::vector<int64_t>{1});
  EXPECT_EQ(last.peak_buffers, 5);
  // No pipeline: one context, no buffers.
  const PipelineRankPeak whole = pipeline_rank_peak(1, 0, 1, 4, 0, {100.0}, 1.0);
  EXPECT_EQ(whole.contexts, std::vector<int64_t>{1});
  EXPECT_EQ(whole.peak_buffers, 0);
}

// A GPT cut into three pipeline stages (one layer each), one micro-batch through all three in
// one process: each stage context's arena and each stage's scratch against the planner. With
// m = 1 the first rank holds its output's copy and the received gradient (2 buffers), the last
// the received input and its gradient's copy (2).
TEST(PlanPipeline, MegatronCppStageArenasExactly) {
  for (const bool bf16 : {false, true}) {
    GptConfig gc = arena_gpt_config(3, /*llama=*/false);
    gc.compute_dtype = bf16 ? DType::BF16 : DType::F32;
    const int64_t b = 2, s = gc.seq_length;
    const ThreeStages run = run_three_stages(gc, test::solo_parallel_state(), b);
    const auto& stages = run.stages;
    const auto& ctxs = run.ctxs;
    const ModelSpec m = arena_model_spec(gc);
    Layout l;
    l.pipeline_parallel = 3;
    l.micro_batch = b;
    l.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
    validate_layout(m, l, Implementation::kMegatronCpp);
    const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
    const double buffer = double(s * b * gc.hidden_size) * (bf16 ? 2 : 4);
    EXPECT_DOUBLE_EQ(a.first_stage,
                     double(stages[0]->stage_activation_bytes(*ctxs[0])) + 2 * buffer);
    EXPECT_DOUBLE_EQ(a.last_stage,
                     double(stages[2]->stage_activation_bytes(*ctxs[2])) + 2 * buffer);
    for (const auto& stage : stages)
      EXPECT_DOUBLE_EQ(a.workspace, double(stage->activation_bytes()));
    EXPECT_DOUBLE_EQ(a.in_flight, 1.0);
  }
}

// BERT (two layers) cut into two one-layer pipeline stages, one micro-batch through both in
// this process, in each LayerNorm order. Parameters: each stage's ParameterStore against a hand
// count (h 32, 4 heads, FFN 128, V_padded 512, 16 positions, 2 token types):
//   a layer: QKV 32·96 + 96, projection 32·32 + 32, fc1 32·128 + 128, fc2 128·32 + 32, two
//            LayerNorms 2·64 = 12,704
//   first stage: word 512·32 + position 16·32 + token type 2·32 + a layer = 29,664
//   last stage: a layer + final LayerNorm 64 + the tied word embedding's copy 512·32 + the MLM
//            head (dense 32·32 + 32, LayerNorm 64, vocabulary bias 512) + pooler 32·32 + 32
//            + binary head 32·2 + 2 = 31,906 (30,784 without the pooler and binary head).
//   post-LN: the final LayerNorm's 64 move to the embedding LayerNorm of the first stage:
//            29,728 and 31,842.
// Activations: each stage's scratch against the planner's workspace, each stage context's arena
// against the planner's per-rank peak less the executor's two buffers (as for GPT above).
TEST(PlanPipeline, MegatronCppBertStages) {
  struct HandCount {
    NormOrder order;
    double first, last;
  };
  for (const HandCount hand : {HandCount{NormOrder::kPre, 29664, 31906},
                               HandCount{NormOrder::kPreResidualFromNorm, 29664, 31906},
                               HandCount{NormOrder::kPost, 29728, 31842}}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << norm_order_name(hand.order) << " bf16 " << bf16);
      BertConfig bc = arena_bert_config(2, /*dropout=*/true, hand.order);
      bc.compute_dtype = bf16 ? DType::BF16 : DType::F32;
      const int64_t b = 2;
      const TwoBertStages run = run_two_bert_stages(bc, test::solo_parallel_state(), b);

      const ModelSpec m = arena_bert_spec(bc);
      Layout l;
      l.pipeline_parallel = 2;
      l.micro_batch = b;
      l.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
      validate_layout(m, l, Implementation::kMegatronCpp);
      const ParameterCounts c = count_parameters(m, l);
      EXPECT_DOUBLE_EQ(c.first_stage_rank, hand.first);
      EXPECT_DOUBLE_EQ(c.last_stage_rank, hand.last);
      EXPECT_DOUBLE_EQ(c.first_stage_rank, double(run.stores[0]->flat_values().numel()));
      EXPECT_DOUBLE_EQ(c.last_stage_rank, double(run.stores[1]->flat_values().numel()));

      const ActivationMemory a = activation_memory(m, l, Implementation::kMegatronCpp);
      // A stage model's own arena stays empty (its contexts hold the activations): what it
      // reports is its scratch.
      for (const auto& stage : run.stages)
        EXPECT_DOUBLE_EQ(a.workspace, double(stage->activation_bytes()));
      const double buffer = double(bc.seq_length * b * bc.hidden_size) * (bf16 ? 2 : 4);
      EXPECT_DOUBLE_EQ(a.first_stage,
                       double(run.stages[0]->stage_activation_bytes(*run.ctxs[0])) + 2 * buffer);
      EXPECT_DOUBLE_EQ(a.last_stage,
                       double(run.stages[1]->stage_activation_bytes(*run.ctxs[1])) + 2 * buffer);
      EXPECT_DOUBLE_EQ(a.in_flight, 1.0);
    }
  }
  // Without the binary head the last stage holds no pooler either.
  BertConfig bc = arena_bert_config(2, /*dropout=*/false);
  bc.binary_head = false;
  ParameterStore store(0, 1);
  BertModel last(bc, test::solo_parallel_state(), store,
                 stage_range({.num_layers = 2, .pipeline_size = 2}, 1, 0));
  store.allocate();
  Layout l;
  l.pipeline_parallel = 2;
  EXPECT_DOUBLE_EQ(count_parameters(arena_bert_spec(bc), l).last_stage_rank, 30784.0);
  EXPECT_DOUBLE_EQ(double(store.flat_values().numel()), 30784.0);
}

}  // namespace
}  // namespace megatron::plan
