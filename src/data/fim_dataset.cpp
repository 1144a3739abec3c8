#include "data/fim_dataset.h"

#include <algorithm>
#include <span>
#include <string_view>

#include "core/error.h"
#include "core/philox.h"
#include "data/random_stream.h"
#include "data/utf8.h"

namespace megatron {

namespace {

constexpr uint64_t kKeyFim = 0x46494d;  // "FIM": the stream of sample i is key (kKeyFim, i)

using Tokens = std::vector<int32_t>;

void append(Tokens& out, std::span<const int32_t> part) {
  out.insert(out.end(), part.begin(), part.end());
}

// One sample's transformation; draws from the sample's own stream in Megatron's order.
class FimTransform {
 public:
  FimTransform(const Tokenizer& tokenizer, const FimOptions& options, RandomStream& rng)
      : tokenizer_(tokenizer), o_(options), rng_(rng) {}

  // Megatron's _query_document_sample_shuffle_indices after the sample is read.
  Tokens sample(std::span<const int32_t> sample) {
    Tokens out;
    size_t start = 0;
    for (size_t i = 0; i < sample.size(); ++i) {
      if (sample[i] != o_.tokens.eod) continue;
      if (i > start) {  // an empty segment vanishes with its EOD
        append(out, split_and_permute(sample.subspan(start, i - start)));
        out.push_back(o_.tokens.eod);
      }
      start = i + 1;
    }
    append(out, split_and_permute(sample.subspan(start)));
    out.resize(sample.size(), o_.tokens.pad);  // cut, or pad with the <pad> sentinel
    return out;
  }

 private:
  bool bernoulli(double p) { return rng_.uniform() < p; }

  // Megatron's _fim_split_and_permute_sequence.
  Tokens split_and_permute(std::span<const int32_t> segment) {
    const auto is_split = [&](int32_t t) { return o_.split_token && t == *o_.split_token; };
    if (std::none_of(segment.begin(), segment.end(), is_split)) return permute(segment, o_.rate);
    if (!bernoulli(o_.rate)) return Tokens(segment.begin(), segment.end());
    Tokens out;
    size_t start = 0;
    for (size_t i = 0; i < segment.size(); ++i) {
      if (!is_split(segment[i])) continue;
      if (i > start) {  // an empty fragment vanishes with its split token
        append(out, permute(segment.subspan(start, i - start), o_.fragment_rate));
        out.push_back(*o_.split_token);
      }
      start = i + 1;
    }
    append(out, permute(segment.subspan(start), o_.fragment_rate));
    return out;
  }

  // Megatron's _permute (without truncation: the whole sample is cut to length afterwards).
  Tokens permute(std::span<const int32_t> part, double rate) {
    if (!bernoulli(rate)) return Tokens(part.begin(), part.end());
    // The text without the tokenizer's special token (Megatron decodes with
    // remove_special_tokens), ill-formed UTF-8 replaced by U+FFFD as Python's decode does.
    Tokens ids;
    for (int32_t t : part)
      if (t != tokenizer_.eod()) ids.push_back(t);
    const std::string text = tokenizer_.decode(ids);
    if (o_.no_prefix && std::string_view(text).starts_with(*o_.no_prefix))
      return Tokens(part.begin(), part.end());
    // Byte offset of each code point, and the end: Python slices str by code points.
    std::vector<size_t> offsets;
    for (size_t pos = 0; pos < text.size();) {
      offsets.push_back(pos);
      next_code_point(text, pos);
    }
    offsets.push_back(text.size());
    const uint64_t chars = offsets.size() - 1;
    uint64_t a = rng_.below(chars + 1), b = rng_.below(chars + 1);
    if (a > b) std::swap(a, b);
    const std::string_view view(text);
    const Tokens prefix = tokenizer_.encode(view.substr(0, offsets[a]));
    const Tokens middle = tokenizer_.encode(view.substr(offsets[a], offsets[b] - offsets[a]));
    const Tokens suffix = tokenizer_.encode(view.substr(offsets[b]));
    Tokens out;
    if (bernoulli(o_.spm_rate)) {  // SPM
      out = {o_.tokens.prefix, o_.tokens.suffix};
      append(out, suffix);
      out.push_back(o_.tokens.middle);
      append(out, prefix);
      append(out, middle);
    } else {  // PSM
      out = {o_.tokens.prefix};
      append(out, prefix);
      out.push_back(o_.tokens.suffix);
      append(out, suffix);
      out.push_back(o_.tokens.middle);
      append(out, middle);
    }
    return out;
  }

  const Tokenizer& tokenizer_;
  const FimOptions& o_;
  RandomStream& rng_;
};

}  // namespace

FimTokens resolve_fim_tokens(const Tokenizer& tokenizer, const FimTokenNames& names) {
  const auto id = [&](const std::string& name, const char* flag) {
    const std::optional<int32_t> found = tokenizer.token_to_id(name);
    MT_REQUIRE(found.has_value(), "--fim-data: the tokenizer's vocabulary has no token '", name,
               "' (", flag, "); set ", flag,
               " to one of its tokens, or use a vocabulary that has the FIM sentinels");
    return *found;
  };
  return {.prefix = id(names.prefix, "--fim-prefix-token"),
          .middle = id(names.middle, "--fim-middle-token"),
          .suffix = id(names.suffix, "--fim-suffix-token"),
          .pad = id(names.pad, "--fim-pad-token"),
          .eod = id(names.eod, "--fim-eod-token")};
}

void validate_fim_options(const FimOptions& o) {
  const auto rate = [](double r, const char* flag) {
    MT_REQUIRE(r >= 0 && r <= 1, flag, " must be a probability in [0, 1], got ", r);
  };
  rate(o.rate, "--fim-rate");
  rate(o.spm_rate, "--fim-spm-rate");
  if (o.split_token) rate(o.fragment_rate, "--fim-fragment-rate");
}

FimDataset::FimDataset(std::shared_ptr<const GptSampleSource> samples,
                       std::shared_ptr<const Tokenizer> tokenizer, const FimOptions& options,
                       uint64_t seed)
    : samples_(std::move(samples)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      seed_(seed) {
  MT_CHECK(samples_ && tokenizer_, "FimDataset needs a sample source and a tokenizer");
  validate_fim_options(options_);
}

void FimDataset::sample(int64_t index, std::vector<int32_t>& tokens) const {
  samples_->sample(index, tokens);
  RandomStream rng(seed_, philox_key({kKeyFim, uint64_t(index)}));
  tokens = FimTransform(*tokenizer_, options_, rng).sample(tokens);
}

}  // namespace megatron
