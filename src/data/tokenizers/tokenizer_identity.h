// The identity of a tokenizer, stored in every checkpoint's state.json as "tokenizer", so
// that a checkpoint says which ids it was trained on and an HF export can write the
// tokenizer's files next to the weights:
//
//   {"type": "GPT2BPETokenizer", "vocab_size": 50257, "eod": 50256,
//    "files": {"vocab_file": {"path": "/abs/gpt2-vocab.json", "crc32c": 3261297338},
//              "merge_file": {"path": "/abs/gpt2-merges.txt", "crc32c": 1853172130}}}
//
// "files" names each file the tokenizer was built from (by its flag name without dashes:
// vocab_file, merge_file, tokenizer_model) with its absolute path and the CRC32C of its
// bytes, so a file changed or moved since training is detected instead of silently used.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "data/tokenizers/make_tokenizer.h"

namespace megatron {

nlohmann::json tokenizer_identity(const TokenizerOptions& options, const Tokenizer& tokenizer);

// The path of file `key` ("vocab_file", ...) recorded in `identity`, or `override_path` when
// not empty, after checking that the file has the recorded content. Throws Error naming the
// file, and the flag that supplies another path, when it is missing or has changed.
std::string tokenizer_file(const nlohmann::json& identity, const std::string& key,
                           const std::string& override_path, const std::string& flag);

}  // namespace megatron
