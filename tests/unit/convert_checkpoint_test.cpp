// Offline conversions: HF GPT-2 -> checkpoint at TP 1/2/4 -> HF gives back the fixture's
// tensors bit for bit; the imported checkpoint loads into a GptModel at another TP size
// (resharding) and reproduces PyTorch's loss; resharding keeps weights and optimizer state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "../common/bert_golden.h"
#include "../common/checkpoint_fixture.h"
#include "../common/gpt2_golden.h"
#include "../common/temp_dir.h"
#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/model_shape.h"
#include "convert/bert_checkpoint.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "core/safetensors.h"
#include "distributed/solo_communicator.h"
#include "optim/distributed_optimizer.h"

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

// A checkpoint of ModelT(config) (whole buffers, TP 1, state.json "model" = `shape` and "args"
// = `args`) resharded to TP 2 × PP 2 as 3 distributed-optimizer shards through `registered`
// (3: the cuts fall inside parameter slices): DP rank d's file holds, of each buffer, exactly
// elements DpShard::of(n, 3, d) of the flat space of the ModelT stage built here for that rank
// — the last stage's copy of the tied embedding counted in n but not stored — as the trainer's
// writer stores them (a slice cut by a boundary as its row-major range), with the source's
// values; no rank writes optimizer.safetensors.
template <typename ModelT, typename ConfigT>
void expect_distributed_optimizer_shards(const ConfigT& config, const nlohmann::json& shape,
                                         nlohmann::json args, const RankParameters& registered) {
  TempDir dir;
  const std::vector<std::string> buffers = {"exp_avg", "exp_avg_sq"};
  std::map<std::string, int> id;  // a number per parameter name, for the values
  // Element `full_index` of parameter `name` (buffer 0: the value, 1 + b: buffers[b]).
  auto value = [&](const std::string& name, int64_t full_index, int buffer) {
    return float(id.at(name)) * 10000.0f + float(full_index) + 0.25f * float(buffer);
  };
  {
    ParameterStore store = registered_parameter_store<ModelT>(config, 0, 1);
    std::map<std::string, Tensor> optimizer;
    for (const std::string& b : buffers)
      optimizer[b] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
    for (const Parameter& p : store.params()) {
      id.emplace(p.spec.name, int(id.size()));
      for (int64_t i = 0; i < shape_numel(p.local_shape); ++i) {
        const int64_t full = full_element_index(p, i);
        store.flat_values().data<float>()[p.flat_offset + i] = value(p.spec.name, full, 0);
        for (size_t b = 0; b < buffers.size(); ++b)
          optimizer[buffers[b]].data<float>()[p.flat_offset + i] =
              value(p.spec.name, full, int(b) + 1);
      }
    }
    args["make_vocab_size_divisible_by"] = 32;
    const nlohmann::json state = {{"iteration", 7}, {"model", shape}, {"args", args}};
    CheckpointTransaction t(dir.file("src"), 7, 1);
    write_checkpoint_rank(t.path(), 7, store, optimizer, state, {0, 1, 0, 1});
    t.commit();
  }
  reshard_checkpoint(dir.file("src"), -1, dir.file("dst"), 2, 2, {3, registered});

  const std::string iteration_dir = checkpoint_iteration_dir(dir.file("dst"), 7);
  EXPECT_EQ(CheckpointShardReader(iteration_dir).state(1, 1)["args"]["use_distributed_optimizer"],
            true);
  for (int pp = 0; pp < 2; ++pp) {
    for (int tp = 0; tp < 2; ++tp) {
      SCOPED_TRACE(::testing::Message() << "tp=" << tp << " pp=" << pp);
      const ParameterStore expected = registered_parameter_store<ModelT>(
          config, tp, 2, stage_range({.num_layers = config.num_layers, .pipeline_size = 2}, pp, 0));
      EXPECT_EQ(std::any_of(expected.params().begin(), expected.params().end(),
                            [](const Parameter& p) { return p.spec.stage_tie == StageTie::kCopy; }),
                pp == 1);
      const int64_t n = expected.flat_values().numel();
      const std::string rank_dir = iteration_dir + "/" + rank_dir_name(tp, pp, 2);
      EXPECT_FALSE(std::filesystem::exists(rank_dir + "/" + kOptimizerFileName));
      for (int d = 0; d < 3; ++d) {
        const DpShard shard = DpShard::of(n, 3, d);
        SafetensorsReader file(rank_dir + "/" + optimizer_shard_file_name(d, 3));
        std::vector<std::string> want;
        int64_t cut = 0;  // slices cut by a shard boundary
        for (const Parameter& p : expected.params()) {
          if (p.spec.stage_tie == StageTie::kCopy) continue;
          const int64_t size = shape_numel(p.local_shape);
          const int64_t lo = std::clamp<int64_t>(shard.range.begin - p.flat_offset, 0, size);
          const int64_t hi = std::clamp<int64_t>(shard.range.end - p.flat_offset, 0, size);
          if (lo >= hi) continue;
          cut += hi - lo < size;
          for (size_t b = 0; b < buffers.size(); ++b) {
            const std::string name = buffers[b] + "." + p.spec.name;
            want.push_back(name);
            ASSERT_TRUE(file.contains(name)) << name;
            const Tensor stored = file.get(name);
            ASSERT_EQ(stored.numel(), hi - lo) << name;
            for (int64_t i = lo; i < hi; ++i)
              ASSERT_EQ(stored.data<float>()[i - lo],
                        value(p.spec.name, full_element_index(p, i), int(b) + 1))
                  << name << " element " << i;
          }
        }
        std::sort(want.begin(), want.end());
        EXPECT_EQ(file.names(), want) << "DP rank " << d;
        EXPECT_EQ(cut, int64_t(d > 0) + int64_t(d < 2)) << "DP rank " << d;
      }
    }
  }
}

