#include "data/indexed_dataset_builder.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "data/index_dtype_dispatch.h"

namespace megatron {

namespace {

template <typename T>
void encode_as(std::span<const int32_t> tokens, IndexDType dtype, std::vector<uint8_t>& out) {
  out.resize(tokens.size() * sizeof(T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t v = tokens[i];
    MT_REQUIRE(
        v >= int64_t(std::numeric_limits<T>::min()) && v <= int64_t(std::numeric_limits<T>::max()),
        "token id ", v, " does not fit the dataset dtype ", index_dtype_name(dtype));
    T t = T(v);
    std::memcpy(out.data() + i * sizeof(T), &t, sizeof(T));
  }
}

}  // namespace

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype)
    : prefix_(prefix), dtype_(dtype), bin_(prefix + ".bin"), doc_idx_{0} {
  MT_CHECK(dtype != IndexDType::F32 && dtype != IndexDType::F64,
           "an indexed dataset of token ids needs an integer dtype, got ", index_dtype_name(dtype));
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  dispatch_integer_index_dtype(
      dtype_, [&](auto tag) { encode_as<decltype(tag)>(tokens, dtype_, scratch_); });
  bin_.write(scratch_.data(), scratch_.size());
  lengths_.push_back(int32_t(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  doc_idx_.push_back(num_sequences());
}

void IndexedDatasetBuilder::add_index(const IndexedDataset& other) {
  MT_REQUIRE(other.dtype() == dtype_, "cannot merge '", other.prefix(), "' of dtype ",
             index_dtype_name(other.dtype()), " into a dataset of dtype ",
             index_dtype_name(dtype_));
  const int64_t base = num_sequences();
  std::vector<int32_t> lengths = other.sequence_lengths();
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  for (int64_t d = 1; d <= other.num_documents(); ++d)
    doc_idx_.push_back(base + other.document_index(d));
  bin_.write(other.bin_data(), other.bin_bytes());
}

void IndexedDatasetBuilder::finalize() {
  const int64_t item = int64_t(index_dtype_size(dtype_));
  AtomicFile idx(prefix_ + ".idx");
  idx.write(kIndexMagic, sizeof(kIndexMagic));
  idx.write_value<uint64_t>(kIndexVersion);
  idx.write_value<uint8_t>(uint8_t(dtype_));
  idx.write_value<uint64_t>(lengths_.size());
  idx.write_value<uint64_t>(doc_idx_.size());
  idx.write(lengths_.data(), lengths_.size() * sizeof(int32_t));
  std::vector<int64_t> pointers(lengths_.size());  // [N] byte offsets into .bin
  int64_t pointer = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    pointers[i] = pointer;
    pointer += int64_t(lengths_[i]) * item;
  }
  idx.write(pointers.data(), pointers.size() * sizeof(int64_t));
  idx.write(doc_idx_.data(), doc_idx_.size() * sizeof(int64_t));
  // .bin first: a reader that finds the new .idx must also find the matching .bin.
  bin_.commit();
  idx.commit();
}

void merge_indexed_datasets(const std::vector<std::string>& input_prefixes,
                            const std::string& output_prefix) {
  MT_REQUIRE(!input_prefixes.empty(), "merge needs at least one input dataset");
  IndexDType dtype = IndexedDataset(input_prefixes.front()).dtype();
  IndexedDatasetBuilder builder(output_prefix, dtype);
  for (const std::string& prefix : input_prefixes) builder.add_index(IndexedDataset(prefix));
  builder.finalize();
}

}  // namespace megatron
