// HF config.json survives import → export byte for byte (key order, indentation, number
// spelling and the keys this program does not read), for GPT-2, BERT and Llama, at any TP
// size; an export whose model no longer matches the recorded file, or of a checkpoint that
// was never imported, writes a regenerated config instead (exported_hf_config_text()).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../common/bert_golden.h"
#include "../common/file_bytes.h"
#include "../common/gpt2_golden.h"
#include "../common/temp_dir.h"
#include "convert/bert_checkpoint.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "convert/hf_directory.h"
#include "convert/hf_llama.h"
#include "convert/llama_checkpoint.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(HfConfigRoundTrip, Gpt2ConfigIsByteIdenticalAtEveryTpSize) {
  const std::string hf_dir = gpt2_fixture_dir() + "/hf";
  const std::string original = file_bytes(hf_dir + "/config.json");
  // The fixture's keys are in insertion order, not sorted: a regenerated file would differ.
  ASSERT_NE(read_hf_directory(hf_dir).config.dump(2) + "\n", original);
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    TempDir dir;
    import_hf_gpt2(hf_dir, dir.file("ckpt"), tp, 32);
    export_hf_gpt2(dir.file("ckpt"), -1, dir.file("hf"), 0);
    EXPECT_EQ(file_bytes(dir.file("hf/config.json")), original);
  }
}

TEST(HfConfigRoundTrip, BertConfigIsByteIdentical) {
  const std::string hf_dir = bert_fixture_dir() + "/hf";
  TempDir dir;
  import_hf_bert(hf_dir, dir.file("ckpt"), 2, 32);
  export_hf_bert(dir.file("ckpt"), -1, dir.file("hf"));
  EXPECT_EQ(file_bytes(dir.file("hf/config.json")), file_bytes(hf_dir + "/config.json"));
}

// A config as real checkpoints ship it: 4-space indentation, keys the importer ignores,
// numbers spelled as Python writes them.
TEST(HfConfigRoundTrip, LlamaConfigWithForeignFormattingIsByteIdentical) {
  const HfDirectory fixture = read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf");
  nlohmann::json config = fixture.config;
  config["transformers_version"] = "4.44.0";
  config["bos_token_id"] = 1;
  config["eos_token_id"] = 2;
  config["use_cache"] = true;
  config["attention_bias"] = false;
  const std::string text = config.dump(4) + "\n";
  TempDir dir;
  write_hf_directory(dir.file("hf"), fixture, 0, text);
  import_hf_llama(dir.file("hf"), dir.file("ckpt"), 2, 32);
  export_hf_llama(dir.file("ckpt"), -1, dir.file("back"), 0);
  EXPECT_EQ(file_bytes(dir.file("back/config.json")), text);
}

TEST(HfConfigRoundTrip, AnotherModelOrNoImportRegeneratesTheConfig) {
  const nlohmann::json recorded =
      read_hf_directory(source_dir() + "/tests/data/llama_tiny/hf").config;
  const std::string text = recorded.dump(4);
  const auto describe = [](const nlohmann::json& j) {
    return gpt_hf_description(gpt_config_from_hf_llama(j, 128));
  };
  const nlohmann::json state = {{"converted_from", {{"config_json", text}}}};
  // The same model: the recorded bytes, even though `regenerated` spells it differently.
  nlohmann::json regenerated = recorded;
  regenerated["transformers_version"] = "another";
  EXPECT_EQ(exported_hf_config_text(state, regenerated, describe), text);
  // Another RoPE base: the recorded file would describe the wrong model.
  regenerated["rope_theta"] = recorded["rope_theta"].get<double>() * 2;
  EXPECT_EQ(exported_hf_config_text(state, regenerated, describe), regenerated.dump(2) + "\n");
  // Not imported: regenerated.
  EXPECT_EQ(exported_hf_config_text(nlohmann::json::object(), recorded, describe),
            recorded.dump(2) + "\n");
}

}  // namespace
}  // namespace megatron
