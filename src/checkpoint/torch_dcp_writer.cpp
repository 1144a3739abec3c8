#include "checkpoint/torch_dcp_writer.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/pickle_writer.h"
#include "core/torch_file.h"

namespace megatron {

namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

// A dataclass instance as pickle rebuilds it: cls.__new__(cls), then its state.
PyValue dataclass(const char* module, const char* name, PyValue state) {
  PyObject o{{module, name}, {}, nullptr, true};
  if (!state.is_none()) o.state = std::make_shared<PyValue>(std::move(state));
  return PyValue::object(std::move(o));
}

// A call of `module.name(*args)` as pickle records it (REDUCE): torch.Size, an enum member, ...
PyValue call(const char* module, const char* name, std::vector<PyValue> args) {
  return PyValue::object(PyObject{{module, name}, std::move(args), nullptr, false});
}

PyValue fields(std::vector<std::pair<const char*, PyValue>> items) {
  PyValue d = PyValue::dict();
  for (auto& [k, v] : items) d.as_dict("").set(PyValue::str(k), std::move(v));
  return d;
}

// torch.Size(dims): pickled as a call of torch.Size with the tuple of its dimensions.
PyValue torch_size(const Shape& dims) {
  std::vector<PyValue> items;
  for (int64_t d : dims) items.push_back(PyValue::integer(d));
  return call("torch", "Size", {PyValue::tuple(std::move(items))});
}

PyValue torch_dtype_global(DType dtype) {
  static const std::map<DType, const char*> names = {
      {DType::F32, "float32"}, {DType::F64, "float64"}, {DType::BF16, "bfloat16"},
      {DType::F16, "float16"}, {DType::I32, "int32"},   {DType::I64, "int64"},
      {DType::U8, "uint8"}};
  return PyValue::global("torch", names.at(dtype));
}

// TensorProperties: its __getstate__ tuple (dtype, layout, requires_grad, memory format as
// _MEM_FORMAT_ENCODING, pin_memory); the layout pickled as torch pickles torch.strided.
PyValue tensor_properties(DType dtype) {
  PyValue layout = call("torch.serialization", "_get_layout", {PyValue::str("torch.strided")});
  PyValue contiguous = call(kMetadataModule, "_MEM_FORMAT_ENCODING", {PyValue::integer(0)});
  return dataclass(kMetadataModule, "TensorProperties",
                   PyValue::tuple({torch_dtype_global(dtype), layout, PyValue::boolean(false),
                                   contiguous, PyValue::boolean(false)}));
}

// pathlib.PosixPath(*parts): how a path pickles.
PyValue posix_path(const std::string& path) {
  std::vector<PyValue> parts;
  for (const auto& part : std::filesystem::path(path)) parts.push_back(PyValue::str(part.string()));
  return call("pathlib", "PosixPath", std::move(parts));
}

nlohmann::json shape_json(const Shape& s) {
  return nlohmann::json(std::vector<int64_t>(s));
}
Shape shape_from(const nlohmann::json& j) {
  return j.get<std::vector<int64_t>>();
}

}  // namespace

std::vector<DcpWrittenItem> write_dcp_data_file(const std::string& dir,
                                                const std::string& file_name,
                                                const std::vector<DcpChunkToWrite>& chunks,
                                                const std::vector<DcpBytesToWrite>& byte_items) {
  std::vector<DcpWrittenItem> out;
  DurableFile file(dir + "/" + file_name);
  uint64_t offset = 0;
  for (const DcpChunkToWrite& c : chunks) {
    MT_CHECK(c.data.device().is_cpu() && c.offsets.size() == c.global_shape.size() &&
                 c.data.dim() == int64_t(c.global_shape.size()),
             "a DCP chunk of ", c.key, " is a host tensor of the global tensor's rank");
    const uint64_t length = torch_save(file, PyValue::tensor(c.data));
    out.push_back({c.key,
                   false,
                   c.data.dtype(),
                   c.global_shape,
                   c.offsets,
                   c.data.shape(),
                   {file_name, offset, length}});
    offset += length;
  }
  for (const DcpBytesToWrite& b : byte_items) {
    file.write(b.bytes.data(), b.bytes.size());
    out.push_back({b.key, true, DType::U8, {}, {}, {}, {file_name, offset, b.bytes.size()}});
    offset += b.bytes.size();
  }
  file.close();
  return out;
}

