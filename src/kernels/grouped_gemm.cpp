// Grouped GEMM (contract: kernels/grouped_gemm.h): checks the groups once, then one backend
// GEMM (kernels/gemm.h) per non-empty group on row views of x and y, so it runs on every
// device the GEMM does and each group gets the backend's blocking for its shape.
#include "kernels/grouped_gemm.h"

#include "kernels/bias_add.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

namespace megatron::kernels {

namespace {

// Checks that the groups cover the rows of t [M, ...] (and there are G of them); returns M.
int64_t check_groups(const Tensor& t, const std::vector<int64_t>& group_rows, int64_t groups,
                     const char* what) {
  MT_CHECK(int64_t(group_rows.size()) == groups, what, ": ", group_rows.size(), " row groups for ",
           groups, " weight matrices");
  int64_t total = 0;
  for (int64_t r : group_rows) {
    MT_CHECK(r >= 0, what, ": a group of ", r, " rows");
    total += r;
  }
  MT_CHECK(t.dim() == 2 && t.size(0) == total, what, ": the groups hold ", total,
           " rows, the operand is ", t.describe());
  return total;
}

}  // namespace

void grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w,
                  const std::vector<int64_t>& group_rows, Tensor& y) {
  check_float_contiguous(x, "grouped_gemm x");
  check_float_contiguous(w, "grouped_gemm w");
  MT_CHECK(w.dim() == 3, "grouped_gemm w must be [G, N, K] or [G, K, N], got ", w.describe());
  const int64_t m = check_groups(x, group_rows, w.size(0), "grouped_gemm x");
  const int64_t k = x.size(1), n = trans_w ? w.size(1) : w.size(2);
  MT_CHECK((trans_w ? w.size(2) : w.size(1)) == k, "grouped_gemm: x ", x.describe(),
           " does not match w ", w.describe(), trans_w ? " (transposed)" : "");
  check_shape(y, {m, n}, "grouped_gemm y");
  operand_device("grouped_gemm", {&x, &w, &y});
  int64_t row = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows == 0) continue;
    Tensor yg = y.slice(0, row, row + rows);
    gemm(x.slice(0, row, row + rows), false, w.select(0, int64_t(g)), trans_w, yg);
    row += rows;
  }
}

void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x,
                              const std::vector<int64_t>& group_rows, Tensor& dw) {
  check_float_contiguous(dy, "grouped_gemm_weight_grad dy");
  check_float_contiguous(x, "grouped_gemm_weight_grad x");
  check_dtype(dw, DType::F32, "grouped_gemm_weight_grad dw");
  check_contiguous(dw, "grouped_gemm_weight_grad dw");
  MT_CHECK(dw.dim() == 3, "grouped_gemm_weight_grad dw must be [G, N, K], got ", dw.describe());
  check_groups(dy, group_rows, dw.size(0), "grouped_gemm_weight_grad dy");
  check_groups(x, group_rows, dw.size(0), "grouped_gemm_weight_grad x");
  check_shape(dw, {int64_t(group_rows.size()), dy.size(1), x.size(1)},
              "grouped_gemm_weight_grad dw");
  operand_device("grouped_gemm_weight_grad", {&dy, &x, &dw});
  int64_t row = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows == 0) continue;
    Tensor dwg = dw.select(0, int64_t(g));
    gemm(dy.slice(0, row, row + rows), true, x.slice(0, row, row + rows), false, dwg, 1.0f, 1.0f);
    row += rows;
  }
}

void grouped_bias_add(Tensor& y, const Tensor& bias, const std::vector<int64_t>& group_rows) {
  MT_CHECK(bias.dim() == 2, "grouped_bias_add bias must be [G, N], got ", bias.describe());
  check_groups(y, group_rows, bias.size(0), "grouped_bias_add y");
  int64_t row = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows == 0) continue;
    Tensor yg = y.slice(0, row, row + rows);
    bias_add_forward(yg, bias.select(0, int64_t(g)));
    row += rows;
  }
}

void grouped_bias_add_backward(const Tensor& dy, const std::vector<int64_t>& group_rows,
                               Tensor& dbias) {
  MT_CHECK(dbias.dim() == 2, "grouped_bias_add_backward dbias must be [G, N], got ",
           dbias.describe());
  check_groups(dy, group_rows, dbias.size(0), "grouped_bias_add_backward dy");
  int64_t row = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows == 0) continue;
    Tensor db = dbias.select(0, int64_t(g));
    bias_add_backward(dy.slice(0, row, row + rows), db);
    row += rows;
  }
}

}  // namespace megatron::kernels
