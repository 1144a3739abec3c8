// GPT2BPETokenizer against golden ids from the reference encoder (tools/reference/
// gpt2_reference_ids.js runs npm gpt-3-encoder, a port of openai/gpt-2's encoder.py), plus
// the pre-tokenization rules, decode, thread safety and bad vocabulary/merges files.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizers/gpt2_bpe_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using testing::fetched_file;
using testing::source_file;
using testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// One tokenizer for the whole suite: loading 50K merges takes a moment.
const GPT2BPETokenizer& gpt2() {
  static const GPT2BPETokenizer tokenizer(fetched_file("gpt2-vocab.json"),
                                          fetched_file("gpt2-merges.txt"));
  return tokenizer;
}

std::vector<int32_t> golden_ids() {
  std::vector<int32_t> ids;
  std::istringstream in(slurp(source_file("tests/data/bpe_golden.ids")));
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(GPT2BPETokenizer, MatchesReferenceEncoderOnGoldenText) {
  const std::string text = slurp(source_file("tests/data/bpe_golden.txt"));
  const std::vector<int32_t> expected = golden_ids();
  ASSERT_GT(text.size(), 100000u);
  ASSERT_GT(expected.size(), 30000u);
  const std::vector<int32_t> ids = gpt2().encode(text);
  // Report the first difference with the text around it rather than 40K numbers.
  size_t first_diff = 0;
  while (first_diff < ids.size() && first_diff < expected.size() &&
         ids[first_diff] == expected[first_diff]) {
    ++first_diff;
  }
  if (first_diff < std::max(ids.size(), expected.size())) {
    const size_t from = first_diff >= 5 ? first_diff - 5 : 0;
    const std::vector<int32_t> context(
        expected.begin() + from, expected.begin() + std::min(first_diff + 5, expected.size()));
    ADD_FAILURE() << "first difference at id " << first_diff << " near text '"
                  << gpt2().decode(context) << "'";
  }
  EXPECT_EQ(ids.size(), expected.size());
}

TEST(GPT2BPETokenizer, DecodeInvertsEncode) {
  const std::string golden = slurp(source_file("tests/data/bpe_golden.txt"));
  for (const std::string& text :
       {golden, std::string(), std::string(" "), std::string(100000, ' '),
        std::string("\n\n\t \r\n"), std::string("<|endoftext|>"), std::string("a\0b", 3)}) {
    EXPECT_EQ(gpt2().decode(gpt2().encode(text)), text);
  }
}

TEST(GPT2BPETokenizer, KnownIdsAndSpecialTokens) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eod(), 50256);
  // encoder.json: "Hello" = 15496, "Ġworld" = 995 (Ġ is the space byte).
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  // Like GPT-2, text never turns into the EOD id; only the data pipeline appends it.
  for (int32_t id : gpt2().encode("<|endoftext|>")) EXPECT_NE(id, 50256);
  EXPECT_EQ(gpt2().decode({50256}), "<|endoftext|>");
  EXPECT_EQ(gpt2_byte_to_unicode(' '), U'\u0120');  // Ġ
  EXPECT_EQ(gpt2_byte_to_unicode('A'), U'A');
  EXPECT_EQ(gpt2_byte_to_unicode(0xAD), U'\u0143');  // soft hyphen is the 68th remapped byte
}

// Expected splits are Python `regex` findall with GPT-2's pattern (the pattern's definition).
TEST(GPT2BPETokenizer, PreTokenizationFollowsGpt2Pattern) {
  using Pieces = std::vector<std::string_view>;
  EXPECT_EQ(gpt2().pre_tokenize("I'm   here\n\n"), (Pieces{"I", "'m", "  ", " here", "\n\n"}));
  EXPECT_EQ(gpt2().pre_tokenize(" 123abc\u00bd!! "), (Pieces{" 123", "abc", "\u00bd", "!!", " "}));
  EXPECT_EQ(gpt2().pre_tokenize("x\u3000\u3000y"), (Pieces{"x", "\u3000", "\u3000", "y"}));
  // U+0085 is White_Space for Python's regex (so GPT-2), unlike PCRE2's and JavaScript's \s.
  EXPECT_EQ(gpt2().pre_tokenize("a \u0085b"), (Pieces{"a", " ", "\u0085", "b"}));
  EXPECT_EQ(gpt2().pre_tokenize("they'LL we've"), (Pieces{"they", "'", "LL", " we", "'ve"}));
}

TEST(GPT2BPETokenizer, DecodeReplacesIllFormedUtf8LikePython) {
  // Token 158 is the lone byte 0xE2 ("â" in encoder.json): a truncated 3-byte sequence.
  EXPECT_EQ(gpt2().decode({158}), "\uFFFD");
  EXPECT_EQ(gpt2().decode({15496, 158, 995}), "Hello\uFFFD world");
}

TEST(GPT2BPETokenizer, RejectsBadIdsAndText) {
  EXPECT_THROW(gpt2().decode({50257}), Error);
  EXPECT_THROW(gpt2().decode({-1}), Error);
  try {
    gpt2().encode("ok \xff\xfe");
    FAIL() << "ill-formed UTF-8 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("not valid UTF-8"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("offset 3"), std::string::npos) << e.message();
  }
}

TEST(GPT2BPETokenizer, ConcurrentEncodesAgreeWithSequential) {
  // A fresh tokenizer so the threads fill its cache concurrently.
  const GPT2BPETokenizer tokenizer(fetched_file("gpt2-vocab.json"),
                                   fetched_file("gpt2-merges.txt"));
  const std::string text = slurp(source_file("tests/data/bpe_golden.txt"));
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<int32_t>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the lines from a different start so they race on the same words.
      for (size_t i = 0; i < lines.size(); ++i) {
        results[t].push_back(
            tokenizer.encode(lines[(i + t * lines.size() / kThreads) % lines.size()]));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < lines.size(); ++i) {
      ASSERT_EQ(results[t][i],
                gpt2().encode(lines[(i + t * lines.size() / kThreads) % lines.size()]));
    }
  }
}

TEST(GPT2BPETokenizer, BadFilesNameTheFileAndProblem) {
  TempDir dir;
  const std::string vocab = fetched_file("gpt2-vocab.json");
  const std::string merges = fetched_file("gpt2-merges.txt");
  const auto message_of = [](const std::string& v, const std::string& m) {
    try {
      GPT2BPETokenizer tokenizer(v, m);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  const std::string missing = dir.file("missing.json");
  EXPECT_NE(message_of(missing, merges).find("--vocab-file '" + missing + "' cannot be read"),
            std::string::npos);
  EXPECT_NE(
      message_of(dir.write("v.json", "[1, 2]"), merges).find("must be a non-empty JSON object"),
      std::string::npos);
  EXPECT_NE(message_of(dir.write("v2.json", "{\"a\": "), merges).find("is not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      message_of(vocab, dir.write("m.txt", "#version: 0.2\n\xC4\xA0 t\nbad\n")).find("line 3"),
      std::string::npos);
  EXPECT_NE(message_of(vocab, dir.write("m2.txt", "#version: 0.2\nzzzq zzzq\n"))
                .find("not in --vocab-file"),
            std::string::npos);
  EXPECT_NE(message_of(dir.write("v3.json", "{\"a\": 0, \"b\": 0}"), merges).find("unique ids"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron
