// The pieces of `megatron eval` that must reproduce Python: Megatron's detokenizer (its re.sub
// chain), str.strip/split whitespace, float formatting, and the _LMDataset / _LambadaDataset
// samples. Expected strings come from Python 3 (tools/reference/zeroshot_reference.py for the
// files, the interpreter for the literals below); the model-level numbers are checked by
// tests/e2e/eval_zero_shot.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/temp_dir.h"
#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/make_tokenizer.h"
#include "tasks/detokenizer.h"
#include "tasks/python_format.h"
#include "tasks/python_text.h"
#include "tasks/zero_shot_datasets.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

std::string fixture(const std::string& name) {
  return testing::source_file("tests/data/zero_shot/" + name);
}

TEST(Detokenizer, WikiTextFileMatchesMegatronsPython) {
  const std::string raw = read_file(fixture("wiki.test.tokens"), "test");
  EXPECT_EQ(detokenize(Detokenizer::WikiText, raw), read_file(fixture("wiki.test.detok"), "test"));
}

TEST(Detokenizer, RegexStepsFollowPythonRe) {
  const auto wiki = [](const std::string& s) { return detokenize(Detokenizer::WikiText, s); };
  // Python's \s includes U+001C..U+001F and U+3000; PCRE2's \s would miss U+001C.
  EXPECT_EQ(wiki("( \x1c a b \u3000)"), "(a b)");
  // A quote pair spans lines; the third quote has no partner and stays.
  EXPECT_EQ(wiki("x \" q \n\n r \" y \" z"), "x \"q\n\nr\" y \" z");
  EXPECT_EQ(wiki("it 's the players ' union 's"), "it's the players' union's");
  // Lazy match to the FIRST closing bracket.
  EXPECT_EQ(wiki("[ [ a ] ]"), "[[ a] ]");
  EXPECT_EQ(wiki("{ }"), "{}");
  EXPECT_EQ(wiki(" @-@ @,@ "), "-@,@ ");
  EXPECT_EQ(wiki("\u00a0( \u00a0x\u00a0 )"), "\u00a0(x)");
  // Megatron's replacement is literal text (sic).
  EXPECT_EQ(wiki("a /' 7/ b"), "a /'[0-9]/ b");
  // PTB's " N " → "1 " eats the space before it (sic).
  EXPECT_EQ(detokenize(Detokenizer::Ptb, "it 's N $ 1 \n a"), "it's1 $1\na");
}

TEST(Detokenizer, ChosenByPathAsMegatron) {
  EXPECT_EQ(detokenizer_for_path("/d/wikitext-103/wiki.test.tokens"), Detokenizer::WikiText);
  EXPECT_EQ(detokenizer_for_path("ptb/wiki.txt"), Detokenizer::Ptb);  // "ptb" is tried first
  EXPECT_EQ(detokenizer_for_path("lambada_test.jsonl"), Detokenizer::Lambada);
  try {
    detokenizer_for_path("/data/test.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("contains none of 'wiki'"), std::string::npos) << e.what();
  }
}

TEST(Detokenizer, RejectsInvalidUtf8) {
  EXPECT_THROW(detokenize(Detokenizer::WikiText, "a \xff b"), Error);
}

TEST(PythonText, StripAndSplitUsePythonWhitespace) {
  EXPECT_EQ(python_strip("  \x1c a\u3000b \xc2\x85"), "a\u3000b");
  const std::vector<std::string_view> words = python_split("  \x1c a\u3000b\u00a0c \xc2\x85");
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0], "a");
  EXPECT_EQ(words[2], "c");
  EXPECT_EQ(python_strip(" \n "), "");
  EXPECT_TRUE(python_split(" \t ").empty());
  EXPECT_TRUE(is_python_space(0x1F));
  EXPECT_FALSE(is_python_space(0x200B));  // zero-width space is not whitespace in Python
}

TEST(PythonFormat, ReprAndExponentFormatMatchPython) {
  const std::pair<double, const char*> repr[] = {{2.0633397312859887, "2.0633397312859887"},
                                                 {1.0, "1.0"},
                                                 {100.0, "100.0"},
                                                 {0.0001, "0.0001"},
                                                 {0.00001, "1e-05"},
                                                 {1e16, "1e+16"},
                                                 {1e15, "1000000000000000.0"},
                                                 {123456.789, "123456.789"},
                                                 {1.5e-7, "1.5e-07"},
                                                 {2.5e20, "2.5e+20"},
                                                 {0.1, "0.1"},
                                                 {-0.5, "-0.5"},
                                                 {1.0 / 3.0, "0.3333333333333333"}};
  for (const auto& [x, want] : repr) EXPECT_EQ(python_float_repr(x), want);
  EXPECT_EQ(python_format_E(123456.789, 4), "1.2346E+05");
  EXPECT_EQ(python_format_E(1.5e-7, 4), "1.5000E-07");
  EXPECT_EQ(python_format_E(-0.5, 4), "-5.0000E-01");
}

