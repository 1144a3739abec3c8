// torch.load and torch.save of the files Megatron-LM writes (model_optim_rng.pt, ...), without
// Python: core/torch_zip.h is the container, core/pickle_reader.h / pickle_writer.h the
// object; this file joins them — each tensor of the pickle gets its data from the zip's
// data/<storage key> record.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/pickle_value.h"

namespace megatron {

class DurableFile;
class MappedFile;

// The object saved in the PyTorch file `path`, every tensor's `data` set: a copy-on-write view
// of the mapped file (tensors that share a storage share memory, as in PyTorch), or a copy
// where a foreign writer left a storage misaligned. Throws Error naming the file and the
// problem: a corrupt or truncated archive, a forbidden global (core/pickle_reader.h), a
// missing storage, a storage whose size disagrees with the pickle.
PyValue torch_load(const std::string& path);
// The same for the archive torch.save wrote at bytes [offset, offset + length) of `file` (mapped
// copy-on-write; a PyTorch Distributed Checkpoint item, checkpoint/torch_dcp.h; `length`
// uint64_t(-1): to the end of the file); `name` names it in messages.
PyValue torch_load(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                   const std::string& name);

// Writes `value` to `path` as torch.save (PyTorch 1.6+ zip format, pickle protocol 2) does:
// records <stem>/data.pkl, <stem>/data/<key> for each tensor ("0", "1", ... in the order the
// pickle meets them, each tensor its own contiguous storage), <stem>/version = "3\n", every
// record 64-byte aligned; `stem` is the file name without its extension, as torch.save names
// it. Tensors must be host tensors. The file is fsync'ed.
void torch_save(const std::string& path, const PyValue& value);
// The same archive appended to the open `file` (torch.save into a stream: the folder is named
// "archive"), as a PyTorch Distributed Checkpoint data file holds its items; returns its size in
// bytes. The file is neither synced nor closed.
uint64_t torch_save(DurableFile& file, const PyValue& value);

// Calls `fn` on every tensor of `value` in pickle order (containers met twice, once).
void for_each_tensor(const PyValue& value, const std::function<void(PyTensor&)>& fn);

}  // namespace megatron
