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

}  // namespace megatron
