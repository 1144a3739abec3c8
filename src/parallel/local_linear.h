// The rank-local GEMMs of a linear layer y = x·Wᵀ on this rank's weight shard, shared by
// ColumnParallelLinear and RowParallelLinear: the two differ only in how the weight is split
// and in the communication (and bias) around these GEMMs.
#pragma once

#include "core/arena.h"
#include "core/tensor.h"

namespace megatron {

// `shape` with its last dimension replaced by `last`.
Shape with_last(const Shape& shape, int64_t last);

// x: [N, in], w: [out, in]; returns y = x·Wᵀ [N, out] allocated from `arena`.
Tensor local_linear_forward(const Tensor& x, const Tensor& w, Arena& arena);

// dy: [N, out], x: [N, in] (the forward input), w: [out, in]. Accumulates dW += dyᵀ·x into
// `dw` [out, in] and returns dx = dy·W [N, in] allocated from `arena`.
Tensor local_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw,
                             Arena& arena);

}  // namespace megatron
