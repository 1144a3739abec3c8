// DSA's top-k selection and indexer loss on CUDA (contract: kernels/sparse_attention.h; CPU
// twin: kernels/cpu/sparse_attention.cpp).
//
// topk_key_mask: a key is selected when fewer than k visible keys precede it in the contract's
// order (score descending, ties to the smaller index) — its rank, counted by the thread that
// owns the key over the row. The same set as the CPU's selection, with no sort and no
// synchronisation; O(visible²) per row, which the indexer's own [B, Sq, Sk] GEMMs outweigh at
// the sequence lengths trained here.
// index_scores: one thread per score; its backward and indexer_kl: one row per warp or block
// (cuda_rows.cuh), its sums in a fixed order.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

constexpr float kEps = 1e-10f;  // Megatron-Core's clamp of the target's sum and logarithm

__device__ __forceinline__ int64_t visible_keys(int64_t i, int64_t sq, int64_t sk) {
  const int64_t last = i + (sk - sq) + 1;
  return last < sk ? last : sk;
}

// One thread per score; the heads summed in index order (the CPU's order).
__global__ void index_scores_kernel(const float* raw, const float* weights, bool relu,
                                    float* scores, int64_t b, int64_t h, int64_t sq, int64_t sk) {
  const int64_t n = b * sq * sk;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % sk, i = (e / sk) % sq, bi = e / (sk * sq);
    float acc = 0.f;
    for (int64_t hi = 0; hi < h; ++hi) {
      const float x = raw[((bi * h + hi) * sq + i) * sk + j];
      acc += weights[(i * b + bi) * h + hi] * (relu ? fmaxf(x, 0.f) : x);
    }
    scores[e] = acc;
  }
}

// One row (b, h, i) of raw per warp or block: draw element-wise, dweights its row's sum.
template <bool kWarp>
__global__ void __launch_bounds__(512)
    index_scores_backward_kernel(const float* dscores, const float* raw, const float* weights,
                                 bool relu, float* draw, float* dweights, int64_t b, int64_t h,
                                 int64_t sq, int64_t sk, int64_t rows) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const int64_t i = r % sq, hi = (r / sq) % h, bi = r / (sq * h);
    const float* d = dscores + (bi * sq + i) * sk;  // [Sk]
    const float* x = raw + r * sk;                  // [Sk]
    float* dx = draw + r * sk;                      // [Sk]
    const float wh = weights[(i * b + bi) * h + hi];
    float dot = 0.f;
    for (int64_t j = G::lane(); j < sk; j += G::width()) {
      const bool pass = !relu || x[j] > 0.f;
      dx[j] = pass ? d[j] * wh : 0.f;
      dot += pass ? d[j] * x[j] : 0.f;
    }
    dot = G::sum(dot, smem);
    if (G::lane() == 0) dweights[(i * b + bi) * h + hi] = dot;
  }
}

__global__ void topk_key_mask_kernel(const float* scores, int64_t k, uint8_t* mask, int64_t sq,
                                     int64_t sk, int64_t rows) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = scores + r * sk;  // [Sk]
    uint8_t* out = mask + r * sk;        // [Sk]
    const int64_t visible = visible_keys(r % sq, sq, sk);
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) {
      if (j >= visible) {
        out[j] = 1;
        continue;
      }
      if (visible <= k) {
        out[j] = 0;
        continue;
      }
      const float x = row[j];
      int64_t rank = 0;
      for (int64_t o = 0; o < visible && rank < k; ++o)
        rank += (row[o] > x || (row[o] == x && o < j)) ? 1 : 0;
      out[j] = rank < k ? 0 : 1;
    }
  }
}

