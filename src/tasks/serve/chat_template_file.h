// Where `megatron serve` finds a model's chat template: --chat-template names a
// tokenizer_config.json (HF's: "chat_template", "bos_token", "eos_token") or a Jinja file; without
// it, the tokenizer_config.json beside an HF tokenizer (--tokenizer-model) is read when it has one.
#pragma once

#include <string>

namespace megatron {

struct ChatTemplateFile {
  std::string source;  // the Jinja text ("" when there is none)
  std::string bos_token, eos_token;
};

// Reads `path`: a .json file as tokenizer_config.json (a "chat_template" string, or a list of
// {"name", "template"} of which "default" is taken), anything else as the template itself.
// Throws Error naming the file and the fix when it cannot be read or has no template.
ChatTemplateFile read_chat_template_file(const std::string& path);

// The tokenizer_config.json beside --tokenizer-model (a tokenizer.json file or its directory),
// "" when there is none.
std::string chat_template_beside(const std::string& tokenizer_model);

}  // namespace megatron
