// Merge of partial attentions on CPU (contract: kernels/attention_merge.h, checked by
// kernels/attention_merge.cpp): one query row (n, h, i) per iteration, rows in parallel.
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

template <typename T>
void merge_rows(T* out, float* lse, const T* part_out, const float* part_lse, int64_t b,
                int64_t heads, int64_t s, int64_t d) {
  const int64_t rows = b * heads * s, out_row = b * heads * d;  // out's stride of a position
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = row % s, h = (row / s) % heads, n = row / (s * heads);
    const float la = lse[row], lb = part_lse[row], m = std::max(la, lb);
    if (m == -std::numeric_limits<float>::infinity()) continue;  // no key reaches the row
    const float wa = std::exp(la - m), wb = std::exp(lb - m), total = wa + wb;
    const float fa = wa / total, fb = wb / total;
    T* o = out + i * out_row + (n * heads + h) * d;
    const T* p = part_out + i * out_row + (n * heads + h) * d;
    for (int64_t k = 0; k < d; ++k) o[k] = T(fa * float(o[k]) + fb * float(p[k]));
    lse[row] = m + std::log(total);
  }
}

}  // namespace

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const int64_t b = lse.size(0), heads = lse.size(1), s = lse.size(2), d = out.size(2) / heads;
  if (out.dtype() == DType::F32)
    merge_rows(out.data<float>(), lse.data<float>(), part_out.data<float>(), part_lse.data<float>(),
               b, heads, s, d);
  else if (out.dtype() == DType::BF16)
    merge_rows(out.data<bf16>(), lse.data<float>(), part_out.data<bf16>(), part_lse.data<float>(),
               b, heads, s, d);
  else
    MT_THROW("attention_merge on CPU: out has dtype ", dtype_name(out.dtype()),
             ", expected f32 or bf16");
}

}  // namespace megatron::kernels::cpu
