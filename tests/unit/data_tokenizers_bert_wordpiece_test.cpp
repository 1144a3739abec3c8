// BertWordPieceTokenizer against BERT's published tokenization rules (google-research/bert
// README and tokenization.py) on handcrafted cases, with the real bert-base-uncased
// vocabulary; the cased variant with a small vocabulary written here; and on the varied
// golden text against ids from tools/reference/bert_reference_ids.py (Python's Unicode).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizers/bert_wordpiece_tokenizer.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using Tokens = std::vector<std::string>;
using testing::fetched_file;
using testing::source_file;
using testing::TempDir;

const BertWordPieceTokenizer& uncased() {
  static const BertWordPieceTokenizer tokenizer(fetched_file("bert-base-uncased-vocab.txt"),
                                                /*lower_case=*/true);
  return tokenizer;
}

Tokens tokens_of(const BertWordPieceTokenizer& tokenizer, std::string_view text) {
  Tokens tokens;
  for (int32_t id : tokenizer.encode(text)) tokens.push_back(tokenizer.token(id));
  return tokens;
}

TEST(BertWordPieceTokenizer, UncasedVocabularyAndSpecialIds) {
  EXPECT_EQ(uncased().vocab_size(), 30522);
  EXPECT_EQ(uncased().pad(), 0);
  EXPECT_EQ(uncased().unk(), 100);
  EXPECT_EQ(uncased().cls(), 101);
  EXPECT_EQ(uncased().sep(), 102);
  EXPECT_EQ(uncased().mask(), 103);
  EXPECT_EQ(uncased().eod(), -1);
}

TEST(BertWordPieceTokenizer, MatchesPythonReferenceOnGoldenText) {
  std::ifstream text_file(source_file("tests/data/bpe_golden.txt"), std::ios::binary);
  std::ostringstream text;
  text << text_file.rdbuf();
  std::ifstream ids_file(source_file("tests/data/wordpiece_golden.ids"));
  std::vector<int32_t> expected;
  for (int32_t id; ids_file >> id;) expected.push_back(id);
  ASSERT_GT(expected.size(), 30000u);
  const std::vector<int32_t> ids = uncased().encode(text.str());
  size_t first_diff = 0;
  while (first_diff < std::min(ids.size(), expected.size()) &&
         ids[first_diff] == expected[first_diff]) {
    ++first_diff;
  }
  if (first_diff < std::max(ids.size(), expected.size())) {
    const size_t from = first_diff >= 5 ? first_diff - 5 : 0;
    ADD_FAILURE() << "first difference at id " << first_diff << " near '"
                  << uncased().decode(
                         {expected.begin() + from,
                          expected.begin() + std::min(first_diff + 5, expected.size())})
                  << "'";
  }
  EXPECT_EQ(ids.size(), expected.size());
}

TEST(BertWordPieceTokenizer, ConcurrentEncodesAgreeWithSequential) {
  // A fresh tokenizer so four threads fill its word cache concurrently, from different starts.
  const BertWordPieceTokenizer tokenizer(fetched_file("bert-base-uncased-vocab.txt"), true);
  std::ifstream in(source_file("tests/data/bpe_golden.txt"), std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  constexpr size_t kThreads = 4;
  const auto line_of = [&](size_t t, size_t i) -> const std::string& {
    return lines[(i + t * lines.size() / kThreads) % lines.size()];
  };
  std::vector<std::vector<std::vector<int32_t>>> results(kThreads);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < lines.size(); ++i)
        results[t].push_back(tokenizer.encode(line_of(t, i)));
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < lines.size(); ++i)
      ASSERT_EQ(results[t][i], uncased().encode(line_of(t, i)));
  }
}

TEST(BertWordPieceTokenizer, GreedyLongestMatch) {
  // The README's "un ##aff ##able" used another vocabulary: bert-base-uncased has "una" (and
  // no "unaf..."), and greedy longest-match must take the longest prefix in the vocabulary.
  EXPECT_EQ(tokens_of(uncased(), "unaffable"), (Tokens{"una", "##ffa", "##ble"}));
  EXPECT_EQ(tokens_of(uncased(), "John Johanson's house"),
            (Tokens{"john", "johan", "##son", "'", "s", "house"}));
}

TEST(BertWordPieceTokenizer, LowerCasesAndStripsAccents) {
  EXPECT_EQ(tokens_of(uncased(), "H\u00e9llo"), (Tokens{"hello"}));
  EXPECT_EQ(tokens_of(uncased(), "HeLLo"), (Tokens{"hello"}));
  EXPECT_EQ(tokens_of(uncased(), "caf\u00e9 na\u00efve"), (Tokens{"cafe", "naive"}));
  EXPECT_EQ(tokens_of(uncased(), "cafe\u0301"), (Tokens{"cafe"}));  // combining acute
  // str.lower() maps U+0130 to "i" + U+0307, and the mark is then stripped.
  EXPECT_EQ(tokens_of(uncased(), "\u0130stanbul"), (Tokens{"istanbul"}));
  // str.lower()'s final sigma: capital sigma ending a word is "\u03c2", else "\u03c3". The
  // expected tokens are Python's (tools/reference/bert_reference_ids.py).
  EXPECT_EQ(tokens_of(uncased(), "\u039f\u0394\u039f\u03a3"),
            (Tokens{"\u03bf", "##\u03b4", "##\u03bf\u03c2"}));
  EXPECT_EQ(tokens_of(uncased(), "\u03a3\u039f\u03a6\u039f\u03a3."),
            (Tokens{"\u03c3", "##\u03bf", "##\u03c6", "##\u03bf\u03c2", "."}));
  EXPECT_EQ(tokens_of(uncased(), "\u03a3"), (Tokens{"\u03c3"}));
  EXPECT_EQ(tokens_of(uncased(), "\u0391\u03a3'"), (Tokens{"\u03b1", "##\u03c2", "'"}));
}

