// Offline conversions: HF GPT-2 -> checkpoint at TP 1/2/4 -> HF gives back the fixture's
// tensors bit for bit; the imported checkpoint loads into a GptModel at another TP size
// (resharding) and reproduces PyTorch's loss; resharding keeps weights and optimizer state.
#include "train/checkpoint_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "../common/checkpoint_fixture.h"
#include "../common/gpt2_golden.h"
#include "../common/temp_dir.h"
#include "core/safetensors.h"
#include "distributed/solo_communicator.h"
#include "train/checkpoint.h"
#include "train/checkpoint_layout.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using namespace megatron::testing;

TEST(CheckpointConvert, HfImportExportRoundTripIsExactAtEveryTpSize) {
  const std::string hf_dir = gpt2_fixture_dir() + "/hf";
  HfDirectory original = read_hf_directory(hf_dir);
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    TempDir dir;
    import_hf_gpt2(hf_dir, dir.file("ckpt"), tp, 32);
    EXPECT_EQ(read_latest_iteration(dir.file("ckpt")), std::optional<int64_t>(0));
    EXPECT_EQ(int(list_rank_dirs(dir.file("ckpt/iter_0000000")).size()), tp);
    export_hf_gpt2(dir.file("ckpt"), -1, dir.file("hf"), 0);
    HfDirectory exported = read_hf_directory(dir.file("hf"));
    size_t compared = 0;
    for (const auto& [name, t] : original.tensors) {
      if (name.find(".attn.bias") != std::string::npos) continue;
      ASSERT_EQ(exported.tensors.count(name), 1u) << name;
      ASSERT_EQ(exported.tensors.at(name).shape(), t.shape()) << name;
      EXPECT_EQ(std::memcmp(exported.tensors.at(name).raw_data(), t.raw_data(), t.nbytes()), 0)
          << name;
      ++compared;
    }
    EXPECT_EQ(compared, exported.tensors.size());
    for (const char* key : {"n_layer", "n_embd", "n_head", "vocab_size", "n_positions"})
      EXPECT_EQ(exported.config[key], original.config[key]) << key;
  }
}

TEST(CheckpointConvert, ImportedCheckpointLoadsAtAnotherTpSizeAndMatchesPytorch) {
  TempDir dir;
  import_hf_gpt2(gpt2_fixture_dir() + "/hf", dir.file("ckpt"), 4, 32);  // padded vocab 128
  Gpt2Golden g = load_gpt2_golden(128);
  ParallelState ps = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  ParameterStore store(0, 1);
  GptModel model(g.config, ps, store);
  store.allocate();
  nlohmann::json state = load_checkpoint(dir.file("ckpt"), -1, store, nullptr, ps);
  model.refresh_compute_weights();
  EXPECT_NEAR(model.forward_loss(g.batch), golden_loss(g), 1e-4 * golden_loss(g));
  EXPECT_EQ(state["iteration"], 0);
  EXPECT_EQ(state["model"]["num_attention_heads"], 4);
  EXPECT_EQ(state["model"]["padded_vocab_size"], 128);
  EXPECT_EQ(state["args"]["tensor_model_parallel_size"], 4);
}

TEST(CheckpointConvert, ReshardKeepsWeightsOptimizerStateAndIteration) {
  TempDir dir;
  {
    CheckpointTransaction t(dir.file("src"), 12, 1);
    for (int r = 0; r < 2; ++r) {
      ParameterStore store = make_fixture_store(r, 2);
      fill_fixture(store, store.flat_values(), 0);
      auto optimizer = make_fixture_optimizer(store);
      fill_fixture_optimizer(store, optimizer);
      nlohmann::json state = {{"iteration", 12}, {"args", {{"tensor_model_parallel_size", 2}}}};
      write_checkpoint_rank(t.path(), 12, store, optimizer, state, {r, 2, 0, 1});
    }
    t.commit();
  }
  reshard_checkpoint(dir.file("src"), -1, dir.file("dst"), 4);
  EXPECT_EQ(read_latest_iteration(dir.file("dst")), std::optional<int64_t>(12));
  CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("dst"), 12));
  EXPECT_EQ(reader.tensor_parallel_size(), 4);
  EXPECT_EQ(reader.state(3, 0)["args"]["tensor_model_parallel_size"], 4);
  for (int r = 0; r < 4; ++r) {
    ParameterStore store = make_fixture_store(r, 4);
    auto optimizer = make_fixture_optimizer(store);
    read_parameters(reader, store, &optimizer);
    EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
    EXPECT_EQ(count_fixture_optimizer_mismatches(store, optimizer), 0);
  }
}

