// GPTSentencePieceTokenizer and Llama2Tokenizer: Megatron's two SentencePiece tokenizers for
// GPT-style models (--tokenizer-model: a SentencePiece .model), on SentencePieceTokenizer.
//
//   GPTSentencePieceTokenizer  encode = the model's ids (encode_as_ids), nothing added;
//                              vocab_size = the model's pieces; EOD = eos id; pad = pad id.
//   Llama2Tokenizer            encode = BOS + the model's ids (tokenize(bos=True, eos=False));
//                              EOD = eos id. Its vocab_size counts, as Megatron's does, the
//                              special pieces its base class adds when the model lacks them:
//                              <CLS> <SEP> <EOD> <MASK>, and the pad/bos/eos pieces (<PAD>,
//                              <BOS>, <EOS> when the model has no such id); pad is that id.
// Both: CLS/SEP/MASK are -1; decode = the model's decode of all ids.
#pragma once

#include <string>

#include "data/sentencepiece_tokenizer.h"

namespace megatron {

class GPTSentencePieceTokenizer final : public Tokenizer {
 public:
  // llama2: Llama2Tokenizer's rules (BOS first, Megatron's vocabulary count); else
  // GPTSentencePieceTokenizer's. Throws Error naming --tokenizer-model for a bad model.
  GPTSentencePieceTokenizer(const std::string& model_file, bool llama2);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return model_.eod(); }
  int32_t pad() const override { return pad_; }
  int32_t bos() const { return model_.bos(); }

 private:
  SentencePieceTokenizer model_;
  bool prepend_bos_;
  int64_t vocab_size_;
  int32_t pad_;
};

}  // namespace megatron