TEST(BertWordPieceTokenizer, SplitsPunctuation) {
  EXPECT_EQ(tokens_of(uncased(), "Hello, world!"), (Tokens{"hello", ",", "world", "!"}));
  // All non-alphanumeric ASCII splits, even symbols that are not Unicode punctuation.
  EXPECT_EQ(tokens_of(uncased(), "a$b^c"), (Tokens{"a", "$", "b", "^", "c"}));
  EXPECT_EQ(tokens_of(uncased(), "\u00bfqu\u00e9?"), (Tokens{"\u00bf", "que", "?"}));
}

TEST(BertWordPieceTokenizer, EachCjkIdeographIsAToken) {
  EXPECT_EQ(tokens_of(uncased(), "\u4e2d\u6587abc\u5927\u5b66"),
            (Tokens{"\u4e2d", "\u6587", "abc", "\u5927", "\u5b66"}));
  // Not every ideograph is in the vocabulary; a missing one is [UNK] on its own.
  EXPECT_EQ(tokens_of(uncased(), "\u4e2d\u5b57"), (Tokens{"\u4e2d", "[UNK]"}));
}

TEST(BertWordPieceTokenizer, WhitespaceAndControlCharacters) {
  EXPECT_EQ(tokens_of(uncased(), "  a\tb\nc\r\nd\u3000e\u00a0f\u2028g  "),
            (Tokens{"a", "b", "c", "d", "e", "f", "g"}));
  // Cc and Cf characters (and NUL, U+FFFD) vanish without splitting the word.
  EXPECT_EQ(tokens_of(uncased(), std::string("hel\x01lo wor\u200bld ho\ufffdme \0z", 26)),
            (Tokens{"hello", "world", "home", "z"}));
  EXPECT_TRUE(uncased().encode("").empty());
  EXPECT_TRUE(uncased().encode(" \t\n\x01").empty());
}

TEST(BertWordPieceTokenizer, UnknownAndOverlongWordsAreUnk) {
  EXPECT_EQ(tokens_of(uncased(), "\U0001F600"), (Tokens{"[UNK]"}));
  // One unmatched character makes the whole word [UNK], not just its tail.
  EXPECT_EQ(tokens_of(uncased(), "hello\U0001F600 world"), (Tokens{"[UNK]", "world"}));
  EXPECT_EQ(tokens_of(uncased(), std::string(101, 'a')), (Tokens{"[UNK]"}));
  const Tokens hundred = tokens_of(uncased(), std::string(100, 'a'));
  EXPECT_GT(hundred.size(), 1u);
  for (const std::string& t : hundred) EXPECT_NE(t, "[UNK]");
}

TEST(BertWordPieceTokenizer, DecodeJoinsPiecesAndCleansUp) {
  EXPECT_EQ(uncased().decode(uncased().encode("Hello, world! I don't know.")),
            "hello, world! i don't know.");
  EXPECT_EQ(uncased().decode(uncased().encode("unaffable")), "unaffable");
  EXPECT_THROW(uncased().decode({30522}), Error);
}

TEST(BertWordPieceTokenizer, CasedKeepsCaseAndAccents) {
  TempDir dir;
  const std::string vocab = dir.write(
      "vocab.txt",
      "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nH\u00e9llo\nhello\nWorld\n##s\n!\n\u4e2d\nun\n##aff\n"
      "##able\n");
  const BertWordPieceTokenizer cased(vocab, /*lower_case=*/false);
  EXPECT_EQ(cased.vocab_size(), 14);
  EXPECT_EQ(cased.encode("H\u00e9llo Worlds!\u4e2d"), (std::vector<int32_t>{5, 7, 8, 9, 10}));
  EXPECT_EQ(cased.encode("hello HELLO Hello unaffable"),
            (std::vector<int32_t>{6, 1, 1, 11, 12, 13}));
  const BertWordPieceTokenizer lowered(vocab, /*lower_case=*/true);
  EXPECT_EQ(lowered.encode("H\u00e9llo HELLO"), (std::vector<int32_t>{6, 6}));
}

TEST(BertWordPieceTokenizer, BadVocabularyFiles) {
  TempDir dir;
  const auto message_of = [](const std::string& path) {
    try {
      BertWordPieceTokenizer tokenizer(path, true);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(dir.write("a.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n")).find("has no [MASK]"),
            std::string::npos);
  EXPECT_NE(message_of(dir.write("b.txt", "[PAD]\nx\nx\n")).find("line 3 repeats token 'x'"),
            std::string::npos);
  EXPECT_NE(message_of(dir.write("c.txt", "")).find("is empty"), std::string::npos);
  EXPECT_NE(message_of(dir.file("none.txt")).find("--vocab-file"), std::string::npos);
}

}  // namespace
}  // namespace megatron
