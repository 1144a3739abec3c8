// Moving a batch of small host tensors to a device in one transfer.
//
// A micro-batch is a handful of small tensors (token ids, labels, masks). Copying each one
// to a GPU separately costs one synchronous host-to-device copy apiece; upload() packs them
// into one host staging buffer and copies that with a single transfer into one block of the
// destination arena, then hands out views of the block.
#pragma once

#include <vector>

#include "core/arena.h"

namespace megatron {

// Each tensor of `tensors` on arena.device(), in order: tensors already there (and undefined
// ones) come back as they are; the others (host tensors, any strides) come back as contiguous
// tensors of the same shape and dtype, all carved from one arena allocation filled by one
// copy. On a CPU arena nothing is copied.
std::vector<Tensor> upload(const std::vector<Tensor>& tensors, Arena& arena);

}  // namespace megatron
