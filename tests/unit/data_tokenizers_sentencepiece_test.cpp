// SentencePieceTokenizer with a tiny BPE model trained here by libsentencepiece's trainer on
// the committed golden text (byte fallback and identity normalization, so every text
// round-trips exactly).
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/tokenizers/sentencepiece_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using testing::source_file;
using testing::TempDir;

std::string golden_text() {
  std::ifstream in(source_file("tests/data/bpe_golden.txt"), std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr int kVocabSize = 700;

// Path of the trained model, trained once per test process.
const std::string& model_path() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string input = dir.write("train.txt", golden_text());
    const std::string prefix = dir.file("tiny");
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + input + " --model_prefix=" + prefix +
        " --vocab_size=" + std::to_string(kVocabSize) +
        " --model_type=bpe --byte_fallback=true --normalization_rule_name=identity"
        " --remove_extra_whitespaces=false --add_dummy_prefix=false --split_digits=true"
        " --pad_id=3 --user_defined_symbols=<CLS>,<SEP>,<MASK> --minloglevel=2"
        " --num_threads=1");
    if (!status.ok()) throw std::runtime_error("training failed: " + status.ToString());
    return prefix + ".model";
  }();
  return path;
}

TEST(SentencePieceTokenizer, VocabularyAndSpecialIds) {
  const SentencePieceTokenizer tokenizer(model_path());
  EXPECT_EQ(tokenizer.vocab_size(), kVocabSize);
  // Trainer defaults: unk 0, bos 1, eos 2; pad 3 as asked; user symbols follow in order.
  EXPECT_EQ(tokenizer.eod(), 2);
  EXPECT_EQ(tokenizer.pad(), 3);
  EXPECT_EQ(tokenizer.cls(), 4);
  EXPECT_EQ(tokenizer.sep(), 5);
  EXPECT_EQ(tokenizer.mask(), 6);
  EXPECT_EQ(tokenizer.encode("<SEP>"), (std::vector<int32_t>{5}));
}

TEST(SentencePieceTokenizer, RoundTripsTextExactly) {
  const SentencePieceTokenizer tokenizer(model_path());
  const std::string text = golden_text();
  const std::vector<int32_t> ids = tokenizer.encode(text);
  // Frequent English words become merged pieces, not one id per byte: the model applies.
  const std::string prose = "the government of the nation";
  EXPECT_LT(tokenizer.encode(prose).size(), prose.size());
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < kVocabSize);
  EXPECT_EQ(tokenizer.decode(ids), text);
  // Characters never seen in training come back through byte fallback.
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\U0001F9EC \u0b95 \u10e1")),
            "\U0001F9EC \u0b95 \u10e1");
  EXPECT_THROW(tokenizer.decode({kVocabSize}), Error);
}

TEST(SentencePieceTokenizer, BadModelFiles) {
  TempDir dir;
  try {
    SentencePieceTokenizer tokenizer(dir.write("bad.model", "not a protobuf"));
    FAIL() << "a garbage model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("is not a SentencePiece model"), std::string::npos) << e.message();
  }
  try {
    SentencePieceTokenizer tokenizer(dir.file("missing.model"));
    FAIL() << "a missing model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--tokenizer-model"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace megatron
