#include "data/bert_datasets_factory.h"

#include "core/error.h"
#include "core/logging.h"
#include "data/split.h"

namespace megatron {

BertDatasets build_bert_datasets(const std::vector<std::string>& data_path,
                                 const std::string& split, const BertDatasetOptions& options,
                                 std::array<int64_t, 3> num_samples) {
  MT_REQUIRE(data_path.size() == 1, "--data-path has ", data_path.size(),
             " values; BERT pretraining takes exactly one dataset prefix (no blending)");
  auto data = std::make_shared<const IndexedDataset>(data_path[0]);
  const std::array<int64_t, 4> bounds = split_boundaries(split, data->num_documents());
  log_info("BERT dataset '", data_path[0], "': ", data->num_documents(), " documents, ",
           data->num_sequences(), " sentences, split ", split, " -> train [", bounds[0], ", ",
           bounds[1], ") valid [", bounds[1], ", ", bounds[2], ") test [", bounds[2], ", ",
           bounds[3], ")");
  std::array<std::shared_ptr<const BertSampleSource>, 3> out;
  for (size_t k = 0; k < 3; ++k) {
    if (num_samples[k] <= 0 || bounds[k] == bounds[k + 1]) continue;
    out[k] = std::make_shared<BertDataset>(data, bounds[k], bounds[k + 1], num_samples[k], options);
  }
  return {out[0], out[1], out[2]};
}

}  // namespace megatron
