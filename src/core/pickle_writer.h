// Writes a PyValue (core/pickle_value.h) as a protocol-2 pickle, as torch.save does: dicts,
// lists and tuples as Python writes them, OrderedDict and argparse.Namespace by their globals,
// bytes as _codecs.encode(text, "latin1"), tensors as torch._utils._rebuild_tensor_v2 with a
// persistent id ('storage', torch.<X>Storage, key, location, numel). Python's memo is not
// used (no object is written twice), so the bytes differ from Python's, never the object. An
// object (PyObject) is rebuilt by NEWOBJ or REDUCE as it says (new_object).
#pragma once

#include <string>

#include "core/pickle_value.h"

namespace megatron {

// The pickle of `value`. Tensors are written with their PyTensor fields (storage_key, ...);
// core/torch_file.h assigns the keys and writes the storages.
std::string write_pickle(const PyValue& value);

}  // namespace megatron
