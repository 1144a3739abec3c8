// HuggingFaceTokenizer, TikTokenizer, GPTSentencePieceTokenizer and Llama2Tokenizer against ids
// that reference implementations give for tests/data/tokenizers/tokenizer_golden.txt (State of
// the Union paragraphs plus unicode, emoji, digits, whitespace runs, contractions and
// special-token text), on small but real tokenizer files committed beside them:
//   tools/reference/bpe_tokenizer_goldens.js  npm @huggingface/tokenizers (tokenizer.json) and
//                                             js-tiktoken (Megatron's TikTokenizer set-up)
//   tools/reference/sentencepiece_goldens.sh  Debian's spm_train / spm_encode
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "data/tokenizers/make_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using testing::source_file;

const std::string kDir = "tests/data/tokenizers/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

const std::string& golden_text() {
  static const std::string text = slurp(source_file(kDir + "tokenizer_golden.txt"));
  return text;
}

// Reports the first difference with the expected tokens around it rather than 4000 numbers.
void expect_ids(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                const std::vector<int32_t>& expected) {
  const auto [mismatch, unused] =
      std::mismatch(ids.begin(), ids.end(), expected.begin(), expected.end());
  const size_t at = static_cast<size_t>(mismatch - ids.begin());
  if (ids.size() == expected.size() && at == ids.size()) return;
  const size_t from = at >= 5 ? at - 5 : 0;
  const std::vector<int32_t> context(
      expected.begin() + static_cast<std::ptrdiff_t>(from),
      expected.begin() + static_cast<std::ptrdiff_t>(std::min(at + 5, expected.size())));
  ADD_FAILURE() << ids.size() << " ids, expected " << expected.size() << "; first difference at id "
                << at << " near text '" << tokenizer.decode(context) << "'";
}

std::unique_ptr<Tokenizer> make(const std::string& type, const std::string& file) {
  TokenizerOptions options;
  options.type = type;
  options.model_file = source_file(kDir + file);
  return make_tokenizer(options);
}

std::unique_ptr<Tokenizer> hf(const std::string& style) {
  return make("HuggingFaceTokenizer", style);
}

TEST(HuggingFaceTokenizerGolden, Llama3StyleMatchesTokenizersJs) {
  const auto tokenizer = hf("hf_llama3_style");
  const std::vector<int32_t> expected = parse_ids(slurp(source_file(kDir + "hf_llama3_style.ids")));
  ASSERT_GT(expected.size(), 4000u);
  EXPECT_EQ(expected.front(), 1756);  // <|begin_of_text|>, added by TemplateProcessing
  expect_ids(*tokenizer, tokenizer->encode(golden_text()), expected);
  EXPECT_EQ(tokenizer->eod(), 1757);  // tokenizer_config.json's eos_token <|end_of_text|>
  EXPECT_EQ(tokenizer->vocab_size(), 1759);
}

TEST(HuggingFaceTokenizerGolden, Gpt2StyleMatchesTokenizersJs) {
  const auto tokenizer = hf("hf_gpt2_style");
  const std::vector<int32_t> expected = parse_ids(slurp(source_file(kDir + "hf_gpt2_style.ids")));
  ASSERT_GT(expected.size(), 4000u);
  expect_ids(*tokenizer, tokenizer->encode(golden_text()), expected);
  EXPECT_EQ(tokenizer->eod(), 1756);  // <|endoftext|>
}

std::unique_ptr<Tokenizer> tiktoken(const std::string& pattern) {
  // The ranks file has 256 bytes + 1500 GPT-2 merges + 3 whole words; Megatron's default
  // 1000 special tokens come first.
  TokenizerOptions options;
  options.type = "TikTokenizer";
  options.model_file = source_file(kDir + "tiktoken_ranks.json");
  options.vocab_size = 1000 + 1759;
  options.tiktoken_pattern = pattern;
  options.tiktoken_num_special_tokens = 1000;
  return make_tokenizer(options);
}

TEST(TikTokenizerGolden, MatchesJsTiktokenWithBothPatterns) {
  for (const std::string pattern : {"v1", "v2"}) {
    SCOPED_TRACE("--tiktoken-pattern " + pattern);
    const auto tokenizer = tiktoken(pattern);
    const std::vector<int32_t> expected =
        parse_ids(slurp(source_file(kDir + "tiktoken_" + pattern + ".ids")));
    ASSERT_GT(expected.size(), 4000u);
    const std::vector<int32_t> ids = tokenizer->encode(golden_text());
    expect_ids(*tokenizer, ids, expected);
    // Special-token text in the golden text became special ids (<s>, </s>, <SPECIAL_42>).
    for (const int32_t special : {1, 2, 42, 999}) {
      EXPECT_NE(std::find(ids.begin(), ids.end(), special), ids.end()) << special;
    }
    EXPECT_EQ(tokenizer->decode(ids), golden_text());
  }
  // The two patterns split differently on this text (so the files check the right pattern).
  EXPECT_NE(slurp(source_file(kDir + "tiktoken_v1.ids")),
            slurp(source_file(kDir + "tiktoken_v2.ids")));
}

TEST(TikTokenizerGolden, DefaultsToPatternV2AndMegatronsSpecialIds) {
  const auto tokenizer = tiktoken("");
  EXPECT_EQ(tokenizer->encode(golden_text()),
            parse_ids(slurp(source_file(kDir + "tiktoken_v2.ids"))));
  // Megatron's SPECIAL_TOKENS: <unk> <s> </s> <mask> <pad> <cls> <sep>.
  EXPECT_EQ(tokenizer->eod(), 2);
  EXPECT_EQ(tokenizer->mask(), 3);
  EXPECT_EQ(tokenizer->pad(), 4);
  EXPECT_EQ(tokenizer->cls(), 5);
  EXPECT_EQ(tokenizer->sep(), 6);
  EXPECT_EQ(tokenizer->encode("<mask><pad><cls><sep><SPECIAL_7>"),
            (std::vector<int32_t>{3, 4, 5, 6, 7}));
}

// spm_encode reads the text line by line (a line keeps its "\r"), so the test does too.
TEST(SentencePieceGolden, GptAndLlama2TokenizersMatchSpmEncode) {
  std::vector<std::string> lines;
  {
    std::istringstream in(golden_text());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::vector<std::vector<int32_t>> expected;
  {
    std::istringstream in(slurp(source_file(kDir + "sentencepiece.ids")));
    for (std::string line; std::getline(in, line);) expected.push_back(parse_ids(line));
  }
  ASSERT_EQ(lines.size(), expected.size());
  for (const std::string type : {"GPTSentencePieceTokenizer", "Llama2Tokenizer"}) {
    SCOPED_TRACE(type);
    const auto tokenizer = make(type, "llama_style.model");
    for (size_t i = 0; i < lines.size(); ++i) {
      SCOPED_TRACE("line " + std::to_string(i + 1));
      // No BOS or EOS: Megatron's current SentencePieceTokenizer.text_to_ids.
      expect_ids(*tokenizer, tokenizer->encode(lines[i]), expected[i]);
    }
    EXPECT_EQ(tokenizer->vocab_size(), 1000);
    EXPECT_EQ(tokenizer->eod(), 2);
    EXPECT_EQ(tokenizer->pad(), -1);
  }
}

}  // namespace
}  // namespace megatron
