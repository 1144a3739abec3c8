// The four conjugate communication operators of Megatron-LM's tensor parallelism, each with
// an explicit forward and backward (paper §3, fig. 3):
//   f  CopyToTpRegion      forward identity,          backward all-reduce
//   g  ReduceFromTpRegion  forward all-reduce,        backward identity
//      ScatterToTpRegion   forward keep own chunk of the last dimension, backward all-gather
//      GatherFromTpRegion  forward all-gather along the last dimension,  backward keep own chunk
// Tensors are [..., C] with C split into tp.size() contiguous chunks (rank r owns chunk r).
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

// The building blocks, shared by the operators above and by layers that split or gather
// themselves (e.g. the vocab-parallel logits).
Tensor split_last_dim(Communicator& tp, const Tensor& x, Arena& arena);
Tensor gather_last_dim(Communicator& tp, const Tensor& x, Arena& arena);

}  // namespace megatron
