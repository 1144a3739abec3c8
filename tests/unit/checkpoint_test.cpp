// Checkpoints in one process: layout names, atomicity (leftover temporary directories are
// ignored, the tracker only ever names complete checkpoints, same-iteration saves replace),
// resharding between TP sizes written offline, and every error path.
#include "checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "../common/checkpoint_fixture.h"
#include "../common/temp_dir.h"
#include "checkpoint/layout.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

// Saves the fixture at TP 1 with every value shifted by `shift`.
void save_solo(const std::string& dir, int64_t iteration, float shift = 0,
               bool with_optimizer = true) {
  ParameterStore store = make_fixture_store(0, 1);
  fill_fixture(store, store.flat_values(), 0);
  for (float& v : std::span(store.flat_values().data<float>(), size_t(store.flat_values().numel())))
    v += shift;
  auto optimizer = make_fixture_optimizer(store);
  fill_fixture_optimizer(store, optimizer);
  if (!with_optimizer) optimizer.clear();
  save_checkpoint(dir, iteration, store, optimizer, {{"iteration", iteration}}, solo());
}

// Writes the fixture as a checkpoint saved at TP = `tp` without MPI, as `convert` does.
void save_offline(const std::string& dir, int64_t iteration, int tp) {
  CheckpointTransaction t(dir, iteration, 42);
  for (int r = 0; r < tp; ++r) {
    ParameterStore store = make_fixture_store(r, tp);
    fill_fixture(store, store.flat_values(), 0);
    auto optimizer = make_fixture_optimizer(store);
    fill_fixture_optimizer(store, optimizer);
    write_checkpoint_rank(t.path(), iteration, store, optimizer, {{"rank", r}}, {r, tp, 0, 1});
  }
  t.commit();
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string load_error(const std::string& dir, int64_t iteration,
                       std::vector<ParamSpec> specs = fixture_specs(), bool optimizer = true) {
  ParameterStore store = make_fixture_store(0, 1, specs);
  auto buffers = make_fixture_optimizer(store);
  try {
    load_checkpoint(dir, iteration, store, optimizer ? &buffers : nullptr, solo());
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(CheckpointLayout, MegatronNames) {
  EXPECT_EQ(iteration_dir_name(100), "iter_0000100");
  EXPECT_EQ(iteration_dir_name(12345678), "iter_12345678");
  EXPECT_EQ(rank_dir_name(1, 0, 1), "mp_rank_01");
  EXPECT_EQ(rank_dir_name(3, 2, 4), "mp_rank_03_002");
  EXPECT_THROW(iteration_dir_name(-1), Error);
}

TEST(Checkpoint, SaveWritesMegatronLayoutAndLoadsBack) {
  TempDir dir;
  save_solo(dir.path(), 100);
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"iter_0000100", "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(read_bytes(dir.file("latest_checkpointed_iteration.txt")), "100");
  EXPECT_EQ(entries(dir.file("iter_0000100")), (std::set<std::string>{"mp_rank_00"}));
  EXPECT_EQ(entries(dir.file("iter_0000100/mp_rank_00")),
            (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));

  ParameterStore store = make_fixture_store(0, 1);
  auto optimizer = make_fixture_optimizer(store);
  nlohmann::json state = load_checkpoint(dir.path(), -1, store, &optimizer, solo());
  EXPECT_EQ(state, (nlohmann::json{{"iteration", 100}}));
  EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
  EXPECT_EQ(count_fixture_optimizer_mismatches(store, optimizer), 0);
}

// Model buffers (parallel/parameter.h: the MoE routers' expert bias): a persistent one is
// saved whole beside the parameters and loaded by name at another TP size; a non-persistent
// one is neither saved nor touched by a load; a buffer the other side lacks is named.
TEST(Checkpoint, ModelBuffersAreSavedWholeAndLoadedByName) {
  const BufferSpec bias{"layers.0.mlp.router.expert_bias", {5}, true};
  const BufferSpec counts{"layers.0.mlp.router.local_tokens_per_expert", {5}, false};
  const std::vector<float> values = {0.25f, -0.125f, 0.0f, 1e-3f, -2.0f};
  TempDir dir;
  {
    CheckpointTransaction t(dir.path(), 1, 42);
    for (int r = 0; r < 2; ++r) {
      ParameterStore store = make_fixture_store(r, 2);
      fill_fixture(store, store.flat_values(), 0);
      store.buffers()[store.add_buffer(bias)].value.copy_from(Tensor::from_vector(values, {5}));
      kernels::fill(store.buffers()[store.add_buffer(counts)].value, 3.0f);
      write_checkpoint_rank(t.path(), 1, store, {}, {{"rank", r}}, {r, 2, 0, 1});
    }
    t.commit();
  }
  ParameterStore store = make_fixture_store(0, 1);
  store.add_buffer(bias);
  kernels::fill(store.buffers()[store.add_buffer(counts)].value, 7.0f);
  load_checkpoint(dir.path(), -1, store, nullptr, solo());
  EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
  EXPECT_EQ(store.buffers()[0].value.to_vector<float>(), values);
  EXPECT_EQ(store.buffers()[1].value.to_vector<float>(), std::vector<float>(5, 7.0f));
  EXPECT_THAT(load_error(dir.path(), 1, fixture_specs(), false),
              HasSubstr("layers.0.mlp.router.expert_bias: not in the model"));
  TempDir plain;
  save_solo(plain.path(), 1);
  ParameterStore with_bias = make_fixture_store(0, 1);
  with_bias.add_buffer(bias);
  try {
    load_checkpoint(plain.path(), -1, with_bias, nullptr, solo());
    ADD_FAILURE() << "loaded a checkpoint without the expert bias";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("layers.0.mlp.router.expert_bias: missing in the "
                                       "checkpoint (model buffer of shape [5])"));
  }
}

TEST(Checkpoint, ModelFileRecordsPlacementMetadata) {
  TempDir dir;
  save_offline(dir.path(), 1, 4);
  SafetensorsReader r(dir.file("iter_0000001/mp_rank_02/model.safetensors"));
  EXPECT_EQ(r.metadata_value("tensor_model_parallel_size"), "4");
  EXPECT_EQ(r.metadata_value("tensor_model_parallel_rank"), "2");
  // The placement, then the CRC-32C of the stored bytes (tests/unit/train_reliability_test.cpp).
  auto placement = [&](const std::string& name) {
    const std::string& v = r.metadata_value(name);
    return v.substr(0, v.find(",\"crc32c\":")) + "}";
  };
  EXPECT_EQ(placement("layers.0.self_attention.dense.weight"),
            R"({"full_shape":[8,8],"partition_dim":1,"slice_start":4})");
  EXPECT_EQ(r.info("layers.0.self_attention.dense.weight").shape, (Shape{8, 2}));
  EXPECT_EQ(placement("final_layernorm.weight"),
            R"({"full_shape":[8],"partition_dim":-1,"slice_start":0})");
}

TEST(Checkpoint, ReshardsOfflineCheckpointsToEveryTensorParallelSize) {
  for (int saved : {1, 2, 4}) {
    TempDir dir;
    save_offline(dir.path(), 3, saved);
    for (int tp : {1, 2, 4}) {
      for (int rank = 0; rank < tp; ++rank) {
        SCOPED_TRACE(::testing::Message()
                     << "saved TP" << saved << ", load TP" << tp << " rank " << rank);
        CheckpointShardReader reader(checkpoint_iteration_dir(dir.path(), -1));
        EXPECT_EQ(reader.tensor_parallel_size(), saved);
        ParameterStore store = make_fixture_store(rank, tp);
        auto optimizer = make_fixture_optimizer(store);
        check_checkpoint_matches(reader, store, true);
        read_parameters(reader, store, &optimizer);
        EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
        EXPECT_EQ(count_fixture_optimizer_mismatches(store, optimizer), 0);
        // Each rank's own state when the checkpoint has its directory, else rank 0's.
        EXPECT_EQ(reader.state(rank, 0)["rank"], rank < saved ? rank : 0);
      }
    }
  }
}

TEST(Checkpoint, LeftoverTemporaryDirectoriesAreIgnored) {
  TempDir dir;
  save_solo(dir.path(), 5);
  // A save that crashed after writing part of its shards, for a later iteration.
  fs::create_directories(dir.file("iter_0000007.tmp-00000000deadbeef/mp_rank_00"));
  write_bytes(dir.file("iter_0000007.tmp-00000000deadbeef/mp_rank_00/model.safetensors"), "junk");
  ParameterStore store = make_fixture_store(0, 1);
  EXPECT_EQ(load_checkpoint(dir.path(), -1, store, nullptr, solo())["iteration"], 5);
  EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
  EXPECT_THAT(load_error(dir.path(), 7), HasSubstr("iter_0000007' does not exist"));
}

TEST(Checkpoint, TrackerNamesOnlyCommittedCheckpoints) {
  TempDir dir;
  save_solo(dir.path(), 5);
  std::string tmp;
  {
    CheckpointTransaction t(dir.path(), 6, 7);
    tmp = t.path();
    ParameterStore store = make_fixture_store(0, 1);
    write_checkpoint_rank(t.path(), 6, store, {}, {}, {0, 1, 0, 1});
    EXPECT_TRUE(fs::exists(tmp));
    EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(5));
  }  // abandoned without commit()
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(5));
  EXPECT_FALSE(fs::exists(dir.file("iter_0000006")));
}

