#include "checkpoint/torch_dcp.h"

#include <filesystem>
#include <optional>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/pickle_reader.h"
#include "core/torch_file.h"

namespace megatron {

namespace {

// A dataclass instance's attribute `name` (its pickled state is the dict of its fields), or
// nullptr when the state has none.
const PyValue* field(const PyValue& obj, const char* name, const std::string& where) {
  const PyObject& o = obj.as_object(where);
  MT_REQUIRE(o.state, where, " (", o.type.qualified(), ") has no state");
  if (o.state->kind() != PyValue::Kind::kDict) return nullptr;
  return o.state->as_dict(where).find(name);
}

const PyValue& required(const PyValue& obj, const char* name, const std::string& where) {
  const PyValue* v = field(obj, name, where);
  MT_REQUIRE(v, where, " (", obj.as_object(where).type.qualified(), ") has no field '", name, "'");
  return *v;
}

const std::string& type_name(const PyValue& v, const std::string& where) {
  return v.as_object(where).type.name;
}

Shape ints(const PyValue& v, const std::string& where) {
  Shape out;
  for (const PyValue& d : v.as_sequence(where)) out.push_back(d.as_int(where));
  return out;
}

// torch.<name> as pickled in TensorProperties.
DType torch_dtype(const PyValue& v, const std::string& where) {
  const PyGlobal& g = v.as_global(where);
  static const std::map<std::string, DType> types = {
      {"float32", DType::F32},   {"float", DType::F32},   {"float64", DType::F64},
      {"double", DType::F64},    {"float16", DType::F16}, {"half", DType::F16},
      {"bfloat16", DType::BF16}, {"int64", DType::I64},   {"long", DType::I64},
      {"int32", DType::I32},     {"int", DType::I32},     {"uint8", DType::U8}};
  auto it = types.find(g.name);
  MT_REQUIRE(g.module == "torch" && it != types.end(), where, " has dtype ", g.qualified(),
             ", which megatron-cpp does not read");
  return it->second;
}

// TensorProperties' dtype: its state is the tuple (dtype, layout, requires_grad, memory
// format, pin_memory) since PyTorch 1.13 (a __getstate__), or the dict of its fields.
DType properties_dtype(const PyValue& props, const std::string& where) {
  const PyObject& o = props.as_object(where);
  MT_REQUIRE(o.state, where, " has no state");
  if (o.state->kind() == PyValue::Kind::kTuple) {
    const auto& t = o.state->as_sequence(where);
    MT_REQUIRE(!t.empty(), where, " has an empty state");
    return torch_dtype(t[0], where + " dtype");
  }
  return torch_dtype(required(props, "dtype", where), where + " dtype");
}

// Whether two boxes (offsets, sizes) of one shape share an element.
bool overlap(const DcpChunk& a, const DcpChunk& b) {
  if (shape_numel(a.sizes) == 0 || shape_numel(b.sizes) == 0) return false;
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (a.offsets[d] >= b.offsets[d] + b.sizes[d] || b.offsets[d] >= a.offsets[d] + a.sizes[d])
      return false;
  return true;
}

// The chunks (each inside the global shape) cover every element exactly once: pairwise
// disjoint, their sizes adding up to the whole.
void check_tiling(const DcpTensor& t, const std::string& where) {
  int64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    covered += shape_numel(t.chunks[i].sizes);
    for (size_t j = 0; j < i; ++j)
      MT_REQUIRE(!overlap(t.chunks[i], t.chunks[j]), where, ": the chunks at ",
                 shape_str(t.chunks[j].offsets), " and ", shape_str(t.chunks[i].offsets),
                 " overlap (two saves mixed in one directory?)");
  }
  MT_REQUIRE(covered == shape_numel(t.shape), where, ": its chunks cover ", covered, " of the ",
             shape_numel(t.shape), " elements of ", shape_str(t.shape),
             " (a rank's chunks are missing from .metadata)");
}

// A chunk or byte item's identity in storage_data: its key and offsets (none for bytes).
using ItemId = std::pair<std::string, std::optional<Shape>>;

}  // namespace

