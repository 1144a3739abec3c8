// The tokenizer.ggml.* metadata of a GGUF export: llama.cpp tokenizes and detokenizes with the
// vocabulary stored in the file, never with files next to it.
//
//   GPT2BPETokenizer   tokenizer.ggml.model "gpt2" (byte-level BPE), tokenizer.ggml.pre "gpt-2"
//                      (GPT-2's pre-tokenizer regex), tokens (vocab.json's strings by id),
//                      token_type (1 normal, 3 control: <|endoftext|>), merges (merges.txt's
//                      lines after the "#version" header), bos/eos = the end-of-document id,
//                      add_bos_token false (Megatron's GPT prompts start without one)
//   none (--mock-data, NullTokenizer, an HF import: no tokenizer recorded)
//                      tokenizer.ggml.model "none": llama.cpp then holds {arch}.vocab_size
//                      placeholder tokens (the exporter writes that key) and takes token ids
//                      only (a warning says so)
// Other tokenizers (SentencePiece, HF tokenizer.json, tiktoken) are refused by name.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/gguf_writer.h"
#include "convert/hf_tokenizer_files.h"

namespace megatron {

// Adds the tokenizer metadata of `tokenizer` (checkpoint_tokenizer(); null: none) for a model
// of `vocab_size` real entries. The files are found as the HF
// export finds them (recorded path and CRC-32C, or `overrides`). Throws Error when a file is
// missing or changed, when the vocabulary is not the model's, or for a tokenizer type llama.cpp
// is not given here.
void add_gguf_tokenizer(GgufWriter& gguf, const nlohmann::json& tokenizer, int64_t vocab_size,
                        const TokenizerFileOverrides& overrides);

}  // namespace megatron
