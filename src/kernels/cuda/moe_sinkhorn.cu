// Sinkhorn expert choice on CUDA (contract: kernels/moe_sinkhorn.h; CPU twin:
// kernels/cpu/moe_sinkhorn.cpp). One pass is two kernels: one thread per token sums its row,
// then one thread per expert sums its column, both in index order as the CPU does, so the
// factors are the CPU's. The stopping test needs the pass's change on the host: one warp adds
// the experts' changes in order and the host reads the scalar (a few passes per micro-batch).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/moe_sinkhorn.h"

namespace megatron::kernels::cuda {

namespace {

constexpr double kEps = 1e-8;

__global__ void row_factors_kernel(const float* logits, const double* d1, int64_t n, int64_t e,
                                   double* d0) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t c = 0; c < e; ++c) s += d1[c] * exp(double(logits[r * e + c]));
    d0[r] = 1.0 / double(n) / (s + kEps);
  }
}

// d1 [E] from d0; change[c] = |d1_old[c] − d1[c]|, and d1_old takes d1.
__global__ void column_factors_kernel(const float* logits, const double* d0, int64_t n, int64_t e,
                                      double* d1, double* d1_old, double* change) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= e) return;
  double s = 0;
  for (int64_t r = 0; r < n; ++r) s += d0[r] * exp(double(logits[r * e + c]));
  d1[c] = 1.0 / double(e) / (s + kEps);
  change[c] = fabs(d1_old[c] - d1[c]);
  d1_old[c] = d1[c];
}

// One warp, one working lane: the mean change in expert order, as the CPU adds it.
__global__ void mean_change_kernel(const double* change, int64_t e, double* out) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int64_t c = 0; c < e; ++c) s += change[c];
  *out = s / double(e);
}

__global__ void choose_kernel(const float* logits, const double* d0, const double* d1, int64_t n,
                              int64_t e, int64_t k, int32_t* indices) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    int32_t* idx = indices + r * k;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      double best_score = 0;
      for (int64_t c = 0; c < e; ++c) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || idx[i] == c;
        if (taken) continue;
        const double s = d0[r] * exp(double(logits[r * e + c])) * d1[c];
        if (best < 0 || s > best_score) {
          best = c;
          best_score = s;
        }
      }
      idx[j] = int32_t(best);
    }
  }
}

__global__ void fill_kernel(double* v, int64_t n, double value) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = value;
}

}  // namespace

void moe_sinkhorn_topk(const Tensor& logits, int64_t topk, Tensor& indices) {
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  // d0 [N], d1 [E], d1_old [E], change [E], the mean change [1].
  Tensor work = Tensor::empty({n + 3 * e + 1}, DType::F64, logits.device());
  double* d0 = static_cast<double*>(work.raw_data());
  double *d1 = d0 + n, *d1_old = d1 + e, *change = d1_old + e, *mean = change + e;
  fill_kernel<<<blocks_for(2 * e), kThreads, 0, stream()>>>(d1, 2 * e, 1.0);
  megatron::cuda::check_launch("moe_sinkhorn_topk");
  double error = 1e9;
  while (error > kSinkhornTolerance) {
    row_factors_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ptr<float>(logits), d1, n, e, d0);
    column_factors_kernel<<<blocks_for(e), kThreads, 0, stream()>>>(ptr<float>(logits), d0, n, e,
                                                                    d1, d1_old, change);
    mean_change_kernel<<<1, 32, 0, stream()>>>(change, e, mean);
    megatron::cuda::check_launch("moe_sinkhorn_topk");
    error = element_value<double>(work, n + 3 * e);
  }
  choose_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ptr<float>(logits), d0, d1, n, e, topk,
                                                          ptr<int32_t>(indices));
  megatron::cuda::check_launch("moe_sinkhorn_topk");
}

}  // namespace megatron::kernels::cuda
