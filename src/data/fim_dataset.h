// FimDataset: Megatron's fill-in-the-middle GPT data (--fim-data; Bavarian et al. 2022,
// "Efficient Training of Language Models to Fill in the Middle"; Megatron's GPTFIMDataset): the
// samples of another GPT sample source, each rearranged so that a model learns to write a middle
// given what comes before and after it.
//
// A sample (seq_length + 1 tokens) is cut at its EOD tokens (the --fim-eod-token) into
// segments; each non-empty segment is transformed and followed by its EOD again (an empty one,
// EOD at the start or twice in a row, vanishes with its EOD, as in Megatron), and so is the
// part after the last EOD (even empty). A segment is transformed, with probability rate:
// its text (the tokens decoded) is cut at two uniformly drawn character positions (Unicode code
// points, 0 ≤ i ≤ j ≤ length) into prefix, middle and suffix, each re-encoded, and arranged
//   PSM: <prefix> prefix <suffix> suffix <middle> middle
//   SPM (with probability spm_rate): <prefix> <suffix> suffix <middle> prefix middle
// unless its text starts with no_prefix. With a split token (--fim-split-sample) a segment that
// contains it is instead, with probability rate, cut at it into fragments, each transformed with
// probability fragment_rate and followed by the split token (empty fragments vanish with theirs,
// the part after the last one is always kept). The result is cut to seq_length + 1 tokens or
// padded with the <pad> sentinel. Loss mask and EOD handling are the GPT data loader's, as for
// any sample (Megatron masks neither the sentinels nor the padding).
//
// Where we differ on purpose: Megatron draws from one numpy RandomState per dataset, in the order
// samples happen to be read, so its samples depend on the reading order (data-loader workers,
// data-parallel ranks). Here sample i draws from RandomStream(seed, key(i)) (data/random_stream.h)
// in Megatron's order of draws, so each sample is a function of its index: the same at every
// layout, on resume, on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/tokenizers/tokenizer.h"

namespace megatron {

// The sentinel ids, resolved from the tokenizer's vocabulary (resolve_fim_tokens).
struct FimTokens {
  int32_t prefix = -1, middle = -1, suffix = -1, pad = -1, eod = -1;
};

struct FimOptions {
  double rate = 0.5;      // --fim-rate
  double spm_rate = 0.5;  // --fim-spm-rate
  FimTokens tokens;
  std::optional<int32_t> split_token;    // --fim-split-sample, resolved
  double fragment_rate = 0.0;            // --fim-fragment-rate (with split_token)
  std::optional<std::string> no_prefix;  // --fim-no-prefix
};

// The --fim-*-token names of the sentinels (Megatron's defaults: <fim_prefix>, <fim_middle>,
// <fim_suffix>, <fim_pad>, <|endoftext|>).
struct FimTokenNames {
  std::string prefix = "<fim_prefix>", middle = "<fim_middle>", suffix = "<fim_suffix>",
              pad = "<fim_pad>", eod = "<|endoftext|>";
};

// Looks each name up in the tokenizer's vocabulary; throws Error naming the token, the flag that
// sets it and the fix when the vocabulary has no such entry.
FimTokens resolve_fim_tokens(const Tokenizer& tokenizer, const FimTokenNames& names);

// Throws Error naming the flag when a rate is outside [0, 1].
void validate_fim_options(const FimOptions& options);

class FimDataset final : public GptSampleSource {
 public:
  FimDataset(std::shared_ptr<const GptSampleSource> samples,
             std::shared_ptr<const Tokenizer> tokenizer, const FimOptions& options, uint64_t seed);

  int64_t size() const override { return samples_->size(); }
  int64_t seq_length() const override { return samples_->seq_length(); }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override;

 private:
  std::shared_ptr<const GptSampleSource> samples_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  FimOptions options_;
  uint64_t seed_;
};

}  // namespace megatron
