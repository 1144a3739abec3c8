// Token sampling kernels on CPU (contract: kernels/sampling.h, checked by kernels/sampling.cpp).
// Rows are independent (one row per OpenMP iteration); B is the batch, so small.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/nucleus_support.h"

namespace megatron::kernels::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// g = −log(−log(u)), u = (philox(seed, key, id) + ½) · 2⁻³² in (0, 1), computed in f64.
inline double gumbel(uint64_t seed, uint64_t key, int64_t id) {
  const double u = (double(PhiloxStream(seed, key).u32(uint64_t(id))) + 0.5) * 0x1p-32;
  return -std::log(-std::log(u));
}

// Above every g: u <= 1 − 2⁻³³ gives g <= 22.9; the margin covers the f32 rounding of
// value + g for any |value| < 1e6.
constexpr double kGumbelMax = 24.0;

// a ranks before b: larger value, then smaller id.
inline bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

}  // namespace

void topk_rows(const Tensor& values, const Tensor& ids, int64_t id_offset, int64_t valid_cols,
               Tensor& out_values, Tensor& out_ids) {
  const int64_t rows = values.size(0), n = values.size(1), k = out_values.size(1);
  const float* v = values.data<float>();                              // [B, N]
  const int32_t* id = ids.defined() ? ids.data<int32_t>() : nullptr;  // [B, N] or none
  float* ov = out_values.data<float>();                               // [B, k]
  int32_t* oi = out_ids.data<int32_t>();                              // [B, k]
  const int64_t cols = id ? n : valid_cols;
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<float, int32_t>> entries;  // (value, id) of the row's live entries
    entries.reserve(size_t(cols));
    for (int64_t c = 0; c < cols; ++c) {
      const int32_t e = id ? id[r * n + c] : int32_t(id_offset + c);
      if (e >= 0) entries.emplace_back(v[r * n + c], e);
    }
    const auto before = [](const auto& a, const auto& b) {
      return ranks_before(a.first, a.second, b.first, b.second);
    };
    const size_t kept = std::min(entries.size(), size_t(k));
    std::partial_sort(entries.begin(), entries.begin() + ptrdiff_t(kept), entries.end(), before);
    for (int64_t j = 0; j < k; ++j) {
      const bool live = size_t(j) < kept;
      ov[r * k + j] = live ? entries[size_t(j)].first : kNegInf;
      oi[r * k + j] = live ? entries[size_t(j)].second : -1;
    }
  }
}

void gumbel_max_rows(const Tensor& values, int64_t id_offset, int64_t valid_cols, uint64_t seed,
                     const std::vector<uint64_t>& row_keys, Tensor& out_values, Tensor& out_ids) {
  const int64_t rows = values.size(0), n = values.size(1);
  const float* v = values.data<float>();  // [B, N]
  float* ov = out_values.data<float>();   // [B]
  int32_t* oi = out_ids.data<int32_t>();  // [B]
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = v + r * n;
    const uint64_t key = row_keys[size_t(r)];
    // Threads scan chunks of the row; the chunk winners are merged in chunk order, with the
    // same tie rule, so the result does not depend on the thread count.
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(64, valid_cols / 4096));
    std::vector<float> best_v(size_t(chunks), kNegInf);
    std::vector<int32_t> best_i(size_t(chunks), -1);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t lo = valid_cols * ch / chunks, hi = valid_cols * (ch + 1) / chunks;
      if (lo >= hi) continue;
      // Start from the largest value, so that most entries are ruled out without drawing:
      // g <= kGumbelMax, so an entry with value + kGumbelMax < best cannot win (nor tie).
      int64_t top = lo;
      for (int64_t c = lo + 1; c < hi; ++c)
        if (row[c] > row[top]) top = c;
      int32_t bi = int32_t(id_offset + top);
      float bv = float(double(row[top]) + gumbel(seed, key, bi));
      for (int64_t c = lo; c < hi; ++c) {
        if (c == top || double(row[c]) + kGumbelMax < double(bv)) continue;
        const int32_t gid = int32_t(id_offset + c);
        const float p = float(double(row[c]) + gumbel(seed, key, gid));
        if (ranks_before(p, gid, bv, bi)) {
          bv = p;
          bi = gid;
        }
      }
      best_v[size_t(ch)] = bv;
      best_i[size_t(ch)] = bi;
    }
    float bv = kNegInf;
    int32_t bi = -1;
    for (int64_t ch = 0; ch < chunks; ++ch)
      if (best_i[size_t(ch)] >= 0 &&
          (bi < 0 || ranks_before(best_v[size_t(ch)], best_i[size_t(ch)], bv, bi))) {
        bv = best_v[size_t(ch)];
        bi = best_i[size_t(ch)];
      }
    ov[r] = bv;
    oi[r] = bi;
  }
}

int64_t sample_candidates(const Tensor& values, const Tensor& ids, const Tensor& row_max,
                          const Tensor& sum_exp, float top_p, bool whole_vocabulary, uint64_t seed,
                          const std::vector<uint64_t>& row_keys, Tensor& out_ids) {
  const int64_t rows = values.size(0), c = values.size(1);
  const float* v = values.data<float>();  // [B, C]
  const int32_t* id = ids.data<int32_t>();
  const bool nucleus = top_p > 0.0f;
  const float* mx = nucleus ? row_max.data<float>() : nullptr;  // [B]
  const float* se = nucleus ? sum_exp.data<float>() : nullptr;  // [B]
  int32_t* out = out_ids.data<int32_t>();                       // [B]
  int64_t incomplete = 0;
  for (int64_t r = 0; r < rows; ++r) {
    // Candidates [0, keep) form the draw's support.
    int64_t keep = c;
    bool complete = true;
    if (nucleus) {
      const NucleusSupport support =
          nucleus_support(v + r * c, id + r * c, c, mx[r], se[r], top_p, whole_vocabulary);
      keep = support.keep;
      complete = support.complete;
    }
    if (!complete) {
      ++incomplete;
      out[r] = -1;
      continue;
    }
    float bv = kNegInf;
    int32_t bi = -1;
    for (int64_t j = 0; j < keep; ++j) {
      const int32_t gid = id[r * c + j];
      if (gid < 0) continue;
      const float p = float(double(v[r * c + j]) + gumbel(seed, row_keys[size_t(r)], gid));
      if (bi < 0 || ranks_before(p, gid, bv, bi)) {
        bv = p;
        bi = gid;
      }
    }
    out[r] = bi;
  }
  return incomplete;
}

}  // namespace megatron::kernels::cpu