TEST(Checkpoint, SavingAnIterationAgainReplacesIt) {
  TempDir dir;
  save_solo(dir.path(), 5, 0.0f);
  save_solo(dir.path(), 5, 0.5f);
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"iter_0000005", "latest_checkpointed_iteration.txt"}));
  ParameterStore store = make_fixture_store(0, 1);
  load_checkpoint(dir.path(), 5, store, nullptr, solo());
  EXPECT_EQ(store.params()[0].value.data<float>()[0], fixture_value(0, 0) + 0.5f);
}

TEST(Checkpoint, FailedSaveKeepsPreviousCheckpointAndLeavesNoTemporaryDirectory) {
  TempDir dir;
  save_solo(dir.path(), 5);
  ParameterStore store = make_fixture_store(0, 1);
  std::map<std::string, Tensor> bad = {{"exp_avg", Tensor::zeros({1}, DType::F32)}};
  try {
    save_checkpoint(dir.path(), 9, store, bad, {}, solo());
    ADD_FAILURE() << "no error for a wrongly sized optimizer buffer";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("optimizer buffer 'exp_avg' is f32[1]"));
  }
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"iter_0000005", "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(5));
}

TEST(CheckpointErrors, NoCheckpoint) {
  TempDir dir;
  EXPECT_THAT(load_error(dir.path(), -1),
              HasSubstr("no checkpoint to load in '" + dir.path() +
                        "': latest_checkpointed_iteration.txt not found"));
  EXPECT_EQ(read_latest_iteration(dir.path()), std::nullopt);
}

