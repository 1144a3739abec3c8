// Fused attention on CUDA (contract: kernels/flash_attention.h; CPU twin and test oracle:
// kernels/cpu/flash_attention.cpp).
//
// Two sets of kernels. Where they apply — bf16 or f16 operands, head dimension <= 128, a GPU
// with mma.sync (sm_80 and later) — the FlashAttention-2-style kernels of
// flash_attention_warp_tiles.cuh: each warp keeps its 16 rows' scores and accumulators in
// registers. Everywhere else (f32, larger heads, older GPUs) the shared-memory kernels of
// flash_attention_kernels.cuh, described here. Both compute the same function with the same
// masks, draws, roundings and order of the backward's sums.
//
// Square tiles of `tile` queries × `tile` keys (64; 32 or 16 when the head dimension needs more
// shared memory per block than the GPU has), every operand staged in shared memory with its head
// dimension zero-padded to dp = ⌈d / 16⌉·16. The tile products run on tensor cores for bf16 and
// f16 (WMMA 16×16×16, f32 accumulation) and on CUDA cores in f32 (no TF32: f32 stays f32). All
// accumulators live in shared memory in f32, so the online softmax rescales a row by indexing it.
//
//   forward    one block per (batch·head, query tile): the key tiles in order, online softmax
//              (running max, running sum of the undropped probabilities, accumulator of the
//              dropped ones times V), as the CPU twin.
//   backward   deterministic — every gradient element is written by one block, in a fixed order,
//              with no atomics (FlashAttention-2 adds dQ with atomics: not run-to-run stable):
//              1. D = rowsum(dout ⊙ out) per query row (one warp per row);
//              2. one block per (batch·group, key tile) owns its dK and dV over the group's
//                 query heads and query tiles;
//              3. one block per (batch·head, query tile) owns its dQ over the key tiles.
//              2 and 3 both recompute P = exp(scale·QKᵀ − lse) and dP = dout·Vᵀ: two products
//              more than FlashAttention-2's five, the price of determinism.
//
// Masks and dropout are the CPU twin's: causal (key > query) and padding keys hidden, and the
// dropout keep bytes drawn from the same Philox rows (philox.cuh's dropout_mask_block, the
// function the CUDA dropout mask kernel uses), so the same elements are kept as on the CPU and
// in the unfused path. Rounding: with 16-bit operands P (and dS in the backward) are rounded to
// the operand dtype before they enter a tensor-core product, as FlashAttention does; the CPU twin
// keeps them in f32. f32 operands round nothing before the store.
#include <iterator>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/flash_attention_kernels.cuh"
#include "kernels/cuda/flash_attention_warp_tiles.cuh"
#include "kernels/cuda/staged_upload.h"

namespace megatron::kernels::cuda {

namespace {

using namespace flash;

constexpr int kTiles[] = {64, 32, 16};  // tried in order: the largest that fits
constexpr int kDefaultSharedBytes = 48 << 10;

int shared_memory_limit() {
  static const int limit = [] {
    int bytes = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         megatron::cuda::bound_device()));
    return bytes;
  }();
  return limit;
}

// The masks' parameters. With dropout, the mask rows are uploaded into `rows` (freed when it
// goes: the caching allocator reuses it only for work queued later).
MaskParams device_mask_params(const FlashAttentionParams& p, const Geometry& g, Device device,
                              Tensor& rows) {
  if (p.dropout_p <= 0.0f) return make_mask_params(p, nullptr);
  const size_t bytes = size_t(g.b * g.heads * g.s) * sizeof(MaskRow);
  rows = Tensor::empty({int64_t(bytes)}, DType::U8, device);
  staged_upload(rows.raw_data(), p.dropout_rows->data(), bytes);
  return make_mask_params(p, static_cast<const MaskRow*>(rows.raw_data()));
}

// kernel<<<l>>>(args...), opting in to more than the default shared memory where l needs it.
template <typename Kernel, typename... Args>
void launch_with_shared_memory(Kernel kernel, const LaunchShape& l, const char* op, Args... args) {
  if (l.shared_bytes > size_t(kDefaultSharedBytes))
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(l.shared_bytes)));
  kernel<<<l.grid, kBlockThreads, l.shared_bytes, stream()>>>(args...);
  ::megatron::cuda::check_launch(op);
}

// Launches kernel<<<shape(tile)>>> at the largest tile that fits the GPU's shared memory.
template <typename Kernel, typename Shape, typename... Args>
void launch_tiled(Kernel kernel, Shape shape, const Geometry& g, const char* op, Args... args) {
  for (int tile : kTiles) {
    const LaunchShape l = shape(tile);
    if (l.shared_bytes > size_t(shared_memory_limit())) continue;
    launch_with_shared_memory(kernel, l, op, args..., tile);
    return;
  }
  const int smallest = kTiles[std::size(kTiles) - 1];
  MT_THROW(op, ": head dimension ", g.d, " needs ", shape(smallest).shared_bytes,
           " bytes of shared memory per block even in ", smallest, "-row tiles, and this GPU has ",
           shared_memory_limit(), "; leave --use-flash-attn out for the batched-GEMM attention");
}

