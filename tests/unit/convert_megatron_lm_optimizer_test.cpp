// The optimizer and trainer state of Megatron-LM checkpoints (convert/megatron_lm_checkpoint.h,
// checkpoint/megatron_lm_trainer_state.h, checkpoint/megatron_lm_torch_optimizer.h) against the
// files PyTorch wrote (tests/data/megatron_lm_gpt_tiny): torch_dist_gpt2_adam_tp2, the tiny GPT-2
// after 3 iterations of torch.optim.AdamW as Megatron's bf16 mixed-precision optimizer saves them
// (tools/reference/megatron_torch_dist_checkpoint.py), and legacy_tp2_pp2, the torch format's
// FP32 Adam state at TP 2 x PP 2 (tools/reference/megatron_lm_checkpoint.py). The imported
// moments and fp32 master weights are bit for bit the scripts', at any target TP size; the step,
// iteration, consumed samples and schedule are Megatron's; megatron-cpp's AdamW from the imported
// state takes the step PyTorch's AdamW takes next; what cannot be read is refused by name.
// distrib_tp2_pp2 holds legacy_tp2_pp2's state as Megatron's distributed optimizer saves it
// (distrib_optim.pt, tools/reference/megatron_lm_distrib_optim.py): its import gives the same
// per-parameter state, and its export writes the same buffers back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "../common/megatron_lm_fixture.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_lm_distrib_optim.h"
#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "checkpoint/megatron_lm_torch_optimizer.h"
#include "checkpoint/shards.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/torch_file.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace megatron {
namespace {

using testing::error_of;
using testing::megatron_lm_fixture;

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::source_dir;
using testing::TempDir;

nlohmann::json read_json(const std::string& name) {
  std::ifstream in(megatron_lm_fixture(name));
  return nlohmann::json::parse(in);
}

nlohmann::json expected() {
  return read_json("torch_dist_adam_expected.json");
}

// Every optimizer buffer of `want` ({buffer: {"vocab_size", "tensors": {name: {shape, crc32}}}})
// is, in the checkpoint `reader` reads, bit for bit the script's (the real vocabulary rows; the
// padding rows zero).
void expect_buffers_as_written_by_pytorch(const CheckpointShardReader& reader,
                                          const nlohmann::json& want) {
  const GptConfig config = gpt_config_from_checkpoint_state(reader.state(0, 0), "ckpt");
  const ParameterStore full = registered_parameter_store<GptModel>(config, 0, 1);
  for (const auto& [buffer, w] : want.items()) {
    const int64_t vocab = w["vocab_size"];
    EXPECT_EQ(w["tensors"].size(), full.params().size()) << buffer;
    for (const Parameter& p : full.params()) {
      SCOPED_TRACE(buffer + " " + p.spec.name);
      ASSERT_TRUE(w["tensors"].contains(p.spec.name));
      Tensor t = Tensor::zeros(p.spec.full_shape, DType::F32);
      reader.read_optimizer(buffer, p.spec.name, t, -1, 0, SlicePart::whole(p.spec.full_shape));
      if (p.spec.name == "embedding.word_embeddings.weight") {
        for (float v : t.slice(0, vocab, t.size(0)).clone().to_vector<float>())
          EXPECT_EQ(v, 0.0f);  // re-padded: the padding rows carry nothing
        t = t.slice(0, 0, vocab);
      }
      const Tensor c = t.clone();
      EXPECT_EQ(c.shape(), w["tensors"][p.spec.name]["shape"].get<Shape>());
      EXPECT_EQ(crc32(c.raw_data(), c.nbytes()),
                w["tensors"][p.spec.name]["crc32"].get<uint32_t>());
    }
  }
}

// The imported checkpoint in `dir` at TP 1: its model, the store and its state.json.
struct Imported {
  GptConfig config;
  ParameterStore store;
  nlohmann::json state;
  std::map<std::string, Tensor> buffers;  // every optimizer buffer, laid out as the store
};

Imported read_imported(const std::string& dir) {
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  nlohmann::json state = reader.state(0, 0);
  GptConfig config = gpt_config_from_checkpoint_state(state, dir);
  ParameterStore store = registered_parameter_store<GptModel>(config, 0, 1);
  std::map<std::string, Tensor> buffers;
  for (const std::string& name : reader.optimizer_buffer_names())
    buffers[name] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
  read_parameters(reader, store, &buffers);
  return {config, std::move(store), std::move(state), std::move(buffers)};
}

// Also from the distributed optimizer's fully_reshardable layout of the same run (the fp32 main
// params as optimizer.state.param.*, the step in the param groups), and from its dp_reshardable
// layout (torch_dist_gpt2_adam_dp_tp2, tools/reference/megatron_lm_distrib_optim.py: per-bucket
// flat buffers of each DP rank's shards, DP 2, four buckets per TP rank).
TEST(MegatronTorchDistOptimizerImport, MomentsMastersAndStepAreBitForBitPyTorchs) {
  const nlohmann::json e = expected();
  for (const auto& [fixture, tp] : {std::pair<std::string, int>{"torch_dist_gpt2_adam_tp2", 1},
                                    {"torch_dist_gpt2_adam_tp2", 2},
                                    {"torch_dist_gpt2_adam_tp2", 4},
                                    {"torch_dist_gpt2_adam_dist_tp2", 1},
                                    {"torch_dist_gpt2_adam_dist_tp2", 2},
                                    {"torch_dist_gpt2_adam_dp_tp2", 1},
                                    {"torch_dist_gpt2_adam_dp_tp2", 4}}) {
    SCOPED_TRACE(fixture + " at TP " + std::to_string(tp));
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture(fixture), -1, dir.file("ckpt"), tp, 0);
    EXPECT_EQ(read_latest_iteration(dir.file("ckpt")), e["iteration"].get<int64_t>());
    CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
    EXPECT_EQ(reader.optimizer_buffer_names(),
              (std::vector<std::string>{"exp_avg", "exp_avg_sq", "fp32_master"}));
    expect_buffers_as_written_by_pytorch(reader, e["buffers"]);
    const nlohmann::json state = reader.state(0, 0);
    EXPECT_EQ(state["iteration"], e["iteration"]);
    EXPECT_EQ(state["consumed_train_samples"], e["consumed_train_samples"]);
    EXPECT_EQ(state["optimizer"]["steps"], e["steps"]);
    EXPECT_EQ(state["scheduler"]["num_steps"], e["scheduler_num_steps"]);
    EXPECT_EQ(state["scheduler"]["decay_style"], int(LrDecayStyle::Linear));
    EXPECT_EQ(state["scheduler"]["decay_steps"], 10);
    EXPECT_EQ(state["converted_from"]["iteration"], e["iteration"]);
    EXPECT_FALSE(state.contains("rng"));  // Megatron's generator states do not carry over
  }
}

