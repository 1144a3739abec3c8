#include "data/indexed_dataset.h"

#include <cstring>

#include "core/error.h"
#include "data/index_dtype_dispatch.h"

namespace megatron {

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// dst[k] = the k-th T stored at src (unaligned), for k < n.
template <typename T>
void widen(const uint8_t* src, int64_t n, int32_t* dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = int32_t(load<T>(src + size_t(k) * sizeof(T)));
}

bool valid_dtype_code(uint8_t code) {
  return code >= 1 && code <= 8;
}

}  // namespace

size_t index_dtype_size(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::U8:
    case IndexDType::I8:
      return 1;
    case IndexDType::I16:
    case IndexDType::U16:
      return 2;
    case IndexDType::I32:
    case IndexDType::F32:
      return 4;
    case IndexDType::I64:
    case IndexDType::F64:
      return 8;
  }
  MT_THROW("unknown index dtype code ", int(dtype));
}

const char* index_dtype_name(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::U8:
      return "uint8";
    case IndexDType::I8:
      return "int8";
    case IndexDType::I16:
      return "int16";
    case IndexDType::I32:
      return "int32";
    case IndexDType::I64:
      return "int64";
    case IndexDType::F64:
      return "float64";
    case IndexDType::F32:
      return "float32";
    case IndexDType::U16:
      return "uint16";
  }
  return "unknown";
}

IndexDType optimal_index_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::U16 : IndexDType::I32;
}

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_(prefix + ".idx"), bin_(prefix + ".bin") {
  const std::string& path = idx_.path();
  const uint8_t* p = idx_.data();
  MT_REQUIRE(idx_.size() >= kIndexHeaderBytes, "index '", path, "' is truncated: ", idx_.size(),
             " bytes, expected at least the ", kIndexHeaderBytes, "-byte header");
  MT_REQUIRE(std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) == 0, "index '", path,
             "' has a bad magic: expected \"MMIDIDX\\x00\\x00\" (a Megatron indexed dataset)");
  uint64_t version = load<uint64_t>(p + 9);
  MT_REQUIRE(version == kIndexVersion, "index '", path, "' has version ", version,
             ", expected version ", kIndexVersion);
  uint8_t code = p[17];
  MT_REQUIRE(valid_dtype_code(code), "index '", path, "' has dtype code ", int(code),
             ", expected 1..8 (uint8, int8, int16, int32, int64, float64, float32, uint16)");
  dtype_ = IndexDType(code);
  MT_REQUIRE(dtype_ != IndexDType::F32 && dtype_ != IndexDType::F64, "index '", path, "' stores ",
             index_dtype_name(dtype_), " values, expected integer token ids");
  uint64_t n = load<uint64_t>(p + 18);
  uint64_t d = load<uint64_t>(p + 26);
  // Bound the counts before multiplying so a garbage header cannot overflow the size check.
  MT_REQUIRE(n <= idx_.size() && d <= idx_.size(), "index '", path, "' claims ", n,
             " sequences and ", d, " document indices, more than its ", idx_.size(),
             " bytes can hold");
  size_t expected = kIndexHeaderBytes + n * 4 + n * 8 + d * 8;
  MT_REQUIRE(idx_.size() == expected, "index '", path, "' is ", idx_.size(), " bytes, expected ",
             expected, " for ", n, " sequences and ", d, " document indices");
  num_sequences_ = int64_t(n);
  num_doc_indices_ = int64_t(d);
  lengths_ = p + kIndexHeaderBytes;
  pointers_ = lengths_ + n * 4;
  doc_idx_ = pointers_ + n * 8;
  validate();
}

void IndexedDataset::validate() const {
  const std::string& path = idx_.path();
  const int64_t item = int64_t(index_dtype_size(dtype_));
  int64_t expected_pointer = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    int32_t len = sequence_length(i);
    MT_REQUIRE(len >= 0, "index '", path, "': sequence ", i, " has negative length ", len);
    int64_t ptr = sequence_pointer(i);
    MT_REQUIRE(ptr == expected_pointer, "index '", path, "': sequence ", i, " points at byte ", ptr,
               ", expected ", expected_pointer, " (sum of the previous lengths × ", item,
               " bytes); the pointers are inconsistent with the lengths");
    expected_pointer += int64_t(len) * item;
  }
  MT_REQUIRE(int64_t(bin_.size()) == expected_pointer, "data file '", bin_.path(), "' is ",
             bin_.size(), " bytes, expected ", expected_pointer, " as described by '", path,
             "' (truncated or mismatched .bin)");
  MT_REQUIRE(num_doc_indices_ >= 1, "index '", path,
             "' has no document indices, expected at least the leading 0");
  MT_REQUIRE(document_index(0) == 0, "index '", path, "': document index 0 is ", document_index(0),
             ", expected 0");
  MT_REQUIRE(document_index(num_doc_indices_ - 1) == num_sequences_, "index '", path,
             "': the last document index is ", document_index(num_doc_indices_ - 1),
             ", expected the sequence count ", num_sequences_);
  for (int64_t k = 1; k < num_doc_indices_; ++k) {
    MT_REQUIRE(document_index(k) >= document_index(k - 1), "index '", path, "': document index ", k,
               " (", document_index(k), ") is smaller than document index ", k - 1, " (",
               document_index(k - 1), "), expected a non-decreasing sequence");
  }
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  return load<int32_t>(lengths_ + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  return load<int64_t>(pointers_ + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t d) const {
  return load<int64_t>(doc_idx_ + 8 * d);
}

std::vector<int32_t> IndexedDataset::sequence_lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(num_sequences_));
  if (num_sequences_ > 0) std::memcpy(out.data(), lengths_, out.size() * 4);
  return out;
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> out(static_cast<size_t>(num_doc_indices_));
  std::memcpy(out.data(), doc_idx_, out.size() * 8);
  return out;
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t length,
                          std::vector<int32_t>& out) const {
  MT_CHECK(seq >= 0 && seq < num_sequences_, "sequence ", seq, " out of range [0, ", num_sequences_,
           ") in '", prefix_, "'");
  int64_t len = sequence_length(seq);
  MT_CHECK(offset >= 0 && length >= 0 && offset + length <= len, "tokens [", offset, ", ",
           offset + length, ") out of range for sequence ", seq, " of length ", len, " in '",
           prefix_, "'");
  const uint8_t* src =
      bin_.data() + sequence_pointer(seq) + size_t(offset) * index_dtype_size(dtype_);
  const size_t base = out.size();
  out.resize(base + size_t(length));
  int32_t* dst = out.data() + base;
  dispatch_integer_index_dtype(dtype_, [&](auto tag) { widen<decltype(tag)>(src, length, dst); });
}

std::vector<int32_t> IndexedDataset::get(int64_t seq) const {
  std::vector<int32_t> out;
  read(seq, 0, sequence_length(seq), out);
  return out;
}

}  // namespace megatron
