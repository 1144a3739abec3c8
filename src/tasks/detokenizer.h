// Megatron's zero-shot detokenizers (tasks/zeroshot_gpt/detokenizer.py): WikiText-103 and PTB
// ship pre-tokenized ("don 't", "1 @,@ 000", "( a )"); before GPT-2 tokenization the text is
// turned back into ordinary prose by a fixed chain of substitutions over the WHOLE file. The
// chain is reproduced step by step: plain replacements as Python's str.replace, the regular
// expressions as Python's re.sub, with PCRE2 (a backtracking engine with the same leftmost,
// lazy-quantifier semantics; `\s` spelled as Python's whitespace set). Some of these matches
// cross lines and run over thousands of characters, e.g. from one stray quote to the next.
#pragma once

#include <string>

namespace megatron {

enum class Detokenizer { Ptb, WikiText, Lambada };

// Megatron's choice by file path: the first of "ptb", "wiki", "lambada" that occurs in
// `path`. Throws Error naming the path when none does (Megatron would fail there too).
Detokenizer detokenizer_for_path(const std::string& path);

// The detokenized text. `text` must be valid UTF-8 (Python decodes the file first).
std::string detokenize(Detokenizer which, std::string text);

}  // namespace megatron
