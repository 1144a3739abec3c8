// Writing Megatron-LM's torch_dist format (checkpoint/torch_dcp_writer.h,
// checkpoint/megatron_lm_torch_dist_writer.h, convert/megatron_lm_checkpoint.h
// export_megatron_lm_gpt_torch_dist): what megatron-cpp writes reads back through its torch_dist
// reader bit for bit at several TP × PP layouts — weights, Adam's moments, the fp32 masters, the
// step, schedule and consumed samples — for GPT-2 (from PyTorch's torch_dist fixture with Adam
// state) and the SwiGLU / GQA / untied Qwen2; the distributed optimizer's shards cut anywhere
// write the same global tensors; the files are laid out as Megatron-Core's; a failed save keeps
// the previous checkpoint. And an independent reader: tools/reference/torch_dist_read_check.py
// (DCP's definitions, PyTorch's own torch.load of every chunk) loads the files and compares
// them with the reference scripts' tensors — skipped where /usr/bin/python3 with torch is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "../common/megatron_lm_fixture.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "checkpoint/megatron_lm_torch_dist_writer.h"
#include "checkpoint/model_shape.h"
#include "checkpoint/shards.h"
#include "checkpoint/torch_dcp.h"
#include "checkpoint/torch_dcp_writer.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/llama_checkpoint.h"
#include "convert/megatron_lm_checkpoint.h"
#include "core/durable_file.h"
#include "core/torch_file.h"
#include "optim/distributed_optimizer.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::full_model_tensors;
using testing::megatron_lm_fixture;
using testing::source_dir;
using testing::TempDir;

// The optimizer state of the part each rank's range covers, no model tensor.
const TorchDistWrites kShardedOptimizerOnly = [] {
  TorchDistWrites w;
  w.dense = w.experts = false;
  w.sharded_optimizer = true;
  return w;
}();

// Every optimizer buffer of megatron-cpp's checkpoint in `dir`, as full tensors by parameter.
std::map<std::string, TensorMap> full_optimizer_tensors(const std::string& dir) {
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  const GptConfig c = gpt_config_from_checkpoint_state(reader.state(0, 0), dir);
  ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
  std::map<std::string, Tensor> flat;
  for (const std::string& b : reader.optimizer_buffer_names())
    flat[b] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
  read_parameters(reader, store, &flat);
  std::map<std::string, TensorMap> out;
  for (const auto& [b, buffer] : flat)
    for (const Parameter& p : store.params())
      out[b][p.spec.name] = buffer.slice(0, p.flat_offset, p.flat_offset + p.value.numel())
                                .view(p.local_shape)
                                .clone();
  return out;
}

void expect_bit_identical(const TensorMap& a, const TensorMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << " " << name;
    const Tensor x = t.clone(), y = b.at(name).clone();
    ASSERT_EQ(x.shape(), y.shape()) << what << " " << name;
    EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>()) << what << " " << name;
  }
}

// The tiny GPT-2 with Adam's state, step, schedule and consumed samples: PyTorch's torch_dist
// fixture (mixed-precision optimizer, 3 iterations) imported as megatron-cpp's checkpoint.
std::string adam_source(const TempDir& dir) {
  import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_gpt2_adam_tp2"), -1, dir.file("src"), 1,
                         0);
  return dir.file("src");
}

