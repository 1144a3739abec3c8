// The planner's time model (plan/flops.h, collective_cost.h, microbatch_costs.h, step_time.h,
// calibration.h), its machine files (machine.h) and its input checks (layout.h), against
// hand-derived values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/calibration.h"
#include "plan/layout_search.h"
#include "plan/plan_report.h"
#include "plan_test_models.h"
#include "train/log/training_log.h"

namespace megatron::plan {
namespace {

// A machine with round numbers: 100 TFLOP/s, GEMMs at half of it with no shape penalty,
// 1 TB/s memory, 4 devices per node on 100 GB/s links, 50 GB/s per node between nodes.
Machine round_machine() {
  Machine m;
  m.name = "round";
  m.bf16 = {100e12, 0.5, 0};
  m.fp32 = {50e12, 0.5, 0};
  m.memory_bytes = 80e9;
  m.memory_bandwidth = 1e12;
  m.devices_per_node = 4;
  m.intra_node = {100e9, 0, 1};
  m.inter_node = {50e9, 0, 1};
  return m;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(PlanFlops, MegatronFormulaAndRecompute) {
  // 72·B·s·L·h²·(1 + s/6h + V/(12Lh)) for GPT-3 175B at B 1536 = 3.3861967463873244e18; with
  // full recompute Narayanan et al.'s 96·B·s·L·h²·(1 + s/6h + V/(16Lh)) = 4.5109707533231063e18.
  Layout l;
  l.global_batch = 1536;
  const ModelSpec m = gpt3_175b();
  auto flops = [&](const Layout& layout, Implementation impl = Implementation::kMegatronLm) {
    return iteration_flops(m, layout, impl);
  };
  EXPECT_NEAR(flops(l).model / 3.3861967463873244e18, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(flops(l).hardware, flops(l).model);
  EXPECT_NEAR(flops(l).model / gpt_flops_per_iteration(1536, 2048, 96, 12288, 51200, false), 1.0,
              1e-12);
  l.recompute = Recompute::kFull;
  EXPECT_NEAR(flops(l).hardware / 4.5109707533231063e18, 1.0, 1e-12);
  // Block recompute of 2 of each 6-layer chunk (PP 16) re-runs a third of the layers: a third
  // of full recompute's extra FLOPs.
  const double full_extra = flops(l).hardware - flops(l).model;
  l.pipeline_parallel = 16;
  l.recompute_block_layers = 2;
  EXPECT_NEAR((flops(l).hardware - flops(l).model) / full_extra, 1.0 / 3, 1e-12);
  l.pipeline_parallel = 1;
  l.recompute_block_layers = 0;
  // Selective recompute re-runs the two attention products: 4·B·s²·h·L forward FLOPs.
  l.recompute = Recompute::kSelective;
  EXPECT_NEAR(flops(l).hardware - flops(l).model, 4.0 * 1536 * 2048.0 * 2048 * 12288 * 96, 1e4);
  // megatron-cpp's re-runs QKᵀ only (ParallelAttention::core_probs): 2·B·s²·h·L.
  const Implementation cpp = Implementation::kMegatronCpp;
  EXPECT_NEAR(flops(l, cpp).hardware - flops(l, cpp).model, 2.0 * 1536 * 2048.0 * 2048 * 12288 * 96,
              1e4);
}

TEST(PlanFlops, GroupedQueryAttentionAndSwiglu) {
  // Per token per layer forward: QKV 2h(a+2g)d, projection 2adh, MLP 3·2hf, attention 4sad;
  // times 3 for forward + backward; logits 6hV per token.
  ModelSpec m = gpt_spec(2, 64, 8, 16, 128);
  m.arch.num_query_groups = 2;
  m.ffn_hidden_size = 96;
  m.arch.swiglu = true;
  Layout l;
  l.global_batch = 3;
  const double h = 64, a = 8, g = 2, d = 8, f = 96, s = 16, V = 128, tokens = 3 * 16;
  const double per_token_layer =
      3 * (2 * h * (a + 2 * g) * d + 2 * a * d * h + 3 * 2 * h * f + 4 * s * a * d);
  EXPECT_NEAR(iteration_flops(m, l, Implementation::kMegatronLm).model,
              tokens * (2 * per_token_layer + 6 * h * V), 1e-3);
}

TEST(PlanCollectives, RingFormulasByHand) {
  const Machine m = round_machine();
  const GroupPlacement node4 = place_group(4, 1, 4);
  EXPECT_EQ(node4.members_per_node, 4);
  EXPECT_FALSE(node4.spans_nodes);
  // All-reduce of 1 GB over 4 devices of a node: 2·(3/4)·1e9 / 100e9 = 15 ms.
  EXPECT_NEAR(collective_seconds(m, Collective::kAllReduce, 1e9, node4), 0.015, 1e-12);
  EXPECT_NEAR(collective_seconds(m, Collective::kAllGather, 1e9, node4), 0.0075, 1e-12);
  // A DP group of 8 with stride 2 on 4-device nodes: 2 members per node, spanning 4 nodes;
  // its share of a node's network is 2/4 of 50 GB/s: 2·(7/8)·1e9 / 25e9 = 70 ms.
  const GroupPlacement dp = place_group(8, 2, 4);
  EXPECT_EQ(dp.members_per_node, 2);
  EXPECT_TRUE(dp.spans_nodes);
  EXPECT_NEAR(collective_seconds(m, Collective::kAllReduce, 1e9, dp), 0.070, 1e-12);
  // Pipeline neighbours 4 ranks apart sit on different nodes: 1e8 / (50e9 / 4) = 8 ms.
  EXPECT_NEAR(collective_seconds(m, Collective::kSendRecv, 1e8, place_group(2, 4, 4)), 0.008,
              1e-12);
  // Latency: 2(n−1) steps of α for an all-reduce.
  Machine slow = m;
  slow.intra_node.latency = 1e-5;
  EXPECT_NEAR(collective_seconds(slow, Collective::kAllReduce, 1e9, node4), 0.015 + 6e-5, 1e-12);
  EXPECT_EQ(collective_seconds(m, Collective::kAllReduce, 1e9, place_group(1, 1, 4)), 0.0);
  Machine single = m;
  single.inter_node = {};
  EXPECT_NE(error_of([&] {
              collective_seconds(single, Collective::kAllReduce, 1e9, dp);
            }).find("has no 'network' entry"),
            std::string::npos);
}

TEST(PlanGemm, ModelAndFit) {
  // 2·1024³ FLOPs at 100 TFLOP/s x 0.5, with c = 64: x (1 + 3·64/1024).
  const ComputeSpec c{100e12, 0.5, 64};
  EXPECT_NEAR(gemm_seconds(c, 1024, 1024, 1024), 2.0 * 1024 * 1024 * 1024 / 50e12 * 1.1875, 1e-15);
  // The fit recovers η and c from samples the model generated.
  std::vector<GemmSample> samples;
  for (double mnk : {64.0, 128.0, 512.0, 2048.0})
    for (double k : {32.0, 768.0})
      samples.push_back({mnk, 3 * mnk, k, 2, 2 * gemm_seconds(c, mnk, 3 * mnk, k)});
  const ComputeSpec fit = fit_gemm_model(100e12, samples);
  EXPECT_NEAR(fit.gemm_efficiency, 0.5, 1e-9);
  EXPECT_NEAR(fit.gemm_half_dim, 64, 1e-6);
  // Data that would extrapolate above the peak (η 1.02) keeps η = 1 and fits c alone: samples
  // with 1/eff = (1 + 64·x)/1.02 give c = Σx(y − 1)/Σx² under FLOP weights.
  std::vector<GemmSample> fast;
  const ComputeSpec above{100e12, 1.02, 64};
  for (double mnk : {256.0, 1024.0, 4096.0})
    fast.push_back({mnk, mnk, mnk, 1, gemm_seconds(above, mnk, mnk, mnk)});
  double sx = 0, sxx = 0, sxy = 0;
  for (const GemmSample& g : fast) {
    const double w = 2 * g.m * g.n * g.k, x = 3 / g.m,
                 y = g.seconds * 100e12 / w;  // 1 / efficiency
    sx += w * x;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const ComputeSpec capped = fit_gemm_model(100e12, fast);
  EXPECT_DOUBLE_EQ(capped.gemm_efficiency, 1.0);
  EXPECT_NEAR(capped.gemm_half_dim, (sxy - sx) / sxx, 1e-9);
  EXPECT_NE(error_of([&] { fit_gemm_model(1e12, {samples[0]}); }).find("at least two"),
            std::string::npos);
}

Layout small_layout() {
  Layout l;
  l.tensor_parallel = 4;
  l.pipeline_parallel = 4;
  l.data_parallel = 2;
  l.micro_batch = 1;
  l.global_batch = 64;
  l.precision = Precision::kBf16;
  l.sequence_parallel = true;
  l.recompute = Recompute::kSelective;
  return l;
}

// small_layout() at DP 8 without pipelining, one micro-batch of 8 per rank: its whole backward
// can hide the gradient reduction.
Layout one_micro_batch_dp8_layout() {
  Layout l = small_layout();
  l.pipeline_parallel = 1;
  l.data_parallel = 8;
  l.micro_batch = 8;
  l.global_batch = 64;
  return l;
}

ModelSpec small_gpt() {
  return gpt_spec(32, 4096, 32, 2048, 50257);
}

TEST(PlanStep, PipelineBubbleAndInterleaving) {
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = small_layout();
  const StepTime a = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  // m = 64 / (1·2) = 32 micro-batches; bubble (p − 1)/v of a mean stage, here 3 stages' worth.
  EXPECT_EQ(a.micro_batches, 32);
  EXPECT_NEAR(a.pipeline, 32 * a.stage + a.bubble, 1e-12);
  EXPECT_GT(a.bubble, 2.5 * a.stage * 0.9);
  EXPECT_LT(a.bubble, 3.0 * a.stage);
  l.virtual_stages = 2;
  const StepTime b = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_NEAR(b.bubble / a.bubble, 0.5, 0.02);  // halved, up to the extra send/recv
  // Step = pipeline + exposed DP + embedding sync + sequence-parallel grads + optimizer.
  EXPECT_NEAR(a.step,
              a.pipeline + a.dp_exposed + a.embedding_sync + a.sequence_parallel_sync + a.optimizer,
              1e-12);
  // Tokens/s and MFU follow from the step.
  EXPECT_NEAR(a.tokens_per_second, 64.0 * 2048 / a.step, 1e-6);
  EXPECT_NEAR(a.mfu, a.flops.model / (a.step * 32 * 100e12), 1e-12);
}

// An uneven split sets the pace by its most loaded stage: 32 layers over PP 4 as 4, 12, 12, 4
// (--decoder-first/last-pipeline-num-layers 4) are slower per micro-batch than 8 each (the
// last of which adds the output layer, about one layer's work here), and than 6, 10, 10, 6.
TEST(PlanStep, UnevenSplitPacesTheSlowestStage) {
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = small_layout();
  const StepTime even = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  l.first_stage_layers = 3;
  l.last_stage_layers = 2;
  EXPECT_THROW(validate_layout(m, l, Implementation::kMegatronLm), Error);  // 27 over 2 ranks
  l.first_stage_layers = 4;
  l.last_stage_layers = 4;  // 4, 12, 12, 4
  validate_layout(m, l, Implementation::kMegatronLm);
  const StepTime ends = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_GT(ends.stage, 1.2 * even.stage);
  l.first_stage_layers = 6;
  l.last_stage_layers = 6;  // 6, 10, 10, 6
  const StepTime milder = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_NEAR(ends.stage / milder.stage, 1.2, 0.05);
}

// megatron-cpp's BERT in four stages: the same pipeline (micro-batches, bubble, step) as GPT's,
// and the tied word embedding's gradient summed between the first stage and the last stage's
// copy: the same V_padded/t·h table as a GPT of that vocabulary and width, so the same sync.
TEST(PlanStep, MegatronCppBertPipelineSyncsTheTiedCopy) {
  const Machine mach = round_machine();
  ModelSpec bert = small_gpt();
  bert.family = ModelFamily::kBert;
  bert.seq_length = 512;
  ModelSpec gpt = small_gpt();
  gpt.seq_length = 512;
  Layout l = small_layout();
  l.sequence_parallel = false;
  l.recompute = Recompute::kFull;
  validate_layout(bert, l, Implementation::kMegatronCpp);
  const StepTime a = predict_step_time(bert, l, mach, Implementation::kMegatronCpp);
  EXPECT_EQ(a.micro_batches, 32);
  EXPECT_NEAR(a.pipeline, 32 * a.stage + a.bubble, 1e-12);
  EXPECT_GT(a.bubble, 0.0);
  EXPECT_GT(a.embedding_sync, 0.0);
  EXPECT_DOUBLE_EQ(a.embedding_sync,
                   predict_step_time(gpt, l, mach, Implementation::kMegatronCpp).embedding_sync);
  EXPECT_NEAR(a.step,
              a.pipeline + a.dp_exposed + a.embedding_sync + a.sequence_parallel_sync + a.optimizer,
              1e-12);
  l.pipeline_parallel = 1;  // one stage: no copy, nothing to sync
  EXPECT_DOUBLE_EQ(predict_step_time(bert, l, mach, Implementation::kMegatronCpp).embedding_sync,
                   0.0);
}

TEST(PlanStep, OverlapHidesGradientReductionBehindBackward) {
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = one_micro_batch_dp8_layout();
  const StepTime plain = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_DOUBLE_EQ(plain.dp_exposed, plain.dp_comm);
  l.overlap_grad_reduce = true;
  const StepTime overlapped = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_LT(overlapped.dp_exposed, 0.2 * overlapped.dp_comm);
  EXPECT_DOUBLE_EQ(overlapped.dp_comm, plain.dp_comm);
}

// megatron-cpp implements --overlap-grad-reduce (optim/grad_buckets.h) and reduce-scatters in
// its 2^22-element buckets too; it still refuses the parameter-gather and TP overlaps.
TEST(PlanStep, MegatronCppOverlapsItsGradientBuckets) {
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = one_micro_batch_dp8_layout();
  for (const bool distributed : {false, true}) {
    l.distributed_optimizer = distributed;
    l.overlap_grad_reduce = false;
    const StepTime plain = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
    EXPECT_DOUBLE_EQ(plain.dp_exposed, plain.dp_comm);
    l.overlap_grad_reduce = true;
    EXPECT_NO_THROW(validate_layout(m, l, Implementation::kMegatronCpp));
    const StepTime overlapped = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
    EXPECT_DOUBLE_EQ(overlapped.dp_comm, plain.dp_comm);
    EXPECT_LT(overlapped.dp_exposed, plain.dp_exposed) << "distributed optimizer " << distributed;
  }
  l.overlap_param_gather = true;
  try {
    validate_layout(m, l, Implementation::kMegatronCpp);
    ADD_FAILURE() << "megatron-cpp accepted --overlap-param-gather";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--overlap-param-gather / --tp-comm-overlap"),
              std::string::npos)
        << e.what();
  }
}

// The reduction buckets against the backward they overlap (plan/step_time.cpp,
// exposed_reduction): a GPT of L 2, h 512, s 64, V 1000 (1024 padded) on one rank holds
// 2·(12·512² + 13·512) + 1024 (final norm) = 6,305,792 parameters in its layers and
// 1024·512 + 64·512 = 557,056 in its embeddings, whose gradients the backward completes last.
// At d 4 an all-reduce of 4 B per gradient over 100 GB/s (0 latency) takes 2·3/4·4·n / 1e11 s:
// 378.34752 µs for the layers', 33.42336 µs for the embeddings'. Megatron-LM's 40M-element
// buckets hold each whole; the layers' is complete only when the backward ends, so nothing
// hides: 411.77088 µs exposed, as without overlap. megatron-cpp's 2^22-element buckets split
// the layers' in two of 189.17376 µs, ready at W/2 and W: with a backward W far longer, the
// first hides (charged overlap_slowdown 0.1 of it), the second and the embeddings' run after.
TEST(PlanStep, OverlappedBucketsStartWhenTheBackwardCompletesThem) {
  Machine mach = round_machine();
  const ModelSpec m = gpt_spec(2, 512, 8, 64, 1000);
  Layout l;
  l.data_parallel = 4;
  l.micro_batch = 1;
  l.global_batch = 4;
  l.overlap_grad_reduce = true;
  const StepTime t = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_NEAR(t.dp_comm * 1e6, 378.34752 + 33.42336, 1e-6);
  EXPECT_NEAR(t.dp_exposed * 1e6, 378.34752 + 33.42336, 1e-6);
  l.overlap_grad_reduce = false;
  EXPECT_NEAR(predict_step_time(m, l, mach, Implementation::kMegatronLm).dp_exposed * 1e6,
              378.34752 + 33.42336, 1e-6);
  l.overlap_grad_reduce = true;
  mach.overlap_slowdown = 0.1;
  mach.fp32.gemm_efficiency = 0.0005;  // a backward of milliseconds
  const StepTime cpp = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_GT(cpp.backward, 1e-3);
  EXPECT_NEAR(cpp.dp_comm * 1e6, 2 * 189.17376 + 33.42336, 1e-6);
  EXPECT_NEAR(cpp.dp_exposed * 1e6, 189.17376 + 33.42336 + 0.1 * 189.17376, 1e-6);
}

// Context parallelism (microbatch_costs.cpp, context_parallel_comm): a Llama-style GPT (h 1024,
// 16 heads in 4 KV groups, head dim 64, s 8192) at CP 4 on one node of round_machine, bf16,
// micro-batch 1. Each rank holds 2048 positions: K/V 2048·2·4·64·2 B = 2 MiB (2,097,152 B),
// 20.97152 µs per ring transfer at 100 GB/s; its f32 dK/dV twice that. The ring (p2p) sends
// 3 K/V forward and 3 backward, each hidden behind a step's blocks (the core's time over 4,
// far longer here), and megatron-cpp's 4 dK/dV after the steps, exposed: 4·41.94304 µs per
// layer. all_gather: all-gathers of 4 ranks' K/V (3/4·8 MiB at 100 GB/s = 62.91456 µs) forward
// and backward and a reduce-scatter of their f32 gradients (125.82912 µs), all exposed; a2a:
// all-to-alls of QKV (2048·(16 + 8)·64·2 B = 6 MiB: 3/4 of it, 47.18592 µs) and of the output
// (4 MiB: 31.45728 µs), forward and backward.
TEST(PlanStep, ContextParallelRingHidesItsKvTransfers) {
  const Machine mach = round_machine();
  ModelSpec m = gpt_spec(2, 1024, 16, 8192, 32000);
  m.arch.num_query_groups = 4;
  Layout l;
  l.context_parallel = 4;
  l.micro_batch = 1;
  l.global_batch = 1;
  l.precision = Precision::kBf16;
  validate_layout(m, l, Implementation::kMegatronCpp);
  EXPECT_EQ(l.world_size(), 4);
  const StepTime ring = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  const double kv = 20.97152e-6;
  EXPECT_NEAR(ring.cp_comm / 2, 6 * kv + 4 * 2 * kv, 1e-12);
  EXPECT_NEAR(ring.cp_exposed / 2, 4 * 2 * kv, 1e-12);
  // The stage time counts the exposed part; CP 1 computes the same layers on 4x the tokens.
  Layout whole = l;
  whole.context_parallel = 1;
  whole.flash_attention = true;
  const StepTime one = predict_step_time(m, whole, mach, Implementation::kMegatronCpp);
  EXPECT_EQ(one.cp_comm, 0.0);
  EXPECT_GT(one.forward, 3.5 * ring.forward);
  EXPECT_NEAR(ring.stage, ring.forward + ring.backward + ring.tp_exposed + ring.cp_exposed, 1e-12);
  // Transformer Engine sends dK/dV in bf16 during the next step: only the last one shows.
  const StepTime te = predict_step_time(m, l, mach, Implementation::kMegatronLm);
  EXPECT_NEAR(te.cp_exposed / 2, kv, 1e-12);

  l.cp_comm = CpCommType::kAllGather;
  const StepTime gather = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_NEAR(gather.cp_exposed / 2, 2 * 62.91456e-6 + 125.82912e-6, 1e-12);
  EXPECT_NEAR(gather.cp_comm, gather.cp_exposed, 1e-15);
  l.cp_comm = CpCommType::kA2A;
  const StepTime a2a = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_NEAR(a2a.cp_exposed / 2, 2 * (47.18592e-6 + 31.45728e-6), 1e-12);
  // a2a+p2p 2 x 2: all-to-alls of 2 ranks (1/2 of the bytes) and a ring of 2 (one K/V each
  // way, two dK/dV).
  l.cp_comm = CpCommType::kA2AP2P;
  l.cp_a2a_size = 2;
  const StepTime both = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_NEAR(both.cp_exposed / 2, 2 * (31.45728e-6 + 20.97152e-6) + 2 * 2 * kv, 1e-12);
}

// Gradients are reduced over DP x CP (d·c ranks, consecutive after TP), and the distributed
// optimizer shards over them: CP 2 x DP 2 moves what DP 4 moves.
TEST(PlanStep, ContextParallelRanksReduceGradientsWithTheDataParallelOnes) {
  const Machine mach = round_machine();
  ModelSpec m = gpt_spec(2, 1024, 16, 8192, 32000);
  Layout cp2;
  cp2.context_parallel = 2;
  cp2.data_parallel = 2;
  cp2.micro_batch = 1;
  cp2.global_batch = 2;
  cp2.distributed_optimizer = true;
  Layout dp4 = cp2;
  dp4.context_parallel = 1;
  dp4.data_parallel = 4;
  dp4.global_batch = 4;
  EXPECT_EQ(cp2.gradient_group(), 4);
  EXPECT_DOUBLE_EQ(predict_step_time(m, cp2, mach, Implementation::kMegatronCpp).dp_comm,
                   predict_step_time(m, dp4, mach, Implementation::kMegatronCpp).dp_comm);
  EXPECT_DOUBLE_EQ(bytes_per_parameter(cp2, Implementation::kMegatronCpp).optimizer, 8.0 / 4);
}

// The 2019 code's step after the backward (plan/step_time.cpp, k2019Optimizer): per-tensor
// loops, two of which wait for the device per tensor. A GPT of L 2, h 128, s 64, V 1000 (1024
// padded) has n = 2·12 + 4 = 28 tensors and P = 2·(12·128² + 13·128) + 1024·128 + 64·128 + 256
// = 536,064 parameters; at 1 TB/s a byte per parameter takes 0.536064 µs. With 10 µs per op and
// 15 µs per wait:
//   zero (6 B)                      3.216384
//   overflow check (3 ops, 1 wait)  28·45 + 10 B = 1260 + 5.36064
//   master copy (2 ops, 6 B)        max(560, 3.216384) = 560
//   unscale (1 op, 8 B)             max(280, 4.288512) = 280
//   norm (2 ops, 1 wait)            28·35 + 4 B = 980 + 2.144256
//   Adam (2 ops, 28 B)              max(560, 15.009792) = 560
//   cast (1 op, 6 B)                max(280, 3.216384) = 280          sum 3930.72128 µs
// and with its own DDP (d 2) flatten max(560, 2.144256) + scale 2.144256 + copy back
// max(840, 2.144256) = 1402.144256 more; PyTorch's DDP only its 12 B: 6.432768. With a host
// that costs nothing, only the bytes remain: 68 B = 36.452352 µs.
TEST(PlanStep, Megatron2019OptimizerLoopsTensorByTensor) {
  Machine mach = round_machine();
  mach.fp16 = mach.bf16;
  mach.host_op = 10e-6;
  mach.host_sync = 15e-6;
  const ModelSpec m = gpt_spec(2, 128, 4, 64, 1000);
  Layout l;
  l.precision = Precision::kFp16;
  ASSERT_EQ(count_parameter_tensors(m, l).max_rank(), 28);
  ASSERT_DOUBLE_EQ(count_parameters(m, l).max_rank(), 536064.0);
  const auto optimizer_us = [&](const Layout& layout) {
    return predict_step_time(m, layout, mach, Implementation::kMegatronLm2019).optimizer * 1e6;
  };
  EXPECT_NEAR(optimizer_us(l), 3930.72128, 1e-6);
  l.data_parallel = 2;
  l.global_batch = 2;
  EXPECT_NEAR(optimizer_us(l), 3930.72128 + 1402.144256, 1e-6);
  l.overlap_grad_reduce = true;
  EXPECT_NEAR(optimizer_us(l), 3930.72128 + 6.432768, 1e-6);
  mach.host_op = mach.host_sync = 0;
  l.data_parallel = 1;
  l.global_batch = 1;
  l.overlap_grad_reduce = false;
  EXPECT_NEAR(optimizer_us(l), 36.452352, 1e-6);
}

TEST(PlanStep, TensorParallelCollectivesPerLayer) {
  // Without sequence parallelism: 2 all-reduces forward, 2 backward, 2 more with full
  // recompute; with it, all-gathers and reduce-scatters of the same [s, b, h] tensors.
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = small_layout();
  l.sequence_parallel = false;
  l.recompute = Recompute::kFull;
  MicrobatchCosts c = microbatch_costs(m, l, mach, Implementation::kMegatronLm);
  ASSERT_EQ(c.layer_comm.size(), 2u);
  EXPECT_EQ(c.layer_comm[0].calls, 4);
  EXPECT_EQ(c.layer_comm[1].calls, 2);
  EXPECT_DOUBLE_EQ(c.layer_comm[0].bytes, 2048.0 * 4096 * 2);
  // One all-reduce of 16.8 MB over 4 devices at 100 GB/s: 2·(3/4)·16777216 / 1e11.
  EXPECT_NEAR(c.layer_comm[1].seconds, 2 * 2 * 0.75 * 16777216 / 1e11, 1e-12);
}

TEST(PlanStep, MegatronCppSequenceParallelMovesTheSameBytes) {
  // An all-gather plus a reduce-scatter of [s, b, h] costs what one all-reduce does on the
  // ring: megatron-cpp's layer collectives take as long with SP as without (it keeps the
  // gathered GEMM inputs, so no weight-gradient re-gather as in Megatron-LM), and its
  // LayerNorm / dropout / residual kernels move a t-th of the bytes.
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = small_layout();
  const Implementation cpp = Implementation::kMegatronCpp;
  const MicrobatchCosts with_sp = microbatch_costs(m, l, mach, cpp);
  ASSERT_EQ(with_sp.layer_comm.size(), 4u);
  for (const CommTerm& ct : with_sp.layer_comm) EXPECT_EQ(ct.overlapped, 0);
  const MicrobatchCosts lm = microbatch_costs(m, l, mach, Implementation::kMegatronLm);
  EXPECT_EQ(lm.layer_comm.size(), 5u);
  l.sequence_parallel = false;
  const MicrobatchCosts without = microbatch_costs(m, l, mach, cpp);
  EXPECT_NEAR(with_sp.layer_comm_seconds(), without.layer_comm_seconds(),
              1e-12 * without.layer_comm_seconds());
  EXPECT_LT(with_sp.layer_forward.memory, without.layer_forward.memory);
  EXPECT_DOUBLE_EQ(with_sp.layer_forward.gemm, without.layer_forward.gemm);
  // The pipeline sends the [s/t, b, h] shard instead of the whole [s, b, h] (zero latency
  // here: a t-th of the time).
  const double whole = predict_step_time(m, l, mach, cpp).pp_p2p;
  l.sequence_parallel = true;
  EXPECT_NEAR(predict_step_time(m, l, mach, cpp).pp_p2p, whole / l.tensor_parallel, 1e-12 * whole);
}

// megatron-cpp's BERT with SP (model/bert_encoder.h): the last stage all-gathers the final
// hidden states [s, b, h] before its heads, which run replicated on the whole sequence, so the
// MLM head all-reduces its input gradient (the 0.15·s·b scored rows) as without SP, the
// gather's backward is a slice (no reduce-scatter), and of the head only the final LayerNorm
// sees a shard: its SP gradients are those of the GPT above, 204,800 f32, where Megatron-LM's
// BERT adds its LM head's dense 4096·4096 + 4096 and LayerNorm 2·4096 (16,789,504 more).
TEST(PlanStep, MegatronCppBertSequenceParallelGathersBeforeTheHeads) {
  const Machine mach = round_machine();
  ModelSpec m = small_gpt();
  m.family = ModelFamily::kBert;
  Layout l = small_layout();
  l.recompute = Recompute::kNone;
  const Implementation cpp = Implementation::kMegatronCpp;
  validate_layout(m, l, cpp);
  const MicrobatchCosts c = microbatch_costs(m, l, mach, cpp);
  ASSERT_EQ(c.output_comm.size(), 3u);
  EXPECT_EQ(c.output_comm[0].op, Collective::kAllGather);
  EXPECT_DOUBLE_EQ(c.output_comm[0].bytes, 2048.0 * 4096 * 2);
  EXPECT_EQ(c.output_comm[1].op, Collective::kAllReduce);
  EXPECT_DOUBLE_EQ(c.output_comm[1].bytes, 0.15 * 2048 * 4096 * 2);
  for (const CommTerm& ct : c.output_comm) EXPECT_NE(ct.op, Collective::kReduceScatter);
  // The embedding: reduce-scatter forward, all-gather of the gradient backward.
  ASSERT_EQ(c.embedding_comm.size(), 2u);
  EXPECT_EQ(c.embedding_comm[0].op, Collective::kReduceScatter);
  EXPECT_EQ(c.embedding_comm[1].op, Collective::kAllGather);

  EXPECT_NEAR(predict_step_time(m, l, mach, cpp).sequence_parallel_sync,
              2 * 0.75 * 204800 * 4 / 1e11, 1e-18);
  EXPECT_NEAR(predict_step_time(m, l, mach, Implementation::kMegatronLm).sequence_parallel_sync,
              2 * 0.75 * (204800 + 16789504) * 4 / 1e11, 1e-15);
  // By stage: 8 layers' 196,608 on each; the final LayerNorm's 2·4096 on the last (pre-LN), or
  // the embedding LayerNorm's on the first (post-LN): the same largest all-reduce, on the other
  // end of the pipeline.
  SequenceParallelGradients g = sequence_parallel_gradients(m, l, cpp);
  EXPECT_DOUBLE_EQ(g.first_stage_rank, 196608.0);
  EXPECT_DOUBLE_EQ(g.last_stage_rank, 204800.0);
  m.set_norm_order(NormOrder::kPost);
  g = sequence_parallel_gradients(m, l, cpp);
  EXPECT_DOUBLE_EQ(g.first_stage_rank, 204800.0);
  EXPECT_DOUBLE_EQ(g.last_stage_rank, 196608.0);
  EXPECT_NEAR(predict_step_time(m, l, mach, cpp).sequence_parallel_sync,
              2 * 0.75 * 204800 * 4 / 1e11, 1e-18);
}

// The LayerNorm order's element-wise traffic in megatron-cpp (model/transformer_layer.h). The
// pre-LN layer's norm backward adds its input gradient to the residual's in place (reads dy, x
// and dx, writes dx: 4 passes over the [s/t, b, h] shard); the post-LN layer, and the pre-LN one
// with residuals from the norms, writes it (3 passes) and adds the residual's gradient with an
// axpy (3 passes): per layer 2 calls and 4 passes more. The post-LN BERT's norm outside the
// layers is the embedding's: its forward (2 passes) and backward (3) move from the last stage
// to the first. Here a pass is 2048·4096/4 bf16 elements at 1 TB/s, a call 1 µs.
TEST(PlanStep, MegatronCppBertNormOrderChangesTheNormTraffic) {
  Machine mach = round_machine();
  mach.kernel_overhead = 1e-6;
  ModelSpec pre = small_gpt();
  pre.family = ModelFamily::kBert;
  const Layout l = small_layout();
  const Implementation cpp = Implementation::kMegatronCpp;
  const double pass = 2048.0 * 4096 / 4 * 2 / 1e12, call = 1e-6;
  const MicrobatchCosts a = microbatch_costs(pre, l, mach, cpp);
  for (const NormOrder order : {NormOrder::kPreResidualFromNorm, NormOrder::kPost}) {
    SCOPED_TRACE(norm_order_name(order));
    ModelSpec m = pre;
    m.set_norm_order(order);
    validate_layout(m, l, cpp);
    const MicrobatchCosts c = microbatch_costs(m, l, mach, cpp);
    EXPECT_DOUBLE_EQ(c.layer_forward.memory, a.layer_forward.memory);
    EXPECT_NEAR(c.layer_backward.memory - a.layer_backward.memory, 2 * call + 4 * pass, 1e-15);
    const bool post = order == NormOrder::kPost;
    EXPECT_NEAR(c.embedding_forward.memory - a.embedding_forward.memory,
                post ? call + 2 * pass : 0.0, 1e-15);
    EXPECT_NEAR(a.output_forward.memory - c.output_forward.memory, post ? call + 2 * pass : 0.0,
                1e-15);
    EXPECT_NEAR(c.embedding_backward.memory - a.embedding_backward.memory,
                post ? call + 3 * pass : 0.0, 1e-15);
    EXPECT_NEAR(a.output_backward.memory - c.output_backward.memory, post ? call + 3 * pass : 0.0,
                1e-15);
  }
}

TEST(PlanStep, SequenceParallelAllReducesNormAndBiasGradients) {
  // With SP each TP rank applies the norms and row-parallel biases to its sequence shard only,
  // so their gradients are partial: one all-reduce over TP per step. The last stage of
  // small_gpt at PP 4 holds 32 / 4 = 8 layers x (2 LayerNorms x 2h + 2 biases x h) + the final
  // LayerNorm 2h = 8·6·4096 + 2·4096 = 204,800 f32 gradients (Megatron-LM: fp32 main grads),
  // 819,200 bytes; on the ring of 4 at 100 GB/s, no latency: 2·(3/4)·819200 / 1e11 s.
  const Machine mach = round_machine();
  ModelSpec m = small_gpt();
  Layout l = small_layout();
  for (Implementation impl : {Implementation::kMegatronCpp, Implementation::kMegatronLm}) {
    const StepTime a = predict_step_time(m, l, mach, impl);
    EXPECT_NEAR(a.sequence_parallel_sync, 2 * 0.75 * 819200 / 1e11, 1e-18);
    EXPECT_NEAR(
        a.step,
        a.pipeline + a.dp_exposed + a.embedding_sync + a.sequence_parallel_sync + a.optimizer,
        1e-12);
  }
  // RMSNorm without biases: the norm weights only, 8·2·4096 + 4096 = 69,632 gradients.
  m.arch.normalization = Normalization::kRMSNorm;
  m.arch.add_bias_linear = false;
  EXPECT_NEAR(predict_step_time(m, l, mach, Implementation::kMegatronCpp).sequence_parallel_sync,
              2 * 0.75 * 69632 * 4 / 1e11, 1e-18);
  // Without SP every rank sees the whole sequence: the gradients are complete.
  l.sequence_parallel = false;
  EXPECT_EQ(predict_step_time(m, l, mach, Implementation::kMegatronCpp).sequence_parallel_sync, 0);
}

TEST(PlanStep, SequenceParallelEmbeddingReduceScattersToTheShard) {
  // megatron-cpp reduce-scatters the vocabulary-parallel lookup [s, b, h] (2048·1·4096 bf16 =
  // 16,777,216 bytes) to the shard, (3/4)·S / 100 GB/s, and all-gathers its gradient, the same;
  // Megatron-LM with a position table all-reduces (twice that) and all-gathers the gradient,
  // with RoPE reduce-scatters as megatron-cpp does.
  const Machine mach = round_machine();
  ModelSpec m = small_gpt();
  const Layout l = small_layout();
  const double half = 0.75 * 16777216 / 1e11;
  auto embedding_seconds = [&](Implementation impl) {
    double seconds = 0;
    for (const CommTerm& ct : microbatch_costs(m, l, mach, impl).embedding_comm)
      seconds += ct.seconds;
    return seconds;
  };
  EXPECT_NEAR(embedding_seconds(Implementation::kMegatronCpp), 2 * half, 1e-15);
  EXPECT_NEAR(embedding_seconds(Implementation::kMegatronLm), 3 * half, 1e-15);
  m.arch.position_embedding = PositionEmbedding::kRope;
  EXPECT_NEAR(embedding_seconds(Implementation::kMegatronLm), 2 * half, 1e-15);
}

TEST(PlanStep, SelectiveRecomputeRunsTheAttentionCoreAgain) {
  // Megatron-LM re-runs QKᵀ and P·V (and the softmax, dropout); megatron-cpp only what its
  // backward needs, ParallelAttention::core_probs: QKᵀ, the softmax and the dropout mask.
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout l = small_layout();
  l.recompute = Recompute::kSelective;
  const double s = double(m.seq_length), d = double(m.head_dim()),
               heads = double(l.micro_batch) * double(m.num_attention_heads) / l.tensor_parallel;
  const double qk = gemm_seconds(mach.compute(l.precision), s, s, d, heads);
  const MicrobatchCosts lm = microbatch_costs(m, l, mach, Implementation::kMegatronLm);
  const MicrobatchCosts cpp = microbatch_costs(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_DOUBLE_EQ(lm.layer_recompute.gemm, 2 * qk);
  EXPECT_DOUBLE_EQ(cpp.layer_recompute.gemm, qk);
  EXPECT_GT(cpp.layer_recompute.memory, 0);
  EXPECT_LT(cpp.layer_recompute.memory, cpp.layer_forward.memory);
}

TEST(PlanCalibration, ReproducesTheTarget) {
  Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  const Layout l = small_layout();
  const double eff = calibrate_gemm_efficiency(mach, m, l, Implementation::kMegatronLm, 30.0,
                                               FlopCounting::kModel);
  EXPECT_DOUBLE_EQ(mach.bf16.gemm_efficiency, eff);
  EXPECT_NEAR(predict_step_time(m, l, mach, Implementation::kMegatronLm).model_tflops_per_device,
              30.0, 1e-6);
  EXPECT_NE(error_of([&] {
              calibrate_gemm_efficiency(mach, m, l, Implementation::kMegatronLm, 99.0,
                                        FlopCounting::kModel);
            }).find("cannot calibrate"),
            std::string::npos);
}

const char* kMachineJson = R"({
  "name": "test node", "_comment": "ignored",
  "device": {"memory_gib": 16, "memory_bandwidth_gbps": 1000, "host_op_us": 10,
             "host_sync_us": 15, "compute": {"bf16": {"peak_tflops": 100, "gemm_efficiency": 0.5}}},
  "node": {"devices": 4, "bandwidth_gbps": 100, "latency_us": 2},
  "network": {"bandwidth_gbps": 50, "efficiency": 0.9}
})";

TEST(PlanMachine, ParsesUnitsAndDefaults) {
  const Machine m = machine_from_json_text(kMachineJson, "t.json");
  EXPECT_EQ(m.name, "test node");
  EXPECT_DOUBLE_EQ(m.memory_bytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(m.bf16.peak_flops, 100e12);
  // Roofline default c = η·peak·2 bytes / (2·bandwidth) = 0.5·1e14·2 / 2e12 = 50.
  EXPECT_DOUBLE_EQ(m.bf16.gemm_half_dim, 50.0);
  EXPECT_DOUBLE_EQ(m.intra_node.latency, 2e-6);
  EXPECT_DOUBLE_EQ(m.inter_node.efficiency, 0.9);
  EXPECT_DOUBLE_EQ(m.host_op, 10e-6);
  EXPECT_DOUBLE_EQ(m.host_sync, 15e-6);
  EXPECT_DOUBLE_EQ(m.kernel_overhead, 0.0);
  EXPECT_NE(error_of([&] { m.compute(Precision::kFp16); }).find("has no 'fp16' entry"),
            std::string::npos);
  const Machine again = machine_from_json_text(machine_to_json_text(m), "round trip");
  EXPECT_DOUBLE_EQ(again.bf16.gemm_half_dim, 50.0);
  EXPECT_DOUBLE_EQ(again.inter_node.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(again.host_sync, 15e-6);
}

TEST(PlanMachine, ErrorsNameTheField) {
  auto err = [](const std::string& text) {
    return error_of([&] { machine_from_json_text(text, "bad.json"); });
  };
  std::string t = kMachineJson;
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(std::string(t).replace(t.find("\"memory_bandwidth_gbps\""), 23,
                                       "\"memory_bandwidth_gbps\": 1, \"memory_eficiency\""))
                .find("unknown key 'device.memory_eficiency'"),
            std::string::npos);
  EXPECT_NE(err(std::string(t).replace(t.find("16,"), 3, "-1,"))
                .find("'device.memory_gib' must be "
                      "positive"),
            std::string::npos);
  EXPECT_NE(err(R"({"name": "x", "node": {"devices": 1}})").find("missing 'device'"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_machine("/nonexistent/machine.json"); }).find("cannot read"),
            std::string::npos);
}

TEST(PlanLayout, ErrorsNameTheRule) {
  const ModelSpec m = small_gpt();
  Layout l;
  l.micro_batch = 1;
  l.tensor_parallel = 3;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronLm);
            }).find("--num-attention-heads 32 must be divisible by --tensor-model-parallel-size 3"),
            std::string::npos);
  l.tensor_parallel = 1;
  l.pipeline_parallel = 5;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronLm);
            }).find("--num-layers 32 is not divisible by --pipeline-model-parallel-size 5"),
            std::string::npos);
  l.pipeline_parallel = 2;
  ModelSpec bert = m;
  bert.family = ModelFamily::kBert;
  // megatron-cpp runs BERT in pipeline stages too (model/bert_model.h).
  EXPECT_NO_THROW(validate_layout(bert, l, Implementation::kMegatronCpp));
  l.pipeline_parallel = 1;
  l.data_parallel = 3;
  l.global_batch = 10;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronLm);
            }).find("--global-batch-size 10 must be a positive multiple"),
            std::string::npos);
  l.global_batch = 0;
  l.sequence_parallel = true;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronLm);
            }).find("--sequence-parallel needs"),
            std::string::npos);
  // megatron-cpp shards whole positions (GptConfig::validate, BertConfig's alike).
  l.tensor_parallel = 2;
  ModelSpec odd = m;
  odd.seq_length = 1001;
  EXPECT_NE(error_of([&] {
              validate_layout(odd, l, Implementation::kMegatronCpp);
            }).find("--seq-length 1001 must be divisible by --tensor-model-parallel-size 2"),
            std::string::npos);
  ModelSpec odd_bert = bert;
  odd_bert.seq_length = 1001;
  EXPECT_NE(error_of([&] {
              validate_layout(odd_bert, l, Implementation::kMegatronCpp);
            }).find("--seq-length 1001 must be divisible by --tensor-model-parallel-size 2"),
            std::string::npos);
  validate_layout(bert, l, Implementation::kMegatronCpp);  // its BERT shards the sequence too
  // The LayerNorm orders: post-LN is a BERT order megatron-cpp runs and Megatron-LM does not;
  // residuals from the norms a megatron-cpp BERT option (and Megatron-LM's, for any model).
  ModelSpec post = bert;
  post.set_norm_order(NormOrder::kPost);
  EXPECT_NO_THROW(validate_layout(post, l, Implementation::kMegatronCpp));
  EXPECT_NE(error_of([&] {
              validate_layout(post, l, Implementation::kMegatronLm);
            }).find("--post-layernorm: megatron-lm has no post-LayerNorm order"),
            std::string::npos);
  ModelSpec post_gpt = m;
  post_gpt.set_norm_order(NormOrder::kPost);
  EXPECT_NE(error_of([&] {
              validate_model(post_gpt);
            }).find("--post-layernorm is a BERT option: give --model bert"),
            std::string::npos);
  ModelSpec residual_gpt = m;
  residual_gpt.set_norm_order(NormOrder::kPreResidualFromNorm);
  EXPECT_NE(error_of([&] {
              validate_layout(residual_gpt, l, Implementation::kMegatronCpp);
            }).find("--apply-residual-connection-post-layernorm: megatron-cpp's GPT"),
            std::string::npos);
  EXPECT_NO_THROW(validate_layout(residual_gpt, l, Implementation::kMegatronLm));

  // Context parallelism: 2c chunks of the sequence, whole KV groups per all-to-all rank, GPT only.
  Layout cp;
  cp.micro_batch = 1;
  cp.context_parallel = 3;
  EXPECT_NE(error_of([&] {
              validate_layout(m, cp, Implementation::kMegatronCpp);
            }).find("--seq-length 2048 must be divisible by 2 x CP = 6"),
            std::string::npos);
  cp.context_parallel = 4;
  cp.cp_comm = CpCommType::kA2AP2P;
  EXPECT_NE(error_of([&] {
              validate_layout(m, cp, Implementation::kMegatronCpp);
            }).find("--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes"),
            std::string::npos);
  ModelSpec gqa = m;
  gqa.arch.num_query_groups = 2;
  cp.cp_comm = CpCommType::kA2A;
  EXPECT_NE(error_of([&] {
              validate_layout(gqa, cp, Implementation::kMegatronCpp);
            }).find("query groups of a TP rank must be divisible by the 4 ranks"),
            std::string::npos);
  cp.cp_comm = CpCommType::kP2P;
  EXPECT_NO_THROW(validate_layout(gqa, cp, Implementation::kMegatronCpp));
  EXPECT_NE(error_of([&] {
              validate_layout(bert, cp, Implementation::kMegatronCpp);
            }).find("megatron-cpp's BERT attends with a padding mask"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              validate_layout(m, cp, Implementation::kMegatronLm2019);
            }).find("megatron-lm-2019 had no context parallelism"),
            std::string::npos);
}