TEST(CheckpointConvert, ReshardWritesDistributedOptimizerShardsOfTheGptFlatSpace) {
  const GptConfig config = load_gpt2_golden(128).config;
  expect_distributed_optimizer_shards<GptModel>(config, gpt_model_shape_json(config),
                                                gpt_imported_args(config), gpt_rank_parameters);
}

TEST(CheckpointConvert, ReshardWritesDistributedOptimizerShardsOfTheBertFlatSpace) {
  const BertConfig config = load_bert_golden(128).config;
  expect_distributed_optimizer_shards<BertModel>(config, bert_model_shape_json(config),
                                                 bert_hf_description(config), bert_rank_parameters);
}

// A TP-1 checkpoint (iteration 1, zero weights) of a 1-layer GPT with `arch`, whose state.json
// records the model shape and `args` as the trainer does.
void write_tiny_gpt_checkpoint(const std::string& dir, const ArchitectureOptions& arch,
                               const nlohmann::json& args) {
  GptConfig c;
  c.num_layers = 1;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.max_position_embeddings = c.seq_length = 8;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.arch = arch;
  CheckpointTransaction t(dir, 1, 1);
  ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
  write_checkpoint_rank(t.path(), 1, store, {},
                        {{"iteration", 1}, {"model", gpt_model_shape_json(c)}, {"args", args}},
                        {0, 1, 0, 1});
  t.commit();
}

// The export reads the model as a resharding does (gpt_config_from_checkpoint_state): the
// norm epsilon a --norm-epsilon run computed with, the trainer's default dropouts where the
// arguments record none, the real vocabulary of the model record.
TEST(CheckpointConvert, ExportDescribesTheModelTheTrainerBuilt) {
  TempDir dir;
  write_tiny_gpt_checkpoint(dir.file("ckpt"), {},
                            {{"layernorm_epsilon", 1e-5}, {"norm_epsilon", 1e-6}});
  export_hf_gpt2(dir.file("ckpt"), -1, dir.file("hf"), 0);
  const nlohmann::json config = read_hf_directory(dir.file("hf")).config;
  EXPECT_EQ(config["layer_norm_epsilon"].get<double>(), 1e-6);
  EXPECT_EQ(config["resid_pdrop"].get<double>(), 0.1);
  EXPECT_EQ(config["attn_pdrop"].get<double>(), 0.1);
  EXPECT_EQ(config["vocab_size"], 30);
}

// HF GPT-2 has no untied output layer: exporting one would drop it without a word.
TEST(CheckpointConvert, ExportRefusesWhatGpt2CannotDescribe) {
  TempDir dir;
  ArchitectureOptions untied;
  untied.untie_embeddings_and_output_weights = true;
  write_tiny_gpt_checkpoint(dir.file("ckpt"), untied, architecture_args_json(untied));
  try {
    export_hf_gpt2(dir.file("ckpt"), -1, dir.file("hf"), 0);
    ADD_FAILURE() << "an untied output layer exported to HF GPT-2";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("only GPT-2-style models"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("hf")));
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
