// Whole-buffer kernels on CUDA (contract: kernels/elementwise.h): cast, strided copy, fill,
// scale, axpy, and the reductions sum_squares, has_inf_or_nan, count_zeros, weighted_sum.
//
// Bits: every 16-bit load and store converts on the bits exactly as the host does
// (float_bits.cuh: NaN payloads included, no reliance on how the hardware conversions treat
// subnormals), and fill stores the host's encoding of the value. So cast, fill and scale (one
// f32 multiply) give the CPU's bits; axpy is one fused multiply-add (y + alpha·x rounded once,
// what GCC emits for the CPU loop on FMA hardware), rounded once to y's dtype.
//
// Reductions are deterministic: f64 partial sums over a grid whose size depends only on the
// element count (never on the GPU's SM count), each block summing its threads in a fixed tree,
// then one block summing the block partials in a fixed tree. No floating-point atomics. The
// value returned to the host is read after a synchronisation of the compute stream.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/float_bits.cuh"

namespace megatron::kernels::cuda {

namespace {

__device__ __forceinline__ int64_t global_thread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return int64_t(gridDim.x) * blockDim.x;
}

// ---------------------------------------------------------------------------------------------
// cast

template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    dst[i] = exact_from_f32<D>(exact_to_f32(src[i]));
}

// f64 <-> f32 (the MoE router's fp64 path): the conversions round to nearest even, as the CPU's.
template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = D(src[i]);
}

// ---------------------------------------------------------------------------------------------
// copy: any dtype, moved as raw elements of its size

constexpr int kMaxCopyDims = 8;

struct CopyGeometry {
  int dims = 0;
  int64_t size[kMaxCopyDims];
  int64_t src_stride[kMaxCopyDims];  // elements
  int64_t dst_stride[kMaxCopyDims];
};

template <typename E>
__global__ void strided_copy_kernel(const E* src, E* dst, CopyGeometry g, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t rest = i, s = 0, d = 0;
#pragma unroll
    for (int k = kMaxCopyDims - 1; k >= 0; --k) {
      if (k >= g.dims) continue;
      const int64_t idx = rest % g.size[k];
      rest /= g.size[k];
      s += idx * g.src_stride[k];
      d += idx * g.dst_stride[k];
    }
    dst[d] = src[s];
  }
}

// Drops unit dimensions and merges neighbours that are contiguous on both sides, so that most
// copies become a few long rows.
CopyGeometry collapse(const Tensor& src, const Tensor& dst) {
  int64_t size[64], ss[64], ds[64];
  int dims = 0;
  for (int64_t k = 0; k < src.dim(); ++k) {
    if (src.size(k) == 1) continue;
    MT_CHECK(dims < 64, "copy of a tensor with more than 64 dimensions");
    size[dims] = src.size(k);
    ss[dims] = src.stride(k);
    ds[dims] = dst.stride(k);
    ++dims;
  }
  // From the outermost dimension inwards: fold each dimension into the kept one outside it when
  // that one steps exactly over it on both sides.
  int out = 0;
  int64_t msize[64], mss[64], mds[64];
  for (int k = 0; k < dims; ++k) {
    if (out > 0 && mss[out - 1] == ss[k] * size[k] && mds[out - 1] == ds[k] * size[k]) {
      msize[out - 1] *= size[k];
      mss[out - 1] = ss[k];
      mds[out - 1] = ds[k];
    } else {
      msize[out] = size[k];
      mss[out] = ss[k];
      mds[out] = ds[k];
      ++out;
    }
  }
  MT_CHECK(out <= kMaxCopyDims, "copy: ", src.describe(), " -> ", dst.describe(), " needs ", out,
           " dimensions after merging contiguous ones; the CUDA copy handles at most ",
           kMaxCopyDims);
  CopyGeometry g;
  g.dims = out;
  for (int k = 0; k < out; ++k) {
    g.size[k] = msize[k];
    g.src_stride[k] = mss[k];
    g.dst_stride[k] = mds[k];
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// fill / scale / axpy

template <typename Bits>
__global__ void fill_kernel(Bits* p, int64_t n, Bits value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) p[i] = value;
}

template <typename T>
__global__ void scale_kernel(T* p, int64_t n, float factor) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    p[i] = exact_from_f32<T>(__fmul_rn(exact_to_f32(p[i]), factor));
}

template <typename X, typename Y>
__global__ void axpy_kernel(float alpha, const X* x, Y* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = exact_from_f32<Y>(__fmaf_rn(alpha, exact_to_f32(x[i]), exact_to_f32(y[i])));
}

// ---------------------------------------------------------------------------------------------
// deterministic f64 reductions

constexpr int kReduceThreads = 256;
constexpr int64_t kMaxReduceBlocks = 1024;
constexpr int64_t kElementsPerThread = 8;