// Where full recompute fits and no recompute does not, the search offers block recompute of the
// fewest layers that fit: a 32-layer GPT on one device with room for block recompute of 16
// layers but not of 15 (flash attention: selective recompute saves nothing more).
TEST(PlanSearch, BlockRecomputeOfTheFewestLayersThatFit) {
  Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout base;
  base.global_batch = 1;
  base.precision = Precision::kBf16;
  base.flash_attention = true;
  const Implementation impl = Implementation::kMegatronLm;
  mach.memory_bytes = 1e15;
  auto peak = [&](Recompute rc, int block) {
    Layout l = base;
    l.recompute = rc;
    l.recompute_block_layers = block;
    return estimate_memory(m, l, mach, impl).peak();
  };
  ASSERT_LT(peak(Recompute::kFull, 16), peak(Recompute::kFull, 15));
  mach.memory_bytes = 0.5 * (peak(Recompute::kFull, 16) + peak(Recompute::kFull, 15));
  ASSERT_GT(peak(Recompute::kNone, 0), mach.memory_bytes);
  const SearchResult r = search_layouts(m, base, mach, impl, 1, 5);
  ASSERT_FALSE(r.best.empty());
  EXPECT_EQ(r.best[0].layout.recompute, Recompute::kFull);
  EXPECT_EQ(r.best[0].layout.recompute_block_layers, 16);
  // ... ahead of recomputing every layer, which fits too.
  bool uniform = false;
  for (const Candidate& c : r.best)
    uniform =
        uniform || (c.layout.recompute == Recompute::kFull && c.layout.recompute_block_layers == 0);
  EXPECT_TRUE(uniform);
}

