// Offline conversions of Llama-family models: the HF fixtures (tests/data/llama_tiny,
// qwen2_tiny) imported at TP 1, 2 and 4 and exported back give the fixture's tensors bit for
// bit; exports from every TP size are byte-identical files, stay so under re-import, and are
// sharded with an index when they exceed --max-shard-size (and such a sharded directory
// imports again); the stored arguments carry the architecture flags.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../common/gpt2_golden.h"
#include "../common/temp_dir.h"
#include "train/architecture_json.h"
#include "train/checkpoint_convert_llama.h"
#include "train/checkpoint_shards.h"
#include "train/hf_directory.h"

namespace megatron {
namespace {

using namespace megatron::testing;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

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
      const std::string bytes = bytes_of(dir.file("hf/model.safetensors"));
      if (first_export.empty()) first_export = bytes;
      EXPECT_EQ(bytes, first_export) << "exports from TP 1 and TP " << tp << " differ";
      // Re-import of the export, exported again: the same bytes.
      import_hf_llama(dir.file("hf"), dir.file("again"), tp, 32);
      export_hf_llama(dir.file("again"), -1, dir.file("hf_again"), 0);
      EXPECT_EQ(bytes_of(dir.file("hf_again/model.safetensors")), bytes);
      EXPECT_EQ(bytes_of(dir.file("hf_again/config.json")), bytes_of(dir.file("hf/config.json")));
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
      nlohmann::json::parse(bytes_of(dir.file("sharded/model.safetensors.index.json")));
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
  EXPECT_EQ(bytes_of(dir.file("single/model.safetensors")),
            bytes_of(dir.file("single_direct/model.safetensors")));
}

}  // namespace
}  // namespace megatron