int compute_capability_major() {
  static const int major = [] {
    int value = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor,
                                         megatron::cuda::bound_device()));
    return value;
  }();
  return major;
}

// fn(std::integral_constant<int, kD>) for kd ∈ warp_tiles::kHeadDims.
template <typename Fn>
void with_head_dim(int kd, Fn&& fn) {
  switch (kd) {
    case 32:
      return fn(std::integral_constant<int, 32>{});
    case 64:
      return fn(std::integral_constant<int, 64>{});
    case 96:
      return fn(std::integral_constant<int, 96>{});
    default:
      return fn(std::integral_constant<int, 128>{});
  }
}

// The padded head dimension kD of the warp-tile kernels for 16-bit operands T, or 0 where they
// do not apply (d > 128, no mma.sync, or more shared memory than the GPU has).
template <typename T>
int warp_tile_head_dim(const Geometry& g) {
  const int kd = warp_tiles::padded_head_dim(g.d);
  if (kd == 0 || compute_capability_major() < 8) return 0;
  size_t bytes = 0;
  with_head_dim(kd, [&](auto kD) { bytes = warp_tiles::BackwardSmem<T, kD.value>::kBytes; });
  return bytes <= size_t(shared_memory_limit()) ? kd : 0;
}

}  // namespace

void flash_attention_forward(const Tensor& qkv, const FlashAttentionParams& params, Tensor& out,
                             Tensor& lse) {
  const Geometry g = make_geometry(qkv, params.queries_per_group);
  if (g.s == 0 || g.b == 0 || g.heads == 0) return;
  Tensor rows;
  const MaskParams m = device_mask_params(params, g, qkv.device(), rows);
  dispatch_float(qkv.dtype(), "flash_attention_forward qkv", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      if (const int kd = warp_tile_head_dim<T>(g)) {
        with_head_dim(kd, [&](auto kD) {
          launch_with_shared_memory(warp_tiles::forward_kernel<T, kD.value>,
                                    warp_tiles::forward_launch<T, kD.value>(g),
                                    "flash_attention_forward", ptr<T>(qkv), g, m, params.scale,
                                    ptr<T>(out), ptr<float>(lse));
        });
        return;
      }
    }
    launch_tiled(
        forward_kernel<T>, [&](int tile) { return forward_launch<T>(g, tile); }, g,
        "flash_attention_forward", ptr<T>(qkv), g, m, params.scale, ptr<T>(out), ptr<float>(lse));
  });
}

void flash_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, const FlashAttentionParams& params,
                              Tensor& dqkv) {
  const Geometry g = make_geometry(qkv, params.queries_per_group);
  if (g.s == 0 || g.b == 0 || g.heads == 0) return;
  Tensor rows;
  const MaskParams m = device_mask_params(params, g, qkv.device(), rows);
  Tensor D = Tensor::empty({g.b, g.heads, g.s}, DType::F32, qkv.device());
  dispatch_float(qkv.dtype(), "flash_attention_backward qkv", [&](auto tag) {
    using T = decltype(tag);
    const LaunchShape l = row_dot_launch(g);
    row_dot_kernel<T>
        <<<l.grid, kBlockThreads, 0, stream()>>>(ptr<T>(out), ptr<T>(dout), g, ptr<float>(D));
    ::megatron::cuda::check_launch("flash_attention_backward (D)");
    if constexpr (!std::is_same_v<T, float>) {
      if (const int kd = warp_tile_head_dim<T>(g)) {
        with_head_dim(kd, [&](auto kD) {
          constexpr int kDim = kD.value;
          launch_with_shared_memory(warp_tiles::key_value_grad_kernel<T, kDim>,
                                    warp_tiles::key_value_grad_launch<T, kDim>(g),
                                    "flash_attention_backward (dK, dV)", ptr<T>(qkv), ptr<T>(dout),
                                    ptr<float>(lse), ptr<float>(D), g, m, params.scale,
                                    ptr<T>(dqkv));
          launch_with_shared_memory(
              warp_tiles::query_grad_kernel<T, kDim>, warp_tiles::query_grad_launch<T, kDim>(g),
              "flash_attention_backward (dQ)", ptr<T>(qkv), ptr<T>(dout), ptr<float>(lse),
              ptr<float>(D), g, m, params.scale, ptr<T>(dqkv));
        });
        return;
      }
    }
    launch_tiled(
        key_value_grad_kernel<T>, [&](int tile) { return key_value_grad_launch<T>(g, tile); }, g,
        "flash_attention_backward (dK, dV)", ptr<T>(qkv), ptr<T>(dout), ptr<float>(lse),
        ptr<float>(D), g, m, params.scale, ptr<T>(dqkv));
    launch_tiled(
        query_grad_kernel<T>, [&](int tile) { return query_grad_launch<T>(g, tile); }, g,
        "flash_attention_backward (dQ)", ptr<T>(qkv), ptr<T>(dout), ptr<float>(lse), ptr<float>(D),
        g, m, params.scale, ptr<T>(dqkv));
  });
}

}  // namespace megatron::kernels::cuda