std::string dcp_items_text(const std::vector<DcpWrittenItem>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const DcpWrittenItem& i : items)
    out.push_back({{"key", i.key},
                   {"bytes", i.bytes},
                   {"dtype", std::string(dtype_name(i.dtype))},
                   {"global_shape", shape_json(i.global_shape)},
                   {"offsets", shape_json(i.offsets)},
                   {"sizes", shape_json(i.sizes)},
                   {"file", i.storage.file},
                   {"offset", i.storage.offset},
                   {"length", i.storage.length}});
  return out.dump();
}

std::vector<DcpWrittenItem> dcp_items_from_text(const std::string& text) {
  std::vector<DcpWrittenItem> out;
  for (const nlohmann::json& j : nlohmann::json::parse(text))
    out.push_back({j.at("key").get<std::string>(),
                   j.at("bytes").get<bool>(),
                   dtype_from_name(j.at("dtype").get<std::string>()),
                   shape_from(j.at("global_shape")),
                   shape_from(j.at("offsets")),
                   shape_from(j.at("sizes")),
                   {j.at("file").get<std::string>(), j.at("offset").get<uint64_t>(),
                    j.at("length").get<uint64_t>()}});
  return out;
}

void write_dcp_metadata(const std::string& dir, const std::vector<DcpWrittenItem>& items,
                        const std::string& checkpoint_id, const std::string& save_id) {
  PyValue state_dict_metadata = PyValue::dict();
  PyValue storage_data = PyValue::dict();
  PyDict& sdm = state_dict_metadata.as_dict("");
  // The chunk lists by key, filled as items come (a key's first item creates its entry).
  std::map<std::string, PyValue> chunk_lists;
  for (const DcpWrittenItem& i : items) {
    PyValue index_offset;
    int64_t chunk_index = 0;
    if (i.bytes) {
      MT_CHECK(!sdm.find(i.key), "DCP byte item ", i.key, " written twice");
      sdm.set(PyValue::str(i.key), dataclass(kMetadataModule, "BytesStorageMetadata", PyValue()));
    } else {
      PyValue& chunks = chunk_lists[i.key];
      if (chunks.is_none()) {
        chunks = PyValue::list();
        sdm.set(PyValue::str(i.key), dataclass(kMetadataModule, "TensorStorageMetadata",
                                               fields({{"properties", tensor_properties(i.dtype)},
                                                       {"size", torch_size(i.global_shape)},
                                                       {"chunks", chunks}})));
      }
      chunk_index = int64_t(chunks.as_sequence("").size());
      chunks.as_sequence("").push_back(
          dataclass(kMetadataModule, "ChunkStorageMetadata",
                    fields({{"offsets", torch_size(i.offsets)}, {"sizes", torch_size(i.sizes)}})));
      index_offset = torch_size(i.offsets);
    }
    PyValue index =
        dataclass(kMetadataModule, "MetadataIndex",
                  fields({{"fqn", PyValue::str(i.key)},
                          {"offset", index_offset},
                          {"index", i.bytes ? PyValue() : PyValue::integer(chunk_index)}}));
    PyValue info = dataclass("torch.distributed.checkpoint.filesystem", "_StorageInfo",
                             fields({{"relative_path", PyValue::str(i.storage.file)},
                                     {"offset", PyValue::integer(int64_t(i.storage.offset))},
                                     {"length", PyValue::integer(int64_t(i.storage.length))}}));
    storage_data.as_dict("").items.emplace_back(std::move(index), std::move(info));
  }
  PyValue storage_meta = dataclass(kMetadataModule, "StorageMeta",
                                   fields({{"checkpoint_id", posix_path(checkpoint_id)},
                                           {"save_id", PyValue::str(save_id)},
                                           {"load_id", PyValue()},
                                           {"modules", PyValue::list()}}));
  const PyValue metadata = dataclass(kMetadataModule, "Metadata",
                                     fields({{"state_dict_metadata", state_dict_metadata},
                                             {"planner_data", PyValue()},
                                             {"storage_data", storage_data},
                                             {"storage_meta", storage_meta},
                                             {"version", PyValue::str("1.0.0")}}));
  write_file_durably(dir + "/.metadata", write_pickle(metadata));
  // The reader's checks: every chunk inside its global shape, the chunks tiling it.
  const DcpCheckpoint check(dir);
  for (const DcpWrittenItem& i : items)
    if (!i.bytes) {
      const DcpTensor& t = check.tensors().at(i.key);
      MT_REQUIRE(t.dtype == i.dtype && t.shape == i.global_shape, "DCP tensor ", i.key,
                 ": its chunks disagree on the global shape or dtype (", shape_str(t.shape), " ",
                 dtype_name(t.dtype), " and ", shape_str(i.global_shape), " ", dtype_name(i.dtype),
                 ")");
    }
}

}  // namespace megatron
