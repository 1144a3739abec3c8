#include "parallel/local_linear.h"

#include "kernels/gemm.h"

namespace megatron {

Shape with_last(const Shape& shape, int64_t last) {
  Shape s = shape;
  s.back() = last;
  return s;
}

Tensor local_linear_forward(const Tensor& x, const Tensor& w, Arena& arena) {
  Tensor y = arena.alloc({x.size(0), w.size(0)}, x.dtype());  // [N, out]
  kernels::gemm(x, false, w, true, y);
  return y;
}

Tensor local_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw,
                             Arena& arena) {
  kernels::gemm(dy, true, x, false, dw, 1.0f, 1.0f);             // dW [out, in] += dyᵀ·x
  Tensor dx = arena.alloc({dy.size(0), w.size(1)}, dy.dtype());  // [N, in]
  kernels::gemm(dy, false, w, false, dx);
  return dx;
}

}  // namespace megatron