TEST(MegatronTorchDistExport, RoundTripsBitForBitAtEveryLayoutWithTheOptimizerState) {
  TempDir dir;
  const std::string src = adam_source(dir);
  nlohmann::json src_state;
  const TensorMap model = full_model_tensors(src, &src_state);
  const std::map<std::string, TensorMap> optimizer = full_optimizer_tensors(src);
  ASSERT_EQ(optimizer.size(), 3u);  // exp_avg, exp_avg_sq, fp32_master
  for (const auto& [tp, pp] : {std::pair{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}}) {
    const std::string layout = std::to_string(tp) + "x" + std::to_string(pp);
    const std::string out = dir.file("dist" + layout), back = dir.file("back" + layout);
    export_megatron_lm_gpt_torch_dist(src, -1, out, tp, pp);
    EXPECT_TRUE(is_megatron_lm_torch_dist_checkpoint(out));
    EXPECT_TRUE(megatron_lm_checkpoint_is_resumable(out, -1)) << layout;
    import_megatron_lm_gpt(out, -1, back, 1, 0);
    nlohmann::json state;
    expect_bit_identical(full_model_tensors(back, &state), model, "model " + layout);
    const std::map<std::string, TensorMap> back_optimizer = full_optimizer_tensors(back);
    ASSERT_EQ(back_optimizer.size(), optimizer.size()) << layout;
    for (const auto& [buffer, tensors] : optimizer)
      expect_bit_identical(back_optimizer.at(buffer), tensors, buffer + " " + layout);
    for (const char* key : {"iteration", "consumed_train_samples", "scheduler", "optimizer"})
      EXPECT_EQ(state[key], src_state[key]) << key << " " << layout;
    EXPECT_EQ(state["converted_from"]["tensor_model_parallel_size"], tp);
    EXPECT_EQ(state["converted_from"]["pipeline_model_parallel_size"], pp);
  }
}

// SwiGLU's linear_fc1 (two chunks per rank), grouped-query attention, QKV biases without linear
// biases, RMSNorm, an untied output layer.
TEST(MegatronTorchDistExport, Qwen2RoundTripsBitForBit) {
  TempDir dir;
  import_megatron_lm_gpt(megatron_lm_fixture("torch_dist_qwen2_tp2"), -1, dir.file("src"), 1, 0);
  const TensorMap model = full_model_tensors(dir.file("src"));
  for (int tp : {1, 2}) {
    const std::string out = dir.file("dist" + std::to_string(tp));
    export_megatron_lm_gpt_torch_dist(dir.file("src"), -1, out, tp, 1);
    const DcpCheckpoint dcp(checkpoint_iteration_dir(out, -1));
    // [gate; up] of every rank: each rank's two halves are chunks of their own.
    EXPECT_EQ(dcp.tensors().at("decoder.layers.mlp.linear_fc1.weight").chunks.size(),
              size_t(2 * tp));
    EXPECT_TRUE(dcp.tensors().count("output_layer.weight"));
    import_megatron_lm_gpt(out, -1, dir.file("back" + std::to_string(tp)), 2, 0);
    expect_bit_identical(full_model_tensors(dir.file("back" + std::to_string(tp))), model,
                         "tp " + std::to_string(tp));
  }
}

// Every persistent buffer (the routers' expert_bias) of megatron-cpp's checkpoint in `dir`.
TensorMap persistent_buffers(const std::string& dir) {
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  const GptConfig c = gpt_config_from_checkpoint_state(reader.state(0, 0), dir);
  ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
  read_parameters(reader, store, nullptr);
  TensorMap out;
  for (const Buffer& b : store.buffers())
    if (b.spec.persistent) out[b.spec.name] = b.value.clone();
  return out;
}

// `base`'s model with Megatron-LM args `extra` added (expert bias, MTP depths, ...) as megatron-
// cpp's checkpoint in `dir`: every parameter and persistent buffer filled with distinct values.
std::string variant_checkpoint(const std::string& base, const nlohmann::json& extra,
                               const std::string& dir) {
  nlohmann::json state = CheckpointShardReader(checkpoint_iteration_dir(base, -1)).state(0, 0);
  state["args"].update(extra);
  const GptConfig c = gpt_config_from_checkpoint_state(state, base);
  state["model"] = gpt_model_shape_json(c);
  state["model"]["vocab_size"] = c.vocab_size;
  const ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
  TensorMap full;
  uint32_t k = 0;
  auto fill = [&](const std::string& name, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::F32);
    float* f = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) f[i] = float((i * 7919 + 131 * ++k) % 2003) / 2003.0f;
    full[name] = t;
  };
  for (const Parameter& p : store.params()) fill(p.spec.name, p.spec.full_shape);
  for (const Buffer& b : store.buffers())
    if (b.spec.persistent) fill(b.spec.name, b.spec.shape);
  write_imported_checkpoint<GptModel>(dir, c, full, state, 1);
  return dir;
}

