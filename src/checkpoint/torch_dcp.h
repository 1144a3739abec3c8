// PyTorch Distributed Checkpoint (DCP, torch.distributed.checkpoint): the storage layout under
// Megatron-LM's `torch_dist` checkpoints (checkpoint/megatron_lm_torch_dist.h), read without
// Python.
//
//   DIR/.metadata        pickle of a Metadata dataclass (read by core/pickle_reader.h, whose
//                        allow-list admits exactly DCP's classes):
//     state_dict_metadata  {key: TensorStorageMetadata(properties (dtype, ...), size
//                            (the global shape), chunks [ChunkStorageMetadata(offsets,
//                            sizes)]) | BytesStorageMetadata()}
//     storage_data         {MetadataIndex(fqn, offset (a chunk's offsets; None for bytes)):
//                            _StorageInfo(relative_path, offset, length)}
//   DIR/__R_K.distcp     the data files, one or more per rank R: each tensor chunk is a
//                        torch.save archive of the chunk (shape `sizes`) at bytes
//                        [offset, offset + length) (PyTorch's TORCH_SAVE serialization, which
//                        Megatron-Core always asks for); each byte item is raw bytes there.
//
// PyTorch 1.13 wrote the classes from torch.distributed._shard.checkpoint; 2.x from
// torch.distributed.checkpoint, the TensorProperties state as a tuple (dtype, layout,
// requires_grad, memory-format enum, pin_memory), plus storage_meta and version, which are not
// needed here. A storage record with transform_descriptors (a DCP stream extension, e.g.
// compression) and a chunk of the SAFETENSORS serialization (its raw elements, no torch.save
// archive: told by its length) are refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/pickle_value.h"
#include "core/tensor.h"

namespace megatron {

class MappedFile;

// Where an item's bytes are: [offset, offset + length) of DIR/file.
struct DcpStorage {
  std::string file;
  uint64_t offset = 0, length = 0;
};

struct DcpChunk {
  Shape offsets, sizes;  // the box of the global tensor this chunk holds
  DcpStorage storage;
};

struct DcpTensor {
  DType dtype = DType::F32;
  Shape shape;  // global
  std::vector<DcpChunk> chunks;
};

class DcpCheckpoint {
 public:
  // Reads and checks DIR/.metadata: every chunk inside its tensor's global shape with a storage
  // record, the chunks of a tensor covering each element exactly once (Megatron saves only the
  // main replica of a replicated tensor), every storage record a plain file name of DIR. Nothing
  // else is read until asked. Throws Error naming the file and the problem (a missing .metadata, a
  // forbidden global, a layout this reader does not know).
  explicit DcpCheckpoint(const std::string& dir);
  ~DcpCheckpoint();
  DcpCheckpoint(DcpCheckpoint&&) noexcept;
  DcpCheckpoint& operator=(DcpCheckpoint&&) noexcept;

  const std::string& dir() const { return dir_; }
  const std::map<std::string, DcpTensor>& tensors() const { return tensors_; }
  const std::map<std::string, DcpStorage>& byte_items() const { return bytes_; }

  // The global tensor `key` (its stored dtype), assembled from its chunks. Throws Error naming
  // the key, the file and the byte range when a chunk's range lies past the end of its file, is
  // not a torch.save archive of one tensor (a wrong offset), or holds another shape or dtype
  // than the metadata says.
  Tensor read_tensor(const std::string& key) const;
  // The byte item `key` read as a torch.save archive (how Megatron-Core stores its objects:
  // torch.save of a list of them).
  PyValue load_byte_item(const std::string& key) const;

 private:
  std::shared_ptr<MappedFile> file(const std::string& name) const;
  // "DIR/FILE bytes [a, b) (what)", for messages.
  std::string where(const DcpStorage& s, const std::string& what) const;

  std::string dir_;
  std::map<std::string, DcpTensor> tensors_;
  std::map<std::string, DcpStorage> bytes_;
  mutable std::map<std::string, std::shared_ptr<MappedFile>> files_;
};

}  // namespace megatron