// The first resumed step: megatron-cpp's AdamW over the imported master weights, moments and step,
// at the learning rate the imported schedule gives, with the gradient the script used, moves
// every parameter as PyTorch's AdamW moved it.
TEST(MegatronTorchDistOptimizerImport, TheNextStepIsPyTorchsNextAdamWStep) {
  const nlohmann::json e = expected();
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_gpt2_adam_tp2"), -1, dir.file("ckpt"), 1,
                         0);
  Imported in = read_imported(dir.file("ckpt"));
  // The trainer's fp32 master weights: the imported fp32_master (the model values are bf16).
  in.store.flat_values().copy_from(in.buffers.at(kMasterWeightsBuffer));
  const Tensor before = in.store.flat_values().clone();
  AdamW adam(in.store, {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  std::map<std::string, Tensor> moments = adam.flat_buffers();
  moments.at("exp_avg").copy_from(in.buffers.at("exp_avg"));
  moments.at("exp_avg_sq").copy_from(in.buffers.at("exp_avg_sq"));
  adam.load_state(in.state.at("optimizer"));
  // Any valid settings: every one comes from the checkpoint.
  LrSchedule schedule({.max_lr = 1, .min_lr = 0, .warmup_steps = 0, .decay_steps = 1});
  schedule.load_state(in.state.at("scheduler"), ScheduleRestore::kFromCheckpoint);
  const double lr = schedule.lr();
  EXPECT_NEAR(lr, e["next_step"]["lr"].get<double>(), 1e-15);
  // next_step_gradient: element j of each tensor, row-major.
  for (Parameter& p : in.store.params()) {
    float* g = p.grad.data<float>();
    for (int64_t j = 0; j < p.grad.numel(); ++j)
      g[j] = float(double((j * 7919) % 2001 - 1000) * 1e-5);
  }
  adam.step(lr);
  const Tensor after = in.store.flat_values().clone();
  for (const Parameter& p : in.store.params()) {
    SCOPED_TRACE(p.spec.name);
    const nlohmann::json& want = e["next_step"]["updates"].at(p.spec.name);
    const float* b = before.data<float>() + p.flat_offset;
    const float* a = after.data<float>() + p.flat_offset;
    // The word embedding's padding rows are not compared: megatron-cpp's import zeroes them
    // (they carry nothing here: padded ids get no gradient), Megatron's hold their random values.
    const int64_t rows = p.spec.name == "embedding.word_embeddings.weight"
                             ? e["vocab_size"].get<int64_t>()
                             : p.local_shape[0];
    const int64_t n = shape_numel(p.local_shape) / p.local_shape[0] * rows;
    // Both in f32, in another order: each new weight agrees to 2 ulps of it, plus 1e-5 of the
    // update, for megatron-cpp's bias corrections come from the betas rounded to f32
    // (1 - 0.999f^4 is 1.3e-5 off 1 - 0.999^4, whose square root moves the update by 6e-6).
    // A wrong step, moment or learning rate moves it by far more, a missing weight decay by
    // lr·wd·|w| = 4e-6·|w|.
    auto tolerance = [](float w, double update) {
      return 2 * std::ldexp(std::fabs(double(w)), -23) + 1e-5 * std::fabs(update);
    };
    double sum = 0, sum_tolerance = 0;
    for (int64_t j = 0; j < n; ++j) {
      sum += double(a[j]) - double(b[j]);
      sum_tolerance += tolerance(b[j], double(a[j]) - double(b[j]));
    }
    EXPECT_NEAR(sum, want["sum"].get<double>(), sum_tolerance);
    for (int64_t j = 0; j < 4 && j < n; ++j)
      EXPECT_NEAR(double(a[j]) - double(b[j]), want["first"][j].get<double>(),
                  tolerance(b[j], want["first"][j].get<double>()));
  }
}

// The torch format's FP32 Adam state at TP 2 x PP 2: ids matched to parameters by the param
// groups (weight-decayed first, as Megatron sorts them), the tied output layer's state on the last
// stage skipped, the per-parameter step and the cosine schedule.
TEST(MegatronLmTorchOptimizerImport, Fp32AdamStateIsBitForBitPyTorchs) {
  for (int tp : {1, 2}) {
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("legacy_tp2_pp2"), -1, dir.file("ckpt"), tp, 0);
    EXPECT_EQ(read_latest_iteration(dir.file("ckpt")), 10);
    CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
    EXPECT_EQ(reader.optimizer_buffer_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
    expect_buffers_as_written_by_pytorch(
        reader, read_json("legacy_optimizer_expected.json")["legacy_tp2_pp2"]);
    const nlohmann::json state = reader.state(0, 0);
    EXPECT_EQ(state["iteration"], 10);
    EXPECT_EQ(state["consumed_train_samples"], 40);
    EXPECT_EQ(state["optimizer"]["steps"], 10);
    EXPECT_EQ(state["scheduler"]["num_steps"], 40);
    EXPECT_EQ(state["scheduler"]["warmup_steps"], 8);
    EXPECT_EQ(state["scheduler"]["decay_steps"], 80);
    EXPECT_EQ(state["scheduler"]["decay_style"], int(LrDecayStyle::Cosine));
    EXPECT_EQ(state["scheduler"]["min_lr"], 1e-4);
  }
}

// A --bf16 run's MixedPrecisionOptimizer: the fp32 main params per param group
// (fp32_from_fp16_params) become fp32_master, bf16 weights beside them.
TEST(MegatronLmTorchOptimizerImport, MixedPrecisionMastersAreBitForBitPyTorchs) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("legacy_bf16_tp2"), -1, dir.file("ckpt"), 1, 0);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
  EXPECT_EQ(reader.optimizer_buffer_names(),
            (std::vector<std::string>{"exp_avg", "exp_avg_sq", "fp32_master"}));
  expect_buffers_as_written_by_pytorch(
      reader, read_json("legacy_optimizer_expected.json")["legacy_bf16_tp2"]);
  const nlohmann::json state = reader.state(0, 0);
  EXPECT_EQ(state["iteration"], 4);
  EXPECT_EQ(state["optimizer"]["steps"], 4);
  EXPECT_EQ(state["scheduler"]["num_steps"], 16);
}

