// IndexedDataset: Megatron-LM's memory-mapped token dataset (PREFIX.bin + PREFIX.idx),
// read side. Byte-compatible with megatron/core/datasets/indexed_dataset.py.
//
// PREFIX.bin: the token ids of every sequence, back to back, in the index dtype.
// PREFIX.idx, little-endian, packed (no alignment padding):
//   offset 0   char[9]  magic "MMIDIDX\0\0"
//   offset 9   u64      version = 1
//   offset 17  u8       dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                                   6 float64, 7 float32, 8 uint16)
//   offset 18  u64      N = sequence count
//   offset 26  u64      D = document-index count (documents + 1)
//   offset 34  i32[N]   sequence lengths, in tokens
//              i64[N]   sequence pointers, byte offsets into .bin
//              i64[D]   document indices: doc d is sequences [doc_idx[d], doc_idx[d+1]);
//                       doc_idx[0] = 0 and doc_idx[D-1] = N
// A "sequence" is a sentence (preprocess --split-sentences) or a whole document.
//
// Because the arrays start at byte 34 they are not naturally aligned, so elements are read
// with memcpy rather than through typed pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace megatron {

enum class IndexDType : uint8_t {
  U8 = 1,
  I8 = 2,
  I16 = 3,
  I32 = 4,
  I64 = 5,
  F64 = 6,
  F32 = 7,
  U16 = 8
};

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 34;

size_t index_dtype_size(IndexDType dtype);
const char* index_dtype_name(IndexDType dtype);
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has < 65500 entries, else int32.
IndexDType optimal_index_dtype(int64_t vocab_size);

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and validates them; every corruption (truncated or
  // oversized file, bad magic, version, dtype, pointers, document indices) throws an Error
  // that names the file and what was expected.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  IndexDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_indices_ - 1; }

  int32_t sequence_length(int64_t i) const;       // 0 <= i < num_sequences()
  int64_t sequence_pointer(int64_t i) const;      // byte offset into .bin
  int64_t document_index(int64_t d) const;        // 0 <= d <= num_documents()
  std::vector<int32_t> sequence_lengths() const;  // all N lengths, copied
  std::vector<int64_t> document_indices() const;  // all D entries, copied

  // Appends tokens [offset, offset + length) of sequence `seq` to `out`, widened to int32.
  void read(int64_t seq, int64_t offset, int64_t length, std::vector<int32_t>& out) const;
  std::vector<int32_t> get(int64_t seq) const;  // the whole sequence

  // The raw .bin bytes (for merging datasets without decoding them).
  const uint8_t* bin_data() const { return bin_.data(); }
  size_t bin_bytes() const { return bin_.size(); }

 private:
  void validate() const;

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  IndexDType dtype_ = IndexDType::U16;
  int64_t num_sequences_ = 0;
  int64_t num_doc_indices_ = 0;
  const uint8_t* lengths_ = nullptr;   // i32[N] inside idx_
  const uint8_t* pointers_ = nullptr;  // i64[N] inside idx_
  const uint8_t* doc_idx_ = nullptr;   // i64[D] inside idx_
};

}  // namespace megatron
