// Sinkhorn expert choice on CPU (contract: kernels/moe_sinkhorn.h; CUDA twin:
// kernels/cuda/moe_sinkhorn.cu). Every sum runs in index order in one thread, so the factors
// do not depend on the thread count; the rows' and columns' sums are independent of each other
// and run in parallel.
#include "kernels/moe_sinkhorn.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void moe_sinkhorn_topk(const Tensor& logits, int64_t topk, Tensor& indices) {
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  const float* l = logits.data<float>();
  std::vector<double> cost(static_cast<size_t>(n * e)), d0(size_t(n), 1.0), d1(size_t(e), 1.0),
      d1_old(size_t(e), 1.0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n * e; ++i) cost[size_t(i)] = std::exp(double(l[i]));
  constexpr double kEps = 1e-8;
  double error = 1e9;
  while (error > kSinkhornTolerance) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < e; ++c) s += d1[size_t(c)] * cost[size_t(r * e + c)];
      d0[size_t(r)] = 1.0 / double(n) / (s + kEps);
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < e; ++c) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += d0[size_t(r)] * cost[size_t(r * e + c)];
      d1[size_t(c)] = 1.0 / double(e) / (s + kEps);
    }
    double change = 0;
    for (int64_t c = 0; c < e; ++c) change += std::fabs(d1_old[size_t(c)] - d1[size_t(c)]);
    error = change / double(e);
    d1_old = d1;
  }
  int32_t* idx = indices.data<int32_t>();
#pragma omp parallel
  {
    std::vector<char> taken(static_cast<size_t>(e));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      std::fill(taken.begin(), taken.end(), 0);
      const auto score = [&](int64_t c) {
        return d0[size_t(r)] * cost[size_t(r * e + c)] * d1[size_t(c)];
      };
      for (int64_t j = 0; j < topk; ++j) {
        int64_t best = -1;
        for (int64_t c = 0; c < e; ++c)
          if (!taken[size_t(c)] && (best < 0 || score(c) > score(best))) best = c;
        taken[size_t(best)] = 1;
        idx[r * topk + j] = int32_t(best);
      }
    }
  }
}

}  // namespace megatron::kernels::cpu
