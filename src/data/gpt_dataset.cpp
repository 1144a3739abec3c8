#include "data/gpt_dataset.h"

#include <numeric>

#include "core/error.h"
#include "core/logging.h"
#include "data/gpt_index_cache.h"

namespace megatron {

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& name,
                       int64_t first_document, int64_t end_document, int64_t num_samples,
                       int64_t seq_length, uint64_t seed, const std::string& cache_dir)
    : data_(std::move(data)), seq_length_(seq_length) {
  MT_CHECK(data_ != nullptr, "GptDataset needs an indexed dataset");
  MT_CHECK(0 <= first_document && first_document < end_document &&
               end_document <= data_->num_sequences(),
           "documents [", first_document, ", ", end_document, ") of '", data_->prefix(),
           "' are not a non-empty range of its ", data_->num_sequences(), " documents");
  cache_path_ = gpt_index_cache_path({data_->prefix(), name, first_document, end_document,
                                      num_samples, seq_length, seed, cache_dir});
  if (std::optional<GptIndex> cached = load_gpt_index(cache_path_)) {
    index_ = std::move(*cached);
  } else {
    std::vector<int64_t> documents(size_t(end_document - first_document));  // [n_docs]
    std::iota(documents.begin(), documents.end(), first_document);
    std::vector<int32_t> sizes = data_->sequence_lengths();
    index_ = build_gpt_index(documents, sizes, seq_length, num_samples, seed);
    try {
      save_gpt_index(cache_path_, index_);
    } catch (const Error& e) {
      log_warning("cannot cache the " + name + " index (" + e.message() + "); continuing");
    }
  }
  MT_REQUIRE(index_.num_samples() >= num_samples, "index '", cache_path_, "' has ",
             index_.num_samples(), " samples, expected at least ", num_samples);
}

void GptDataset::sample(int64_t index, std::vector<int32_t>& tokens) const {
  MT_CHECK(index >= 0 && index < size(), "sample ", index, " out of range [0, ", size(), ")");
  const int64_t k = index_.shuffle_idx[size_t(index)];
  const int64_t first_pos = index_.sample_idx[size_t(2 * k)];
  const int64_t first_offset = index_.sample_idx[size_t(2 * k + 1)];
  const int64_t last_pos = index_.sample_idx[size_t(2 * k + 2)];
  const int64_t last_offset = index_.sample_idx[size_t(2 * k + 3)];
  const std::vector<int64_t>& doc_idx = index_.doc_idx;
  tokens.clear();
  if (first_pos == last_pos) {
    data_->read(doc_idx[size_t(first_pos)], first_offset, last_offset - first_offset + 1, tokens);
  } else {
    const int64_t first_doc = doc_idx[size_t(first_pos)];
    data_->read(first_doc, first_offset, data_->sequence_length(first_doc) - first_offset, tokens);
    for (int64_t p = first_pos + 1; p < last_pos; ++p) {
      const int64_t doc = doc_idx[size_t(p)];
      data_->read(doc, 0, data_->sequence_length(doc), tokens);
    }
    data_->read(doc_idx[size_t(last_pos)], 0, last_offset + 1, tokens);
  }
  MT_CHECK(int64_t(tokens.size()) == seq_length_ + 1, "sample ", index, " has ", tokens.size(),
           " tokens, expected ", seq_length_ + 1);
}

}  // namespace megatron
