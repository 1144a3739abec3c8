// MoE token permutation on CUDA (contract: kernels/moe_permute.h; CPU twin:
// kernels/cpu/moe_permute.cpp).
//
// Slot assignment: one thread per expert walks the pairs in token order (the CPU's counting
// sort, so the slots are the CPU's); with the probs drop policy a first kernel marks, one thread
// per pair, whether the pair ranks among its expert's `slots` largest probs (ties to the earlier
// pair). The gathers run one block per output row, threads over the columns, each row summed
// over its k choices in order (f32), in the CPU's order of operations.
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/staged_upload.h"

namespace megatron::kernels::cuda {

namespace {

__global__ void counts_kernel(const int32_t* idx, int64_t pairs, int64_t experts, int64_t* counts) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= experts) return;
  int64_t c = 0;
  for (int64_t i = 0; i < pairs; ++i) c += idx[i] == e ? 1 : 0;
  counts[e] = c;
}

// keep[i] = whether pair i is among the largest `slots` probs of its expert.
__global__ void keep_by_probs_kernel(const int32_t* idx, const float* probs, int64_t pairs,
                                     const int64_t* expert_slots, uint8_t* keep) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t e = idx[i];
    const int64_t slots = expert_slots[e + 1] - expert_slots[e];
    int64_t rank = 0;
    for (int64_t j = 0; j < pairs && rank < slots; ++j)
      if (idx[j] == e && (probs[j] > probs[i] || (probs[j] == probs[i] && j < i))) ++rank;
    keep[i] = rank < slots ? 1 : 0;
  }
}

__global__ void assign_kernel(const int32_t* idx, const uint8_t* keep, int64_t pairs,
                              int64_t experts, const int64_t* expert_slots, int32_t* source,
                              int32_t* of) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= experts) return;
  int64_t slot = expert_slots[e];
  const int64_t end = expert_slots[e + 1];
  for (int64_t i = 0; i < pairs; ++i) {
    if (idx[i] != e) continue;
    if (slot < end && (keep == nullptr || keep[i])) {
      source[slot] = int32_t(i);
      of[i] = int32_t(slot);
      ++slot;
    } else {
      of[i] = -1;
    }
  }
  for (; slot < end; ++slot) source[slot] = -1;
}

template <typename T>
__global__ void permute_kernel(const T* x, const int32_t* source, int64_t m, int64_t h, int64_t k,
                               T* out) {
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const int32_t s = source[r];
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
      out[r * h + c] = s < 0 ? from_f32<T>(0.f) : x[(s / k) * h + c];
  }
}

template <typename T>
__global__ void permute_backward_kernel(const T* dout, const int32_t* of, int64_t n, int64_t h,
                                        int64_t k, T* dx) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t slot = of[r * k + j];
        if (slot >= 0) acc = __fadd_rn(acc, to_f32(dout[int64_t(slot) * h + c]));
      }
      dx[r * h + c] = from_f32<T>(acc);
    }
}

template <typename T>
__global__ void unpermute_kernel(const T* y, const int32_t* of, const float* probs, int64_t n,
                                 int64_t h, int64_t k, T* out) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t slot = of[r * k + j];
        if (slot >= 0)
          acc = __fadd_rn(acc, __fmul_rn(probs[r * k + j], to_f32(y[int64_t(slot) * h + c])));
      }
      out[r * h + c] = from_f32<T>(acc);
    }
}

template <typename T>
__global__ void unpermute_dy_kernel(const T* dout, const int32_t* source, const float* probs,
                                    int64_t m, int64_t h, int64_t k, T* dy) {
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const int32_t pair = source[r];
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
      dy[r * h + c] =
          pair < 0 ? from_f32<T>(0.f)
                   : from_f32<T>(__fmul_rn(probs[pair], to_f32(dout[int64_t(pair / k) * h + c])));
  }
}

// One thread per pair: the dot product in column order, in double (the CPU's).
template <typename T>
__global__ void unpermute_dprobs_kernel(const T* dout, const T* y, const int32_t* of, int64_t pairs,
                                        int64_t h, int64_t k, float* dprobs) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t slot = of[i];
    double dot = 0;
    if (slot >= 0)
      for (int64_t c = 0; c < h; ++c)
        dot += double(to_f32(dout[(i / k) * h + c])) * double(to_f32(y[int64_t(slot) * h + c]));
    dprobs[i] = float(dot);
  }
}

