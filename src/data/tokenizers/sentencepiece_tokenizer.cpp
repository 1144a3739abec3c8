// SentencePieceTokenizer: a thin adapter; all of the algorithm is libsentencepiece's.
// In a build without libsentencepiece (MEGATRON_USE_SENTENCEPIECE,
// cmake/MegatronDependencies.cmake) the constructor throws an Error that says so, and the class is
// otherwise unusable.
#include "data/tokenizers/sentencepiece_tokenizer.h"

#ifdef MEGATRON_HAS_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

#include "core/error.h"
#include "data/read_file.h"

#ifndef MEGATRON_HAS_SENTENCEPIECE
namespace sentencepiece {
class SentencePieceProcessor {};
}  // namespace sentencepiece
#endif

namespace megatron {

#ifndef MEGATRON_HAS_SENTENCEPIECE

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file) {
  MT_THROW("--tokenizer-type SentencePieceTokenizer (--tokenizer-model '", model_file,
           "'): this megatron was built without SentencePiece (libsentencepiece-dev was not "
           "found when it was configured, or -DMEGATRON_USE_SENTENCEPIECE=OFF); install it and "
           "rebuild, or use another tokenizer");
}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;
int32_t SentencePieceTokenizer::piece_id(std::initializer_list<const char*>) const {
  return -1;
}
std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view) const {
  return {};
}
std::string SentencePieceTokenizer::decode(const std::vector<int32_t>&) const {
  return {};
}
int64_t SentencePieceTokenizer::vocab_size() const {
  return 0;
}
int32_t SentencePieceTokenizer::piece_to_id(const std::string&) const {
  return -1;
}
std::string SentencePieceTokenizer::id_to_piece(int32_t) const {
  return {};
}

#else

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string model = read_file(model_file, "--tokenizer-model");
  const auto status = processor_->LoadFromSerializedProto(model);
  MT_REQUIRE(status.ok(), "--tokenizer-model '", model_file,
             "' is not a SentencePiece model: ", status.ToString());
  eod_ = processor_->eos_id();
  pad_ = processor_->pad_id();
  bos_ = processor_->bos_id();
  cls_ = piece_id({"<CLS>", "[CLS]"});
  sep_ = piece_id({"<SEP>", "[SEP]"});
  mask_ = piece_id({"<MASK>", "[MASK]"});
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int32_t SentencePieceTokenizer::piece_id(std::initializer_list<const char*> pieces) const {
  for (const char* piece : pieces) {
    const int32_t id = piece_to_id(piece);
    if (id >= 0) return id;
  }
  return -1;
}

int32_t SentencePieceTokenizer::piece_to_id(const std::string& piece) const {
  const int id = processor_->PieceToId(piece);
  // PieceToId answers unk_id for an unknown piece; the unk piece itself is known.
  return processor_->IsUnknown(id) && processor_->IdToPiece(id) != piece ? -1 : id;
}

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id,
           " is outside the SentencePiece vocabulary [0, ", vocab_size(), ")");
  return processor_->IdToPiece(id);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode({text.data(), text.size()}, &ids);
  MT_CHECK(status.ok(), "SentencePiece failed to encode text: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> pieces(ids.begin(), ids.end());
  for (int id : pieces) {
    MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id,
             " is outside the SentencePiece vocabulary [0, ", vocab_size(), ")");
  }
  std::string text;
  const auto status = processor_->Decode(pieces, &text);
  MT_CHECK(status.ok(), "SentencePiece failed to decode ids: ", status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return processor_->GetPieceSize();
}

#endif  // MEGATRON_HAS_SENTENCEPIECE

}  // namespace megatron
