// Writing PyTorch Distributed Checkpoint (DCP, the storage under Megatron-LM's `torch_dist`
// checkpoints; the layout is described in checkpoint/torch_dcp.h, which reads it) without
// Python, as PyTorch 2.x's FileSystemWriter lays it out for Megatron-Core:
//
//   DIR/__R_0.distcp   rank R's items back to back: each tensor chunk a torch.save archive of
//                      the chunk (TORCH_SAVE serialization, folder "archive"), each byte item
//                      its bytes as given (Megatron-Core's objects are torch.save'd already)
//   DIR/.metadata      pickle of torch.distributed.checkpoint.metadata.Metadata, written once
//                      all ranks' items are known: state_dict_metadata {key: TensorStorageMetadata
//                      (TensorProperties, torch.Size global shape, [ChunkStorageMetadata])
//                      | BytesStorageMetadata}, planner_data None, storage_data {MetadataIndex
//                      (key, chunk offsets, chunk index): filesystem._StorageInfo(file, offset,
//                      length)}, storage_meta StorageMeta(checkpoint_id PosixPath, save_id),
//                      version "1.0.0". The dataclasses are pickled as Python pickles them
//                      (NEWOBJ + BUILD of their fields; TensorProperties' state the tuple its
//                      __getstate__ returns, its memory format the _MEM_FORMAT_ENCODING enum).
//
// A save is two steps so that ranks write in parallel: every rank writes its data file
// (write_dcp_data_file) and hands its item records to one rank (dcp_items_text /
// dcp_items_from_text carry them as text), which writes .metadata (write_dcp_metadata).
#pragma once

#include <string>
#include <vector>

#include "checkpoint/torch_dcp.h"
#include "core/tensor.h"

namespace megatron {

// A chunk of the global tensor `key`: `data` (a host tensor of the chunk's sizes, any strides)
// sits at `offsets` of `global_shape`.
struct DcpChunkToWrite {
  std::string key;
  Shape global_shape, offsets;
  Tensor data;
};

// A byte item (BytesStorageMetadata): `bytes` stored as they are.
struct DcpBytesToWrite {
  std::string key, bytes;
};

// Where a written item went: what .metadata records of it.
struct DcpWrittenItem {
  std::string key;
  bool bytes = false;  // a byte item; the fields below describe tensor chunks
  DType dtype = DType::F32;
  Shape global_shape, offsets, sizes;
  DcpStorage storage;
};

// Writes `file_name` (e.g. "__3_0.distcp") in `dir`, fsync'ed: the chunks, then the byte items.
// Returns their records.
std::vector<DcpWrittenItem> write_dcp_data_file(const std::string& dir,
                                                const std::string& file_name,
                                                const std::vector<DcpChunkToWrite>& chunks,
                                                const std::vector<DcpBytesToWrite>& byte_items);

// Records as text (JSON) and back, to gather them from the ranks.
std::string dcp_items_text(const std::vector<DcpWrittenItem>& items);
std::vector<DcpWrittenItem> dcp_items_from_text(const std::string& text);

// Writes `dir`/.metadata (fsync'ed) for `items` (every rank's, in rank order), recording
// `checkpoint_id` (the directory the checkpoint is committed as) and `save_id` in StorageMeta,
// then reads it back with DcpCheckpoint, so a checkpoint whose chunks leave an element
// uncovered, overlap or disagree on a tensor's shape or dtype is an Error before it is
// committed (naming the key).
void write_dcp_metadata(const std::string& dir, const std::vector<DcpWrittenItem>& items,
                        const std::string& checkpoint_id, const std::string& save_id);

}  // namespace megatron