// Param groups the default grouping does not explain, and state that does not fit its parameter.
TEST(MegatronLmTorchOptimizerImport, GroupsAndStateThatDoNotFitAreRefusedByName) {
  const MegatronLmCheckpoint ckpt =
      read_megatron_lm_checkpoint(megatron_lm_fixture("legacy_tp2_pp2"), -1);
  const MegatronLmRank& rank = ckpt.ranks.front();
  const auto parameters = megatron_lm_rank_parameters(rank, ckpt.naming, 0, true);
  EXPECT_EQ(megatron_lm_rank_optimizer(rank, parameters).at("exp_avg").size(), parameters.size());
  // The parameters listed in another order than the model's: a shape differs.
  auto reversed = parameters;
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_THAT(error_of([&] { megatron_lm_rank_optimizer(rank, reversed); }),
              HasSubstr("the param groups do not list the parameters in the model's order"));
  // Both groups claiming weight decay (the loaded dict is changed in place).
  PyDict& adam = rank.root.as_dict("").find("optimizer")->as_dict("");
  for (PyValue& g : adam.find("param_groups")->as_sequence(""))
    g.as_dict("").set(PyValue::str("wd_mult"), PyValue::real(1.0));
  EXPECT_THAT(error_of([&] { megatron_lm_rank_optimizer(rank, parameters); }),
              HasSubstr("has more than one non-empty param group with weight decay"));
}

