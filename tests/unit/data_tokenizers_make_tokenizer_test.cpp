// make_tokenizer: each --tokenizer-type builds its tokenizer; bad flags give errors that name
// the flag.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/tokenizers/make_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using testing::fetched_file;

std::string error_of(const TokenizerOptions& options) {
  try {
    make_tokenizer(options);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(MakeTokenizer, BuildsEachType) {
  TokenizerOptions gpt2;
  gpt2.type = "GPT2BPETokenizer";
  gpt2.vocab_file = fetched_file("gpt2-vocab.json");
  gpt2.merge_file = fetched_file("gpt2-merges.txt");
  EXPECT_EQ(make_tokenizer(gpt2)->eod(), 50256);

  TokenizerOptions bert;
  bert.type = "BertWordPieceLowerCase";
  bert.vocab_file = fetched_file("bert-base-uncased-vocab.txt");
  EXPECT_EQ(make_tokenizer(bert)->encode("HELLO"), make_tokenizer(bert)->encode("hello"));
  bert.type = "BertWordPieceCase";
  EXPECT_NE(make_tokenizer(bert)->encode("HELLO"), make_tokenizer(bert)->encode("hello"));

  TokenizerOptions null;
  null.type = "NullTokenizer";
  null.vocab_size = 10;
  EXPECT_EQ(make_tokenizer(null)->eod(), 9);
}

TEST(MakeTokenizer, ErrorsNameTheFlag) {
  TokenizerOptions options;
  EXPECT_NE(error_of(options).find("--tokenizer-type is required"), std::string::npos);
  options.type = "GPT3Tokenizer";
  const std::string unknown = error_of(options);
  EXPECT_NE(unknown.find("unknown --tokenizer-type 'GPT3Tokenizer'"), std::string::npos);
  EXPECT_NE(unknown.find("BertWordPieceLowerCase"), std::string::npos);

  options.type = "GPT2BPETokenizer";
  EXPECT_NE(error_of(options).find("--vocab-file is required"), std::string::npos);
  options.vocab_file = fetched_file("gpt2-vocab.json");
  EXPECT_NE(error_of(options).find("--merge-file is required"), std::string::npos);
  options.merge_file = "/nonexistent/merges.txt";
  EXPECT_NE(error_of(options).find("--merge-file '/nonexistent/merges.txt' cannot be read"),
            std::string::npos);

  options.type = "BertWordPieceCase";
  options.vocab_file = "/nonexistent/vocab.txt";
  EXPECT_NE(error_of(options).find("--vocab-file '/nonexistent/vocab.txt' cannot be read"),
            std::string::npos);

  options.type = "SentencePieceTokenizer";
  EXPECT_NE(error_of(options).find("--tokenizer-model is required"), std::string::npos);

  options.type = "NullTokenizer";
  EXPECT_NE(error_of(options).find("--vocab-size"), std::string::npos);
}

// A build without libsentencepiece (cmake/MegatronDependencies.cmake) says so when the
// tokenizer is asked for, before it looks at the model file.
TEST(MakeTokenizer, SentencePieceInABuildWithoutItSaysSo) {
#ifdef MEGATRON_HAS_SENTENCEPIECE
  GTEST_SKIP() << "built with SentencePiece (data_tokenizers_sentencepiece_test.cpp covers it)";
#else
  TokenizerOptions options;
  options.type = "SentencePieceTokenizer";
  options.model_file = "/nonexistent/tiny.model";
  const std::string error = error_of(options);
  EXPECT_NE(error.find("built without SentencePiece"), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/tiny.model"), std::string::npos) << error;
#endif
}

}  // namespace
}  // namespace megatron
