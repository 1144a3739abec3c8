// Rotary embedding on CUDA (contract: kernels/rotary.h; CPU twin: kernels/cpu/rotary.cpp),
// YaRN's frequency blend and concentration factor with it (kernels/yarn_rope.h).
// One thread per (row, k): k < r/2 rotates channel pair k (see rotary_pair_lo/hi), the other k
// copy one
// pass-through channel (nothing to do in place). Angles in f32 with the CPU's formula
// (powf, cosf, sinf: within a few ulp of the host's).
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

// [s, m1, m2, m3, d] with absent middle dims of size 1: element offsets of a row.
struct RowGeometry {
  int64_t size[4];  // s, m1, m2, m3
  int64_t x_stride[4], y_stride[4];
  __device__ void offsets(int64_t row, int64_t& pos, int64_t& xo, int64_t& yo) const {
    xo = 0;
    yo = 0;
    for (int k = 3; k >= 1; --k) {
      const int64_t idx = row % size[k];
      row /= size[k];
      xo += idx * x_stride[k];
      yo += idx * y_stride[k];
    }
    pos = row;
    xo += row * x_stride[0];
    yo += row * y_stride[0];
  }
};

RowGeometry geometry(const Tensor& x, const Tensor& y) {
  RowGeometry g{};
  for (int k = 0; k < 4; ++k) {
    g.size[k] = 1;
    g.x_stride[k] = g.y_stride[k] = 0;
  }
  // dim 0 → slot 0; the middle dims fill the last slots so absent ones sit first.
  const int64_t middle = x.dim() - 2;
  g.size[0] = x.size(0);
  g.x_stride[0] = x.stride(0);
  g.y_stride[0] = y.stride(0);
  for (int64_t k = 0; k < middle; ++k) {
    const int slot = int(4 - middle + k);
    g.size[slot] = x.size(1 + k);
    g.x_stride[slot] = x.stride(1 + k);
    g.y_stride[slot] = y.stride(1 + k);
  }
  return g;
}

template <typename T>
struct Rotate {
  const T* x;
  T* y;
  RowGeometry g;
  int64_t position_start, half, rotary_dim;
  float base, factor, sign;
  Llama3RopeScaling llama3;
  bool yarn;
  YarnTerms yarn_terms;  // its factor 1 and concentration 1 when yarn is off
  bool interleaved;
  __device__ void operator()(int64_t row, int64_t k, int64_t) const {
    int64_t pos, xo, yo;
    g.offsets(row, pos, xo, yo);
    if (k < half) {
      const float base_pow = powf(base, float(2 * k) / float(rotary_dim));
      float inv_freq = yarn ? yarn_inv_freq(base_pow, k, yarn_terms) : 1.0f / base_pow;
      if (llama3.factor > 0.0f)
        inv_freq = llama3_scaled_inv_freq(inv_freq, llama3.factor, llama3.low_freq_factor,
                                          llama3.high_freq_factor,
                                          llama3.original_max_position_embeddings);
      const float theta = (float(position_start + pos) / factor) * inv_freq;
      const float c = cosf(theta) * yarn_terms.concentration,
                  s = sign * (sinf(theta) * yarn_terms.concentration);
      const int64_t lo = rotary_pair_lo(k, half, interleaved);
      const int64_t hi = rotary_pair_hi(k, half, interleaved);
      const float a = to_f32(x[xo + lo]), b = to_f32(x[xo + hi]);
      y[yo + lo] = from_f32<T>(a * c - b * s);
      y[yo + hi] = from_f32<T>(b * c + a * s);
    } else {
      const int64_t j = rotary_dim + (k - half);
      if (x + xo != y + yo) y[yo + j] = x[xo + j];
    }
  }
};

}  // namespace

void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y) {
  const int64_t d = x.size(-1), half = p.rotary_dim / 2;
  const int64_t rows = x.numel() / d;
  const RowGeometry g = geometry(x, y);
  dispatch_float(x.dtype(), "rotary_embedding x", [&](auto tag) {
    using T = decltype(tag);
    const Rotate<T> op{ptr<T>(x),
                       ptr<T>(y),
                       g,
                       position_start,
                       half,
                       p.rotary_dim,
                       p.base,
                       p.seq_interpolation_factor,
                       inverse ? -1.0f : 1.0f,
                       p.llama3,
                       p.yarn.has_value(),
                       p.yarn ? yarn_terms(*p.yarn, p.rotary_dim, p.base) : YarnTerms{},
                       p.interleaved};
    launch_rows_cols(op, rows, half + (d - p.rotary_dim), "rotary_embedding");
  });
}

}  // namespace megatron::kernels::cuda