TEST(MegatronTorchDistOptimizerImport, ACheckpointWithoutOptimizerStateStaysWeightsOnly) {
  EXPECT_TRUE(
      megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("torch_dist_gpt2_adam_tp2"), -1));
  EXPECT_TRUE(megatron_lm_checkpoint_is_resumable(
      megatron_lm_fixture("torch_dist_gpt2_adam_dist_tp2"), -1));
  EXPECT_TRUE(
      megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("torch_dist_gpt2_adam_dp_tp2"), -1));
  EXPECT_FALSE(megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("torch_dist_gpt2_tp2"), -1));
  EXPECT_TRUE(megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("legacy_tp2_pp2"), -1));
  EXPECT_FALSE(megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("mcore_tp1"), -1));
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_gpt2_tp2"), -1, dir.file("ckpt"), 1, 0);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
  EXPECT_TRUE(reader.optimizer_buffer_names().empty());
  EXPECT_EQ(reader.state(0, 0)["iteration"], 0);
  EXPECT_FALSE(reader.state(0, 0).contains("optimizer"));
}

// Megatron's buffer layout (DistributedOptimizer._compute_per_buffer_param_layout), worked by
// hand: reverse order, starts at multiples of 64, buckets closed at bucket_size, the shared
// embedding alone, bucket ends padded to lcm(DP, 128) and dropped from the coalesced offsets.
TEST(MegatronLmDistribOptimLayout, FollowsMegatronsBucketRules) {
  // [100, 10, 200], one bucket: 200 at 0, 10 at 256, 100 at 320; 420 elements, padded to 512.
  MegatronLmBufferLayout one = megatron_lm_buffer_layout({{100}, {10}, {200}}, std::nullopt, 1);
  EXPECT_EQ(one.offset, (std::vector<int64_t>{320, 256, 0}));
  EXPECT_EQ(one.bucket_numel_unpadded, (std::vector<int64_t>{420}));
  EXPECT_EQ(one.bucket_numel, (std::vector<int64_t>{512}));
  // Buckets of 150 at DP 3 (ends padded to 384): 200 closes bucket 0 (200 elements); 10 and 100
  // fill bucket 1 from 384: 10 at 384, 100 at 448, ending 548 (164 >= 150).
  MegatronLmBufferLayout buckets = megatron_lm_buffer_layout({{100}, {10}, {200}}, 150, 3);
  EXPECT_EQ(buckets.bucket_numel_unpadded, (std::vector<int64_t>{200, 164}));
  EXPECT_EQ(buckets.bucket_numel, (std::vector<int64_t>{384, 384}));
  EXPECT_EQ(buckets.offset, (std::vector<int64_t>{200 + 64, 200, 0}));
  EXPECT_EQ(buckets.numel_unpadded, 364);
  // A shared embedding first in the model order: the last in the buffer, in a bucket of its own.
  MegatronLmBufferLayout shared =
      megatron_lm_buffer_layout({{100, true}, {10}, {200}}, std::nullopt, 2);
  EXPECT_EQ(shared.bucket_numel_unpadded, (std::vector<int64_t>{320, 100}));
  EXPECT_EQ(shared.offset, (std::vector<int64_t>{320, 256, 0}));
  EXPECT_EQ(shared.bucket, (std::vector<int>{1, 0, 0}));
  // The fixture's stages, as the reference script laid them out (--ddp-bucket-size 4250 on the
  // first stage, closed after a bias whose end is not a multiple of 128, so that the bucket
  // boundary moves the later parameters; the last stage's output-layer copy alone in its bucket).
  const MegatronLmCheckpoint ckpt =
      read_megatron_lm_checkpoint(megatron_lm_fixture("distrib_tp2_pp2"), -1);
  const nlohmann::json args = megatron_lm_args_json(ckpt.args());
  const std::vector<std::vector<int64_t>> want = {{4256, 3392, 2048}, {2048, 6784}};
  for (const MegatronLmRank& rank : ckpt.ranks) {
    std::vector<MegatronLmBufferParam> params;
    for (const auto& [name, t] : megatron_lm_rank_parameters(rank, ckpt.naming, rank.pp_rank, true))
      params.push_back({t.numel(), megatron_lm_shared_embedding(name, true, 2)});
    EXPECT_EQ(megatron_lm_buffer_layout(params, megatron_lm_bucket_size(args, rank.pp_rank), 2)
                  .bucket_numel_unpadded,
              want[rank.pp_rank])
        << rank.path;
  }
}

