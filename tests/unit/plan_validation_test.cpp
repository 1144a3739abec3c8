// Validation of `megatron plan` against published and measured results (docs/plan.md,
// "Validation"): the Megatron-LM paper's weak-scaling table from one calibration, the 2019
// README's data-parallel overlap figures, Narayanan et al. (2021)'s trillion-parameter run, and
// the step times and peak memory measured on this project's development machine
// (bench/RESULTS.md, "megatron plan against measured runs"). No timing happens here: the
// measured numbers are constants, compared through the model.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/calibration.h"
#include "plan/plan_report.h"
#include "plan_test_models.h"

namespace megatron::plan {
namespace {

std::string source_dir() {
  const char* dir = std::getenv("MEGATRON_SOURCE_DIR");
  return dir ? dir : MEGATRON_TEST_SOURCE_DIR;
}

Machine shipped(const std::string& name) {
  return load_machine(source_dir() + "/examples/machines/" + name);
}

// ---------------------------------------------------------------------------------------------
// Shoeybi et al. (2019), "Megatron-LM", weak scaling (section 5.1, figure 1 / table): GPT-2
// models with 96 channels per head, padded vocabulary 51,200, sequence 1024, fp16, activation
// checkpointing; model-parallel runs at batch 8 on one DGX-2H, model + data parallel at global
// batch 512 (batch 8 per model replica). Efficiency = TFLOP/s per GPU over the 1-GPU baseline
// (39 TFLOP/s, 30% of 125).
struct WeakScalingRow {
  int hidden, heads, layers, mp, gpus;
  double mp_efficiency, mpdp_efficiency;  // published, %
  bool overlapped_ddp;                    // README: torch DDP only where it was faster
};

constexpr WeakScalingRow kWeakScaling[] = {
    {1536, 16, 40, 1, 64, 100, 96, false},
    {1920, 20, 54, 2, 128, 95, 83, false},
    {2304, 24, 64, 4, 256, 82, 79, true},
    {3072, 32, 72, 8, 512, 77, 74, true},
};
constexpr double kWeakScalingTolerance = 5;  // points, the target

ModelSpec weak_scaling_model(const WeakScalingRow& r) {
  return gpt_spec(r.layers, r.hidden, r.heads, 1024, 51200);
}

Layout weak_scaling_layout(const WeakScalingRow& r, int data_parallel, bool overlap) {
  Layout l;
  l.tensor_parallel = r.mp;
  l.data_parallel = data_parallel;
  l.micro_batch = 8;
  l.global_batch = 8 * data_parallel;
  l.recompute = Recompute::kFull;
  l.precision = Precision::kFp16;
  l.overlap_grad_reduce = overlap;
  return l;
}

struct WeakScaling {
  Machine machine;
  double baseline = 0;  // TFLOP/s per GPU of the 1-GPU run after calibration
  double efficiency(const WeakScalingRow& r, int dp, bool overlap) const {
    const StepTime t = predict_step_time(weak_scaling_model(r), weak_scaling_layout(r, dp, overlap),
                                         machine, Implementation::kMegatronLm2019);
    return 100.0 * t.hardware_tflops_per_device / baseline;
  }
};

WeakScaling calibrated_dgx2h() {
  WeakScaling w{shipped("dgx2h_v100.json")};
  const WeakScalingRow& base = kWeakScaling[0];
  calibrate_gemm_efficiency(w.machine, weak_scaling_model(base),
                            weak_scaling_layout(base, 1, false), Implementation::kMegatronLm2019,
                            39.0, FlopCounting::kHardware);
  w.baseline = 39.0;
  return w;
}

TEST(PlanValidation, ShoeybiWeakScalingFromOneCalibration) {
  const WeakScaling w = calibrated_dgx2h();
  // The shipped machine file holds this calibration.
  EXPECT_NEAR(w.machine.fp16.gemm_efficiency, shipped("dgx2h_v100.json").fp16.gemm_efficiency,
              0.002);
  for (const WeakScalingRow& r : kWeakScaling) {
    SCOPED_TRACE("hidden " + std::to_string(r.hidden));
    EXPECT_NEAR(w.efficiency(r, 1, false), r.mp_efficiency, kWeakScalingTolerance);
    EXPECT_NEAR(w.efficiency(r, r.gpus / r.mp, r.overlapped_ddp), r.mpdp_efficiency,
                kWeakScalingTolerance);
  }
}

// The 2019 README: "for the 8.3 billion parameters model running on 512 GPUs, the scaling
// increases from 60% to 74% when torch's distributed data parallel is used" — the gradient
// all-reduce after the backward against one overlapped with it.
TEST(PlanValidation, ShoeybiReadmeGradientOverlap) {
  const WeakScaling w = calibrated_dgx2h();
  const WeakScalingRow& r = kWeakScaling[3];
  EXPECT_NEAR(w.efficiency(r, 64, false), 60.0, 2.0);
  EXPECT_NEAR(w.efficiency(r, 64, true), 74.0, 5.0);
}

// Narayanan et al. (2021): the 1-trillion-parameter GPT (L 128, h 25600, a 160, s 2048,
// V 51200) on 3072 A100s at TP 8 x PP 64, batch 3072, reaches 163 TFLOP/s per GPU (502
// PFLOP/s, 52% of peak; recompute counted). That run calibrates examples/machines/
// dgx_a100_80gb.json (micro-batch 1, no interleaving assumed).
TEST(PlanValidation, NarayananTrillionCalibratesTheA100File) {
  Machine m = shipped("dgx_a100_80gb.json");
  const ModelSpec model = gpt_spec(128, 25600, 160, 2048, 51200);
  Layout l;
  l.tensor_parallel = 8;
  l.pipeline_parallel = 64;
  l.data_parallel = 6;
  l.micro_batch = 1;
  l.global_batch = 3072;
  l.recompute = Recompute::kFull;
  l.precision = Precision::kFp16;
  const StepTime t = predict_step_time(model, l, m, Implementation::kMegatronLm);
  EXPECT_NEAR(t.hardware_tflops_per_device, 163.0, 163.0 * 0.005);
  EXPECT_NEAR(t.hardware_tflops_per_device * 3072 / 1e3, 502.0, 502.0 * 0.005);  // PFLOP/s
  EXPECT_TRUE(estimate_memory(model, l, m, Implementation::kMegatronLm).peak() < m.memory_bytes);
}

// ---------------------------------------------------------------------------------------------
// This project on its development machine (bench/plan_validation.sh; bench/RESULTS.md):
// bench/plan_validation/measured.json holds each run's iteration times and peak RSS, and the
// machine files measured right before and right after it in the same process layout.
struct MeasuredRun {
  const char* name;
  ModelFamily family;
  int layers, hidden, heads, tp, dp;
  int64_t micro_batch;
  double time_tolerance;  // relative: the 15%
};

constexpr MeasuredRun kMeasured[] = {
    {"gpt_tp1", ModelFamily::kGpt, 12, 768, 12, 1, 1, 8, 0.15},
    {"gpt_tp2", ModelFamily::kGpt, 12, 768, 12, 2, 1, 8, 0.15},
    {"gpt_dp2", ModelFamily::kGpt, 12, 768, 12, 1, 2, 4, 0.15},
    {"bert_tp1", ModelFamily::kBert, 12, 768, 12, 1, 1, 8, 0.15},
};

nlohmann::json measured() {
  std::ifstream in(source_dir() + "/bench/plan_validation/measured.json");
  return nlohmann::json::parse(in);
}

ModelSpec measured_model(ModelFamily family, int layers, int hidden, int heads) {
  ModelSpec m;
  m.family = family;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.seq_length = 128;
  m.max_position_embeddings = family == ModelFamily::kGpt ? 1024 : 512;
  m.vocab_size = family == ModelFamily::kGpt ? 50257 : 30522;
  return m;
}

Layout measured_layout(int tp, int dp, int64_t micro_batch) {
  Layout l;
  l.tensor_parallel = tp;
  l.data_parallel = dp;
  l.micro_batch = micro_batch;
  l.global_batch = 8;
  return l;
}

Machine measured_machine(const std::string& name, const char* when) {
  return load_machine(source_dir() + "/bench/plan_validation/" + name + "." + when + ".json");
}

// Mean over iterations 3.. (the first two warm the arenas and GEMM primitives).
double measured_step_ms(const nlohmann::json& run) {
  const std::vector<double> its = run.at("iterations_ms").get<std::vector<double>>();
  double sum = 0;
  for (size_t i = 2; i < its.size(); ++i) sum += its[i];
  return sum / double(its.size() - 2);
}

TEST(PlanValidation, ThisMachineStepTimes) {
  const nlohmann::json runs = measured();
  for (const MeasuredRun& r : kMeasured) {
    SCOPED_TRACE(r.name);
    const ModelSpec m = measured_model(r.family, r.layers, r.hidden, r.heads);
    const Layout l = measured_layout(r.tp, r.dp, r.micro_batch);
    double predicted = 0;
    for (const char* when : {"before", "after"})
      predicted += 0.5 * predict_step_time(m, l, measured_machine(r.name, when),
                                           Implementation::kMegatronCpp)
                             .step;
    const double step = measured_step_ms(runs.at(r.name)) / 1e3;
    EXPECT_NEAR(predicted / step, 1.0, r.time_tolerance)
        << "predicted " << predicted << " s, measured " << step << " s";
  }
}

// Peak RSS beyond a fixed baseline: the tiny run's RSS minus its predicted memory is what the
// process holds besides the planner's accounting (libraries, MPI, OpenBLAS buffers).
TEST(PlanValidation, ThisMachinePeakMemory) {
  const nlohmann::json runs = measured();
  auto predicted_bytes = [](const ModelSpec& m, const Layout& l) {
    Machine none;
    none.memory_bytes = 1e12;
    return estimate_memory(m, l, none, Implementation::kMegatronCpp).peak();
  };
  ModelSpec tiny = measured_model(ModelFamily::kGpt, 1, 64, 2);
  tiny.max_position_embeddings = 128;
  const double baseline = runs.at("tiny").at("peak_rss_kb").get<double>() * 1024 -
                          predicted_bytes(tiny, measured_layout(1, 1, 8));
  EXPECT_GT(baseline, 0);
  for (const MeasuredRun& r : kMeasured) {
    SCOPED_TRACE(r.name);
    const double rss = runs.at(r.name).at("peak_rss_kb").get<double>() * 1024;
    const double predicted = predicted_bytes(measured_model(r.family, r.layers, r.hidden, r.heads),
                                             measured_layout(r.tp, r.dp, r.micro_batch));
    EXPECT_NEAR((rss - baseline) / predicted, 1.0, 0.10);
  }
}

// The same check at the layouts bench/plan_memory.sh runs (a small GPT, L 4, h 512, s 128,
// micro-batch 2, global batch 8): PP 2 (4 micro-batches in 1F1B, and interleaved with 2
// chunks of one layer per stage), DP 2 and DP 4 with the distributed optimizer (and DP 2 with
// it in bf16), the Llama-family options at TP 2, and sequence parallelism with selective
// recompute at TP 2; baseline from that campaign's one-layer run.
TEST(PlanValidation, ThisMachinePeakMemoryPipelineDistributedOptimizerLlama) {
  std::ifstream in(source_dir() + "/bench/plan_validation/memory_measured.json");
  const nlohmann::json runs = nlohmann::json::parse(in);
  auto predicted_bytes = [](const ModelSpec& m, const Layout& l) {
    validate_layout(m, l, Implementation::kMegatronCpp);
    Machine none;
    none.memory_bytes = 1e12;
    return estimate_memory(m, l, none, Implementation::kMegatronCpp).peak();
  };
  // The baseline run has one layer of the same widths (bench/plan_memory.sh says why).
  ModelSpec one_layer = measured_model(ModelFamily::kGpt, 1, 512, 8);
  one_layer.max_position_embeddings = 128;
  const double baseline = runs.at("mem_base").at("peak_rss_kb").get<double>() * 1024 -
                          predicted_bytes(one_layer, measured_layout(1, 1, 2));
  EXPECT_GT(baseline, 0);
  ModelSpec small = one_layer;
  small.num_layers = 4;
  ModelSpec llama = small;
  llama.arch.swiglu = true;
  llama.ffn_hidden_size = 1024;
  llama.arch.num_query_groups = 2;
  llama.arch.normalization = Normalization::kRMSNorm;
  llama.arch.position_embedding = PositionEmbedding::kRope;
  llama.arch.add_bias_linear = false;
  llama.arch.untie_embeddings_and_output_weights = true;
  Layout pp2 = measured_layout(1, 1, 2);
  pp2.pipeline_parallel = 2;
  Layout distopt = measured_layout(1, 2, 2);
  distopt.distributed_optimizer = true;
  Layout distopt4 = measured_layout(1, 4, 2);
  distopt4.distributed_optimizer = true;
  Layout distopt_bf16 = distopt;
  distopt_bf16.precision = Precision::kBf16;
  Layout pp2_interleaved = pp2;
  pp2_interleaved.virtual_stages = 2;
  const Layout tp2 = measured_layout(2, 1, 2);
  Layout sp_tp2 = tp2;
  sp_tp2.sequence_parallel = true;
  sp_tp2.recompute = Recompute::kSelective;
  const std::pair<const char*, double> checks[] = {
      {"mem_pp2", predicted_bytes(small, pp2)},
      {"mem_pp2_interleaved", predicted_bytes(small, pp2_interleaved)},
      {"mem_dp2_distopt", predicted_bytes(small, distopt)},
      {"mem_dp4_distopt", predicted_bytes(small, distopt4)},
      {"mem_dp2_distopt_bf16", predicted_bytes(small, distopt_bf16)},
      {"mem_llama_tp2", predicted_bytes(llama, tp2)},
      {"mem_sp_tp2", predicted_bytes(small, sp_tp2)}};
  for (const auto& [name, predicted] : checks) {
    SCOPED_TRACE(name);
    const double rss = runs.at(name).at("peak_rss_kb").get<double>() * 1024;
    EXPECT_NEAR((rss - baseline) / predicted, 1.0, 0.10)
        << "RSS " << rss / 1048576 << " MiB, baseline " << baseline / 1048576 << " MiB, predicted "
        << predicted / 1048576 << " MiB";
  }
}

// Context parallelism on this machine (bench/context_parallel.sh memory, bench/RESULTS.md): a
// tiny Llama-family GPT (L 2, h 64, 4 heads in 2 KV groups, SwiGLU ffn 96, RMSNorm, RoPE, no
// biases, untied, V 512, fused attention, micro-batch 1) at s 8,192 and 32,768, CP 1 in one
// process and CP 4 on four. The memory report's tensors (rank 0, allocated, after the first
// iteration) against the planner's weights, gradients, optimizer state, activations, workspace
// and the gradient reduction's ring buffers (d·c = 4 ranks reduce); and each CP 4 rank's peak RSS
// beyond the process baseline of that sequence's CP 1 run (its RSS minus its prediction) against
// its prediction.
ModelSpec cp_llama(int seq) {
  ModelSpec m = gpt_spec(2, 64, 4, seq, 512);
  m.arch.num_query_groups = 2;
  m.ffn_hidden_size = 96;
  m.arch.swiglu = true;
  m.arch.normalization = Normalization::kRMSNorm;
  m.arch.position_embedding = PositionEmbedding::kRope;
  m.arch.add_bias_linear = false;
  m.arch.untie_embeddings_and_output_weights = true;
  return m;
}

TEST(PlanValidation, ThisMachineContextParallelMemory) {
  std::ifstream in(source_dir() + "/bench/plan_validation/context_parallel_measured.json");
  const nlohmann::json runs = nlohmann::json::parse(in);
  constexpr double kMB = 1024.0 * 1024.0;
  for (int seq : {8192, 32768}) {
    const ModelSpec m = cp_llama(seq);
    auto predicted = [&](int cp) {
      Layout l;
      l.context_parallel = cp;
      l.micro_batch = 1;
      l.global_batch = 1;
      l.flash_attention = true;
      validate_layout(m, l, Implementation::kMegatronCpp);
      Machine none;
      none.memory_bytes = 1e12;
      return estimate_memory(m, l, none, Implementation::kMegatronCpp).first_stage;
    };
    const nlohmann::json& one = runs.at("cp1_s" + std::to_string(seq));
    const nlohmann::json& four = runs.at("cp4_s" + std::to_string(seq));
    const RankMemory p1 = predicted(1), p4 = predicted(4);
    SCOPED_TRACE("s " + std::to_string(seq));
    EXPECT_NEAR(one.at("allocated_mb").get<double>() * kMB / p1.total(), 1.0, 0.01);
    EXPECT_NEAR(four.at("allocated_mb").get<double>() * kMB / p4.total(), 1.0, 0.01);
    const double baseline = one.at("peak_rss_kb").get<double>() * 1024 - p1.total();
    EXPECT_GT(baseline, 0);
    for (const auto& rss_kb : four.at("rank_rss_kb"))
      EXPECT_NEAR((rss_kb.get<double>() * 1024 - baseline) / p4.total(), 1.0, 0.10)
          << "RSS " << rss_kb.get<double>() / 1024 << " MiB, baseline " << baseline / kMB
          << " MiB, predicted " << p4.total() / kMB << " MiB";
  }
}

// bench/plan_validation_moe.sh: a tiny MoE GPT (2 layers, h 128, 4 heads, s 256, micro-batch 4,
// 8 experts of width 512, top 2, the aux loss, f32) at EP 1 (1 process), EP 2 (DP 2) and EP 2
// with TP 2 (4 processes), each rank's peak RSS and rank 0's allocated tensors after the last
// iteration, against the planner's megatron-cpp prediction of the first stage. The expert rows a
// rank computes are the planner's expectation (the router spreading the tokens evenly); at EP 1
// they are exact.
ModelSpec moe_validation_model() {
  ModelSpec m = gpt_spec(2, 128, 4, 256, 512);
  m.arch.moe.num_experts = 8;
  m.arch.moe.ffn_hidden_size = 512;
  m.arch.moe.topk = 2;
  m.arch.moe.aux_loss_coeff = 0.01;
  return m;
}

TEST(PlanValidation, ThisMachineMoeMemory) {
  std::ifstream in(source_dir() + "/bench/plan_validation/moe_measured.json");
  const nlohmann::json runs = nlohmann::json::parse(in);
  constexpr double kMB = 1024.0 * 1024.0;
  const ModelSpec m = moe_validation_model();
  auto predicted = [&](int tp, int dp, int ep) {
    Layout l;
    l.tensor_parallel = tp;
    l.data_parallel = dp;
    l.expert_parallel = ep;
    l.micro_batch = 4;
    l.global_batch = 4 * dp;
    validate_layout(m, l, Implementation::kMegatronCpp);
    Machine none;
    none.memory_bytes = 1e12;
    return estimate_memory(m, l, none, Implementation::kMegatronCpp).first_stage;
  };
  struct Run {
    const char* name;
    int tp, dp, ep;
    double allocated_tolerance;
  };
  // EP 1: exact; EP 2: the arenas of rank 0's experts follow its share of the routed rows
  // (measured: −0.1% and +0.4%).
  const Run kRuns[] = {{"ep1", 1, 1, 1, 0.01}, {"ep2", 1, 2, 2, 0.02}, {"ep2_tp2", 2, 2, 2, 0.02}};
  const RankMemory one = predicted(1, 1, 1);
  const double baseline = runs.at("ep1").at("peak_rss_kb").get<double>() * 1024 - one.total();
  EXPECT_GT(baseline, 0);
  for (const Run& r : kRuns) {
    SCOPED_TRACE(r.name);
    const nlohmann::json& run = runs.at(r.name);
    const RankMemory p = predicted(r.tp, r.dp, r.ep);
    EXPECT_NEAR(run.at("allocated_mb").get<double>() * kMB / p.total(), 1.0, r.allocated_tolerance);
    // Peak RSS beyond the process baseline (the EP 1 run's RSS less its prediction).
    if (r.ep == 1) continue;
    for (const auto& rss_kb : run.at("rank_rss_kb"))
      EXPECT_NEAR((rss_kb.get<double>() * 1024 - baseline) / p.total(), 1.0, 0.10)
          << "RSS " << rss_kb.get<double>() / 1024 << " MiB, baseline " << baseline / kMB
          << " MiB, predicted " << p.total() / kMB << " MiB";
  }
}

}  // namespace
}  // namespace megatron::plan
