// SentencePieceTokenizer: a SentencePiece model (--tokenizer-model) through Debian's
// libsentencepiece. EOD is the model's </s> (eos) id and PAD its pad id, as in Megatron's
// GPTSentencePieceTokenizer; CLS/SEP/MASK are the ids of "<CLS>"/"[CLS]" (etc.) pieces when
// the model defines them as user symbols, else -1.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace megatron {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws Error naming --tokenizer-model when the file is missing or not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& model_file);
  ~SentencePieceTokenizer() override;

  // SentencePieceProcessor's Encode/Decode are const and safe to call from several threads.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override { return eod_; }
  int32_t cls() const override { return cls_; }
  int32_t sep() const override { return sep_; }
  int32_t mask() const override { return mask_; }
  int32_t pad() const override { return pad_; }
  int32_t bos() const { return bos_; }

  // Id of `piece`, or -1 when the model does not have it.
  int32_t piece_to_id(const std::string& piece) const;
  // The piece of id (0 <= id < vocab_size()).
  std::string id_to_piece(int32_t id) const;

 private:
  // Id of the first of the pieces the model has, else -1.
  int32_t piece_id(std::initializer_list<const char*> pieces) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  int32_t eod_ = -1, cls_ = -1, sep_ = -1, mask_ = -1, pad_ = -1, bos_ = -1;
};

}  // namespace megatron
