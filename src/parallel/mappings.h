// The four conjugate communication operators of Megatron-LM's tensor parallelism, each with
// an explicit forward and backward (paper §3, fig. 3):
//   f  CopyToTpRegion      forward identity,          backward all-reduce
//   g  ReduceFromTpRegion  forward all-reduce,        backward identity
//      ScatterToTpRegion   forward keep own chunk of the last dimension, backward all-gather
//      GatherFromTpRegion  forward all-gather along the last dimension,  backward keep own chunk
// Tensors are [..., C] with C split into tp.size() contiguous chunks (rank r owns chunk r).
//
// Sequence parallelism (Korthikanti et al. 2022, §4.2.2) splits the activations OUTSIDE the
// tensor-parallel region (LayerNorms, dropouts, residuals) along the sequence: they are
// [s/t, b, h], rank r owning positions [r·s/t, (r+1)·s/t) — dim 0, contiguous, as activations
// are sequence-first. f and g become
//   ḡ  GatherFromSequenceParallelRegion       forward all-gather along dim 0, backward
//                                             reduce-scatter along dim 0 (enters the TP region)
//   g̅  ReduceScatterToSequenceParallelRegion  forward reduce-scatter along dim 0, backward
//                                             all-gather along dim 0 (leaves the TP region;
//                                             also the vocab-parallel embedding's output)
//      ScatterToSequenceParallelRegion        forward keep own chunk of dim 0, backward
//                                             all-gather along dim 0 (a replicated [s, ...]
//                                             back to its shards: the MTP projection's output)
// TpRegionInput picks f or ḡ for the input of a column-parallel layer.
// All-reduces work in place; scatter/gather outputs are allocated from the arena. With one
// rank every operator is the identity and returns its input without copying.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"

namespace megatron {

struct CopyToTpRegion {
  static Tensor forward(const Tensor& x) { return x; }
  static void backward(Communicator& tp, Tensor& grad);  // all-reduce SUM in place
};

struct ReduceFromTpRegion {
  static void forward(Communicator& tp, Tensor& y);  // all-reduce SUM in place
  static Tensor backward(const Tensor& grad) { return grad; }
};

struct ScatterToTpRegion {
  // x [..., C] → [..., C/t], this rank's chunk.
  static Tensor forward(Communicator& tp, const Tensor& x, Arena& arena);
  // grad [..., C/t] → [..., C].
  static Tensor backward(Communicator& tp, const Tensor& grad, Arena& arena);
};

struct GatherFromTpRegion {
  // x [..., C/t] → [..., C].
  static Tensor forward(Communicator& tp, const Tensor& x, Arena& arena);
  // grad [..., C] → [..., C/t], this rank's chunk.
  static Tensor backward(Communicator& tp, const Tensor& grad, Arena& arena);
};

struct GatherFromSequenceParallelRegion {
  // x [s/t, ...] (contiguous) → [s, ...].
  static Tensor forward(Communicator& tp, const Tensor& x, Arena& arena);
  // grad [s, ...] (contiguous) → [s/t, ...], the sum over the group of this rank's chunk.
  static Tensor backward(Communicator& tp, const Tensor& grad, Arena& arena);
};

struct ReduceScatterToSequenceParallelRegion {
  // y [s, ...] (contiguous, partial sums) → [s/t, ...], the sum of this rank's chunk.
  static Tensor forward(Communicator& tp, const Tensor& y, Arena& arena);
  // grad [s/t, ...] → [s, ...].
  static Tensor backward(Communicator& tp, const Tensor& grad, Arena& arena);
};

struct ScatterToSequenceParallelRegion {
  // x [s, ...] (replicated on the group) → [s/t, ...], this rank's chunk.
  static Tensor forward(Communicator& tp, const Tensor& x, Arena& arena);
  // grad [s/t, ...] (contiguous) → [s, ...].
  static Tensor backward(Communicator& tp, const Tensor& grad, Arena& arena);
};

// The input of a column-parallel layer (replicated weights' x Wᵀ inside the TP region): f
// (CopyToTpRegion) on a replicated [s, b, h], or ḡ (GatherFromSequenceParallelRegion) on a
// sequence shard [s/t, b, h].
struct TpRegionInput {
  // x → the full-sequence input [s, ..., h] every rank multiplies.
  static Tensor forward(Communicator& tp, const Tensor& x, bool sequence_parallel, Arena& arena);
  // grad [s, ..., h] (this rank's partial input gradient, contiguous) → the gradient of x:
  // all-reduced in place, or reduce-scattered to [s/t, ..., h].
  static Tensor backward(Communicator& tp, Tensor& grad, bool sequence_parallel, Arena& arena);
};

// The building blocks, shared by the operators above and by layers that split or gather
// themselves (e.g. the vocab-parallel logits).
Tensor split_last_dim(Communicator& tp, const Tensor& x, Arena& arena);
Tensor gather_last_dim(Communicator& tp, const Tensor& x, Arena& arena);
// Along dim 0 (sequence parallelism): x [n, ...] → [t·n, ...] in rank order; x [t·n, ...] →
// [n, ...], the sum over the group of chunk tp.rank().
Tensor gather_first_dim(Communicator& tp, const Tensor& x, Arena& arena);
Tensor reduce_scatter_first_dim(Communicator& tp, const Tensor& x, Arena& arena);

}  // namespace megatron