// A sequence too long for one device's activations: only context-parallel layouts fit, and
// the search finds them (a 2-layer h 1024 GPT at s 131072 on 8 devices of 4 GB, megatron-cpp).
TEST(PlanSearch, LongSequencesFitOnlyWithContextParallelism) {
  Machine mach = round_machine();
  mach.memory_bytes = 4e9;
  ModelSpec m = gpt_spec(2, 1024, 16, 131072, 1000);
  Layout base;
  base.global_batch = 8;
  base.precision = Precision::kBf16;
  const SearchResult r = search_layouts(m, base, mach, Implementation::kMegatronCpp, 8, 500);
  ASSERT_FALSE(r.best.empty());
  for (const Candidate& c : r.best) EXPECT_GT(c.layout.context_parallel, 1) << c.layout.describe();
  bool cp8 = false;
  for (const Candidate& c : r.best) cp8 = cp8 || c.layout.context_parallel == 8;
  EXPECT_TRUE(cp8);
  EXPECT_NE(format_search(m, mach, Implementation::kMegatronCpp, 8, r, 0).find(" CP "),
            std::string::npos);
}

// ---- Mixture of experts (model/moe_layer.h) ----

// 2 MoE layers (h 64, 4 heads, s 16), 8 experts of width 32, top 2, bf16, micro-batch 2, on 4
// devices of one node: DP 4 with EP 4 (2 experts per rank, ed = 1).
ModelSpec moe_gpt() {
  ModelSpec m = gpt_spec(2, 64, 4, 16, 128);
  m.arch.moe.num_experts = 8;
  m.arch.moe.ffn_hidden_size = 32;
  m.arch.moe.topk = 2;
  return m;
}
Layout moe_ep4() {
  Layout l;
  l.data_parallel = 4;
  l.expert_parallel = 4;
  l.micro_batch = 2;
  l.global_batch = 8;
  l.precision = Precision::kBf16;
  return l;
}

