// A pickle reader for PyTorch checkpoints that never runs Python.
//
// A pickle is a program for a stack machine whose GLOBAL opcode names any importable callable
// and whose REDUCE calls it: loading an untrusted pickle in Python runs whatever it names
// (os.system, builtins.eval, ...). This reader executes nothing. It interprets the opcodes of
// protocols 0-5 that torch.save's pickles use and admits a global only from an allow-list of
// what Megatron-LM checkpoints hold; any other global is refused by name before anything is
// built. The allow-list is the security boundary:
//
//   collections.OrderedDict            -> an OrderedDict (PyDict)
//   argparse.Namespace                 -> a Namespace (PyDict of attributes)
//   torch._utils._rebuild_tensor_v2,   -> a PyTensor (its data is read from the zip's
//   torch._utils._rebuild_parameter       data/<key> record by core/torch_file.h)
//   torch.<Float|Double|Half|BFloat16|Long|Int|Byte>Storage, in persistent ids
//   torch.<dtype> (float32, bfloat16, ...: `args.params_dtype`) -> a PyGlobal value
//   _codecs.encode (protocol-2 bytes)   -> bytes
//   torch.Size                         -> the tuple of its dimensions
//   PyTorch Distributed Checkpoint's .metadata classes (torch.distributed.checkpoint.metadata's
//   Metadata, TensorStorageMetadata, ChunkStorageMetadata, BytesStorageMetadata, MetadataIndex,
//   TensorProperties, _MEM_FORMAT_ENCODING, StorageMeta; filesystem._StorageInfo; their
//   PyTorch 1.13 modules under torch.distributed._shard; Megatron-Core's MCoreMetadata),
//   torch.serialization._get_layout and pathlib.PosixPath (a layout and a directory recorded
//   there)
//   numpy's ndarray/dtype/scalar reconstruction (NumPy RNG states), _io.BytesIO (Transformer
//   Engine's older _extra_state), Megatron-Core's enums
//   (Class(value), or getattr(Class, "member") as Python >= 3.11 pickles them; getattr of
//   anything else is refused)          -> PyObject records: kept as data, never called
//
// Sets, frozensets, extension codes and text-mode persistent ids are refused as unsupported, and
// so is a result nested more than 1000 containers deep or containing itself (its readers
// recurse; PyTorch checkpoints nest a handful).
// Every failure is an Error naming the source, the byte offset and the problem (a truncated
// stream, an unknown opcode, a stack underflow, a forbidden global).
#pragma once

#include <string>
#include <string_view>

#include "core/pickle_value.h"

namespace megatron {

// The object the pickle `bytes` builds; `source` names it in messages ("'x.pt'/data.pkl").
PyValue read_pickle(std::string_view bytes, const std::string& source);

// Whether read_pickle admits the global module.name (for tests and messages).
bool pickle_global_allowed(const std::string& module, const std::string& name);

}  // namespace megatron
