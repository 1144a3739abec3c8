// clean_up_tokenization: HuggingFace transformers' decode clean-up (" ." -> ".", " n't" ->
// "n't", ...), applied by BERT's decode and by HuggingFace tokenizers whose
// tokenizer_config.json sets clean_up_tokenization_spaces.
#pragma once

#include <string>

namespace megatron {

// text with spaces before punctuation and English contractions removed.
std::string clean_up_tokenization(std::string text);

}  // namespace megatron