// The distributed optimizer's distrib_optim.pt of legacy_tp2_pp2's run: the same per-parameter
// moments, step and schedule as that checkpoint's plain Adam state, at any target TP; the weights
// as the HF import's.
TEST(MegatronLmDistribOptimImport, StateIsBitForBitThePerParameterStates) {
  EXPECT_TRUE(megatron_lm_checkpoint_is_resumable(megatron_lm_fixture("distrib_tp2_pp2"), -1));
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE("TP " + std::to_string(tp));
    TempDir dir;
    import_megatron_lm_gpt(megatron_lm_fixture("distrib_tp2_pp2"), -1, dir.file("ckpt"), tp, 0);
    CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
    EXPECT_EQ(reader.optimizer_buffer_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
    expect_buffers_as_written_by_pytorch(
        reader, read_json("legacy_optimizer_expected.json")["legacy_tp2_pp2"]);
    testing::expect_tensors_as_computed_by_pytorch(testing::full_model_tensors(dir.file("ckpt")),
                                                   "expected.json");
    const nlohmann::json state = reader.state(0, 0);
    EXPECT_EQ(state["iteration"], 10);
    EXPECT_EQ(state["consumed_train_samples"], 40);
    EXPECT_EQ(state["optimizer"]["steps"], 10);
    EXPECT_EQ(state["scheduler"]["num_steps"], 40);
    EXPECT_EQ(state["args"]["use_distributed_optimizer"], true);
    EXPECT_EQ(state["args"]["ddp_bucket_size"], 4250);
  }
}

