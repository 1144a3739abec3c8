// Offline conversions of Llama-family models: the HF fixtures (tests/data/llama_tiny,
// qwen2_tiny) imported at TP 1, 2 and 4 and exported back give the fixture's tensors bit for
// bit; exports from every TP size are byte-identical files, stay so under re-import, and are
// sharded with an index when they exceed --max-shard-size (and such a sharded directory
// imports again); the stored arguments carry the architecture flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../common/file_bytes.h"
#include "../common/gpt2_golden.h"
#include "../common/temp_dir.h"
#include "checkpoint/architecture_json.h"
#include "checkpoint/shards.h"
#include "convert/hf_directory.h"
#include "convert/hf_llama.h"
#include "convert/llama_checkpoint.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(LlamaConvert, HfImportExportRoundTripIsExactAtEveryTpSize) {
  for (const char* fixture : {"llama_tiny", "qwen2_tiny"}) {
    const std::string hf_dir = source_dir() + "/tests/data/" + fixture + "/hf";
    ASSERT_TRUE(is_hf_llama_directory(hf_dir));
    const HfDirectory original = read_hf_directory(hf_dir);
    std::string first_export;
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << fixture << " tp=" << tp);
      TempDir dir;
      import_hf_llama(hf_dir, dir.file("ckpt"), tp, 32);
      const nlohmann::json state = CheckpointShardReader(dir.file("ckpt/iter_0000000")).state(0, 0);
      EXPECT_TRUE(is_llama_checkpoint(state));
      const ArchitectureOptions a = architecture_from_args_json(state["args"]);
      EXPECT_EQ(a.num_query_groups, 2);
      EXPECT_EQ(a.rotary_base, original.config["rope_theta"].get<float>());
      export_hf_llama(dir.file("ckpt"), -1, dir.file("hf"), 0);
      const HfDirectory exported = read_hf_directory(dir.file("hf"));
      ASSERT_EQ(exported.tensors.size(), original.tensors.size());
      for (const auto& [name, t] : original.tensors) {
        ASSERT_EQ(exported.tensors.count(name), 1u) << name;
        ASSERT_EQ(exported.tensors.at(name).shape(), t.shape()) << name;
        EXPECT_EQ(std::memcmp(exported.tensors.at(name).raw_data(), t.raw_data(), t.nbytes()), 0)
            << name;
      }
      const std::string bytes = file_bytes(dir.file("hf/model.safetensors"));
      if (first_export.empty()) first_export = bytes;
      EXPECT_EQ(bytes, first_export) << "exports from TP 1 and TP " << tp << " differ";
      // Re-import of the export, exported again: the same bytes.
      import_hf_llama(dir.file("hf"), dir.file("again"), tp, 32);
      export_hf_llama(dir.file("again"), -1, dir.file("hf_again"), 0);
      EXPECT_EQ(file_bytes(dir.file("hf_again/model.safetensors")), bytes);
      EXPECT_EQ(file_bytes(dir.file("hf_again/config.json")),
                file_bytes(dir.file("hf/config.json")));
    }
  }
}

TEST(LlamaConvert, ShardedExportHasAnIndexAndImportsAgain) {
  const std::string hf_dir = source_dir() + "/tests/data/llama_tiny/hf";
  TempDir dir;
  import_hf_llama(hf_dir, dir.file("ckpt"), 2, 32);
  export_hf_llama(dir.file("ckpt"), -1, dir.file("sharded"), 200000);  // ~0.2 MB shards
  namespace fs = std::filesystem;
  EXPECT_FALSE(fs::exists(dir.file("sharded/model.safetensors")));
  ASSERT_TRUE(fs::exists(dir.file("sharded/model.safetensors.index.json")));
  const nlohmann::json index =
      nlohmann::json::parse(file_bytes(dir.file("sharded/model.safetensors.index.json")));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file);
  EXPECT_GT(files.size(), 2u);
  EXPECT_TRUE(files.count("model-00001-of-0000" + std::to_string(files.size()) + ".safetensors"));
  // The sharded directory is a valid HF input with the same tensors.
  const HfDirectory original = read_hf_directory(hf_dir),
                    sharded = read_hf_directory(dir.file("sharded"));
  ASSERT_EQ(sharded.tensors.size(), original.tensors.size());
  int64_t total = 0;
  for (const auto& [name, t] : original.tensors) {
    EXPECT_EQ(sharded.tensors.at(name).to_vector<float>(), t.to_vector<float>()) << name;
    total += int64_t(t.nbytes());
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  import_hf_llama(dir.file("sharded"), dir.file("ckpt2"), 4, 32);
  export_hf_llama(dir.file("ckpt2"), -1, dir.file("single"), 0);
  export_hf_llama(dir.file("ckpt"), -1, dir.file("single_direct"), 0);
  EXPECT_EQ(file_bytes(dir.file("single/model.safetensors")),
            file_bytes(dir.file("single_direct/model.safetensors")));
}

// A bf16 checkpoint (as real Llama weights ship) exports back to bf16, byte for byte.
TEST(LlamaConvert, Bf16WeightsRoundTripByteIdentically) {
  const HfDirectory f32 = read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf");
  HfDirectory narrow = f32;
  narrow.config["torch_dtype"] = "bfloat16";
  for (auto& [name, t] : narrow.tensors) {
    Tensor b = Tensor::empty(t.shape(), DType::BF16);
    const std::vector<float> values = t.to_vector<float>();
    for (size_t i = 0; i < values.size(); ++i) b.data<bf16>()[i] = bf16(values[i]);
    t = b;
  }
  TempDir dir;
  write_hf_directory(dir.file("hf"), narrow);
  import_hf_llama(dir.file("hf"), dir.file("ckpt"), 2, 32);
  export_hf_llama(dir.file("ckpt"), -1, dir.file("back"), 0);
  EXPECT_EQ(file_bytes(dir.file("back/model.safetensors")),
            file_bytes(dir.file("hf/model.safetensors")));
}

