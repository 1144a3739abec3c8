// Dropout masks from Philox and the kernels that apply them, on CUDA (contract:
// kernels/dropout.h; CPU twin: kernels/cpu/dropout.cpp).
//
// Masks are bit-identical to the CPU's: the same Philox4x32-10 (philox.cuh), keyed by
// (seed, rows[r].key) at counters rows[r].counter_base + c, and the same integer keep test
// (u32 >> 8) >= ceil(p · 2^24), which is uniform >= p exactly. One thread draws one Philox
// block (4 consecutive draws of one row) and writes the mask bytes that fall inside the row.
//
// The row keys are the only host data: up to kInlineRows of them travel inside the kernel's
// parameters (__grid_constant__, no copy); more go through a pinned staging slot into a scratch
// device buffer (staged_upload.h: no host synchronisation).
//
// The apply kernels use keep_scale = 1 / (1 − p) computed in f32 on the host exactly as the CPU
// does, and the CPU's arithmetic element by element.
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda/staged_upload.h"

namespace megatron::kernels::cuda {

namespace {

static_assert(sizeof(MaskRow) == 16 && alignof(MaskRow) == 8, "MaskRow is {u64 key, u64 base}");

constexpr int64_t kInlineRows = 64;  // 1 KiB of kernel parameters

struct InlineRows {
  MaskRow rows[kInlineRows];
};

__global__ void __launch_bounds__(kThreads)
    mask_kernel_inline(const __grid_constant__ InlineRows rows, uint64_t seed, uint32_t threshold,
                       int64_t n_rows, int64_t cols, uint8_t* mask) {
  const int64_t per_row = dropout_blocks_per_row(cols);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n_rows * per_row;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / per_row, kb = t - r * per_row;
    const MaskRow& row = rows.rows[r];
    dropout_mask_block(seed, row.key, row.counter_base, kb, cols, threshold, mask + r * cols);
  }
}

__global__ void __launch_bounds__(kThreads)
    mask_kernel(const MaskRow* rows, uint64_t seed, uint32_t threshold, int64_t n_rows,
                int64_t cols, uint8_t* mask) {
  const int64_t per_row = dropout_blocks_per_row(cols);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n_rows * per_row;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / per_row, kb = t - r * per_row;
    const MaskRow row = rows[r];
    dropout_mask_block(seed, row.key, row.counter_base, kb, cols, threshold, mask + r * cols);
  }
}

// y = x ⊙ mask · keep_scale over n flat elements (the CPU's apply_mask).
template <typename T>
struct ApplyMask {
  const T* in;
  const uint8_t* mask;
  float keep_scale;
  T* out;
  __device__ void operator()(int64_t i) const {
    const float kept = to_f32(in[i]) * keep_scale;
    out[i] = from_f32<T>(mask[i] ? kept : 0.f);
  }
};

// y = residual + dropout(x + bias); mask null: no dropout; bias null: + 0 (the CPU's zeros).
template <typename T>
struct BiasDropoutAdd {
  const T* x;
  const T* bias;
  const T* residual;
  const uint8_t* mask;
  float keep_scale;
  T* y;
  __device__ void operator()(int64_t, int64_t j, int64_t i) const {
    float v = to_f32(x[i]) + (bias ? to_f32(bias[j]) : 0.f);
    if (mask) v = mask[i] ? v * keep_scale : 0.f;
    y[i] = from_f32<T>(to_f32(residual[i]) + v);
  }
};

// dx = dropout'(dy); the column reduction sums the unrounded g, as the CPU does.
template <typename T>
struct BiasDropoutAddBackward {
  const T* dy;
  const uint8_t* mask;
  float keep_scale;
  T* dx;
  __device__ float grad(int64_t i) const {
    float g = to_f32(dy[i]);
    if (mask) g = mask[i] ? g * keep_scale : 0.f;
    dx[i] = from_f32<T>(g);
    return g;
  }
  __device__ void operator()(int64_t i) const { grad(i); }
  __device__ void operator()(int64_t, int64_t, int64_t i, float (&v)[1]) const { v[0] = grad(i); }
};

float keep_scale(float p) {
  return 1.f / (1.f - p);  // the CPU's expression, in f32
}

}  // namespace

void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask) {
  const int64_t n_rows = mask.size(0), cols = mask.size(1);
  if (n_rows == 0 || cols == 0) return;
  const uint32_t threshold = dropout_keep_threshold(p);
  const unsigned blocks = blocks_for(n_rows * dropout_blocks_per_row(cols));
  uint8_t* m = ptr<uint8_t>(mask);
  if (n_rows <= kInlineRows) {
    InlineRows inline_rows{};
    std::memcpy(inline_rows.rows, rows.data(), size_t(n_rows) * sizeof(MaskRow));
    mask_kernel_inline<<<blocks, kThreads, 0, stream()>>>(inline_rows, seed, threshold, n_rows,
                                                          cols, m);
  } else {
    const size_t bytes = size_t(n_rows) * sizeof(MaskRow);
    // Freed at return; the caching allocator reuses it only for work queued after ours.
    Tensor device_rows = Tensor::empty({int64_t(bytes)}, DType::U8, mask.device());
    staged_upload(device_rows.raw_data(), rows.data(), bytes);
    mask_kernel<<<blocks, kThreads, 0, stream()>>>(
        static_cast<const MaskRow*>(device_rows.raw_data()), seed, threshold, n_rows, cols, m);
  }
  ::megatron::cuda::check_launch("dropout_mask");
}

void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y) {
  dispatch_float(x.dtype(), "dropout_forward x", [&](auto tag) {
    using T = decltype(tag);
    launch_flat(ApplyMask<T>{ptr<T>(x), ptr<uint8_t>(mask), keep_scale(p), ptr<T>(y)}, x.numel(),
                "dropout_forward");
  });
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  dispatch_float(dy.dtype(), "dropout_backward dy", [&](auto tag) {
    using T = decltype(tag);
    launch_flat(ApplyMask<T>{ptr<T>(dy), ptr<uint8_t>(mask), keep_scale(p), ptr<T>(dx)}, dy.numel(),
                "dropout_backward");
  });
}

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "bias_dropout_add_forward x", [&](auto tag) {
    using T = decltype(tag);
    const BiasDropoutAdd<T> op{ptr<T>(x),
                               bias.defined() ? ptr<T>(bias) : nullptr,
                               ptr<T>(residual),
                               mask.defined() ? ptr<uint8_t>(mask) : nullptr,
                               mask.defined() ? keep_scale(p) : 1.f,
                               ptr<T>(y)};
    launch_rows_cols(op, n, c, "bias_dropout_add_forward");
  });
}

void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias) {
  const int64_t n = dy.size(0), c = dy.size(1);
  dispatch_float(dy.dtype(), "bias_dropout_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    const BiasDropoutAddBackward<T> op{ptr<T>(dy), mask.defined() ? ptr<uint8_t>(mask) : nullptr,
                                       mask.defined() ? keep_scale(p) : 1.f, ptr<T>(dx)};
    if (dbias.defined())
      column_sums<1>(op, n, c, ColumnOutputs<1>{{ptr<float>(dbias)}}, dy.device(),
                     "bias_dropout_add_backward");
    else
      launch_flat(op, n * c, "bias_dropout_add_backward");
  });
}

}  // namespace megatron::kernels::cuda
