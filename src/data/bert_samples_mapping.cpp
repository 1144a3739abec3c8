#include "data/bert_samples_mapping.h"

#include "core/error.h"
#include "data/random_stream.h"
#include "data/split.h"

namespace megatron {

namespace {

constexpr int64_t kLongSentence = 512;  // Megatron's LONG_SENTENCE_LEN
constexpr int64_t kMinSentences = 2;    // A and B each need one
enum : uint64_t { kKeyTargets = 0x62657274000001, kKeyShuffle };

}  // namespace

std::vector<BertSampleSpan> build_bert_samples_mapping(std::span<const int64_t> doc_idx,
                                                       std::span<const int32_t> sizes,
                                                       int64_t num_samples, int64_t max_tokens,
                                                       double short_seq_prob, uint64_t seed) {
  MT_REQUIRE(max_tokens >= 2, "BERT needs --seq-length >= 5 (2 tokens + [CLS] and two [SEP])");
  MT_REQUIRE(short_seq_prob >= 0 && short_seq_prob <= 1, "--short-seq-prob ", short_seq_prob,
             " is not in [0, 1]");
  MT_REQUIRE(doc_idx.size() >= 2, "the BERT dataset split has no documents");
  // Megatron: a short target when draw % round(1 / p) == 0; p = 0 means never.
  const int64_t short_ratio = short_seq_prob > 0 ? round_half_even(1.0 / short_seq_prob) : 0;
  RandomStream targets(seed, kKeyTargets);
  auto target_length = [&] {
    const uint32_t r = targets.next_u32();
    if (short_ratio > 0 && r % uint64_t(short_ratio) == 0) return 2 + int64_t(r % (max_tokens - 1));
    return max_tokens;
  };

  std::vector<BertSampleSpan> samples;
  while (int64_t(samples.size()) < num_samples) {
    const size_t before = samples.size();
    for (size_t d = 0; d + 1 < doc_idx.size(); ++d) {
      const int64_t first = doc_idx[d], last = doc_idx[d + 1];
      if (last - first < kMinSentences) continue;
      bool has_long = false;
      for (int64_t s = first; s < last; ++s)
        has_long = has_long || sizes[size_t(s)] > kLongSentence;
      if (has_long) continue;
      int64_t start = first, length = 0, count = 0, target = target_length();
      for (int64_t s = first; s < last; ++s) {
        length += sizes[size_t(s)];
        ++count;
        const int64_t remaining = last - s - 1;
        if ((length >= target && remaining > 1 && count >= kMinSentences) || remaining == 0) {
          // An early cut leaves >= 2 sentences, so every sample has >= 2 sentences.
          samples.push_back({start, s + 1, target});
          start = s + 1;
          length = 0;
          count = 0;
          target = target_length();
        }
      }
    }
    MT_REQUIRE(samples.size() > before,
               "no document of the BERT dataset split has >= 2 sentences of <= 512 tokens; "
               "was the data preprocessed with --split-sentences?");
  }
  RandomStream(seed, kKeyShuffle).shuffle(samples);
  return samples;
}

}  // namespace megatron
