// SentencePieceTokenizer with a tiny BPE model trained here by libsentencepiece's trainer on
// the committed golden text (byte fallback and identity normalization, so every text
// round-trips exactly), and parse_sentencepiece_model (the .model file read without
// libsentencepiece) against what libsentencepiece says of that model and of Llama's kind.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/sentencepiece_model_file.h"
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

// Every piece, score and type, the special ids and the trainer/normalizer settings as
// libsentencepiece reads them (user-defined pieces, which its API does not expose, are the
// symbols the model was trained with).
void expect_model_file_matches_libsentencepiece(const std::string& path,
                                                const std::vector<std::string>& user_defined) {
  const std::string bytes = read_file(path, "model");
  const SentencePieceModelFile model = parse_sentencepiece_model(bytes, path);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(bytes).ok());
  ASSERT_EQ(int64_t(model.pieces.size()), int64_t(sp.GetPieceSize()));
  using Type = SentencePieceModelFile::PieceType;
  int64_t counted_user_defined = 0;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    const SentencePieceModelFile::Piece& p = model.pieces[size_t(id)];
    SCOPED_TRACE(p.piece);
    EXPECT_EQ(p.piece, sp.IdToPiece(id));
    EXPECT_EQ(p.score, sp.GetScore(id));
    EXPECT_EQ(p.type == Type::kUnknown, sp.IsUnknown(id));
    EXPECT_EQ(p.type == Type::kControl, sp.IsControl(id));
    EXPECT_EQ(p.type == Type::kUnused, sp.IsUnused(id));
    EXPECT_EQ(p.type == Type::kByte, sp.IsByte(id));
    const bool user =
        std::find(user_defined.begin(), user_defined.end(), p.piece) != user_defined.end();
    EXPECT_EQ(p.type == Type::kUserDefined, user);
    counted_user_defined += p.type == Type::kUserDefined;
  }
  EXPECT_EQ(counted_user_defined, int64_t(user_defined.size()));
  EXPECT_EQ(model.unk_id, sp.unk_id());
  EXPECT_EQ(model.bos_id, sp.bos_id());
  EXPECT_EQ(model.eos_id, sp.eos_id());
  EXPECT_EQ(model.pad_id, sp.pad_id());
  EXPECT_EQ(model.model_type, SentencePieceModelFile::ModelType::kBpe);
  EXPECT_TRUE(model.byte_fallback);
  EXPECT_EQ(model.normalizer_name, "identity");
  EXPECT_FALSE(model.remove_extra_whitespaces);
}

TEST(SentencePieceModelFile, ReadsWhatLibsentencepieceReads) {
  {
    SCOPED_TRACE("trained here: user symbols, pad 3, no dummy prefix");
    expect_model_file_matches_libsentencepiece(model_path(), {"<CLS>", "<SEP>", "<MASK>"});
    EXPECT_FALSE(parse_sentencepiece_model(read_file(model_path(), "model"), "m").add_dummy_prefix);
  }
  {
    SCOPED_TRACE("tests/data/tokenizers/llama_style.model: Llama 2's settings");
    const std::string path = source_file("tests/data/tokenizers/llama_style.model");
    expect_model_file_matches_libsentencepiece(path, {});
    const SentencePieceModelFile model = parse_sentencepiece_model(read_file(path, "m"), path);
    EXPECT_TRUE(model.add_dummy_prefix);
    EXPECT_EQ(model.pad_id, -1);  // none: a 10-byte varint in the file
  }
}

TEST(SentencePieceModelFile, RefusesBrokenFiles) {
  const std::string bytes = read_file(model_path(), "model");
  const auto expect_refused = [](const std::string& b, const std::string& what) {
    try {
      parse_sentencepiece_model(b, "x.model");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SentencePiece model 'x.model' is not a valid model "
                                           "file (at byte "),
                std::string::npos)
          << e.what();
    }
  };
  // The file ends in a message field (the normalizer specs), so one byte less cuts it short.
  expect_refused(bytes.substr(0, bytes.size() - 1), "a truncated file");
  expect_refused("", "an empty file");
  expect_refused("not a protobuf", "text");
  // One piece "a" of type 9 (sentencepiece's types are 1-6).
  expect_refused(std::string("\x0a\x05\x0a\x01\x61\x18\x09", 7), "an unknown piece type");
  // Wire type 7 does not exist.
  expect_refused(std::string("\x0f", 1), "an unknown wire type");
}

}  // namespace
}  // namespace megatron
