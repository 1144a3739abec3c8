// The zero-shot evaluation datasets of Megatron (tasks/zeroshot_gpt/datasets.py), sample for
// sample: WikiText-103-style language modelling windows (_LMDataset) and LAMBADA last-word
// samples (_LambadaDataset).
//
// Every sample is seq_length + 1 tokens padded with EOD and a mask over the seq_length targets
// tokens[1..]: the model reads tokens[0..s) and the masked targets are scored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizers/tokenizer.h"

namespace megatron {

struct EvalSample {
  std::vector<int32_t> tokens;  // [seq_length + 1], EOD-padded
  std::vector<float> mask;      // [seq_length], 1 = target tokens[i + 1] is scored
};

// A raw corpus file prepared as Megatron prepares WikiText-103's test file: the original token
// count is len(text.strip().split(" ")) of the raw text, the text is detokenized (detokenizer
// chosen by the path) and then tokenized whole.
struct LmCorpus {
  std::vector<int32_t> tokens;
  int64_t num_original_tokens = 0;
  int64_t num_tokenized_tokens = 0;
};
// Throws Error naming `path` when it cannot be read, is not UTF-8, or tokenizes to fewer
// than two tokens (nothing to predict).
LmCorpus read_lm_corpus(const std::string& path, const Tokenizer& tokenizer);

// _LMDataset: windows of seq_length + 1 tokens starting every `overlapping_eval` tokens
// (clamped to >= 1), the last padded with `pad`. Window 0 scores all its targets; every later
// window only its last `overlapping_eval` (the earlier ones were scored before and serve as
// context), so each of the corpus's len − 1 targets is scored once when
// overlapping_eval <= seq_length.
class LmWindows {
 public:
  LmWindows(std::vector<int32_t> tokens, int64_t seq_length, int32_t pad, int64_t overlapping_eval);
  int64_t size() const { return num_windows_; }
  EvalSample operator[](int64_t index) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_length_, overlapping_eval_, num_windows_;
  int32_t pad_;
};

// _LambadaDataset: one sample per JSONL line {"text": ...}; the target is the last token
// (strict = false) or the last whitespace-separated word tokenized on its own with a leading
// space (strict = true, --strict-lambada), the context the text before it. Throws Error naming
// the file and line for a line that is not such an object, an empty text, or a sample longer
// than seq_length + 1 tokens.
std::vector<EvalSample> read_lambada(const std::string& path, const Tokenizer& tokenizer,
                                     int64_t seq_length, bool strict);

}  // namespace megatron
