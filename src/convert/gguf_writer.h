// A GGUF version 3 file writer (the format llama.cpp and ggml load; ggml's gguf.h describes it):
//
//   "GGUF" | u32 version 3 | i64 tensor count | i64 key-value count
//   key-value pairs: string key | i32 value type | value
//     (array: i32 element type | u64 count | elements)
//   tensor infos:    string name | u32 n_dims | i64 ne[n_dims] | i32 ggml type | u64 offset
//   padding to general.alignment (default 32), then the tensor data, each tensor at its offset
//   (relative to the data section, a multiple of the alignment), padded with zeros.
//
// Strings are u64 length + bytes (no terminator), everything little-endian. ne[] lists the
// dimensions fastest-varying first: a row-major [rows, cols] tensor is ne = {cols, rows}. Keys
// and tensors are written in the order they were added; a key or tensor name given twice is an
// Error (llama.cpp refuses such files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace megatron {

// The element types a GGUF export writes (ggml's type ids).
enum class GgufTensorType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };

class GgufWriter {
 public:
  // The alignment of the data section and of every tensor in it; written as
  // general.alignment (u32) when it is not GGUF's default of 32.
  explicit GgufWriter(uint32_t alignment = 32);

  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& values);
  void add_float32_array(const std::string& key, const std::vector<float>& values);

  // `values` (f32, any strides, row-major logical order) stored as `type`: f16 and bf16 are
  // rounded to nearest even (kernels::cast). The tensor is kept by reference until write().
  void add_tensor(const std::string& name, const Tensor& values, GgufTensorType type);

  // Writes the file to `path` (through `path`.tmp, fsync'ed and renamed into place, so a
  // crash never leaves a truncated file under the name; on an Error the temporary is removed).
  // A finite value that f16 cannot hold (|x| > 65504) is an Error naming the tensor.
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    Tensor values;
    GgufTensorType type;
    uint64_t offset;  // in the data section
    uint64_t bytes;
  };
  void begin_key(const std::string& key, int32_t value_type);

  uint32_t alignment_;
  std::string metadata_;  // the serialized key-value pairs
  int64_t num_keys_ = 0;
  std::vector<std::string> keys_;
  std::vector<PendingTensor> tensors_;
  uint64_t data_bytes_ = 0;  // the data section so far (aligned)
};

}  // namespace megatron
