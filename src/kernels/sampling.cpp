// Token sampling kernels (contract: kernels/sampling.h): argument checks, then the device's
// backend (kernels/cpu/sampling.cpp, kernels/cuda/sampling.cu).
#include "kernels/sampling.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_values(const Tensor& values, const char* what) {
  check_defined(values, what);
  check_dtype(values, DType::F32, what);
  check_contiguous(values, what);
  MT_CHECK(values.dim() == 2, what, " must be [B, N], got ", values.describe());
}

void check_sampled_ids(const Tensor& ids, const Shape& shape, const char* what) {
  check_defined(ids, what);
  check_shape(ids, shape, what);
  check_i32_contiguous(ids, what);
}

void check_row_stat(const Tensor& t, int64_t rows, const char* what) {
  check_defined(t, what);
  check_shape(t, {rows}, what);
  check_dtype(t, DType::F32, what);
  check_contiguous(t, what);
}

void check_keys(const std::vector<uint64_t>& keys, int64_t rows, const char* kernel) {
  MT_CHECK(int64_t(keys.size()) == rows, kernel, ": ", keys.size(), " row keys for ", rows,
           " rows");
}

}  // namespace

void topk_rows(const Tensor& values, const Tensor& ids, int64_t id_offset, int64_t valid_cols,
               Tensor& out_values, Tensor& out_ids) {
  check_values(values, "topk_rows values");
  const int64_t rows = values.size(0), n = values.size(1);
  if (ids.defined()) check_sampled_ids(ids, values.shape(), "topk_rows ids");
  MT_CHECK(valid_cols >= 0 && valid_cols <= n, "topk_rows: valid_cols ", valid_cols,
           " must be in [0, ", n, "]");
  check_values(out_values, "topk_rows out_values");
  MT_CHECK(out_values.size(0) == rows && out_values.size(1) >= 1, "topk_rows out_values ",
           out_values.describe(), " must be [", rows, ", k >= 1]");
  check_sampled_ids(out_ids, out_values.shape(), "topk_rows out_ids");
  const Device device = operand_device("topk_rows", {&values, &ids, &out_values, &out_ids});
  MT_DISPATCH(device, topk_rows, values, ids, id_offset, valid_cols, out_values, out_ids);
}

void gumbel_max_rows(const Tensor& values, int64_t id_offset, int64_t valid_cols, uint64_t seed,
                     const std::vector<uint64_t>& row_keys, Tensor& out_values, Tensor& out_ids) {
  check_values(values, "gumbel_max_rows values");
  const int64_t rows = values.size(0);
  MT_CHECK(valid_cols >= 0 && valid_cols <= values.size(1), "gumbel_max_rows: valid_cols ",
           valid_cols, " must be in [0, ", values.size(1), "]");
  MT_CHECK(id_offset >= 0, "gumbel_max_rows: id_offset ", id_offset, " must be >= 0");
  check_keys(row_keys, rows, "gumbel_max_rows");
  check_row_stat(out_values, rows, "gumbel_max_rows out_values");
  check_sampled_ids(out_ids, {rows}, "gumbel_max_rows out_ids");
  const Device device = operand_device("gumbel_max_rows", {&values, &out_values, &out_ids});
  MT_DISPATCH(device, gumbel_max_rows, values, id_offset, valid_cols, seed, row_keys, out_values,
              out_ids);
}

int64_t sample_candidates(const Tensor& values, const Tensor& ids, const Tensor& row_max,
                          const Tensor& sum_exp, float top_p, bool whole_vocabulary, uint64_t seed,
                          const std::vector<uint64_t>& row_keys, Tensor& out_ids) {
  check_values(values, "sample_candidates values");
  const int64_t rows = values.size(0);
  check_sampled_ids(ids, values.shape(), "sample_candidates ids");
  MT_CHECK(top_p <= 1.0f, "sample_candidates: top_p ", top_p, " must be <= 1");
  if (top_p > 0.0f) {
    check_row_stat(row_max, rows, "sample_candidates row_max");
    check_row_stat(sum_exp, rows, "sample_candidates sum_exp");
  }
  check_keys(row_keys, rows, "sample_candidates");
  check_sampled_ids(out_ids, {rows}, "sample_candidates out_ids");
  const Device device =
      operand_device("sample_candidates", {&values, &ids, &row_max, &sum_exp, &out_ids});
  return MT_DISPATCH(device, sample_candidates, values, ids, row_max, sum_exp, top_p,
                     whole_vocabulary, seed, row_keys, out_ids);
}

}  // namespace megatron::kernels
