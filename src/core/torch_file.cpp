#include "core/torch_file.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/pickle_reader.h"
#include "core/pickle_writer.h"
#include "core/torch_zip.h"

namespace megatron {

namespace {

void visit(const PyValue& v, const std::function<void(PyTensor&)>& fn,
           std::set<const void*>& seen) {
  switch (v.kind()) {
    case PyValue::Kind::kList:
    case PyValue::Kind::kTuple: {
      auto& items = v.as_sequence("");
      if (!seen.insert(&items).second) return;
      for (const PyValue& item : items) visit(item, fn, seen);
      return;
    }
    case PyValue::Kind::kDict: {
      PyDict& d = v.as_dict("");
      if (!seen.insert(&d).second) return;
      for (const auto& [k, item] : d.items) {
        visit(k, fn, seen);
        visit(item, fn, seen);
      }
      return;
    }
    case PyValue::Kind::kObject: {
      PyObject& o = v.as_object("");
      if (!seen.insert(&o).second) return;
      for (const PyValue& item : o.args) visit(item, fn, seen);
      if (o.state) visit(*o.state, fn, seen);
      return;
    }
    case PyValue::Kind::kTensor: {
      PyTensor& t = v.as_tensor("");
      if (seen.insert(&t).second) fn(t);
      return;
    }
    default:
      return;
  }
}

}  // namespace

void for_each_tensor(const PyValue& value, const std::function<void(PyTensor&)>& fn) {
  std::set<const void*> seen;
  visit(value, fn, seen);
}

PyValue torch_load(const std::string& path) {
  return torch_load(std::make_shared<MappedFile>(path, MappedFile::Access::kCopyOnWrite), 0,
                    uint64_t(-1), path);
}

PyValue torch_load(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                   const std::string& path) {
  auto zip = std::make_shared<TorchZipReader>(std::move(file), offset, length, path);
  const std::string source = "'" + path + "' (" + zip->archive_name() + "/data.pkl)";
  PyValue root = read_pickle(zip->record("data.pkl"), source);
  std::map<std::string, std::shared_ptr<Storage>> storages;
  for_each_tensor(root, [&](PyTensor& t) {
    const size_t element = dtype_size(t.dtype);
    std::shared_ptr<Storage>& storage = storages[t.storage_key];
    const std::string record = "data/" + t.storage_key;
    const size_t bytes = zip->record(record).size();
    MT_REQUIRE(bytes == size_t(t.storage_numel) * element, "PyTorch checkpoint '", path,
               "': storage ", t.storage_key, " holds ", bytes, " bytes, but its pickle says ",
               t.storage_numel, " ", dtype_name(t.dtype),
               " elements (the file is corrupt or truncated)");
    if (storage && storage->bytes() != bytes)
      MT_THROW("PyTorch checkpoint '", path, "': storage ", t.storage_key,
               " is used with two different element types");
    if (!storage) {
      uint8_t* data = zip->writable_record(record);
      if (reinterpret_cast<uintptr_t>(data) % element == 0) {
        storage = Storage::borrow(data, bytes, Device::CPU, zip);
      } else {  // a foreign writer's misaligned record: an aligned copy
        storage = Storage::allocate(bytes);
        std::memcpy(storage->data(), data, bytes);
      }
    }
    t.data = Tensor(storage, t.offset, t.shape, t.strides, t.dtype);
  });
  return root;
}

namespace {

// torch.save's records of `value` into `zip`: the pickle, the storages, the version.
void write_torch_archive(TorchZipWriter& zip, const PyValue& value) {
  // Keys in pickle order; each tensor its own contiguous storage.
  std::vector<Tensor> storages;
  for_each_tensor(value, [&](PyTensor& t) {
    MT_CHECK(t.data.defined() && t.data.device().is_cpu(), "torch_save writes host tensors");
    MT_CHECK(t.data.dtype() == t.dtype && t.data.shape() == t.shape,
             "a PyTensor's fields describe its data");
    if (!t.data.is_contiguous()) t.data = t.data.clone();
    t.storage_key = std::to_string(storages.size());
    t.storage_numel = t.data.numel();
    t.offset = 0;
    t.strides = contiguous_strides(t.shape);
    storages.push_back(t.data);
  });
  const std::string pickle = write_pickle(value);
  zip.add_record("data.pkl", pickle.data(), pickle.size());
  for (size_t i = 0; i < storages.size(); ++i)
    zip.add_record("data/" + std::to_string(i), storages[i].raw_data(), storages[i].nbytes());
  zip.add_record("version", "3\n", 2);
  zip.finish();
}

}  // namespace

void torch_save(const std::string& path, const PyValue& value) {
  TorchZipWriter zip(path, std::filesystem::path(path).stem().string());
  write_torch_archive(zip, value);
}

uint64_t torch_save(DurableFile& file, const PyValue& value) {
  TorchZipWriter zip(file, "archive");
  write_torch_archive(zip, value);
  return zip.size();
}

}  // namespace megatron