TEST(PlanStep, MoeGroupedGemmAndAllToAllByHand) {
  const Machine mach = round_machine();  // GEMMs at 50 TFLOP/s, no shape penalty
  const ModelSpec m = moe_gpt();
  const Layout l = moe_ep4();
  validate_layout(m, l, Implementation::kMegatronCpp);
  const MicrobatchCosts c = microbatch_costs(m, l, mach, Implementation::kMegatronCpp);
  // Forward FLOPs of a layer (N = 32 tokens): QKV 2·32·192·64, projection 2·32·64·64, QKᵀ and
  // PV 2·(2·16·16·16·8), the router 2·32·8·64, and the 2 local experts' GEMMs on the 64 routed
  // rows (32 each, expected): fc1 2·(2·32·32·64), fc2 the same.
  const double flops = 2.0 * 32 * 192 * 64 + 2.0 * 32 * 64 * 64 + 2 * (2.0 * 16 * 16 * 16 * 8) +
                       2.0 * 32 * 8 * 64 + 2 * (2.0 * 32 * 32 * 64) + 2 * (2.0 * 32 * 64 * 32);
  EXPECT_NEAR(c.layer_forward.gemm, flops / 50e12, 1e-20);
  // The token exchange: dispatch and combine, each an all-to-all of the 64 routed rows
  // (64·64·2 bytes) over the 4 EP ranks, forward and backward: (3/4)·8192 / 100 GB/s each.
  ASSERT_EQ(c.layer_ep_comm.size(), 2u);
  for (const CommTerm& t : c.layer_ep_comm) {
    EXPECT_EQ(t.op, Collective::kAllToAll);
    EXPECT_DOUBLE_EQ(t.bytes, 8192.0);
    EXPECT_DOUBLE_EQ(t.calls, 2.0);
    EXPECT_NEAR(t.seconds, 2 * 0.75 * 8192 / 1e11, 1e-18);
  }
  // Every rank holds different experts (ed = 1): only the dense gradients are all-reduced over
  // DP 4, in one megatron-cpp bucket: 2·(3/4)·4 bytes each / 100 GB/s.
  const StepTime st = predict_step_time(m, l, mach, Implementation::kMegatronCpp);
  EXPECT_TRUE(c.layer_comm.empty());  // TP 1: no tensor-parallel collective
  // On the critical path: 2 layers x 4 all-to-alls.
  EXPECT_NEAR(st.ep_comm, 2 * 4 * 0.75 * 8192 / 1e11, 1e-18);
  const ParameterCounts p = count_parameters(m, l);
  EXPECT_GT(p.stage_expert_rank, 0);
  EXPECT_NEAR(st.dp_comm, 2 * 0.75 * 4 * (p.max_rank() - p.stage_expert_rank) / 1e11, 1e-15);
  // The allgather dispatcher of Megatron-LM: an all-gather of the 4 ranks' tokens
  // (4·32·64·2 bytes gathered) and a reduce-scatter back, forward and backward.
  Layout ag = l;
  ag.dispatcher = TokenDispatcher::kAllGather;
  const MicrobatchCosts g = microbatch_costs(m, ag, mach, Implementation::kMegatronLm);
  ASSERT_EQ(g.layer_ep_comm.size(), 2u);
  EXPECT_DOUBLE_EQ(g.layer_ep_comm[0].bytes, 4 * 32 * 64 * 2.0);
  EXPECT_NEAR(g.layer_ep_comm[0].seconds, 2 * 0.75 * 16384 / 1e11, 1e-18);
}

