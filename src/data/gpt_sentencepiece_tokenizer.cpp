// GPTSentencePieceTokenizer / Llama2Tokenizer. Reference: Megatron-LM
// megatron/training/tokenizer/tokenizer.py (_GPTSentencePieceTokenizer, _Llama2Tokenizer and
// their base _SentencePieceTokenizer._initalize).
#include "data/gpt_sentencepiece_tokenizer.h"

#include <set>

#include "core/error.h"

namespace megatron {

GPTSentencePieceTokenizer::GPTSentencePieceTokenizer(const std::string& model_file, bool llama2)
    : model_(model_file),
      prepend_bos_(llama2),
      vocab_size_(model_.vocab_size()),
      pad_(model_.pad()) {
  if (!llama2) return;
  MT_REQUIRE(model_.bos() >= 0, "--tokenizer-model '", model_file,
             "' has no BOS piece, which Llama2Tokenizer puts before every text; use "
             "--tokenizer-type GPTSentencePieceTokenizer");
  // _initalize adds each of these pieces the model lacks, in this order, after its pieces.
  const auto piece_or = [&](int32_t id, const char* fallback) {
    return id >= 0 ? model_.id_to_piece(id) : std::string(fallback);
  };
  const std::string pad_piece = piece_or(model_.pad(), "<PAD>");
  std::set<std::string> added;
  for (const std::string& piece :
       {std::string("<CLS>"), std::string("<SEP>"), std::string("<EOD>"), std::string("<MASK>"),
        pad_piece, piece_or(model_.bos(), "<BOS>"), piece_or(model_.eod(), "<EOS>")}) {
    if (model_.piece_to_id(piece) >= 0 || added.count(piece)) continue;
    if (piece == pad_piece) pad_ = static_cast<int32_t>(vocab_size_);
    added.insert(piece);
    ++vocab_size_;
  }
}

std::vector<int32_t> GPTSentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids = model_.encode(text);
  if (prepend_bos_) ids.insert(ids.begin(), model_.bos());
  return ids;
}

std::string GPTSentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  return model_.decode(ids);
}

}  // namespace megatron
