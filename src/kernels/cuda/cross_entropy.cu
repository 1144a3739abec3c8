// Vocab-sharded softmax cross-entropy pieces on CUDA (contract: kernels/cross_entropy.h; CPU
// twin: kernels/cpu/cross_entropy.cpp). One warp per row up to 1024 columns, one block per row
// beyond (vocabulary shards of any width), statistics in f32 with fixed-order reductions
// (cuda_rows.cuh). Only the first valid_cols columns are read; padding columns get dlogits 0.
// The row max skips NaN like the CPU's and is −inf over an empty shard; the target's logit is 0
// on shards that do not own it.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T, bool kWarp>
__global__ void __launch_bounds__(512)
    row_max_kernel(const T* logits, int64_t n, int64_t v, int64_t valid_cols, float* row_max) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* lr = logits + r * v;
    float m = -CUDART_INF_F;
    for (int64_t j = G::lane(); j < valid_cols; j += G::width()) m = fmaxf(m, to_f32(lr[j]));
    m = G::max(m, smem);
    if (G::lane() == 0) row_max[r] = m;
  }
}

template <typename T, bool kWarp>
__global__ void __launch_bounds__(512)
    sum_exp_target_kernel(const T* logits, const int32_t* targets, int64_t vocab_start, int64_t n,
                          int64_t v, int64_t valid_cols, const float* row_max, float* sum_exp,
                          float* target_logit) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* lr = logits + r * v;
    const float m = row_max[r];
    float s = 0.f;
    for (int64_t j = G::lane(); j < valid_cols; j += G::width()) s += expf(to_f32(lr[j]) - m);
    s = G::sum(s, smem);
    if (G::lane() == 0) {
      sum_exp[r] = s;
      const int64_t local = int64_t(targets[r]) - vocab_start;
      target_logit[r] = (local >= 0 && local < valid_cols) ? to_f32(lr[local]) : 0.f;
    }
  }
}

struct Loss {
  const float* row_max;
  const float* sum_exp;
  const float* target_logit;
  float* loss;
  __device__ void operator()(int64_t r) const {
    loss[r] = logf(sum_exp[r]) + row_max[r] - target_logit[r];
  }
};

// dlogits[n, c] = exp(logit − max) · (dloss / sum_exp) − [c is target] · dloss; 0 on padding.
// dlogits may alias logits: each element is read and then written by one thread.
template <typename T>
struct Backward {
  const T* logits;
  const int32_t* targets;
  int64_t vocab_start;
  int64_t v;
  int64_t valid_cols;
  const float* row_max;
  const float* sum_exp;
  const float* dloss;
  T* dlogits;
  __device__ void operator()(int64_t r, int64_t j, int64_t i) const {
    if (j >= valid_cols) {
      dlogits[i] = from_f32<T>(0.f);
      return;
    }
    const float d = dloss[r], scale = d / sum_exp[r];
    const int64_t local = int64_t(targets[r]) - vocab_start;
    dlogits[i] = from_f32<T>(expf(to_f32(logits[i]) - row_max[r]) * scale - (j == local ? d : 0.f));
  }
};

}  // namespace

void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const RowLaunch L = row_launch(n, valid_cols);
  dispatch_float(logits.dtype(), "cross_entropy_row_max logits", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      row_max_kernel<T, decltype(warp)::value>
          <<<L.grid, L.block, 0, stream()>>>(ptr<T>(logits), n, v, valid_cols, ptr<float>(row_max));
    });
  });
  ::megatron::cuda::check_launch("cross_entropy_row_max");
}

void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const RowLaunch L = row_launch(n, valid_cols);
  dispatch_float(logits.dtype(), "cross_entropy_sum_exp_target logits", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      sum_exp_target_kernel<T, decltype(warp)::value><<<L.grid, L.block, 0, stream()>>>(
          ptr<T>(logits), ptr<int32_t>(targets), vocab_start, n, v, valid_cols, ptr<float>(row_max),
          ptr<float>(sum_exp), ptr<float>(target_logit));
    });
  });
  ::megatron::cuda::check_launch("cross_entropy_sum_exp_target");
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss) {
  launch_flat(
      Loss{ptr<float>(row_max), ptr<float>(sum_exp), ptr<float>(target_logit), ptr<float>(loss)},
      row_max.size(0), "cross_entropy_loss");
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid_cols, const Tensor& row_max, const Tensor& sum_exp,
                            const Tensor& dloss, Tensor& dlogits) {
  const int64_t n = logits.size(0), v = logits.size(1);
  dispatch_float(logits.dtype(), "cross_entropy_backward logits", [&](auto tag) {
    using T = decltype(tag);
    const Backward<T> op{
        ptr<T>(logits), ptr<int32_t>(targets), vocab_start,         v,
        valid_cols,     ptr<float>(row_max),   ptr<float>(sum_exp), ptr<float>(dloss),
        ptr<T>(dlogits)};
    launch_rows_cols(op, n, v, "cross_entropy_backward");
  });
}

}  // namespace megatron::kernels::cuda
