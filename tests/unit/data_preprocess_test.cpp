// preprocess: output identical for 1 and 4 workers, sequences equal to the tokenizer's own
// output, --append-eod, --split-sentences, several JSON keys, malformed lines (error with the
// line number and no partial outputs, or skipped and counted with keep_going).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentence_splitter.h"
#include "data/tokenizers/null_tokenizer.h"
#include "data_test_util.h"

namespace megatron {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

// A toy tokenizer independent of the real ones: one id per byte (id = byte + 1), EOD = 0.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(int32_t(c) + 1);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(char(id - 1));
    return s;
  }
  int64_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 0; }
};

std::string corpus(int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) {
    s += "{\"text\": \"Doc " + std::to_string(i) + ". It has words.";
    if (i % 7 == 0) s += " Mr. Smith came. Then \\\"quoted\\\" text!";
    s += "\", \"title\": \"t" + std::to_string(i) + "\"}\n";
  }
  return s;
}

PreprocessOptions options(const TempDir& dir, const std::string& out) {
  PreprocessOptions o;
  o.input = dir.file("in.jsonl");
  o.output_prefix = dir.file(out);
  o.log_interval = 0;
  return o;
}

TEST(DataPreprocess, OutputIsIdenticalForAnyWorkerCount) {
  TempDir dir;
  test::write_text(dir.file("in.jsonl"), corpus(2500));  // several batches of lines
  ByteTokenizer tok;
  for (bool split : {false, true}) {
    PreprocessOptions one = options(dir, "one");
    one.split_sentences = split;
    one.append_eod = true;
    PreprocessOptions four = one;
    four.output_prefix = dir.file("four");
    four.workers = 4;
    PreprocessResult r1 = preprocess(one, tok);
    PreprocessResult r4 = preprocess(four, tok);
    EXPECT_EQ(r1.documents, 2500);
    const std::string level = split ? "_text_sentence" : "_text_document";
    ASSERT_EQ(r1.output_prefixes, std::vector<std::string>{dir.file("one" + level)});
    for (const char* ext : {".bin", ".idx"}) {
      auto a = test::read_bytes(dir.file("one" + level + ext));
      ASSERT_FALSE(a.empty());
      EXPECT_EQ(a, test::read_bytes(dir.file("four" + level + ext))) << ext;
    }
  }
}

TEST(DataPreprocess, SequencesAreTheTokenizersOutput) {
  TempDir dir;
  test::write_text(dir.file("in.jsonl"),
                   "{\"text\": \"Hello there. General Kenobi!\", \"title\": \"A\"}\n"
                   "{\"text\": \"\", \"title\": \"B\"}\n"
                   "{\"text\": \"one\", \"title\": \"C\"}\n");
  ByteTokenizer tok;
  PreprocessOptions o = options(dir, "p");
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  o.split_sentences = true;
  preprocess(o, tok);
  IndexedDataset text(dir.file("p_text_sentence"));
  EXPECT_EQ(text.dtype(), IndexDType::U16);
  // Line 2 has no sentences: an empty document, as Megatron writes it.
  EXPECT_EQ(text.document_indices(), (std::vector<int64_t>{0, 2, 2, 3}));
  EXPECT_EQ(text.get(0), tok.encode("Hello there."));
  std::vector<int32_t> last = tok.encode("General Kenobi!");
  last.push_back(0);  // EOD on the document's last sequence
  EXPECT_EQ(text.get(1), last);
  EXPECT_EQ(text.get(2), (std::vector<int32_t>{'o' + 1, 'n' + 1, 'e' + 1, 0}));
  IndexedDataset title(dir.file("p_title_sentence"));
  EXPECT_EQ(title.num_documents(), 3);
  EXPECT_EQ(title.get(1), (std::vector<int32_t>{'B' + 1, 0}));
}