TEST(PlanSearch, ExpertsFitOnlyWithExpertParallelism) {
  // One layer, one head (TP 1 only), 8 experts of width 4096 at h 256: 16.8M expert parameters
  // (f32: 4 bytes of weights, 4 of gradients, 8 of moments), so a rank holding all of them
  // needs 134 MB before any optimizer state, 168 MB with the moments sharded over 4 ranks —
  // over the 0.12 GB device (114 MB usable); at EP 4 the rank's quarter takes 67 MB.
  Machine mach = round_machine();
  mach.memory_bytes = 0.12e9;
  ModelSpec m = gpt_spec(1, 256, 1, 64, 1000);
  m.arch.moe.num_experts = 8;
  m.arch.moe.ffn_hidden_size = 4096;
  m.arch.moe.topk = 2;
  Layout base;
  base.global_batch = 8;
  const SearchResult r = search_layouts(m, base, mach, Implementation::kMegatronCpp, 4, 500);
  ASSERT_FALSE(r.best.empty());
  for (const Candidate& c : r.best) EXPECT_GT(c.layout.expert_parallel, 1) << c.layout.describe();
  bool ep4 = false;
  for (const Candidate& c : r.best) ep4 = ep4 || c.layout.expert_parallel == 4;
  EXPECT_TRUE(ep4);
  EXPECT_NE(format_search(m, mach, Implementation::kMegatronCpp, 4, r, 0).find(" EP "),
            std::string::npos);
}