// Written back (--to megatron-lm-core of the import, TP 2 x PP 2): distrib_optim.pt beside each
// rank file, the rank files' optimizer entries the distributed optimizer's, and reading the
// export gives the same state again; at TP 1 x PP 1 (another layout) too.
TEST(MegatronLmDistribOptimExport, WritesDistribOptimThatReadsBackTheSame) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("distrib_tp2_pp2"), -1, dir.file("ckpt"), 1, 0);
  for (const auto& [tp, pp] : {std::pair{2, 2}, std::pair{1, 1}}) {
    SCOPED_TRACE(std::to_string(tp) + " x " + std::to_string(pp));
    const std::string out = dir.file("out" + std::to_string(tp) + std::to_string(pp));
    export_megatron_lm_gpt(dir.file("ckpt"), -1, out, tp, pp, MegatronLmNaming::kCore);
    const MegatronLmCheckpoint ckpt = read_megatron_lm_checkpoint(out, -1);
    for (const MegatronLmRank& rank : ckpt.ranks) {
      ASSERT_FALSE(megatron_lm_distrib_optim_path(rank).empty()) << rank.path;
      EXPECT_FALSE(megatron_lm_rank_has_optimizer_state(rank));
      const PyDict& torch_optim =
          rank.root.as_dict("").find("optimizer")->as_dict("").find("optimizer")->as_dict("");
      EXPECT_FALSE(torch_optim.find("state"));
      for (const PyValue& g : torch_optim.find("param_groups")->as_sequence("")) {
        EXPECT_FALSE(g.as_dict("").find("params"));
        EXPECT_EQ(g.as_dict("").find("step")->as_int(""), 10);
      }
    }
    import_megatron_lm_gpt(out, -1, dir.file("back" + std::to_string(tp) + std::to_string(pp)), 2,
                           0);
    CheckpointShardReader reader(
        checkpoint_iteration_dir(dir.file("back" + std::to_string(tp) + std::to_string(pp)), -1));
    expect_buffers_as_written_by_pytorch(
        reader, read_json("legacy_optimizer_expected.json")["legacy_tp2_pp2"]);
    EXPECT_EQ(reader.state(0, 0)["optimizer"]["steps"], 10);
  }
}

