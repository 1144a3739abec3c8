// The optimizer and trainer state of Megatron-LM checkpoints (convert/megatron_lm_checkpoint.h,
// checkpoint/megatron_lm_trainer_state.h, checkpoint/megatron_lm_torch_optimizer.h) against the
// files PyTorch wrote (tests/data/megatron_lm_gpt_tiny): torch_dist_gpt2_adam_tp2, the tiny GPT-2
// after 3 iterations of torch.optim.AdamW as Megatron's bf16 mixed-precision optimizer saves them
// (tools/reference/megatron_torch_dist_checkpoint.py), and legacy_tp2_pp2, the torch format's
// FP32 Adam state at TP 2 x PP 2 (tools/reference/megatron_lm_checkpoint.py). The imported
// moments and fp32 master weights are bit for bit the scripts', at any target TP size; the step,
// iteration, consumed samples and schedule are Megatron's; megatron-cpp's AdamW from the imported
// state takes the step PyTorch's AdamW takes next; what cannot be read is refused by name.
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
#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_torch_optimizer.h"
#include "checkpoint/shards.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/crc32.h"
#include "core/error.h"
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
// params as optimizer.state.param.*, the step in the param groups).
TEST(MegatronTorchDistOptimizerImport, MomentsMastersAndStepAreBitForBitPyTorchs) {
  const nlohmann::json e = expected();
  for (const auto& [fixture, tp] : {std::pair<std::string, int>{"torch_dist_gpt2_adam_tp2", 1},
                                    {"torch_dist_gpt2_adam_tp2", 2},
                                    {"torch_dist_gpt2_adam_tp2", 4},
                                    {"torch_dist_gpt2_adam_dist_tp2", 1},
                                    {"torch_dist_gpt2_adam_dist_tp2", 2}}) {
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

}  // namespace
}  // namespace megatron