DcpCheckpoint::~DcpCheckpoint() = default;
DcpCheckpoint::DcpCheckpoint(DcpCheckpoint&&) noexcept = default;
DcpCheckpoint& DcpCheckpoint::operator=(DcpCheckpoint&&) noexcept = default;

DcpCheckpoint::DcpCheckpoint(const std::string& dir) : dir_(dir) {
  const std::string path = dir + "/.metadata";
  MT_REQUIRE(std::filesystem::exists(path), "'", dir,
             "' has no .metadata file, so it is not a PyTorch Distributed Checkpoint (or its save "
             "did not finish: .metadata is written last)");
  const PyValue root =
      read_pickle(read_file(path, "PyTorch Distributed Checkpoint metadata"), "'" + path + "'");
  const std::string what = "the object in '" + path + "'";
  MT_REQUIRE(root.kind() == PyValue::Kind::kObject &&
                 (type_name(root, what) == "Metadata" || type_name(root, what) == "MCoreMetadata"),
             what, " is ", root.describe(), ", not DCP's Metadata");

  std::map<ItemId, DcpStorage> storage;
  const PyValue& storage_data = required(root, "storage_data", what);
  for (const auto& [index, info] : storage_data.as_dict(what + ".storage_data").items) {
    const std::string w = what + ".storage_data";
    const std::string fqn = required(index, "fqn", w + " key").as_str(w + " key fqn");
    const PyValue* offset = field(index, "offset", w + " key");
    std::optional<Shape> offsets;
    if (offset && !offset->is_none()) offsets = ints(*offset, w + " key offset");
    const std::string wi = w + "['" + fqn + "']";
    const PyValue* transforms = field(info, "transform_descriptors", wi);
    MT_REQUIRE(!transforms || transforms->is_none() ||
                   transforms->as_sequence(wi + ".transform_descriptors").empty(),
               "'", path, "': item '", fqn,
               "' was written through a DCP stream transform (transform_descriptors, e.g. "
               "compression), which megatron-cpp does not read; save the checkpoint without it");
    const int64_t offset_bytes = required(info, "offset", wi).as_int(wi + ".offset");
    const int64_t length = required(info, "length", wi).as_int(wi + ".length");
    MT_REQUIRE(offset_bytes >= 0 && length >= 0, "'", path, "': item '", fqn,
               "' has a negative offset or length (", offset_bytes, ", ", length, ")");
    DcpStorage s{required(info, "relative_path", wi).as_str(wi + ".relative_path"),
                 uint64_t(offset_bytes), uint64_t(length)};
    MT_REQUIRE(
        !s.file.empty() && s.file.find('/') == std::string::npos && s.file != "." && s.file != "..",
        "'", path, "': item '", fqn, "' is stored in '", s.file,
        "', which is not a file name of the checkpoint directory");
    storage[{fqn, offsets}] = s;
  }

  const PyValue& sdm = required(root, "state_dict_metadata", what);
  for (const auto& [k, m] : sdm.as_dict(what + ".state_dict_metadata").items) {
    const std::string key = k.as_str("a state_dict_metadata key");
    const std::string w = "'" + path + "' entry '" + key + "'";
    const std::string& kind = type_name(m, w);
    if (kind == "BytesStorageMetadata") {
      auto it = storage.find({key, std::nullopt});
      MT_REQUIRE(it != storage.end(), w, " (bytes) has no storage record");
      bytes_[key] = it->second;
      continue;
    }
    MT_REQUIRE(kind == "TensorStorageMetadata", w, " is a ", kind,
               ", not TensorStorageMetadata or BytesStorageMetadata");
    DcpTensor t;
    t.dtype = properties_dtype(required(m, "properties", w), w + " properties");
    t.shape = ints(required(m, "size", w), w + " size");
    for (const PyValue& c : required(m, "chunks", w).as_sequence(w + " chunks")) {
      DcpChunk chunk;
      chunk.offsets = ints(required(c, "offsets", w + " chunk"), w + " chunk offsets");
      chunk.sizes = ints(required(c, "sizes", w + " chunk"), w + " chunk sizes");
      bool inside = chunk.offsets.size() == t.shape.size() && chunk.sizes.size() == t.shape.size();
      for (size_t d = 0; inside && d < t.shape.size(); ++d)
        inside = chunk.offsets[d] >= 0 && chunk.sizes[d] >= 0 &&
                 chunk.offsets[d] + chunk.sizes[d] <= t.shape[d];
      MT_REQUIRE(inside, w, ": a chunk ", shape_str(chunk.sizes), " at ", shape_str(chunk.offsets),
                 " lies outside its global shape ", shape_str(t.shape));
      auto it = storage.find({key, chunk.offsets});
      MT_REQUIRE(it != storage.end(), w, ": the chunk at ", shape_str(chunk.offsets),
                 " has no storage record");
      chunk.storage = it->second;
      t.chunks.push_back(std::move(chunk));
    }
    check_tiling(t, w);
    tensors_[key] = std::move(t);
  }
}