// torch_dist's dp_reshardable buckets of a rank: concatenated in bucket order (the fixture's 4
// buckets per TP rank), and refused for parameters whose layout is not that buffer.
TEST(MegatronLmDistribOptimImport, DpReshardableBucketsThatDoNotFitAreRefused) {
  const MegatronLmTorchDist ckpt =
      read_megatron_lm_torch_dist(megatron_lm_fixture("torch_dist_gpt2_adam_dp_tp2"), -1);
  const std::map<std::string, Tensor> flat = megatron_lm_dp_reshardable_buffers(ckpt.dcp, 1);
  ASSERT_EQ(flat.size(), 3u);
  EXPECT_EQ(flat.at("exp_avg").numel(), 4352 + 4544 + 4000 + 3584);
  EXPECT_TRUE(megatron_lm_dp_reshardable_buffers(ckpt.dcp, 2).empty());
  const nlohmann::json args = megatron_lm_args_json(ckpt.args());
  const std::vector<std::pair<std::string, Tensor>> parameters = {
      {"layers.0.mlp.dense_h_to_4h.bias", Tensor::zeros({int64_t(1000)}, DType::F32)}};
  EXPECT_THAT(
      error_of([&] { megatron_lm_coalesced_state(flat, "rank 1", 0, 1, parameters, args); }),
      HasSubstr("rank 1 holds a buffer of 16480 elements, the model its args describe "
                "lays out 1000"));
}

// What cannot be read is refused with the file's name: a truncated file, a bucket layout the
// model and args do not give, the pre-2024 per-bucket layout, several buffers.
TEST(MegatronLmDistribOptimImport, FilesThatDoNotFitAreRefusedByName) {
  const MegatronLmCheckpoint ckpt =
      read_megatron_lm_checkpoint(megatron_lm_fixture("distrib_tp2_pp2"), -1);
  const MegatronLmRank& rank = ckpt.ranks.front();
  const auto parameters = megatron_lm_rank_parameters(rank, ckpt.naming, 0, true);
  nlohmann::json args = megatron_lm_args_json(ckpt.args());
  const std::string path = megatron_lm_distrib_optim_path(rank);
  EXPECT_EQ(megatron_lm_distrib_optim_state(path, 0, 2, parameters, args).at("exp_avg").size(),
            parameters.size());
  // Without --overlap-grad-reduce the first stage is one bucket: the parameters after the
  // fixture's first bucket end move, the buffer is 32 elements longer.
  nlohmann::json one_bucket = args;
  one_bucket["overlap_grad_reduce"] = false;
  EXPECT_THAT(
      error_of([&] { megatron_lm_distrib_optim_state(path, 0, 2, parameters, one_bucket); }),
      HasSubstr("its bucket layout does not match the model"));
  // Another model: a parameter left out.
  auto fewer = parameters;
  fewer.pop_back();
  EXPECT_THAT(error_of([&] { megatron_lm_distrib_optim_state(path, 0, 2, fewer, args); }),
              HasSubstr("its bucket layout does not match the model"));
  TempDir dir;
  // Truncated.
  const std::string truncated = dir.file("distrib_optim.pt");
  fs::copy_file(path, truncated);
  fs::resize_file(truncated, fs::file_size(path) / 2);
  EXPECT_THAT(error_of([&] { megatron_lm_distrib_optim_state(truncated, 0, 2, parameters, args); }),
              HasSubstr(truncated));
  // The layout before February 2024 (no buckets_coalesced), and two buffers.
  PyValue old = PyValue::dict();
  old.as_dict("").set(PyValue::integer(0), PyValue::dict());
  torch_save(dir.file("old.pt"), old);
  EXPECT_THAT(error_of([&] {
                megatron_lm_distrib_optim_state(dir.file("old.pt"), 0, 2, parameters, args);
              }),
              HasSubstr("--ckpt-convert-update-legacy-dist-opt-format"));
  PyValue two = torch_load(path);
  two.as_dict("").set(PyValue::integer(1), PyValue::dict());
  torch_save(dir.file("two.pt"), two);
  EXPECT_THAT(error_of([&] {
                megatron_lm_distrib_optim_state(dir.file("two.pt"), 0, 2, parameters, args);
              }),
              HasSubstr("holds 2 gradient buffers"));
}

}  // namespace
}  // namespace megatron