TEST(CheckpointErrors, TrackerWithoutANumber) {
  TempDir dir;
  write_bytes(dir.file("latest_checkpointed_iteration.txt"), "latest\n");
  EXPECT_THAT(load_error(dir.path(), -1),
              HasSubstr("holds 'latest\n', expected an iteration number or \"release\""));
  // Megatron's "release" names the release/ directory.
  write_bytes(dir.file("latest_checkpointed_iteration.txt"), "release\n");
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(kReleaseIteration));
  EXPECT_THAT(load_error(dir.path(), -1),
              HasSubstr("checkpoint directory '" + dir.path() + "/release' does not exist"));
}

TEST(CheckpointErrors, ShapeDifferencesAreAllListed) {
  TempDir dir;
  save_solo(dir.path(), 1);
  std::vector<ParamSpec> specs = fixture_specs();
  specs[0].full_shape = {32, 8};   // different vocabulary
  specs[4].full_shape = {8, 16};   // different width
  specs.erase(specs.begin() + 7);  // final_layernorm.weight: extra
  specs.push_back({"layers.1.input_layernorm.weight", {8}, -1, false});  // missing
  std::string msg = load_error(dir.path(), 1, specs, false);
  EXPECT_THAT(msg, HasSubstr("does not match the model (4 differences)"));
  EXPECT_THAT(msg, HasSubstr("embedding.word_embeddings.weight: checkpoint shape [16, 8], "
                             "model shape [32, 8]"));
  EXPECT_THAT(msg, HasSubstr("layers.0.self_attention.dense.weight: checkpoint shape [8, 8], "
                             "model shape [8, 16]"));
  EXPECT_THAT(msg, HasSubstr("layers.1.input_layernorm.weight: missing in the checkpoint"));
  EXPECT_THAT(msg, HasSubstr("final_layernorm.weight: not in the model"));
}