// TP 1 → TP 2 × PP 2: each pipeline rank's files hold its stage's parameters only (the
// embedding on the first, the final LayerNorm on the last, layer i on rank i), and the
// checkpoint still loads into the whole model (PP 1) with PyTorch's loss.
TEST(CheckpointConvert, ReshardWritesPipelineStages) {
  TempDir dir;
  import_hf_gpt2(gpt2_fixture_dir() + "/hf", dir.file("ckpt"), 1, 32);
  reshard_checkpoint(dir.file("ckpt"), -1, dir.file("pp"), 2, 2);
  const std::string iteration_dir = checkpoint_iteration_dir(dir.file("pp"), 0);
  CheckpointShardReader reader(iteration_dir);
  EXPECT_EQ(reader.tensor_parallel_size(), 2);
  EXPECT_EQ(reader.pipeline_parallel_size(), 2);
  EXPECT_EQ(reader.state(1, 1)["args"]["pipeline_model_parallel_size"], 2);
  for (int pp = 0; pp < 2; ++pp) {
    SafetensorsReader file(iteration_dir + "/" + rank_dir_name(1, pp, 2) + "/" + kModelFileName);
    for (const std::string& name : file.names()) {
      const bool first = name.rfind("embedding.", 0) == 0;
      const bool last = name.rfind("final_layernorm.", 0) == 0;
      const bool layer_here = name.rfind("layers." + std::to_string(pp) + ".", 0) == 0;
      EXPECT_TRUE(pp == 0 ? first || layer_here : last || layer_here) << name << " on stage " << pp;
    }
  }
  Gpt2Golden g = load_gpt2_golden(128);  // 96 padded for TP 2: a multiple of 32 x 2
  ParallelState ps = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  ParameterStore store(0, 1);
  GptModel model(g.config, ps, store);
  store.allocate();
  load_checkpoint(dir.file("pp"), -1, store, nullptr, ps);
  model.refresh_compute_weights();
  EXPECT_NEAR(model.forward_loss(g.batch), golden_loss(g), 1e-4 * golden_loss(g));
}

TEST(CheckpointConvert, ReshardToAnIndivisiblePipelineNamesTheFlags) {
  TempDir dir;
  import_hf_gpt2(gpt2_fixture_dir() + "/hf", dir.file("ckpt"), 1, 32);
  try {
    reshard_checkpoint(dir.file("ckpt"), -1, dir.file("out"), 1, 4);  // 2 layers
    ADD_FAILURE() << "no error for PP 4";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--num-layers 2 is not divisible by "
                                       "--pipeline-model-parallel-size 4"));
  }
  EXPECT_EQ(read_latest_iteration(dir.file("out")), std::nullopt);
}

TEST(CheckpointConvert, ReshardToAnIndivisibleSizeNamesTheParameter) {
  TempDir dir;
  import_hf_gpt2(gpt2_fixture_dir() + "/hf", dir.file("ckpt"), 1, 32);
  try {
    reshard_checkpoint(dir.file("ckpt"), -1, dir.file("out"), 3);
    ADD_FAILURE() << "no error for TP 3";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("is not divisible by the tensor-model-parallel size 3"));
  }
  EXPECT_EQ(read_latest_iteration(dir.file("out")), std::nullopt);  // nothing committed
}

TEST(CheckpointConvert, ExportNeedsTheModelShape) {
  TempDir dir;
  {
    CheckpointTransaction t(dir.file("ckpt"), 1, 1);
    ParameterStore store = make_fixture_store(0, 1);
    write_checkpoint_rank(t.path(), 1, store, {}, {{"iteration", 1}}, {0, 1, 0, 1});
    t.commit();
  }
  try {
    export_hf_gpt2(dir.file("ckpt"), -1, dir.file("hf"), 0);
    ADD_FAILURE() << "no error without a model shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("state.json has no model.num_layers"));
  }
}

}  // namespace
}  // namespace megatron
