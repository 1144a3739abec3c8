// HF export's tokenizer files: the training files copied byte for byte with HF's configs, the
// identity's checksum guarding against a changed file, --vocab-file for a moved one, and the
// tokenizer identity pretrain-* stores in every checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "convert/hf_tokenizer_files.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "data/tokenizers/tokenizer_identity.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

const char* const kBertVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\n";

TEST(HfTokenizerFiles, Gpt2FilesAreCopiedWithHfConfigs) {
  TempDir dir;
  const std::string vocab = dir.write("v.json", "{\"a\": 0, \"<|endoftext|>\": 1}");
  const std::string merges = dir.write("m.txt", "#version: 0.2\n");
  nlohmann::json identity = {
      {"type", "GPT2BPETokenizer"},
      {"vocab_size", 2},
      {"eod", 1},
      {"files",
       {{"vocab_file", {{"path", vocab}, {"crc32c", 0}}}, {"merge_file", {{"path", merges}}}}}};
  // The checksum is checked: a wrong one is a changed file.
  try {
    write_hf_tokenizer_files(dir.file("hf"), identity, 2, 64, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("is not the one the checkpoint was trained with"));
    EXPECT_THAT(e.message(), HasSubstr("--vocab-file"));
  }
  identity["files"]["vocab_file"].erase("crc32c");  // older records: no checksum
  EXPECT_EQ(write_hf_tokenizer_files(dir.file("hf"), identity, 2, 64, {}),
            (std::vector<std::string>{"vocab.json", "merges.txt", "tokenizer_config.json",
                                      "special_tokens_map.json"}));
  EXPECT_EQ(read_file(dir.file("hf/vocab.json"), "test"), read_file(vocab, "test"));
  EXPECT_EQ(read_file(dir.file("hf/merges.txt"), "test"), "#version: 0.2\n");
  const nlohmann::json config =
      nlohmann::json::parse(read_file(dir.file("hf/tokenizer_config.json"), "test"));
  EXPECT_EQ(config["tokenizer_class"], "GPT2Tokenizer");
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["model_max_length"], 64);

  try {  // a tokenizer of another size than the model
    write_hf_tokenizer_files(dir.file("hf2"), identity, 3, 64, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("has 2 entries but its model 3"));
  }
}

TEST(HfTokenizerFiles, IdentityRecordsFilesAndMovedFilesAreFoundByFlag) {
  TempDir dir;
  const std::string vocab = dir.write("vocab.txt", kBertVocab);
  TokenizerOptions o{"BertWordPieceLowerCase", vocab, "", "", 0, "", 1000};
  const nlohmann::json identity = tokenizer_identity(o, *make_tokenizer(o));
  EXPECT_EQ(identity["type"], "BertWordPieceLowerCase");
  EXPECT_EQ(identity["files"]["vocab_file"]["path"], vocab);
  EXPECT_TRUE(identity["files"]["vocab_file"].contains("crc32c"));
  EXPECT_FALSE(identity["files"].contains("merge_file"));

  const std::string moved = dir.write("moved.txt", read_file(vocab, "test"));
  std::filesystem::remove(vocab);
  try {
    write_hf_tokenizer_files(dir.file("hf"), identity, identity["vocab_size"].get<int64_t>(), 512,
                             {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("does not exist; give its new place with --vocab-file"));
  }
  write_hf_tokenizer_files(dir.file("hf"), identity, identity["vocab_size"].get<int64_t>(), 512,
                           {moved, "", ""});
  const nlohmann::json config =
      nlohmann::json::parse(read_file(dir.file("hf/tokenizer_config.json"), "test"));
  EXPECT_EQ(config["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(config["do_lower_case"], true);
  EXPECT_EQ(read_file(dir.file("hf/vocab.txt"), "test"), kBertVocab);
}

TEST(HfTokenizerFiles, SentencePieceModelIsCopiedWithLlamaTokenizerConfig) {
  TempDir dir;
  const std::string model = testing::source_dir() + "/tests/data/tokenizers/llama_style.model";
  const nlohmann::json identity = {{"type", "Llama2Tokenizer"},
                                   {"vocab_size", 1000},
                                   {"files", {{"tokenizer_model", {{"path", model}}}}}};
  EXPECT_EQ(write_hf_tokenizer_files(dir.file("hf"), identity, 1000, 128, {}),
            (std::vector<std::string>{"tokenizer.model", "tokenizer_config.json",
                                      "special_tokens_map.json"}));
  EXPECT_EQ(read_file(dir.file("hf/tokenizer.model"), "test"), read_file(model, "test"));
  const nlohmann::json config =
      nlohmann::json::parse(read_file(dir.file("hf/tokenizer_config.json"), "test"));
  EXPECT_EQ(config["tokenizer_class"], "LlamaTokenizer");
  // The pieces spm_train gave ids 0, 1, 2 (tools/reference/sentencepiece_goldens.sh); no pad.
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_FALSE(config.contains("pad_token"));
  EXPECT_EQ(config["add_bos_token"], false);  // Megatron encodes with the model alone
  EXPECT_EQ(config["add_eos_token"], false);
  EXPECT_EQ(config["model_max_length"], 128);
  try {  // the model of another vocabulary
    write_hf_tokenizer_files(dir.file("hf2"), identity, 1001, 128, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("has 1000 entries but its model 1001"));
  }
}

TEST(HfTokenizerFiles, CheckpointsWithoutAnIdentityUseTheirArguments) {
  EXPECT_TRUE(checkpoint_tokenizer({{"args", {{"mock_data", true}}}}).is_null());
  const nlohmann::json t = checkpoint_tokenizer(
      {{"args",
        {{"tokenizer_type", "GPT2BPETokenizer"}, {"vocab_file", "v"}, {"merge_file", "m"}}}});
  EXPECT_EQ(t["type"], "GPT2BPETokenizer");
  EXPECT_EQ(t["files"]["merge_file"]["path"], "m");
  EXPECT_FALSE(t["files"]["merge_file"].contains("crc32c"));
}

}  // namespace
}  // namespace megatron