// _LMDataset on 0..n-1, worked by hand from Megatron's __getitem__.
TEST(LmWindows, OverlappingWindowsScoreEachTargetOnce) {
  std::vector<int32_t> tokens(11);
  for (int i = 0; i < 11; ++i) tokens[size_t(i)] = i;
  const LmWindows w(tokens, 4, -1, 2);  // 10 targets: ceil((10 - 2) / 2) + 1 = 5 windows
  ASSERT_EQ(w.size(), 5);
  EXPECT_EQ(w[0].tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(w[0].mask, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(w[1].tokens, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(w[1].mask, (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(w[4].tokens, (std::vector<int32_t>{8, 9, 10, -1, -1}));
  EXPECT_EQ(w[4].mask, (std::vector<float>{0, 0, 0, 0}));  // its real targets came before
  EXPECT_EQ(w[3].mask, (std::vector<float>{0, 0, 1, 1}));  // targets 9, 10
  float scored = 0;
  for (int64_t i = 0; i < w.size(); ++i)
    for (float m : w[i].mask) scored += m;
  EXPECT_EQ(scored, 10.0f);

  const LmWindows whole(tokens, 4, -1, 4);  // no overlap: every real target of every window
  ASSERT_EQ(whole.size(), 3);
  EXPECT_EQ(whole[2].tokens, (std::vector<int32_t>{8, 9, 10, -1, -1}));
  EXPECT_EQ(whole[2].mask, (std::vector<float>{1, 1, 0, 0}));
}

class LambadaFile : public ::testing::Test {
 protected:
  std::unique_ptr<Tokenizer> tokenizer =
      make_tokenizer({"GPT2BPETokenizer", fixture("gpt2-vocab.json"), fixture("gpt2-merges.txt"),
                      "", 0, "", 1000});
  testing::TempDir dir;
  std::string write(const std::string& text) {
    const std::string path = dir.path() + "/lambada.jsonl";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(LambadaFile, StrictTargetIsTheLastWordTokenizedAlone) {
  const std::string path = write("{\"text\": \"the tower was never built\"}\n");
  const std::vector<EvalSample> plain = read_lambada(path, *tokenizer, 16, false);
  const std::vector<EvalSample> strict = read_lambada(path, *tokenizer, 16, true);
  ASSERT_EQ(plain.size(), 1u);
  const std::vector<int32_t> all = tokenizer->encode("the tower was never built");
  const std::vector<int32_t> context = tokenizer->encode("the tower was never");
  const std::vector<int32_t> word = tokenizer->encode(" built");
  // plain: the target is the last token only
  EXPECT_EQ(std::vector<int32_t>(plain[0].tokens.begin(), plain[0].tokens.begin() + all.size()),
            all);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(plain[0].mask[i], i + 2 == all.size() ? 1 : 0) << i;
  // strict: every token of " built" is a target
  for (size_t i = 0; i < 16; ++i) {
    const bool target = i + 1 >= context.size() && i + 1 < context.size() + word.size();
    EXPECT_EQ(strict[0].mask[i], target ? 1 : 0) << i;
  }
  EXPECT_EQ(strict[0].tokens[context.size()], word[0]);
  EXPECT_EQ(strict[0].tokens.back(), tokenizer->eod());
}

TEST_F(LambadaFile, BadLinesNameTheLine) {
  const auto message = [&](const std::string& text, int64_t seq) {
    try {
      read_lambada(write(text), *tokenizer, seq, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{\"text\": \"a b\"}\nnot json\n", 16).find("line 2: not valid JSON"),
            std::string::npos);
  EXPECT_NE(message("{\"txt\": \"a\"}\n", 16).find("line 1: expected an object with a string"),
            std::string::npos);
  EXPECT_NE(message("{\"text\": \"  \"}\n", 16).find("line 1: the text is empty"),
            std::string::npos);
  EXPECT_NE(
      message("{\"text\": \"the tower was never built\"}\n", 3).find("more than --seq-length"),
      std::string::npos);
}

}  // namespace
}  // namespace megatron
