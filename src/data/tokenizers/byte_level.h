// Byte-level BPE's byte<->unicode table (GPT-2's bytes_to_unicode()), shared by GPT-2's files
// and HuggingFace tokenizer.json files of byte-level models: vocabulary and merges store each
// byte as a printable code point so that tokens are valid, space-free strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megatron {

// The printable code point standing for `byte` in vocab/merges files.
char32_t gpt2_byte_to_unicode(uint8_t byte);

// The raw bytes that `token` (in byte-to-unicode form) stands for. Throws Error naming `file`
// when a character is outside the table.
std::string byte_level_token_bytes(std::string_view token, std::string_view file);

}  // namespace megatron