std::shared_ptr<MappedFile> DcpCheckpoint::file(const std::string& name) const {
  std::shared_ptr<MappedFile>& f = files_[name];
  if (!f) {
    const std::string path = dir_ + "/" + name;
    MT_REQUIRE(std::filesystem::exists(path), "PyTorch Distributed Checkpoint '", dir_,
               "': its .metadata names the data file '", name,
               "', which is missing (copy the whole checkpoint directory)");
    f = std::make_shared<MappedFile>(path, MappedFile::Access::kCopyOnWrite);
  }
  return f;
}

std::string DcpCheckpoint::where(const DcpStorage& s, const std::string& what) const {
  return dir_ + "/" + s.file + " bytes [" + std::to_string(s.offset) + ", " +
         std::to_string(s.offset + s.length) + ") (" + what + ")";
}

Tensor DcpCheckpoint::read_tensor(const std::string& key) const {
  auto it = tensors_.find(key);
  MT_CHECK(it != tensors_.end(), "read_tensor of a key the checkpoint does not hold");
  const DcpTensor& t = it->second;
  Tensor out = Tensor::empty(t.shape, t.dtype);
  for (const DcpChunk& c : t.chunks) {
    const std::string name =
        where(c.storage, "the chunk of " + key + " at " + shape_str(c.offsets));
    // DCP's SAFETENSORS serialization stores a chunk's raw elements, no archive around them.
    MT_REQUIRE(c.storage.length != uint64_t(shape_numel(c.sizes)) * dtype_size(t.dtype), "'", name,
               "' holds the chunk's raw elements (DCP's SAFETENSORS serialization), which "
               "megatron-cpp does not read; Megatron-Core saves with TORCH_SAVE");
    PyValue item;
    try {
      item = torch_load(file(c.storage.file), c.storage.offset, c.storage.length, name);
    } catch (const Error& e) {
      MT_THROW(e.message(),
               "; its .metadata places that chunk there, so the .distcp file is truncated or "
               "was not written together with this .metadata");
    }
    MT_REQUIRE(item.kind() == PyValue::Kind::kTensor, "'", name, "' holds ", item.describe(),
               ", not a tensor");
    const Tensor& data = item.as_tensor(name).data;
    MT_REQUIRE(data.shape() == c.sizes && data.dtype() == t.dtype, "'", name, "' holds ",
               dtype_name(data.dtype()), shape_str(data.shape()), ", but .metadata says ",
               dtype_name(t.dtype), shape_str(c.sizes));
    Tensor box = out;
    for (size_t d = 0; d < t.shape.size(); ++d)
      box = box.slice(int64_t(d), c.offsets[d], c.offsets[d] + c.sizes[d]);
    box.copy_from(data);
  }
  return out;
}

PyValue DcpCheckpoint::load_byte_item(const std::string& key) const {
  auto it = bytes_.find(key);
  MT_CHECK(it != bytes_.end(), "load_byte_item of a key the checkpoint does not hold");
  const std::string name = where(it->second, "item " + key);
  try {
    return torch_load(file(it->second.file), it->second.offset, it->second.length, name);
  } catch (const Error& e) {
    MT_THROW(e.message(),
             "; its .metadata places that item there, so the .distcp file is truncated or was "
             "not written together with this .metadata");
  }
}

}  // namespace megatron
