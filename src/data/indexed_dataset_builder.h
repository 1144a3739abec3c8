// IndexedDatasetBuilder: writes a Megatron indexed dataset (PREFIX.bin + PREFIX.idx; layout
// in indexed_dataset.h), and merge_indexed_datasets, which concatenates several.
//
// Both files are written under temporary names and renamed into place by finalize(), so a
// builder destroyed before finalize() (error, exception) leaves no partial output behind.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/atomic_file.h"
#include "data/indexed_dataset.h"

namespace megatron {

class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype);

  // Appends one sequence (a sentence or a whole document). Throws when a token id does not
  // fit the dtype (e.g. >= 65536 for uint16).
  void add_item(std::span<const int32_t> tokens);
  // Closes the current document: the sequences added since the last call form one document
  // (possibly none: an empty document, as Megatron writes for an empty text).
  void end_document();
  // Appends every sequence and document of an existing dataset (Megatron's add_index).
  void add_index(const IndexedDataset& other);
  // Writes the .idx and renames both files into place.
  void finalize();

  int64_t num_sequences() const { return int64_t(lengths_.size()); }
  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }

 private:
  std::string prefix_;
  IndexDType dtype_;
  AtomicFile bin_;
  std::vector<int32_t> lengths_;  // [N]
  std::vector<int64_t> doc_idx_;  // [D], starts with 0
  std::vector<uint8_t> scratch_;  // one sequence encoded in dtype_
};

// Concatenates the datasets at `input_prefixes` (same dtype) into `output_prefix`.
void merge_indexed_datasets(const std::vector<std::string>& input_prefixes,
                            const std::string& output_prefix);

}  // namespace megatron