// Megatron-Core's MoE, QK-norm, multi-latent-attention and multi-token-prediction keys:
// megatron-cpp → torch_dist (at TP 1 and 2, PP 1 and 2) → megatron-cpp gives every
// weight and expert bias back bit for bit, the experts as Megatron's [L, E, ...] (SwiGLU's
// [gate; up] per expert), MoE layers mixed with dense ones as one key per layer, MLA's rope rows
// in Megatron's pairing.
TEST(MegatronTorchDistExport, MoeQkNormMlaAndMtpModelsRoundTripBitForBit) {
  TempDir dir;
  import_hf_llama(source_dir() + "/tests/data/mixtral_tiny/hf", dir.file("mixtral"), 1, 32);
  import_hf_llama(source_dir() + "/tests/data/qwen2_moe_tiny/hf", dir.file("qwen2_moe"), 1, 32);
  import_hf_llama(source_dir() + "/tests/data/qwen3_moe_tiny/hf", dir.file("qwen3_moe"), 1, 32);
  import_hf_llama(source_dir() + "/tests/data/qwen3_tiny/hf", dir.file("qwen3"), 1, 32);
  variant_checkpoint(dir.file("mixtral"),
                     {{"moe_router_score_function", "sigmoid"},
                      {"moe_router_enable_expert_bias", true},
                      {"mtp_num_layers", 1}},
                     dir.file("bias_mtp"));
  variant_checkpoint(dir.file("mixtral"),
                     {{"multi_latent_attention", true},
                      {"group_query_attention", false},
                      {"q_lora_rank", 16},
                      {"kv_lora_rank", 16},
                      {"qk_head_dim", 8},
                      {"qk_pos_emb_head_dim", 8},
                      {"v_head_dim", 8},
                      {"rope_type", "rope"}},
                     dir.file("mla"));
  for (const std::string name : {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3", "bias_mtp", "mla"}) {
    const std::string src = dir.file(name);
    const TensorMap model = full_model_tensors(src);
    const TensorMap buffers = persistent_buffers(src);
    EXPECT_EQ(buffers.empty(), name != "bias_mtp") << name;
    for (const auto& [tp, pp] : {std::pair{1, 1}, {2, 1}, {2, 2}}) {
      if (pp == 2 && name == "qwen2_moe") continue;  // 3 layers: no even pipeline split
      const std::string layout = name + " " + std::to_string(tp) + "x" + std::to_string(pp);
      const std::string out = dir.file(name + "_dist" + std::to_string(tp) + std::to_string(pp));
      export_megatron_lm_gpt_torch_dist(src, -1, out, tp, pp);
      const DcpCheckpoint dcp(checkpoint_iteration_dir(out, -1));
      const std::string back = dir.file(name + "_back" + std::to_string(tp) + std::to_string(pp));
      import_megatron_lm_gpt(out, -1, back, 1, 0);
      expect_bit_identical(full_model_tensors(back), model, layout);
      expect_bit_identical(persistent_buffers(back), buffers, layout);
      if (name == "mixtral") {
        // [layers, experts, 2 · ffn, h], each TP rank's gate and up rows chunks of their own.
        const DcpTensor& fc1 = dcp.tensors().at("decoder.layers.mlp.experts.linear_fc1.weight");
        EXPECT_EQ(fc1.shape, (Shape{2, 4, 32, 32})) << layout;
        EXPECT_EQ(fc1.chunks.size(), size_t(2 * 2 * tp)) << layout;
        EXPECT_EQ(dcp.tensors().at("decoder.layers.mlp.router.weight").shape, (Shape{2, 4, 32}));
        EXPECT_EQ(dcp.tensors().at("decoder.layers.pre_mlp_layernorm.weight").shape,
                  (Shape{2, 32}));
      }
      if (name == "qwen2_moe") {  // mlp_only_layers [1]: one key per layer
        EXPECT_TRUE(dcp.tensors().count("decoder.layers.0.mlp.shared_experts.gate_weight"));
        EXPECT_TRUE(dcp.tensors().count("decoder.layers.1.mlp.linear_fc1.layer_norm_weight"));
        EXPECT_TRUE(dcp.tensors().count("decoder.layers.2.mlp.experts.linear_fc2.weight"));
        EXPECT_FALSE(dcp.tensors().count("decoder.layers.self_attention.linear_qkv.weight"));
      }
      if (name == "qwen3") {
        EXPECT_EQ(dcp.tensors().at("decoder.layers.self_attention.k_layernorm.weight").shape,
                  (Shape{2, 16}));
      }
      if (name == "mla") {
        // Megatron's rope row 2j is megatron-cpp's j, its 2j + 1 megatron-cpp's dr/2 + j (dr 8,
        // after the 16 latent rows); the latent norms fused into the up projections.
        const Tensor ours = model.at("layers.0.self_attention.linear_kv_down_proj.weight");
        const Tensor theirs =
            dcp.read_tensor("decoder.layers.self_attention.linear_kv_down_proj.weight")
                .slice(0, 0, 1)
                .view({24, 32});
        for (const auto& [row, our_row] : {std::pair{0, 0},
                                           {15, 15},
                                           {16, 16},
                                           {17, 20},
                                           {18, 17},
                                           {19, 21},
                                           {22, 19},
                                           {23, 23}})
          EXPECT_EQ(theirs.slice(0, row, row + 1).clone().to_vector<float>(),
                    ours.slice(0, our_row, our_row + 1).clone().to_vector<float>())
              << layout << " row " << row;
        EXPECT_TRUE(dcp.tensors().count(
            "decoder.layers.self_attention.linear_kv_up_proj.layer_norm_weight"));
        EXPECT_TRUE(dcp.tensors().count("decoder.layers.input_layernorm.weight"));
      }
      if (name == "bias_mtp") {
        EXPECT_EQ(dcp.tensors().at("decoder.layers.mlp.router.expert_bias").shape, (Shape{2, 4}));
        EXPECT_EQ(dcp.tensors().at("mtp.layers.0.eh_proj.weight").shape, (Shape{32, 64}));
        EXPECT_TRUE(
            dcp.tensors().count("mtp.layers.0.transformer_layer.mlp.experts.linear_fc1.weight"));
      }
    }
  }
}

TEST(MegatronTorchDistExport, FilesAreLaidOutAsMegatronCoresWithPyTorch2Classes) {
  TempDir dir;
  const std::string src = adam_source(dir);
  export_megatron_lm_gpt_torch_dist(src, -1, dir.file("dist"), 2, 2);
  const std::string it = dir.file("dist/iter_0000003");
  for (const char* f : {"__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", ".metadata",
                        "common.pt", "metadata.json"})
    EXPECT_TRUE(fs::exists(it + "/" + f)) << f;
  EXPECT_EQ(read_file(dir.file("dist/latest_checkpointed_iteration.txt"), "tracker"), "3");
  const nlohmann::json config = nlohmann::json::parse(read_file(it + "/metadata.json", "config"));
  EXPECT_EQ(config["sharded_backend"], "torch_dist");
  EXPECT_EQ(config["common_backend"], "torch");
  const std::string metadata = read_file(it + "/.metadata", "metadata");
  EXPECT_NE(metadata.find("ctorch.distributed.checkpoint.metadata\nMetadata\n"), std::string::npos);
  EXPECT_NE(metadata.find("ctorch.distributed.checkpoint.filesystem\n_StorageInfo\n"),
            std::string::npos);
  // Nothing of a save in progress is left.
  for (const auto& e : fs::directory_iterator(dir.file("dist")))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  const PyValue common = torch_load(it + "/common.pt");
  const PyDict& c = common.as_dict("");
  EXPECT_EQ(c.find("iteration")->as_int(""), 3);
  EXPECT_EQ(c.find("checkpoint_version")->as_float(""), 3.0);
  const PyDict& args = c.find("args")->as_dict("");
  EXPECT_EQ(args.find("tensor_model_parallel_size")->as_int(""), 2);
  EXPECT_EQ(args.find("pipeline_model_parallel_size")->as_int(""), 2);
  EXPECT_EQ(args.find("ckpt_format")->as_str(""), "torch_dist");
  EXPECT_EQ(args.find("consumed_train_samples")->as_int(""), 6);
  // Layer-stacked keys, each rank's layer its own chunk; the main replica of a replicated
  // tensor written once (TP rank 0 of the stage that holds it).
  const DcpCheckpoint dcp(it);
  const DcpTensor& qkv = dcp.tensors().at("decoder.layers.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.shape, (Shape{2, 96, 32}));
  EXPECT_EQ(qkv.chunks.size(), 4u);  // 2 layers (one per stage) x 2 TP ranks
  EXPECT_EQ(dcp.tensors().at("decoder.final_layernorm.weight").chunks.size(), 1u);
  EXPECT_EQ(dcp.tensors().at("decoder.final_layernorm.weight").chunks[0].storage.file,
            "__2_0.distcp");  // the last stage's TP rank 0: rank pp 1 · tp 2 + 0
  EXPECT_FALSE(dcp.tensors().count("output_layer.weight"));  // tied: the embedding's replica
  EXPECT_TRUE(dcp.tensors().count("optimizer.state.fp32_param.embedding.word_embeddings.weight"));
}

// The distributed optimizer's DP shards cut parameters anywhere: the boxes each DP rank writes
// assemble into the same global tensors as whole buffers.
TEST(MegatronTorchDistExport, DistributedOptimizerShardsWriteTheSameGlobalTensors) {
  TempDir dir;
  const GptConfig config = gpt_config_from_checkpoint_state(
      CheckpointShardReader(checkpoint_iteration_dir(adam_source(dir), -1)).state(0, 0),
      dir.file("src"));
  ParameterStore store = registered_parameter_store<GptModel>(config, 0, 1);
  const int64_t total = store.flat_values().numel();
  Tensor flat = Tensor::empty({total}, DType::F32);
  float* f = flat.data<float>();
  for (int64_t i = 0; i < total; ++i) f[i] = float(i) * 0.5f - 7.0f;
  const std::map<std::string, Tensor> whole = {{"exp_avg", flat}};
  for (const std::string& name : {std::string("whole"), std::string("sharded")}) {
    const std::string d = dir.file(name);
    fs::create_directories(d);
    std::vector<DcpWrittenItem> items;
    if (name == "whole") {
      items = write_dcp_data_file(
          d, "__0_0.distcp",
          megatron_lm_torch_dist_chunks(store, whole, {}, 2, kShardedOptimizerOnly), {});
    } else {
      for (int r = 0; r < 3; ++r) {
        const DpShard shard = DpShard::of(total, 3, r);
        const std::map<std::string, Tensor> part = {
            {"exp_avg", flat.slice(0, shard.range.begin, shard.range.end).clone()}};
        for (DcpWrittenItem& i : write_dcp_data_file(
                 d, "__" + std::to_string(r) + "_0.distcp",
                 megatron_lm_torch_dist_chunks(store, part, shard.range, 2, kShardedOptimizerOnly),
                 {}))
          items.push_back(std::move(i));
      }
    }
    write_dcp_metadata(d, items, d, "test");
  }
  const DcpCheckpoint a(dir.file("whole")), b(dir.file("sharded"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  size_t more_chunks = 0;
  for (const auto& [key, t] : a.tensors()) {
    ASSERT_TRUE(b.tensors().count(key)) << key;
    more_chunks += b.tensors().at(key).chunks.size() > t.chunks.size();
    EXPECT_EQ(a.read_tensor(key).to_vector<float>(), b.read_tensor(key).to_vector<float>()) << key;
  }
  EXPECT_GT(more_chunks, 0u);  // some parameter was cut by a shard boundary
}

TEST(MegatronTorchDistExport, AFailedSaveKeepsThePreviousCheckpointAndModelsWithoutKeysAreRefused) {
  TempDir dir;
  import_hf_gpt2(source_dir() + "/tests/data/gpt2_tiny/hf", dir.file("gpt2"), 1, 64);
  export_megatron_lm_gpt_torch_dist(dir.file("gpt2"), -1, dir.file("dist"), 1, 1);
  const std::string before =
      read_file(dir.file("dist/iter_0000000/__0_0.distcp"), "the first save");
  // DeepSeek sparse attention's indexer has no key this writer knows: refused, nothing replaced.
  import_hf_llama(source_dir() + "/tests/data/mixtral_tiny/hf", dir.file("moe"), 1, 64);
  variant_checkpoint(dir.file("moe"),
                     {{"multi_latent_attention", true},
                      {"group_query_attention", false},
                      {"kv_lora_rank", 16},
                      {"qk_head_dim", 8},
                      {"qk_pos_emb_head_dim", 8},
                      {"v_head_dim", 8},
                      {"rope_type", "rope"},
                      {"experimental_attention_variant", "dsa"},
                      {"dsa_indexer_n_heads", 2},
                      {"dsa_indexer_head_dim", 16},
                      {"dsa_indexer_topk", 4}},
                     dir.file("dsa"));
  const std::string message = error_of(
      [&] { export_megatron_lm_gpt_torch_dist(dir.file("dsa"), -1, dir.file("dist"), 1, 1); });
  EXPECT_NE(message.find("has no key in Megatron-Core's GPT checkpoints"), std::string::npos)
      << message;
  EXPECT_EQ(read_file(dir.file("dist/iter_0000000/__0_0.distcp"), "the first save"), before);
  for (const auto& e : fs::directory_iterator(dir.file("dist")))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// /usr/bin/python3 with torch, else the check is skipped.
bool reference_python_available() {
  return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
}

TEST(MegatronTorchDistExport, AnIndependentReaderFromTheDcpSpecLoadsWhatWasWritten) {
  if (!reference_python_available()) GTEST_SKIP() << "no /usr/bin/python3 with torch";
  TempDir dir;
  import_hf_gpt2(source_dir() + "/tests/data/gpt2_tiny/hf", dir.file("gpt2"), 2, 64);
  const std::string script = source_dir() + "/tools/reference/torch_dist_read_check.py";
  auto check = [&](const std::string& it_dir, const std::string& source, int tp, int pp) {
    const std::string cmd = "/usr/bin/python3 " + script + " " + it_dir + " --source " + source +
                            " --tp " + std::to_string(tp) + " --pp " + std::to_string(pp) + " > " +
                            dir.file("check.log") + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(dir.file("check.log"), "the log");
  };
  for (const auto& [tp, pp] : {std::pair{2, 2}, {4, 1}}) {
    const std::string out = dir.file("gpt2_" + std::to_string(tp) + std::to_string(pp));
    export_megatron_lm_gpt_torch_dist(dir.file("gpt2"), -1, out, tp, pp);
    check(out + "/iter_0000000", "gpt2", tp, pp);
  }
  export_megatron_lm_gpt_torch_dist(adam_source(dir), -1, dir.file("adam"), 2, 1);
  check(dir.file("adam/iter_0000003"), "gpt2_adam", 2, 1);
}

}  // namespace
}  // namespace megatron
