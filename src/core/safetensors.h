// safetensors: HuggingFace's tensor file format, read (mmap, validated) and written.
//
// Layout (https://github.com/huggingface/safetensors, "Format"):
//   [u64 little-endian N] [N bytes UTF-8 JSON header, padded with spaces] [data section]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with
// byte offsets relative to the data section, plus an optional "__metadata__" object of
// string -> string. Tensors are row-major, little-endian and tile the data section exactly.
//
// The writer produces what the reference implementation produces: compact JSON with
// "__metadata__" first, tensors ordered by decreasing element size then name (so every tensor
// is naturally aligned), header padded with spaces to a multiple of 8 bytes.
//
// The reader validates everything before exposing a byte (header length, JSON, dtype names,
// shapes, offsets within the file and tiling the data section without gaps or overlaps) and
// reports a bad file with an Error naming the file and the problem. Tensors it returns are
// copy-on-write views of a private mapping: reading costs no copy, writing never touches the
// file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace megatron {

class MappedFile;

// The safetensors spelling of a dtype ("F32", "BF16", ...) and back.
std::string safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(const std::string& name);  // throws on unsupported names

struct SafetensorsTensorInfo {
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsReader {
 public:
  // Maps and validates the file; throws Error naming `path` and the problem.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Metadata value for `key`; throws Error naming the file when it is absent.
  const std::string& metadata_value(const std::string& key) const;
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return infos_.count(name) > 0; }
  const SafetensorsTensorInfo& info(const std::string& name) const;  // throws if absent
  // The tensor as a view of the mapping (a copy if the file leaves it misaligned).
  Tensor get(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> mapping_;  // copy-on-write
  uint8_t* data_ = nullptr;              // start of the data section inside the mapping
  std::map<std::string, SafetensorsTensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (any strides; CPU) and `metadata` to `path` and fsyncs the file.
// Names must be unique and not "__metadata__".
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace megatron
