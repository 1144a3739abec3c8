#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/mapped_file.h"

namespace megatron {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, so that a corrupt
// length cannot make us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const std::pair<DType, const char*> kDTypeNames[] = {
    {DType::F64, "F64"}, {DType::F32, "F32"}, {DType::BF16, "BF16"}, {DType::F16, "F16"},
    {DType::I64, "I64"}, {DType::I32, "I32"}, {DType::U8, "U8"},
};

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == dtype) return name;
  MT_THROW("dtype ", dtype_name(dtype), " has no safetensors name");
}

DType dtype_from_safetensors_name(const std::string& name) {
  for (const auto& [d, n] : kDTypeNames)
    if (name == n) return d;
  MT_THROW("unsupported safetensors dtype '", name,
           "' (expected F32, F64, BF16, F16, I32, I64 or U8)");
}

SafetensorsReader::SafetensorsReader(const std::string& path)
    // Copy-on-write: tensors may be modified in memory without ever changing the file.
    : path_(path), mapping_(std::make_shared<MappedFile>(path, MappedFile::Access::kCopyOnWrite)) {
  const size_t file_size = mapping_->size();
  MT_REQUIRE(file_size >= 8, "safetensors file '", path, "' is ", file_size,
             " bytes, too short for the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, mapping_->data(), 8);  // little-endian host (x86-64, aarch64)
  MT_REQUIRE(header_len <= kMaxHeaderBytes, "safetensors file '", path, "': header length ",
             header_len, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  MT_REQUIRE(header_len <= file_size - 8, "safetensors file '", path, "': header length ",
             header_len, " exceeds the ", file_size - 8, " bytes after the length field");
  const char* header = reinterpret_cast<const char*>(mapping_->data()) + 8;
  MT_REQUIRE(header_len > 0 && header[0] == '{', "safetensors file '", path,
             "': header does not start with '{'");
  data_ = mapping_->writable_data() + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, header + header_len);
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("safetensors file '", path, "': header is not valid JSON: ", e.what());
  }
  MT_REQUIRE(j.is_object(), "safetensors file '", path, "': header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // to check the tiling
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      MT_REQUIRE(v.is_object(), "safetensors file '", path, "': __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        MT_REQUIRE(m.value().is_string(), "safetensors file '", path, "': __metadata__ value of '",
                   m.key(), "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&] { return "safetensors file '" + path + "', tensor '" + name + "': "; };
    MT_REQUIRE(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        where(), "expected an object with dtype, shape and data_offsets");
    MT_REQUIRE(v["dtype"].is_string(), where(), "dtype is not a string");
    SafetensorsTensorInfo info;
    try {
      info.dtype = dtype_from_safetensors_name(v["dtype"].get<std::string>());
    } catch (const Error& e) {
      MT_THROW(where(), e.message());
    }
    MT_REQUIRE(v["shape"].is_array(), where(), "shape is not an array");
    uint64_t numel = 1;
    for (const nlohmann::json& d : v["shape"]) {
      MT_REQUIRE(d.is_number_unsigned(), where(), "shape ", v["shape"].dump(),
                 " has an entry that is not a non-negative integer");
      uint64_t n = d.get<uint64_t>();
      MT_REQUIRE(!__builtin_mul_overflow(numel, n, &numel) && numel <= uint64_t(INT64_MAX), where(),
                 "shape ", v["shape"].dump(), " overflows");
      info.shape.push_back(int64_t(n));
    }
    const nlohmann::json& off = v["data_offsets"];
    MT_REQUIRE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                   off[1].is_number_unsigned(),
               where(), "data_offsets ", off.dump(), " is not [begin, end]");
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    MT_REQUIRE(info.begin <= info.end && info.end <= data_size, where(), "data_offsets [",
               info.begin, ", ", info.end, "] outside the data section of ", data_size, " bytes");
    uint64_t bytes;
    MT_REQUIRE(!__builtin_mul_overflow(numel, uint64_t(dtype_size(info.dtype)), &bytes) &&
                   bytes == info.end - info.begin,
               where(), "data_offsets [", info.begin, ", ", info.end, "] hold ",
               info.end - info.begin, " bytes but ", v["dtype"].get<std::string>(), " ",
               shape_str(info.shape), " needs ", numel * dtype_size(info.dtype));
    ranges.emplace_back(info.begin, info.end);
    infos_[name] = std::move(info);
  }

  // The tensors must tile the data section: no gap (hidden bytes), no overlap (aliasing).
  std::sort(ranges.begin(), ranges.end());
  uint64_t expected = 0;
  for (const auto& [b, e] : ranges) {
    MT_REQUIRE(b == expected, "safetensors file '", path, "': tensor data ",
               b < expected ? "overlaps" : "leaves a gap", " at byte ", std::min(b, expected),
               " of the data section");
    expected = e;
  }
  MT_REQUIRE(expected == data_size, "safetensors file '", path, "': tensors cover ", expected,
             " bytes but the data section has ", data_size);
}

const std::string& SafetensorsReader::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  MT_REQUIRE(it != metadata_.end(), "safetensors file '", path_, "' has no metadata key '", key,
             "'");
  return it->second;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : infos_) out.push_back(name);
  return out;
}

const SafetensorsTensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = infos_.find(name);
  MT_REQUIRE(it != infos_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return it->second;
}

Tensor SafetensorsReader::get(const std::string& name) const {
  const SafetensorsTensorInfo& i = info(name);
  uint8_t* p = data_ + i.begin;
  Tensor view(Storage::borrow(p, i.end - i.begin, Device::CPU, mapping_), 0, i.shape,
              contiguous_strides(i.shape), i.dtype);
  // Files from other writers may leave a tensor misaligned for its element type.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(i.dtype) != 0) return view.clone();
  return view;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Decreasing element size, then name: every tensor starts aligned to its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    size_t sa = dtype_size(tensors[a].second.dtype()), sb = dtype_size(tensors[b].second.dtype());
    return sa != sb ? sa > sb : tensors[a].first < tensors[b].first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    MT_CHECK(name != "__metadata__", "safetensors: a tensor cannot be named __metadata__");
    MT_CHECK(!header.contains(name), "safetensors file '", path, "': tensor '", name,
             "' given twice");
    MT_CHECK(t.defined() && t.device() == Device::CPU, "safetensors file '", path, "': tensor '",
             name, "' must be a defined CPU tensor");
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = std::move(entry);
    offset += t.nbytes();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  DurableFile f(path);
  uint64_t header_len = header_text.size();
  f.write(&header_len, 8);
  f.write(header_text.data(), header_text.size());
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    Tensor c = t.is_contiguous() ? t : t.clone();
    f.write(c.raw_data(), c.nbytes());
  }
  f.close();
}

}  // namespace megatron
