#include "convert/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "core/durable_file.h"
#include "core/error.h"
#include "kernels/elementwise.h"

namespace megatron {

namespace {

// gguf_type ids of the values written here.
constexpr int32_t kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9;
constexpr uint32_t kDefaultAlignment = 32;

template <typename T>
void append(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the project builds for little-endian hosts only
  out.append(bytes, sizeof(T));
}

void append_string(std::string& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out += s;
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

DType dtype_of(GgufTensorType type) {
  switch (type) {
    case GgufTensorType::kF32:
      return DType::F32;
    case GgufTensorType::kF16:
      return DType::F16;
    case GgufTensorType::kBF16:
      return DType::BF16;
  }
  MT_THROW("unknown GGUF tensor type ", int32_t(type));
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  MT_CHECK(alignment > 0 && alignment % 8 == 0, "GGUF alignment ", alignment,
           " is not a positive multiple of 8");
  if (alignment != kDefaultAlignment) add_uint32("general.alignment", alignment);
}

void GgufWriter::begin_key(const std::string& key, int32_t value_type) {
  MT_CHECK(std::find(keys_.begin(), keys_.end(), key) == keys_.end(), "GGUF key '", key,
           "' written twice");
  keys_.push_back(key);
  ++num_keys_;
  append_string(metadata_, key);
  append<int32_t>(metadata_, value_type);
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
  begin_key(key, kUint32);
  append(metadata_, value);
}

void GgufWriter::add_int32(const std::string& key, int32_t value) {
  begin_key(key, kInt32);
  append(metadata_, value);
}

void GgufWriter::add_float32(const std::string& key, float value) {
  begin_key(key, kFloat32);
  append(metadata_, value);
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  begin_key(key, kBool);
  append<int8_t>(metadata_, value ? 1 : 0);
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  begin_key(key, kString);
  append_string(metadata_, value);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  begin_key(key, kArray);
  append<int32_t>(metadata_, kString);
  append<uint64_t>(metadata_, values.size());
  for (const std::string& v : values) append_string(metadata_, v);
}

void GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& values) {
  begin_key(key, kArray);
  append<int32_t>(metadata_, kInt32);
  append<uint64_t>(metadata_, values.size());
  for (int32_t v : values) append(metadata_, v);
}

void GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& values) {
  begin_key(key, kArray);
  append<int32_t>(metadata_, kFloat32);
  append<uint64_t>(metadata_, values.size());
  for (float v : values) append(metadata_, v);
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& values, GgufTensorType type) {
  MT_CHECK(values.dtype() == DType::F32, "GGUF tensor '", name, "': expected f32 values, got ",
           values.describe());
  MT_CHECK(values.dim() >= 1 && values.dim() <= 4, "GGUF tensor '", name,
           "': ggml holds 1 to 4 dimensions, got ", values.describe());
  for (const PendingTensor& t : tensors_)
    MT_CHECK(t.name != name, "GGUF tensor '", name, "' written twice");
  const uint64_t bytes = uint64_t(values.numel()) * dtype_size(dtype_of(type));
  tensors_.push_back({name, values, type, data_bytes_, bytes});
  data_bytes_ = align_up(data_bytes_ + bytes, alignment_);
}

void GgufWriter::write(const std::string& path) const {
  std::string header = "GGUF";
  append<uint32_t>(header, 3);
  append<int64_t>(header, int64_t(tensors_.size()));
  append<int64_t>(header, num_keys_);
  header += metadata_;
  for (const PendingTensor& t : tensors_) {
    append_string(header, t.name);
    const Shape& shape = t.values.shape();
    append<uint32_t>(header, uint32_t(shape.size()));
    for (auto d = shape.rbegin(); d != shape.rend(); ++d) append<int64_t>(header, *d);
    append<int32_t>(header, int32_t(t.type));
    append<uint64_t>(header, t.offset);
  }
  header.resize(align_up(header.size(), alignment_), '\0');

  const std::string tmp = path + ".tmp";
  try {
    DurableFile file(tmp);
    file.write(header.data(), header.size());
    const std::string zeros(alignment_, '\0');
    for (const PendingTensor& t : tensors_) {
      Tensor stored = Tensor::empty(t.values.shape(), dtype_of(t.type));
      if (t.type == GgufTensorType::kF32) {
        kernels::copy(t.values, stored);
      } else {
        const Tensor values = t.values.is_contiguous() ? t.values : t.values.clone();
        kernels::cast(values, stored);
        // f16 tops out at 65504: a larger weight would silently become infinite.
        MT_REQUIRE(!kernels::has_inf_or_nan(stored) || kernels::has_inf_or_nan(values),
                   "GGUF tensor '", t.name,
                   "' has values beyond f16's range (|x| > 65504): ", "export it as bf16 or f32");
      }
      file.write(stored.raw_data(), t.bytes);
      file.write(zeros.data(), align_up(t.bytes, alignment_) - t.bytes);
    }
    file.close();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MT_REQUIRE(!ec, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  fsync_directory(parent.string());
}

}  // namespace megatron
