#include "data/blended_dataset.h"

#include <algorithm>

#include "core/error.h"

namespace megatron {

BlendingIndex build_blending_index(const std::vector<double>& weights, int64_t size) {
  MT_REQUIRE(!weights.empty(), "blending needs at least one dataset");
  double sum = 0;
  for (double w : weights) {
    MT_REQUIRE(w >= 0, "blending weight ", w, " is negative, expected >= 0");
    sum += w;
  }
  MT_REQUIRE(sum > 0, "blending weights sum to 0, expected a positive sum");
  std::vector<double> w(weights.size());
  for (size_t k = 0; k < w.size(); ++k) w[k] = weights[k] / sum;

  BlendingIndex index;
  index.dataset.resize(size_t(size));
  index.dataset_sample.resize(size_t(size));
  std::vector<int64_t> counts(w.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double target = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = w[0] * target - double(counts[0]);
    for (size_t k = 1; k < w.size(); ++k) {
      const double error = w[k] * target - double(counts[k]);
      if (error > best_error) {
        best_error = error;
        best = k;
      }
    }
    index.dataset[size_t(i)] = int32_t(best);
    index.dataset_sample[size_t(i)] = counts[best]++;
  }
  return index;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const GptSampleSource>> datasets,
                               const std::vector<double>& weights, int64_t size)
    : datasets_(std::move(datasets)) {
  MT_CHECK(!datasets_.empty() && datasets_.size() == weights.size(), "blending ", datasets_.size(),
           " datasets with ", weights.size(), " weights, expected one each");
  for (const auto& d : datasets_) {
    MT_CHECK(d != nullptr, "blending a missing dataset");
    MT_REQUIRE(d->seq_length() == datasets_.front()->seq_length(),
               "blended datasets have different seq lengths ", d->seq_length(), " and ",
               datasets_.front()->seq_length());
  }
  index_ = build_blending_index(weights, size);
  std::vector<int64_t> needed(datasets_.size(), 0);
  for (size_t i = 0; i < index_.dataset.size(); ++i)
    needed[size_t(index_.dataset[i])] = index_.dataset_sample[i] + 1;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    MT_REQUIRE(needed[k] <= datasets_[k]->size(), "blended dataset ", k, " has ",
               datasets_[k]->size(), " samples, the blend needs ", needed[k]);
  }
}

void BlendedDataset::sample(int64_t index, std::vector<int32_t>& tokens) const {
  MT_CHECK(index >= 0 && index < size(), "sample ", index, " out of range [0, ", size(), ")");
  datasets_[size_t(index_.dataset[size_t(index)])]->sample(index_.dataset_sample[size_t(index)],
                                                           tokens);
}

}  // namespace megatron
