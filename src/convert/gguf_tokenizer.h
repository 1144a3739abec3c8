// The tokenizer.ggml.* metadata of a GGUF export: llama.cpp tokenizes and detokenizes with the
// vocabulary stored in the file, never with files next to it.
//
//   GPT2BPETokenizer   tokenizer.ggml.model "gpt2" (byte-level BPE), tokenizer.ggml.pre "gpt-2"
//                      (GPT-2's pre-tokenizer regex), tokens (vocab.json's strings by id),
//                      token_type (1 normal, 3 control: <|endoftext|>), merges (merges.txt's
//                      lines after the "#version" header), bos/eos = the end-of-document id,
//                      add_bos_token false (Megatron's GPT prompts start without one)
//   none recorded (--mock-data, NullTokenizer, an HF import)
//                      placeholder tokens "<|0|>", "<|1|>", ... of type user-defined (which
//                      llama.cpp matches in any text: "<|5|><|17|>" is the ids 5, 17), no
//                      merges, pre-tokenizer "default", bos/eos = NullTokenizer's end of
//                      document when recorded. (llama.cpp's tokenizer-less "none" model aborts
//                      as soon as anything tokenizes, e.g. node-llama-cpp's loader.)
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