// Megatron's encode(): a list value is a document of pre-split sentences, one sequence each.
TEST(DataPreprocess, ListValuedKeysArePreSplitSentences) {
  TempDir dir;
  test::write_text(dir.file("in.jsonl"),
                   "{\"text\": [\"One two.\", \"\", \"Three. Four\"]}\n"
                   "{\"text\": \"plain\"}\n");
  ByteTokenizer tok;
  PreprocessOptions o = options(dir, "p");
  o.append_eod = true;
  preprocess(o, tok);
  IndexedDataset text(dir.file("p_text_document"));
  // The empty sentence tokenizes to nothing and is dropped; the list is not split further.
  EXPECT_EQ(text.document_indices(), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(text.get(0), tok.encode("One two."));
  std::vector<int32_t> last = tok.encode("Three. Four");
  last.push_back(0);
  EXPECT_EQ(text.get(1), last);
  test::write_text(dir.file("in.jsonl"), "{\"text\": [\"a\", 3]}\n");
  EXPECT_THAT([&] { preprocess(options(dir, "q"), tok); },
              ::testing::ThrowsMessage<Error>(HasSubstr(
                  "line 1: key \"text\" holds a array, expected a string or a list of strings")));
}

// Megatron's --partitions 3 deals lines 0..6 round-robin and writes partition after partition:
// 0 3 6 | 1 4 | 2 5. --keep-sequential-samples keeps the input order.
TEST(DataPreprocess, PartitionsOrderDocumentsAsMegatron) {
  TempDir dir;
  std::string input;
  for (int i = 0; i < 7; ++i) input += "{\"text\": \"" + std::to_string(i) + "\"}\n";
  test::write_text(dir.file("in.jsonl"), input);
  ByteTokenizer tok;
  auto order = [&](int partitions, bool sequential) {
    std::string name = "p";  // appended: GCC 12 warns (-Wrestrict) on "p" + string
    name.append(std::to_string(partitions)).append(sequential ? "s" : "");
    PreprocessOptions o = options(dir, name);
    o.partitions = partitions;
    o.keep_sequential_samples = sequential;
    preprocess(o, tok);
    IndexedDataset d(o.output_prefix + "_text_document");
    std::string digits;
    for (int64_t i = 0; i < d.num_sequences(); ++i) digits += tok.decode(d.get(i));
    return digits;
  };
  EXPECT_EQ(order(1, false), "0123456");
  EXPECT_EQ(order(3, false), "0361425");
  EXPECT_EQ(order(3, true), "0123456");
}

TEST(DataPreprocess, MalformedLineStopsWithLineNumberAndNoOutput) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", "line 2: malformed JSON"},
      {"{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"body\": \"c\"}\n", "line 3: no key \"text\""},
      {"[1, 2]\n", "line 1: expected a JSON object, got array"},
      {"{\"text\": 5}\n", "line 1: key \"text\" holds a number, expected a string"}};
  ByteTokenizer tok;
  for (const auto& [input, message] : cases) {
    test::write_text(dir.file("in.jsonl"), corpus(1500) + input);
    PreprocessOptions o = options(dir, "bad");
    o.workers = 3;
    try {
      preprocess(o, tok);
      FAIL() << "no error for " << message;
    } catch (const Error& e) {
      const std::string shifted =
          "line " + std::to_string(1500 + std::stoi(message.substr(5))) + message.substr(6);
      EXPECT_THAT(e.message(), HasSubstr(shifted));
      EXPECT_THAT(e.message(), HasSubstr("in.jsonl"));
    }
    for (const auto& f : std::filesystem::directory_iterator(dir.path()))
      EXPECT_EQ(f.path().filename(), "in.jsonl") << "left behind: " << f.path();
  }
}

TEST(DataPreprocess, KeepGoingSkipsAndCountsBadLines) {
  TempDir dir;
  test::write_text(dir.file("in.jsonl"),
                   "{\"text\": \"1 2\"}\nnot json\n{\"text\": \"3\"}\n{\"other\": 1}\n"
                   "{\"text\": \"4 99\"}\n{\"text\": \"5\"}\n");
  NullTokenizer tok(50);  // "99" is out of its vocabulary: a tokenizer error
  PreprocessOptions o = options(dir, "k");
  o.keep_going = true;
  PreprocessResult r = preprocess(o, tok);
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.skipped_lines, 3);
  IndexedDataset ds(dir.file("k_text_document"));
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.get(0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ds.get(1), (std::vector<int32_t>{3}));
  EXPECT_EQ(ds.get(2), (std::vector<int32_t>{5}));
  o.keep_going = false;
  EXPECT_THAT([&] { preprocess(o, tok); },
              ::testing::ThrowsMessage<Error>(HasSubstr("line 2: malformed JSON")));
}

TEST(DataPreprocess, BadOptionsNameTheFlag) {
  TempDir dir;
  ByteTokenizer tok;
  PreprocessOptions o = options(dir, "x");
  EXPECT_THAT([&] { preprocess(o, tok); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot open --input")));
  test::write_text(dir.file("in.jsonl"), "{}\n");
  o.workers = 0;
  EXPECT_THAT([&] { preprocess(o, tok); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--workers must be >= 1")));
}

TEST(DataSentenceSplitter, SplitsEnglishSentences) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_sentences("Hello world. This is it!  Is it?Yes. no"),
            (V{"Hello world.", "This is it!", "Is it?Yes. no"}));
  EXPECT_EQ(split_sentences("Mr. Smith met Dr. Who at 5 p.m. yesterday. He left."),
            (V{"Mr. Smith met Dr. Who at 5 p.m. yesterday.", "He left."}));
  EXPECT_EQ(split_sentences("The U.S. Army. J. R. R. Tolkien wrote it, e.g. The Hobbit."),
            (V{"The U.S. Army.", "J. R. R. Tolkien wrote it, e.g. The Hobbit."}));
  EXPECT_EQ(split_sentences("He said \"Stop.\" Then he left... (Really.) 3 more."),
            (V{"He said \"Stop.\"", "Then he left...", "(Really.)", "3 more."}));
  EXPECT_EQ(split_sentences("Pi is 3.14. Right?"), (V{"Pi is 3.14.", "Right?"}));
  EXPECT_EQ(split_sentences("A title\n\nfirst paragraph. second"),
            (V{"A title", "first paragraph. second"}));
  EXPECT_EQ(split_sentences("  \n "), V{});
  EXPECT_EQ(split_sentences("No end"), (V{"No end"}));
}

}  // namespace
}  // namespace megatron