// Mistral and the optional config keys: the sliding window caps the positions (full causal
// attention within it), linear RoPE scaling and head_dim are carried, and the export names
// the architecture.
TEST(LlamaConvert, MistralConfigAndOptionalKeys) {
  nlohmann::json hf = read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf").config;
  hf["architectures"] = {"MistralForCausalLM"};
  hf["model_type"] = "mistral";
  hf["sliding_window"] = 32;
  hf["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  hf["head_dim"] = 32;  // 8 heads of 32 on h = 128
  const GptConfig c = gpt_config_from_hf_llama(hf, 128);
  EXPECT_EQ(c.max_position_embeddings, 32);
  EXPECT_EQ(c.arch.rotary_seq_len_interpolation_factor, 2.0f);
  EXPECT_EQ(c.arch.kv_channels, 32);
  EXPECT_FALSE(c.arch.add_qkv_bias);
  const nlohmann::json back = hf_llama_config_from_gpt(c, "MistralForCausalLM");
  EXPECT_EQ(back["model_type"], "mistral");
  EXPECT_EQ(back["head_dim"], 32);
  EXPECT_EQ(back["rope_scaling"]["factor"], 2.0);
  hf["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  try {
    gpt_config_from_hf_llama(hf, 128);
    ADD_FAILURE() << "no error for dynamic RoPE scaling";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("rope_scaling type 'dynamic' is not supported"), std::string::npos)
        << e.message();
  }
}

// Checkpoints saved by older `transformers` carry each layer's RoPE frequencies as a buffer
// (model.layers.N.self_attn.rotary_emb.inv_freq): imported without them when they agree with
// the config's rope_theta (also rounded to fp16, as a half-precision save stores them), refused
// naming the tensor when they do not.
TEST(LlamaConvert, RotaryInvFreqBuffersOfOlderTransformersAreCheckedAndDropped) {
  const HfDirectory hf = read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf");
  const GptConfig c = gpt_config_from_hf_llama(hf.config, 128);
  const TransformerConfig t = c.transformer_config();
  const int64_t half = t.rotary_dim() / 2;
  auto with_buffers = [&](DType dtype, double base) {
    TensorMap tensors = hf.tensors;
    Tensor f = Tensor::empty({half}, DType::F32);
    for (int64_t i = 0; i < half; ++i)
      f.data<float>()[i] = float(1.0 / std::pow(base, 2.0 * double(i) / double(t.rotary_dim())));
    Tensor stored = Tensor::empty({half}, dtype);
    kernels::cast(f, stored);  // rounded as a half-precision save rounds them
    for (int layer = 0; layer < c.num_layers; ++layer)
      tensors["model.layers." + std::to_string(layer) + ".self_attn.rotary_emb.inv_freq"] = stored;
    return tensors;
  };
  const TensorMap plain = gpt_tensors_from_hf_llama(hf.tensors, c);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const TensorMap imported =
        gpt_tensors_from_hf_llama(with_buffers(dtype, c.arch.rotary_base), c);
    ASSERT_EQ(imported.size(), plain.size()) << dtype_name(dtype);
    for (const auto& [name, tensor] : plain)
      EXPECT_EQ(std::memcmp(imported.at(name).raw_data(), tensor.raw_data(), tensor.nbytes()), 0)
          << name;
  }
  try {
    gpt_tensors_from_hf_llama(with_buffers(DType::F32, 2.0 * c.arch.rotary_base), c);
    ADD_FAILURE() << "no error for frequencies of another rope_theta";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("layers.0.self_attn.rotary_emb.inv_freq: RoPE frequency 1 is"),
              std::string::npos)
        << e.message();
  }
}

// Llama 3.1's rope_scaling ({"rope_type": "llama3", ...}): imported into the architecture
// arguments (Megatron's use_rope_scaling / rope_scaling_factor and the three bounds), kept
// through a checkpoint at TP 2, and exported as the same config.json.
TEST(LlamaConvert, Llama3RopeScalingRoundTrips) {
  const HfDirectory fixture = read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf");
  nlohmann::json hf = fixture.config;
  hf["rope_scaling"] = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  const GptConfig c = gpt_config_from_hf_llama(hf, 128);
  EXPECT_EQ(c.arch.rope_scaling, (kernels::Llama3RopeScaling{32.0f, 1.0f, 4.0f, 8192.0f}));
  EXPECT_EQ(c.arch.rotary_seq_len_interpolation_factor, 1.0f);
  EXPECT_EQ(architecture_from_args_json(architecture_args_json(c.arch)).rope_scaling,
            c.arch.rope_scaling);
  EXPECT_EQ(hf_llama_config_from_gpt(c, "LlamaForCausalLM")["rope_scaling"], hf["rope_scaling"]);

  TempDir dir;
  const std::string text = hf.dump(2) + "\n";
  write_hf_directory(dir.file("hf"), fixture, 0, text);
  import_hf_llama(dir.file("hf"), dir.file("ckpt"), 2, 32);
  const nlohmann::json state = CheckpointShardReader(dir.file("ckpt/iter_0000000")).state(0, 0);
  EXPECT_TRUE(state["args"]["use_rope_scaling"].get<bool>());
  EXPECT_EQ(state["args"]["rope_scaling_factor"].get<float>(), 32.0f);
  export_hf_llama(dir.file("ckpt"), -1, dir.file("back"), 0);
  EXPECT_EQ(file_bytes(dir.file("back/config.json")), text);
}

}  // namespace
}  // namespace megatron