TEST(CheckpointErrors, MissingOptimizerState) {
  TempDir dir;
  save_solo(dir.path(), 1, 0.0f, /*with_optimizer=*/false);
  EXPECT_THAT(load_error(dir.path(), 1),
              HasSubstr("holds no optimizer buffer 'exp_avg' (stored: none)"));
  EXPECT_EQ(load_error(dir.path(), 1, fixture_specs(), false), "no error");
}

TEST(CheckpointErrors, TruncatedShardNamesTheFile) {
  TempDir dir;
  save_solo(dir.path(), 1);
  std::string path = dir.file("iter_0000001/mp_rank_00/model.safetensors");
  fs::resize_file(path, fs::file_size(path) - 4);
  std::string msg = load_error(dir.path(), 1);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("data section"));
}

TEST(CheckpointErrors, MissingRankDirectory) {
  TempDir dir;
  save_offline(dir.path(), 1, 2);
  fs::remove_all(dir.file("iter_0000001/mp_rank_01"));
  EXPECT_THAT(load_error(dir.path(), 1),
              HasSubstr("says it is tensor rank 0 of 2, pipeline rank 0 of 1, but its "
                        "directory makes it tensor rank 0 of 1"));
  fs::remove_all(dir.file("iter_0000001/mp_rank_00"));
  EXPECT_THAT(load_error(dir.path(), 1), HasSubstr("holds no mp_rank_* directories"));
}

// Megatron-LM's own formats are named, with the way to bring them here, instead of failing on a
// missing model.safetensors: `torch` (mp_rank_XX[_YYY]/model_optim_rng.pt) and `torch_dist`
// (PyTorch Distributed Checkpoint files in the iteration directory), both converted with
// megatron convert --from megatron-lm.
TEST(CheckpointErrors, MegatronLmFormatsAreNamed) {
  TempDir dir;
  write_bytes(dir.file("latest_checkpointed_iteration.txt"), "20\n");
  fs::create_directories(dir.file("iter_0000020/mp_rank_00_000"));
  write_bytes(dir.file("iter_0000020/mp_rank_00_000/model_optim_rng.pt"), "PK");
  std::string msg = load_error(dir.path(), -1);
  EXPECT_THAT(msg, HasSubstr("is Megatron-LM's torch format (" +
                             dir.file("iter_0000020/mp_rank_00_000/model_optim_rng.pt")));
  EXPECT_THAT(msg, HasSubstr("Convert it once with `megatron convert --model-type gpt --from "
                             "megatron-lm"));

  fs::remove_all(dir.file("iter_0000020"));
  fs::create_directories(dir.file("iter_0000020"));
  write_bytes(dir.file("iter_0000020/__0_0.distcp"), "data");
  write_bytes(dir.file("iter_0000020/.metadata"), "meta");
  msg = load_error(dir.path(), -1);
  EXPECT_THAT(msg, HasSubstr("is Megatron-LM's torch_dist format (PyTorch Distributed Checkpoint"));
  EXPECT_THAT(msg, HasSubstr("Convert it once with `megatron convert --model-type gpt --from "
                             "megatron-lm --load <its parent directory>"));
}

TEST(CheckpointErrors, ShardWithoutPlacementMetadata) {
  TempDir dir;
  save_solo(dir.path(), 1, 0.0f, false);
  write_safetensors(dir.file("iter_0000001/mp_rank_00/model.safetensors"),
                    {{"final_layernorm.weight", Tensor::zeros({8}, DType::F32)}},
                    {{"format", "megatron-cpp"},
                     {"tensor_model_parallel_size", "1"},
                     {"tensor_model_parallel_rank", "0"},
                     {"pipeline_model_parallel_size", "1"},
                     {"pipeline_model_parallel_rank", "0"}});
  EXPECT_THAT(load_error(dir.path(), 1, fixture_specs(), false),
              HasSubstr("tensor 'final_layernorm.weight': no placement metadata"));
}

TEST(CheckpointErrors, ForeignSafetensorsFile) {
  TempDir dir;
  save_solo(dir.path(), 1, 0.0f, false);
  write_safetensors(dir.file("iter_0000001/mp_rank_00/model.safetensors"),
                    {{"wte.weight", Tensor::zeros({8}, DType::F32)}}, {{"format", "pt"}});
  EXPECT_THAT(load_error(dir.path(), 1, fixture_specs(), false),
              HasSubstr("has format 'pt', expected 'megatron-cpp'"));
}

}  // namespace
}  // namespace megatron
