// Merge of partial attentions on CUDA (contract: kernels/attention_merge.h; CPU twin:
// kernels/cpu/attention_merge.cpp): one thread per query row (n, h, i), the same arithmetic in
// the same order as the CPU twin, so the two agree to the last bit up to exp/log's rounding.
#include <math_constants.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T>
struct Merge {
  T* out;
  float* lse;
  const T* part_out;
  const float* part_lse;
  int64_t heads, s, d, out_row;  // out_row: out's stride of a position, b·H·d
  __device__ void operator()(int64_t row) const {
    const int64_t i = row % s, h = (row / s) % heads, n = row / (s * heads);
    const float la = lse[row], lb = part_lse[row], m = fmaxf(la, lb);
    if (m == -CUDART_INF_F) return;  // no key reaches the row
    const float wa = expf(la - m), wb = expf(lb - m), total = wa + wb;
    const float fa = wa / total, fb = wb / total;
    T* o = out + i * out_row + (n * heads + h) * d;
    const T* p = part_out + i * out_row + (n * heads + h) * d;
    for (int64_t k = 0; k < d; ++k) o[k] = from_f32<T>(fa * to_f32(o[k]) + fb * to_f32(p[k]));
    lse[row] = m + logf(total);
  }
};

}  // namespace

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const int64_t b = lse.size(0), heads = lse.size(1), s = lse.size(2), d = out.size(2) / heads;
  dispatch_float(out.dtype(), "attention_merge out", [&](auto tag) {
    using T = decltype(tag);
    const Merge<T> op{
        ptr<T>(out), ptr<float>(lse), ptr<T>(part_out), ptr<float>(part_lse), heads, s,
        d,           b * heads * d};
    launch_flat(op, b * heads * s, "attention_merge");
  });
}

}  // namespace megatron::kernels::cuda
