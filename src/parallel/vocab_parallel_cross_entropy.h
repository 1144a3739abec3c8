// Vocab-parallel softmax cross-entropy (Megatron-LM §3): the logits stay split along the
// vocabulary; only three numbers per token cross the wire.
//   1. all-reduce MAX of the row maxima (numerical stability, so logits ×1000 do not overflow)
//   2. one all-reduce SUM of [Σ exp(logit − max); target logit] (the owner contributes it)
//   loss = log Σexp + max − target logit
// Backward needs no communication: dlogits = dloss · (softmax − onehot) on the local shard.
// Padded vocabulary entries (global id >= vocab_size) are excluded from the softmax, so the
// loss is independent of the padding and padded ids get zero probability.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"

namespace megatron {

struct VocabParallelCrossEntropyCtx {
  Tensor logits;   // [N, V/t] local shard (f32 or bf16)
  Tensor targets;  // i32 [N] global ids
  Tensor row_max;  // f32 [N] global max
  Tensor sum_exp;  // f32 [N] global Σ exp(logit − max)
  int64_t vocab_start = 0;
  int64_t valid_cols = 0;  // real (unpadded) columns in this shard
};

// logits [N, V/t] (rank r holds global columns [r·V/t, (r+1)·V/t)), targets i32 [N] in
// [0, vocab_size) → loss f32 [N], identical on every rank.
Tensor vocab_parallel_cross_entropy_forward(VocabParallelCrossEntropyCtx& ctx, Communicator& tp,
                                            const Tensor& logits, const Tensor& targets,
                                            int64_t vocab_size, Arena& arena);

// dloss f32 [N] → dlogits [N, V/t] (dtype of the logits), written over ctx.logits in place:
// the logits are dead once the loss is known, and they are the largest activation.
Tensor vocab_parallel_cross_entropy_backward(const VocabParallelCrossEntropyCtx& ctx,
                                             const Tensor& dloss);

}  // namespace megatron
