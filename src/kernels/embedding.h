// Embedding gather and scatter-add over a (possibly vocab-sharded) table.
//   ids [N] i32 global ids; table [V_local, C] holds rows [vocab_start, vocab_start+V_local)
//   out [N, C]: the row of ids[n] when this shard owns it, zeros otherwise.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
// dtable[ids[n] − vocab_start] += dout[n] for owned ids (f32 dtable; deterministic order).
void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start, Tensor& dtable);

}  // namespace megatron::kernels