unsigned row_blocks(int64_t rows) {
  return unsigned(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

}  // namespace

void moe_expert_counts(const Tensor& indices, int64_t num_experts, Tensor& counts) {
  counts_kernel<<<blocks_for(num_experts), kThreads, 0, stream()>>>(
      ptr<int32_t>(indices), indices.numel(), num_experts, ptr<int64_t>(counts));
  megatron::cuda::check_launch("moe_expert_counts");
}

void moe_assign_slots(const Tensor& indices, const Tensor& probs,
                      const std::vector<int64_t>& expert_slots, Tensor& slot_source,
                      Tensor& slot_of) {
  const int64_t pairs = indices.numel(), experts = int64_t(expert_slots.size()) - 1;
  Tensor slots = Tensor::empty({experts + 1}, DType::I64, indices.device());
  staged_upload(slots.raw_data(), expert_slots.data(), expert_slots.size() * sizeof(int64_t));
  Tensor keep;
  if (probs.defined() && pairs > 0) {
    keep = Tensor::empty({pairs}, DType::U8, indices.device());
    keep_by_probs_kernel<<<blocks_for(pairs), kThreads, 0, stream()>>>(
        ptr<int32_t>(indices), ptr<float>(probs), pairs, ptr<int64_t>(slots), ptr<uint8_t>(keep));
    megatron::cuda::check_launch("moe_assign_slots");
  }
  assign_kernel<<<blocks_for(experts), kThreads, 0, stream()>>>(
      ptr<int32_t>(indices), keep.defined() ? ptr<uint8_t>(keep) : nullptr, pairs, experts,
      ptr<int64_t>(slots), ptr<int32_t>(slot_source), ptr<int32_t>(slot_of));
  megatron::cuda::check_launch("moe_assign_slots");
}

void moe_permute(const Tensor& x, const Tensor& slot_source, int64_t topk, Tensor& out) {
  const int64_t m = slot_source.numel(), h = x.size(1);
  if (m == 0) return;
  dispatch_float(x.dtype(), "moe_permute x", [&](auto tag) {
    using T = decltype(tag);
    permute_kernel<T><<<row_blocks(m), kThreads, 0, stream()>>>(
        ptr<T>(x), ptr<int32_t>(slot_source), m, h, topk, ptr<T>(out));
  });
  megatron::cuda::check_launch("moe_permute");
}

void moe_permute_backward(const Tensor& dout, const Tensor& slot_of, int64_t topk, Tensor& dx) {
  const int64_t n = dx.size(0), h = dx.size(1);
  if (n == 0) return;
  dispatch_float(dout.dtype(), "moe_permute_backward dout", [&](auto tag) {
    using T = decltype(tag);
    permute_backward_kernel<T><<<row_blocks(n), kThreads, 0, stream()>>>(
        ptr<T>(dout), ptr<int32_t>(slot_of), n, h, topk, ptr<T>(dx));
  });
  megatron::cuda::check_launch("moe_permute_backward");
}

void moe_unpermute(const Tensor& y, const Tensor& slot_of, const Tensor& probs, Tensor& out) {
  const int64_t n = out.size(0), h = out.size(1), k = probs.size(1);
  if (n == 0) return;
  dispatch_float(y.dtype(), "moe_unpermute y", [&](auto tag) {
    using T = decltype(tag);
    unpermute_kernel<T><<<row_blocks(n), kThreads, 0, stream()>>>(
        ptr<T>(y), ptr<int32_t>(slot_of), ptr<float>(probs), n, h, k, ptr<T>(out));
  });
  megatron::cuda::check_launch("moe_unpermute");
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& slot_source,
                            const Tensor& slot_of, const Tensor& probs, Tensor& dy,
                            Tensor& dprobs) {
  const int64_t m = y.size(0), h = y.size(1), pairs = probs.numel(), k = probs.size(1);
  dispatch_float(y.dtype(), "moe_unpermute_backward y", [&](auto tag) {
    using T = decltype(tag);
    if (m > 0)
      unpermute_dy_kernel<T><<<row_blocks(m), kThreads, 0, stream()>>>(
          ptr<T>(dout), ptr<int32_t>(slot_source), ptr<float>(probs), m, h, k, ptr<T>(dy));
    if (pairs > 0)
      unpermute_dprobs_kernel<T><<<blocks_for(pairs), kThreads, 0, stream()>>>(
          ptr<T>(dout), ptr<T>(y), ptr<int32_t>(slot_of), pairs, h, k, ptr<float>(dprobs));
  });
  megatron::cuda::check_launch("moe_unpermute_backward");
}

}  // namespace megatron::kernels::cuda