template <bool kWarp>
__global__ void __launch_bounds__(512)
    indexer_kl_kernel(const float* scores, const float* target, const uint8_t* key_mask, float* kl,
                      float* dscores, int64_t sq, int64_t sk, int64_t rows) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const float* x = scores + r * sk;                                  // [Sk]
    const float* t = target + r * sk;                                  // [Sk]
    const uint8_t* excluded = key_mask ? key_mask + r * sk : nullptr;  // [Sk] or null
    float* d = dscores + r * sk;                                       // [Sk]
    const int64_t visible = visible_keys(r % sq, sq, sk);
    auto valid = [&](int64_t j) { return j < visible && !(excluded && excluded[j]); };
    float mx = -CUDART_INF_F, total = 0.f;
    for (int64_t j = G::lane(); j < visible; j += G::width())
      if (valid(j)) {
        mx = fmaxf(mx, x[j]);
        total += t[j];
      }
    mx = G::max(mx, smem);
    total = G::sum(total, smem);
    if (mx == -CUDART_INF_F) {  // no valid key (uniform over the group)
      for (int64_t j = G::lane(); j < sk; j += G::width()) d[j] = 0.f;
      if (G::lane() == 0) kl[r] = 0.f;
      continue;
    }
    float z = 0.f;
    for (int64_t j = G::lane(); j < visible; j += G::width())
      if (valid(j)) z += expf(x[j] - mx);
    const float log_z = logf(G::sum(z, smem)), inv_total = 1.f / fmaxf(total, kEps);
    float target_sum = 0.f, row_kl = 0.f;
    for (int64_t j = G::lane(); j < visible; j += G::width())
      if (valid(j)) {
        const float tn = t[j] * inv_total, log_p = x[j] - mx - log_z;
        target_sum += tn;
        row_kl += tn * (logf(fmaxf(tn, kEps)) - log_p);
      }
    target_sum = G::sum(target_sum, smem);
    row_kl = G::sum(row_kl, smem);
    for (int64_t j = G::lane(); j < sk; j += G::width())
      d[j] = valid(j) ? expf(x[j] - mx - log_z) * target_sum - t[j] * inv_total : 0.f;
    if (G::lane() == 0) kl[r] = row_kl;
  }
}

}  // namespace

void index_scores(const Tensor& raw, const Tensor& weights, bool relu, Tensor& scores) {
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  if (scores.numel() == 0) return;
  index_scores_kernel<<<blocks_for(scores.numel()), kThreads, 0, stream()>>>(
      ptr<float>(raw), ptr<float>(weights), relu, ptr<float>(scores), b, h, sq, sk);
  ::megatron::cuda::check_launch("index_scores");
}

void index_scores_backward(const Tensor& dscores, const Tensor& raw, const Tensor& weights,
                           bool relu, Tensor& draw, Tensor& dweights) {
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  const int64_t rows = b * h * sq;
  if (rows == 0 || sk == 0) return;
  const RowLaunch L = row_launch(rows, sk);
  with_row_mode(L, [&](auto warp) {
    index_scores_backward_kernel<decltype(warp)::value><<<L.grid, L.block, 0, stream()>>>(
        ptr<float>(dscores), ptr<float>(raw), ptr<float>(weights), relu, ptr<float>(draw),
        ptr<float>(dweights), b, h, sq, sk, rows);
  });
  ::megatron::cuda::check_launch("index_scores_backward");
}

void topk_key_mask(const Tensor& scores, int64_t k, Tensor& mask) {
  const int64_t sq = scores.size(1), sk = scores.size(2), rows = scores.size(0) * sq;
  if (rows == 0 || sk == 0) return;
  const unsigned grid = unsigned(std::min<int64_t>(rows, 65535));
  topk_key_mask_kernel<<<grid, kThreads, 0, stream()>>>(ptr<float>(scores), k, ptr<uint8_t>(mask),
                                                        sq, sk, rows);
  ::megatron::cuda::check_launch("topk_key_mask");
}

void indexer_kl(const Tensor& scores, const Tensor& target, const Tensor& key_mask, Tensor& kl,
                Tensor& dscores) {
  const int64_t sq = scores.size(1), sk = scores.size(2), rows = scores.size(0) * sq;
  if (rows == 0 || sk == 0) return;
  const uint8_t* excluded = key_mask.defined() ? ptr<uint8_t>(key_mask) : nullptr;
  const RowLaunch L = row_launch(rows, sk);
  with_row_mode(L, [&](auto warp) {
    indexer_kl_kernel<decltype(warp)::value>
        <<<L.grid, L.block, 0, stream()>>>(ptr<float>(scores), ptr<float>(target), excluded,
                                           ptr<float>(kl), ptr<float>(dscores), sq, sk, rows);
  });
  ::megatron::cuda::check_launch("indexer_kl");
}

}  // namespace megatron::kernels::cuda
