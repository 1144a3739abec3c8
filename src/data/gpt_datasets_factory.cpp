#include "data/gpt_datasets_factory.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/logging.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/split.h"

namespace megatron {

namespace {

constexpr const char* kSplitNames[3] = {"train", "valid", "test"};

// One prefix's three datasets, each with `num_samples[k]` samples (none where 0).
std::array<std::shared_ptr<const GptSampleSource>, 3> build_for_prefix(
    const std::string& prefix, const std::string& split, int64_t seq_length, uint64_t seed,
    const std::array<int64_t, 3>& num_samples, const std::string& cache_dir) {
  auto data = std::make_shared<const IndexedDataset>(prefix);
  const std::array<int64_t, 4> bounds = split_boundaries(split, data->num_sequences());
  log_info("dataset '", prefix, "': ", data->num_sequences(), " documents, split ", split,
           " -> train [", bounds[0], ", ", bounds[1], ") valid [", bounds[1], ", ", bounds[2],
           ") test [", bounds[2], ", ", bounds[3], ")");
  std::array<std::shared_ptr<const GptSampleSource>, 3> out;
  for (int k = 0; k < 3; ++k) {
    if (num_samples[size_t(k)] <= 0) continue;
    if (bounds[size_t(k)] == bounds[size_t(k + 1)]) {
      log_warning(std::string("the ") + kSplitNames[k] + " split of '" + prefix +
                  "' has no documents (--split " + split + ")");
      continue;
    }
    out[size_t(k)] =
        std::make_shared<GptDataset>(data, kSplitNames[k], bounds[size_t(k)], bounds[size_t(k + 1)],
                                     num_samples[size_t(k)], seq_length, seed, cache_dir);
  }
  return out;
}

}  // namespace

std::vector<std::pair<double, std::string>> parse_data_path(
    const std::vector<std::string>& data_path) {
  MT_REQUIRE(!data_path.empty(), "--data-path is empty, expected a prefix or weight/prefix pairs");
  if (data_path.size() == 1) return {{1.0, data_path[0]}};
  MT_REQUIRE(data_path.size() % 2 == 0, "--data-path has ", data_path.size(),
             " values, expected one prefix or weight/prefix pairs (w1 p1 w2 p2 ...)");
  std::vector<std::pair<double, std::string>> out;
  for (size_t i = 0; i < data_path.size(); i += 2) {
    char* end = nullptr;
    double w = std::strtod(data_path[i].c_str(), &end);
    MT_REQUIRE(!data_path[i].empty() && *end == '\0' && std::isfinite(w) && w > 0,
               "--data-path weight '", data_path[i], "' (before '", data_path[i + 1],
               "') is not a positive number");
    out.emplace_back(w, data_path[i + 1]);
  }
  return out;
}

std::array<int64_t, 3> train_valid_test_num_samples(int64_t train_iters, int64_t global_batch,
                                                    int64_t eval_interval, int64_t eval_iters) {
  MT_REQUIRE(train_iters >= 0 && global_batch >= 1 && eval_interval >= 1 && eval_iters >= 0,
             "sample counts need --train-iters >= 0, --global-batch-size >= 1, "
             "--eval-interval >= 1 and --eval-iters >= 0");
  return {train_iters * global_batch, (train_iters / eval_interval + 1) * eval_iters * global_batch,
          eval_iters * global_batch};
}

GptDatasets build_gpt_datasets(const std::vector<std::string>& data_path, const std::string& split,
                               int64_t seq_length, uint64_t seed,
                               std::array<int64_t, 3> num_samples, const std::string& cache_dir) {
  MT_REQUIRE(seq_length >= 1, "--seq-length must be >= 1, got ", seq_length);
  const auto sources = parse_data_path(data_path);
  std::array<std::shared_ptr<const GptSampleSource>, 3> result;
  if (sources.size() == 1) {
    result = build_for_prefix(sources[0].second, split, seq_length, seed, num_samples, cache_dir);
  } else {
    double total = 0;
    for (const auto& s : sources) total += s.first;
    MT_REQUIRE(total > 0, "--data-path weights sum to 0, expected a positive sum");
    std::vector<double> weights;
    std::array<std::vector<std::shared_ptr<const GptSampleSource>>, 3> parts;
    for (const auto& [weight, prefix] : sources) {
      std::array<int64_t, 3> wanted;
      for (size_t k = 0; k < 3; ++k)
        wanted[k] = int64_t(std::ceil(double(num_samples[k]) * weight / total * 1.005));
      auto built = build_for_prefix(prefix, split, seq_length, seed, wanted, cache_dir);
      weights.push_back(weight);
      for (size_t k = 0; k < 3; ++k) parts[k].push_back(built[k]);
    }
    for (size_t k = 0; k < 3; ++k) {
      if (num_samples[k] <= 0) continue;
      // A part missing from one prefix (empty split) leaves the blend undefined.
      bool complete = true;
      for (const auto& p : parts[k]) complete = complete && p != nullptr;
      if (!complete) continue;
      result[k] = std::make_shared<BlendedDataset>(parts[k], weights, num_samples[k]);
    }
  }
  return {result[0], result[1], result[2]};
}

}  // namespace megatron
