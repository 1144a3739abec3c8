#include "data/bert_dataset.h"

#include "core/error.h"
#include "core/philox.h"

namespace megatron {

namespace {

constexpr uint64_t kKeySample = 0x62657274000010;

// Megatron's truncate_segments: drop one token at a time from the longer segment (B on a
// tie), from its front or back with equal probability.
bool truncate_segments(std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t max_tokens,
                       RandomStream& rng) {
  bool truncated = false;
  while (int64_t(a.size() + b.size()) > max_tokens) {
    std::vector<int32_t>& longer = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5) {
      longer.erase(longer.begin());
    } else {
      longer.pop_back();
    }
    truncated = true;
  }
  return truncated;
}

}  // namespace

BertDataset::BertDataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document,
                         int64_t end_document, int64_t num_samples, BertDatasetOptions options)
    : data_(std::move(data)), options_(std::move(options)) {
  MT_CHECK(data_ != nullptr, "BertDataset needs an indexed dataset");
  MT_CHECK(0 <= first_document && first_document < end_document &&
               end_document <= data_->num_documents(),
           "documents [", first_document, ", ", end_document, ") of '", data_->prefix(),
           "' are not a non-empty range of its ", data_->num_documents(), " documents");
  MT_REQUIRE(options_.cls >= 0 && options_.sep >= 0 && options_.mask >= 0 && options_.pad >= 0,
             "BERT needs a tokenizer with [CLS], [SEP], [MASK] and [PAD] tokens");
  MT_REQUIRE(options_.mask_prob >= 0 && options_.mask_prob <= 1, "--mask-prob ", options_.mask_prob,
             " is not in [0, 1]");
  std::vector<int64_t> all = data_->document_indices();
  std::vector<int64_t> doc_idx(all.begin() + first_document, all.begin() + end_document + 1);
  mapping_ = build_bert_samples_mapping(doc_idx, data_->sequence_lengths(), num_samples,
                                        options_.max_seq_length - 3, options_.short_seq_prob,
                                        options_.seed);
}

void BertDataset::sample(int64_t index, BertSample& out) const {
  MT_CHECK(index >= 0 && index < size(), "sample ", index, " out of range [0, ", size(), ")");
  const BertSampleSpan& span = mapping_[size_t(index)];
  RandomStream rng(options_.seed, philox_key({kKeySample, uint64_t(index)}));
  // Segment A is sentences [first, a_end), B the rest; with >= 3 sentences a_end is random.
  const int64_t n = span.end_sentence - span.first_sentence;
  const int64_t a_end = n >= 3 ? 1 + int64_t(rng.below(uint64_t(n - 1))) : 1;
  std::vector<int32_t> a, b;
  for (int64_t k = 0; k < n; ++k)
    data_->read(span.first_sentence + k, 0, data_->sequence_length(span.first_sentence + k),
                k < a_end ? a : b);
  out.sop_label = rng.uniform() < 0.5 ? 1 : 0;
  if (out.sop_label) std::swap(a, b);
  out.truncated = truncate_segments(a, b, span.target_length, rng);

  const int64_t s = options_.max_seq_length;
  std::vector<int32_t> tokens;  // [CLS] A [SEP] B [SEP]
  tokens.reserve(size_t(s));
  tokens.push_back(options_.cls);
  tokens.insert(tokens.end(), a.begin(), a.end());
  tokens.push_back(options_.sep);
  tokens.insert(tokens.end(), b.begin(), b.end());
  tokens.push_back(options_.sep);
  const int64_t used = int64_t(tokens.size());

  BertMaskingOptions masking{options_.mask_prob,  options_.max_ngrams, options_.cls,
                             options_.sep,        options_.mask,       options_.vocab_size,
                             &options_.word_start};
  MaskedPositions masked = mask_whole_words(tokens, span.target_length, masking, rng);

  out.tokens.assign(size_t(s), options_.pad);
  std::copy(tokens.begin(), tokens.end(), out.tokens.begin());
  out.token_types.assign(size_t(s), 0);
  for (int64_t i = int64_t(a.size()) + 2; i < used; ++i) out.token_types[size_t(i)] = 1;
  out.padding_mask.assign(size_t(s), 0.0f);
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + used, 1.0f);
  out.labels.assign(size_t(s), -1);
  out.loss_mask.assign(size_t(s), 0.0f);
  for (size_t k = 0; k < masked.positions.size(); ++k) {
    out.labels[size_t(masked.positions[k])] = masked.labels[k];
    out.loss_mask[size_t(masked.positions[k])] = 1.0f;
  }
}

}  // namespace megatron
