// split_sentences: a rule-based English sentence splitter for `preprocess --split-sentences`
// (Megatron uses NLTK's Punkt, which is not available here).
//
// A sentence ends after a run of '.', '!' or '?' (plus any closing quotes or brackets) that
// is followed by whitespace and then by an upper-case letter, a digit or an opening
// quote/bracket — except after a '.' that ends a known abbreviation ("Mr.", "e.g.", "Jan."),
// a single-letter initial ("J. Smith") or a dotted acronym ("U.S."). A blank line (two
// newlines) always ends a sentence. Sentences are returned without surrounding whitespace;
// whitespace-only pieces are dropped.
#pragma once

#include <string_view>
#include <vector>

namespace megatron {

std::vector<std::string_view> split_sentences(std::string_view text);

}  // namespace megatron