// Blocks for a reduction over n elements: a function of n only.
int64_t reduce_blocks(int64_t n) {
  const int64_t per_block = kReduceThreads * kElementsPerThread;
  return std::clamp<int64_t>((n + per_block - 1) / per_block, 1, kMaxReduceBlocks);
}

// Sums acc[0..V) of every thread of the block in a fixed tree; thread 0 gets the totals.
template <int V>
__device__ void block_sum(double (&acc)[V]) {
  __shared__ double shared[V][kReduceThreads];
  for (int v = 0; v < V; ++v) shared[v][threadIdx.x] = acc[v];
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    if (int(threadIdx.x) < half)
      for (int v = 0; v < V; ++v) shared[v][threadIdx.x] += shared[v][threadIdx.x + half];
    __syncthreads();
  }
  for (int v = 0; v < V; ++v) acc[v] = shared[v][0];
}

// Pass 1: partial[block·V + v] = the block's sum of term v over its grid-stride elements.
template <int V, typename Terms>
__global__ void __launch_bounds__(kReduceThreads)
    partial_sums_kernel(Terms terms, int64_t n, double* partial) {
  double acc[V] = {};
  for (int64_t i = global_thread(); i < n; i += grid_threads()) terms(i, acc);
  block_sum<V>(acc);
  if (threadIdx.x == 0)
    for (int v = 0; v < V; ++v) partial[int64_t(blockIdx.x) * V + v] = acc[v];
}

// Pass 2 (one block): total[v] = Σ over blocks of partial[block·V + v].
template <int V>
__global__ void __launch_bounds__(kReduceThreads)
    total_sums_kernel(const double* partial, int64_t blocks, double* total) {
  double acc[V] = {};
  for (int64_t b = threadIdx.x; b < blocks; b += kReduceThreads)
    for (int v = 0; v < V; ++v) acc[v] += partial[b * V + v];
  block_sum<V>(acc);
  if (threadIdx.x == 0)
    for (int v = 0; v < V; ++v) total[v] = acc[v];
}

// Runs both passes and returns the V totals on the host (synchronises the compute stream).
template <int V, typename Terms>
void reduce(const Terms& terms, int64_t n, Device device, double (&out)[V]) {
  const int64_t blocks = reduce_blocks(n);
  Tensor scratch = Tensor::empty({blocks * V + V}, DType::F64, device);  // partials, totals
  double* partial = static_cast<double*>(scratch.raw_data());
  double* total = partial + blocks * V;
  partial_sums_kernel<V><<<unsigned(blocks), kReduceThreads, 0, stream()>>>(terms, n, partial);
  megatron::cuda::check_launch("partial_sums");
  total_sums_kernel<V><<<1, kReduceThreads, 0, stream()>>>(partial, blocks, total);
  megatron::cuda::check_launch("total_sums");
  megatron::cuda::copy_async(out, total, sizeof(double) * V, /*host_involved=*/true);
}

template <typename T>
struct SquareTerms {
  const T* p;
  __device__ void operator()(int64_t i, double (&acc)[1]) const {
    const double v = exact_to_f32(p[i]);
    acc[0] += v * v;
  }
};

template <typename T>
struct ZeroTerms {
  const T* p;
  __device__ void operator()(int64_t i, double (&acc)[1]) const {
    acc[0] += exact_to_f32(p[i]) == 0.f ? 1.0 : 0.0;
  }
};

template <typename V, typename W>
struct WeightedTerms {
  const V* values;
  const W* weights;
  __device__ void operator()(int64_t i, double (&acc)[2]) const {
    const double w = exact_to_f32(weights[i]);
    acc[0] += double(exact_to_f32(values[i])) * w;  // exact: a product of two f32 fits in f64
    acc[1] += w;
  }
};

// Inf and NaN are exactly the encodings whose exponent bits are all ones.
template <typename Bits>
__global__ void inf_nan_kernel(const Bits* p, int64_t n, Bits exp_mask, int* found) {
  int any = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    any |= int((p[i] & exp_mask) == exp_mask);
  if (__syncthreads_or(any) && threadIdx.x == 0) *found = 1;  // every writer stores 1
}

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == DType::F64 || dst.dtype() == DType::F64) {  // with f32 (checked)
    if (src.dtype() == DType::F64)
      convert_kernel<double, float>
          <<<blocks_for(n), kThreads, 0, stream()>>>(ptr<double>(src), ptr<float>(dst), n);
    else
      convert_kernel<float, double>
          <<<blocks_for(n), kThreads, 0, stream()>>>(ptr<float>(src), ptr<double>(dst), n);
    megatron::cuda::check_launch("cast");
    return;
  }
  dispatch_float(src.dtype(), "cast src", [&](auto src_tag) {
    dispatch_float(dst.dtype(), "cast dst", [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      cast_kernel<S, D><<<blocks_for(n), kThreads, 0, stream()>>>(ptr<S>(src), ptr<D>(dst), n);
      megatron::cuda::check_launch("cast");
    });
  });
}