TEST(PlanLayout, BadExpertGridNamesTheFlag) {
  const ModelSpec m = moe_gpt();  // 8 experts
  Layout l = moe_ep4();
  l.expert_parallel = 3;
  l.data_parallel = 3;
  l.global_batch = 6;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronCpp);
            }).find("--num-experts 8 is not divisible by --expert-model-parallel-size 3"),
            std::string::npos);
  l.expert_parallel = 2;  // 2 does not divide the 3 ranks
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronCpp);
            }).find("--expert-model-parallel-size 2"),
            std::string::npos);
  // Megatron-LM's MoE layers with TP route sequence shards.
  l = moe_ep4();
  l.tensor_parallel = 2;
  l.data_parallel = 2;
  l.expert_parallel = 2;
  EXPECT_NE(error_of([&] {
              validate_layout(m, l, Implementation::kMegatronLm);
            }).find("Megatron-LM's MoE layers need --sequence-parallel"),
            std::string::npos);
  ModelSpec dense = gpt_spec(2, 64, 4, 16, 128);
  l = moe_ep4();
  EXPECT_NE(error_of([&] {
              validate_layout(dense, l, Implementation::kMegatronCpp);
            }).find("but the model has none"),
            std::string::npos);
}

TEST(PlanSearch, RanksFittingLayoutsFastestFirst) {
  const Machine mach = round_machine();
  const ModelSpec m = small_gpt();
  Layout base;
  base.global_batch = 64;
  base.precision = Precision::kBf16;
  const SearchResult r = search_layouts(m, base, mach, Implementation::kMegatronLm, 16, 5);
  ASSERT_FALSE(r.best.empty());
  EXPECT_LE(r.best.size(), 5u);
  for (size_t i = 0; i < r.best.size(); ++i) {
    EXPECT_TRUE(r.best[i].fits);
    EXPECT_EQ(r.best[i].layout.world_size(), 16);
    EXPECT_LE(r.best[i].memory.peak(), mach.memory_bytes);
    if (i > 0) {
      EXPECT_GE(r.best[i - 1].time.tokens_per_second, r.best[i].time.tokens_per_second);
    }
  }
  // megatron-cpp layouts: TP x PP x DP, the distributed optimizer, full and selective
  // recompute, SP.
  const SearchResult cpp = search_layouts(m, base, mach, Implementation::kMegatronCpp, 16, 500);
  bool pipelined = false, selective = false, sp = false;
  for (const Candidate& c : cpp.best) {
    pipelined = pipelined || c.layout.pipeline_parallel > 1;
    selective = selective || c.layout.recompute == Recompute::kSelective;
    sp = sp || c.layout.sequence_parallel;
  }
  EXPECT_TRUE(pipelined);
  EXPECT_TRUE(selective);
  EXPECT_TRUE(sp);
  // megatron-cpp's BERT: pipelined, sequence-parallel and selective-recompute layouts too.
  ModelSpec bert = m;
  bert.family = ModelFamily::kBert;
  bert.seq_length = 512;
  const SearchResult cpp_bert =
      search_layouts(bert, base, mach, Implementation::kMegatronCpp, 16, 500);
  bool bert_pipelined = false, bert_sp = false, bert_selective = false;
  for (const Candidate& c : cpp_bert.best) {
    bert_pipelined = bert_pipelined || c.layout.pipeline_parallel > 1;
    bert_sp = bert_sp || c.layout.sequence_parallel;
    bert_selective = bert_selective || c.layout.recompute == Recompute::kSelective;
  }
  EXPECT_TRUE(bert_pipelined);
  EXPECT_TRUE(bert_sp);
  EXPECT_TRUE(bert_selective);
  EXPECT_NE(error_of([&] {
              search_layouts(m, Layout{}, mach, Implementation::kMegatronLm, 16, 5);
            }).find("--global-batch-size"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::plan
