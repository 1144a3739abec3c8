// Index kernels: position ids and range checks of token ids, so that no layer above kernels/
// reads id tensors on the host.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace megatron::kernels {

// ids [s·b] i32, a seq-major [s, b] block flattened (or [s, b] itself; any contiguous shape
// whose numel is a multiple of batch): ids[i] = start + i / batch. start > 0 continues the
// positions of a sequence (inference with a KV cache); start + s − 1 must fit i32.
void fill_positions(Tensor& ids, int64_t batch, int64_t start);

// ids [N] i32 (any contiguous shape): the index of the first element outside [lo, hi), or −1
// when every id is inside. The caller turns a hit into an error message naming the id.
int64_t first_out_of_range(const Tensor& ids, int64_t lo, int64_t hi);

}  // namespace megatron::kernels