void copy(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const size_t elem = dtype_size(src.dtype());
  const CopyGeometry g = collapse(src, dst);
  if (g.dims == 0 || (g.dims == 1 && g.src_stride[0] == 1 && g.dst_stride[0] == 1)) {
    megatron::cuda::copy_async(dst.raw_data(), src.raw_data(), size_t(n) * elem,
                               /*host_involved=*/false);
    return;
  }
  auto launch = [&](auto tag) {
    using E = decltype(tag);
    strided_copy_kernel<E><<<blocks_for(n), kThreads, 0, stream()>>>(
        static_cast<const E*>(src.raw_data()), static_cast<E*>(dst.raw_data()), g, n);
    megatron::cuda::check_launch("strided_copy");
  };
  switch (elem) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    case 8:
      return launch(uint64_t{});
    default:
      MT_THROW("copy: unsupported element size ", elem, " of ", src.describe());
  }
}

void fill(Tensor& t, float value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto launch = [&](auto bits) {
    using Bits = decltype(bits);
    fill_kernel<Bits>
        <<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<Bits*>(t.raw_data()), n, bits);
    megatron::cuda::check_launch("fill");
  };
  switch (t.dtype()) {
    case DType::F32: {
      uint32_t bits;
      std::memcpy(&bits, &value, 4);
      return launch(bits);
    }
    case DType::BF16:
      return launch(bf16::from_float(value));
    case DType::F16:
      return launch(f16::from_float(value));
    default:
      MT_THROW("fill tensor has dtype ", dtype_name(t.dtype()), ", expected f32, bf16 or f16");
  }
}

void scale(Tensor& t, float factor) {
  const int64_t n = t.numel();
  if (n == 0) return;
  dispatch_float(t.dtype(), "scale tensor", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(t), n, factor);
    megatron::cuda::check_launch("scale");
  });
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "axpy x", [&](auto x_tag) {
    dispatch_float(y.dtype(), "axpy y", [&](auto y_tag) {
      using X = decltype(x_tag);
      using Y = decltype(y_tag);
      axpy_kernel<X, Y><<<blocks_for(n), kThreads, 0, stream()>>>(alpha, ptr<X>(x), ptr<Y>(y), n);
      megatron::cuda::check_launch("axpy");
    });
  });
}

double sum_squares(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  double out[1] = {0.0};
  dispatch_float(t.dtype(), "sum_squares tensor", [&](auto tag) {
    using T = decltype(tag);
    reduce<1>(SquareTerms<T>{ptr<T>(t)}, n, t.device(), out);
  });
  return out[0];
}

// Counted in f64, exact up to 2^53 elements.
int64_t count_zeros(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return 0;
  double out[1] = {0.0};
  dispatch_float(t.dtype(), "count_zeros tensor", [&](auto tag) {
    using T = decltype(tag);
    reduce<1>(ZeroTerms<T>{ptr<T>(t)}, n, t.device(), out);
  });
  return int64_t(out[0]);
}

bool has_inf_or_nan(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  Tensor flag = Tensor::zeros({1}, DType::I32, t.device());
  int* found = static_cast<int*>(flag.raw_data());
  auto launch = [&](auto mask) {
    using Bits = decltype(mask);
    inf_nan_kernel<Bits><<<blocks_for(n), kThreads, 0, stream()>>>(
        static_cast<const Bits*>(t.raw_data()), n, mask, found);
    megatron::cuda::check_launch("has_inf_or_nan");
  };
  switch (t.dtype()) {
    case DType::F32:
      launch(uint32_t(0x7f800000u));
      break;
    case DType::BF16:
      launch(uint16_t(0x7f80u));
      break;
    case DType::F16:
      launch(uint16_t(0x7c00u));
      break;
    default:
      MT_THROW("has_inf_or_nan tensor has dtype ", dtype_name(t.dtype()),
               ", expected f32, bf16 or f16");
  }
  int host = 0;
  megatron::cuda::copy_async(&host, found, sizeof(int), /*host_involved=*/true);
  return host != 0;
}

WeightedSum weighted_sum(const Tensor& values, const Tensor& weights) {
  const int64_t n = values.numel();
  WeightedSum result;
  if (n == 0) return result;
  double out[2] = {0.0, 0.0};
  dispatch_float(values.dtype(), "weighted_sum values", [&](auto v_tag) {
    dispatch_float(weights.dtype(), "weighted_sum weights", [&](auto w_tag) {
      using V = decltype(v_tag);
      using W = decltype(w_tag);
      reduce<2>(WeightedTerms<V, W>{ptr<V>(values), ptr<W>(weights)}, n, values.device(), out);
    });
  });
  result.weighted = out[0];
  result.weights = out[1];
  return result;
}

}  // namespace megatron::kernels::cuda
