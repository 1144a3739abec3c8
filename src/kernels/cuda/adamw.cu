// Fused AdamW over flat f32 buffers on CUDA (contract: kernels/adamw.h), with the CPU twin's
// arithmetic (kernels/cpu/adamw.cpp) in its order:
//   m = β1·m + (1−β1)·g;  v = β2·v + ((1−β2)·g)·g
//   p = p·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps)
// with the bias corrections computed on the host in double, exactly as the CPU does. Every
// operation is rounded as written (explicit _rn intrinsics, no FMA contraction), so the result
// is the CPU's to the bit when the CPU build does not contract either, and within a few ulps
// when its compiler fuses some multiply-adds.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace megatron::kernels::cuda {

namespace {

struct AdamWScalars {
  float b1, one_minus_b1, b2, one_minus_b2, eps, step_size, decay, bc2_sqrt;
};

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n,
                             AdamWScalars s) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(s.one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h, const std::vector<AdamWRun>& runs) {
  MT_CHECK(h.step >= 1, "adamw_update step must be >= 1, got ", h.step);
  // Host scalars exactly as kernels/cpu/adamw.cpp computes them.
  const float bc1 = float(1.0 - std::pow(double(h.beta1), double(h.step)));
  AdamWScalars s;
  s.bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))));
  s.step_size = h.lr / bc1;
  s.b1 = h.beta1;
  s.one_minus_b1 = 1.f - h.beta1;
  s.b2 = h.beta2;
  s.one_minus_b2 = 1.f - h.beta2;
  s.eps = h.eps;
  // One launch per run: launches are asynchronous and cheap next to the CPU's per-call
  // parallel region, which is why the CPU twin loops over the runs inside one region instead.
  for (const AdamWRun& r : runs) {
    const int64_t n = r.end - r.begin;
    if (n == 0) continue;
    s.decay = 1.f - h.lr * (r.decay ? h.weight_decay : 0.f);
    adamw_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<float>(param) + r.begin, ptr<float>(grad) + r.begin, ptr<float>(exp_avg) + r.begin,
        ptr<float>(exp_avg_sq) + r.begin, n, s);
    megatron::cuda::check_launch("adamw_update");
  }
}

}  // namespace megatron::kernels::cuda
