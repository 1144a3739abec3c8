// GPTSentencePieceTokenizer and Llama2Tokenizer: Megatron-LM's SentencePiece tokenizers for
// GPT-style models (--tokenizer-model: a SentencePiece .model), on SentencePieceTokenizer.
//
// Megatron's current main builds both types the same way (megatron/core/tokenizers
// SentencePieceTokenizer with legacy=False and ignore_extra_whitespaces=True): encode is the
// model's encode_as_ids, with no BOS or EOS added; vocab_size is the model's piece count;
// EOD = the eos id, pad = the pad id, bos = the bos id (-1 where the model has none);
// CLS/SEP/MASK are -1; decode is the model's decode of all ids.
// (Megatron's older megatron/training/tokenizer put BOS before every Llama2Tokenizer text and
// counted extra <CLS> <SEP> <EOD> <MASK> pieces; its current main does neither.)
#pragma once

#include <string>

#include "data/tokenizers/sentencepiece_tokenizer.h"

namespace megatron {

class GPTSentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws Error naming --tokenizer-model for a missing or bad model.
  explicit GPTSentencePieceTokenizer(const std::string& model_file) : model_(model_file) {}

  std::vector<int32_t> encode(std::string_view text) const override { return model_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return model_.decode(ids); }
  int64_t vocab_size() const override { return model_.vocab_size(); }
  int32_t eod() const override { return model_.eod(); }
  int32_t pad() const override { return model_.pad(); }
  int32_t bos() const { return model_.bos(); }

 private:
  SentencePieceTokenizer model_;
};

}  // namespace megatron
