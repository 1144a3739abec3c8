// The tokenizer files of an HF model directory, written by `megatron convert --to hf` next to
// config.json and model.safetensors so that the export loads with transformers'
// AutoTokenizer as well as AutoModel:
//   GPT2BPETokenizer           vocab.json, merges.txt (the training files, byte for byte),
//                              tokenizer_config.json (GPT2Tokenizer), special_tokens_map.json
//   BertWordPieceLowerCase/Case  vocab.txt, tokenizer_config.json (BertTokenizer, do_lower_case)
//   GPTSentencePieceTokenizer / Llama2Tokenizer
//                              tokenizer.model (the training file, byte for byte),
//                              tokenizer_config.json (LlamaTokenizer: no BOS or EOS added, as
//                              Megatron encodes; <unk>, <s>, </s> the model's pieces),
//                              special_tokens_map.json
// The files are found through the checkpoint's tokenizer identity (state.json "tokenizer",
// data/tokenizers/tokenizer_identity.h; older checkpoints: the stored --vocab-file/--merge-file).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace megatron {

// Paths that replace the recorded ones (e.g. after the files moved); empty: use the record.
struct TokenizerFileOverrides {
  std::string vocab_file, merge_file, tokenizer_model;
};

// The checkpoint's tokenizer identity: state["tokenizer"], or one rebuilt (without checksums)
// from state["args"] for checkpoints written before it was stored; null when the checkpoint
// was trained without a tokenizer (--mock-data).
nlohmann::json checkpoint_tokenizer(const nlohmann::json& state);

// Writes the tokenizer files of `tokenizer` (checkpoint_tokenizer()) into `hf_dir` for a model
// of `model_vocab_size` real entries and `max_length` positions; returns the names written.
// Throws Error when a file is missing or changed (naming the --vocab-file/--merge-file/
// --tokenizer-model flag
// that supplies it) or when the tokenizer's vocabulary is not the model's. A tokenizer type
// HF has no file set for here (tiktoken, HF's own, Null) writes nothing and warns.
std::vector<std::string> write_hf_tokenizer_files(const std::string& hf_dir,
                                                  const nlohmann::json& tokenizer,
                                                  int64_t model_vocab_size, int64_t max_length,
                                                  const TokenizerFileOverrides& overrides);

}  // namespace megatron
