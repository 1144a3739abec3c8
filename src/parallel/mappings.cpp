#include "parallel/mappings.h"

#include "kernels/elementwise.h"

namespace megatron {

void CopyToTpRegion::backward(Communicator& tp, Tensor& grad) {
  if (tp.size() > 1) tp.all_reduce(grad, ReduceOp::SUM);
}

void ReduceFromTpRegion::forward(Communicator& tp, Tensor& y) {
  if (tp.size() > 1) tp.all_reduce(y, ReduceOp::SUM);
}

Tensor ScatterToTpRegion::forward(Communicator& tp, const Tensor& x, Arena& arena) {
  return split_last_dim(tp, x, arena);
}

Tensor ScatterToTpRegion::backward(Communicator& tp, const Tensor& grad, Arena& arena) {
  return gather_last_dim(tp, grad, arena);
}

Tensor GatherFromTpRegion::forward(Communicator& tp, const Tensor& x, Arena& arena) {
  return gather_last_dim(tp, x, arena);
}

Tensor GatherFromTpRegion::backward(Communicator& tp, const Tensor& grad, Arena& arena) {
  return split_last_dim(tp, grad, arena);
}

Tensor GatherFromSequenceParallelRegion::forward(Communicator& tp, const Tensor& x, Arena& arena) {
  return gather_first_dim(tp, x, arena);
}

Tensor GatherFromSequenceParallelRegion::backward(Communicator& tp, const Tensor& grad,
                                                  Arena& arena) {
  return reduce_scatter_first_dim(tp, grad, arena);
}

Tensor ReduceScatterToSequenceParallelRegion::forward(Communicator& tp, const Tensor& y,
                                                      Arena& arena) {
  return reduce_scatter_first_dim(tp, y, arena);
}

Tensor ReduceScatterToSequenceParallelRegion::backward(Communicator& tp, const Tensor& grad,
                                                       Arena& arena) {
  return gather_first_dim(tp, grad, arena);
}

Tensor ScatterToSequenceParallelRegion::forward(Communicator& tp, const Tensor& x, Arena& arena) {
  const int64_t t = tp.size();
  if (t == 1) return x;
  const int64_t s = x.size(0);
  MT_CHECK(s % t == 0, "ScatterToSequenceParallelRegion: the sequence ", s, " of ", x.describe(),
           " is not divisible by the tensor-model-parallel size ", t);
  const int64_t chunk = s / t;
  Shape shape = x.shape();
  shape[0] = chunk;
  Tensor out = arena.alloc(shape, x.dtype());  // [s/t, ...]
  kernels::copy(x.slice(0, tp.rank() * chunk, (tp.rank() + 1) * chunk), out);
  return out;
}

Tensor ScatterToSequenceParallelRegion::backward(Communicator& tp, const Tensor& grad,
                                                 Arena& arena) {
  return gather_first_dim(tp, grad, arena);
}

Tensor TpRegionInput::forward(Communicator& tp, const Tensor& x, bool sequence_parallel,
                              Arena& arena) {
  return sequence_parallel ? GatherFromSequenceParallelRegion::forward(tp, x, arena)
                           : CopyToTpRegion::forward(x);
}

Tensor TpRegionInput::backward(Communicator& tp, Tensor& grad, bool sequence_parallel,
                               Arena& arena) {
  if (sequence_parallel) return GatherFromSequenceParallelRegion::backward(tp, grad, arena);
  CopyToTpRegion::backward(tp, grad);
  return grad;
}

Tensor split_last_dim(Communicator& tp, const Tensor& x, Arena& arena) {
  const int64_t t = tp.size();
  if (t == 1) return x;
  const int64_t c = x.size(-1);
  MT_CHECK(c % t == 0, "split_last_dim: last dimension ", c, " of ", x.describe(),
           " is not divisible by the tensor-model-parallel size ", t);
  const int64_t chunk = c / t;
  Shape shape = x.shape();
  shape.back() = chunk;
  Tensor out = arena.alloc(shape, x.dtype());  // [..., C/t]
  kernels::copy(x.slice(x.dim() - 1, tp.rank() * chunk, (tp.rank() + 1) * chunk), out);
  return out;
}

Tensor gather_last_dim(Communicator& tp, const Tensor& x, Arena& arena) {
  const int64_t t = tp.size();
  if (t == 1) return x;
  MT_CHECK(x.is_contiguous(), "gather_last_dim: input must be contiguous, got ", x.describe());
  const int64_t chunk = x.size(-1), rows = x.numel() / chunk;
  Tensor gathered = arena.alloc({t * rows, chunk}, x.dtype());  // [t·N, C/t], rank-major
  tp.all_gather(x.view({rows, chunk}), gathered);
  Shape shape = x.shape();
  shape.back() = t * chunk;
  Tensor out = arena.alloc(shape, x.dtype());  // [..., C]
  // [t, N, C/t] → [N, t, C/t]: chunk r becomes columns [r·C/t, (r+1)·C/t) of every row.
  Tensor out3 = out.view({rows, t, chunk});
  kernels::copy(gathered.view({t, rows, chunk}).transpose(0, 1), out3);
  return out;
}

Tensor gather_first_dim(Communicator& tp, const Tensor& x, Arena& arena) {
  const int64_t t = tp.size();
  if (t == 1) return x;
  MT_CHECK(x.is_contiguous(), "gather_first_dim: input must be contiguous, got ", x.describe());
  Shape shape = x.shape();
  shape[0] *= t;
  Tensor out = arena.alloc(shape, x.dtype());  // [t·n, ...], rank r's x at rows [r·n, (r+1)·n)
  tp.all_gather(x, out);
  return out;
}

Tensor reduce_scatter_first_dim(Communicator& tp, const Tensor& x, Arena& arena) {
  const int64_t t = tp.size();
  if (t == 1) return x;
  MT_CHECK(x.is_contiguous(), "reduce_scatter_first_dim: input must be contiguous, got ",
           x.describe());
  MT_CHECK(x.size(0) % t == 0, "sequence parallelism: the sequence length ", x.size(0), " of ",
           x.describe(), " is not divisible by the tensor-model-parallel size ", t);
  Shape shape = x.shape();
  shape[0] /= t;
  Tensor out = arena.alloc(shape, x.dtype());  // [n, ...]
  tp.reduce_scatter(x, out, ReduceOp::SUM);
  return out;
}

}  // namespace megatron
