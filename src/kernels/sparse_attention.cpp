// DSA's top-k selection and indexer loss (contract: kernels/sparse_attention.h): argument
// checks, then the device's backend.
#include "kernels/sparse_attention.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_rows(const Tensor& t, const Shape& shape, DType dtype, const char* what) {
  check_defined(t, what);
  check_shape(t, shape, what);
  check_dtype(t, dtype, what);
  check_contiguous(t, what);
}

}  // namespace

void index_scores(const Tensor& raw, const Tensor& weights, bool relu, Tensor& scores) {
  check_defined(raw, "index_scores raw");
  MT_CHECK(raw.dim() == 4, "index_scores raw must be [B, H, Sq, Sk], got ", raw.describe());
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  check_rows(raw, raw.shape(), DType::F32, "index_scores raw");
  check_rows(weights, {sq, b, h}, DType::F32, "index_scores weights");
  check_rows(scores, {b, sq, sk}, DType::F32, "index_scores scores");
  const Device device = operand_device("index_scores", {&raw, &weights, &scores});
  MT_DISPATCH(device, index_scores, raw, weights, relu, scores);
}

void index_scores_backward(const Tensor& dscores, const Tensor& raw, const Tensor& weights,
                           bool relu, Tensor& draw, Tensor& dweights) {
  check_defined(raw, "index_scores_backward raw");
  MT_CHECK(raw.dim() == 4, "index_scores_backward raw must be [B, H, Sq, Sk], got ",
           raw.describe());
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  check_rows(raw, raw.shape(), DType::F32, "index_scores_backward raw");
  check_rows(dscores, {b, sq, sk}, DType::F32, "index_scores_backward dscores");
  check_rows(weights, {sq, b, h}, DType::F32, "index_scores_backward weights");
  check_rows(draw, raw.shape(), DType::F32, "index_scores_backward draw");
  check_rows(dweights, {sq, b, h}, DType::F32, "index_scores_backward dweights");
  const Device device =
      operand_device("index_scores_backward", {&dscores, &raw, &weights, &draw, &dweights});
  MT_DISPATCH(device, index_scores_backward, dscores, raw, weights, relu, draw, dweights);
}

void topk_key_mask(const Tensor& scores, int64_t k, Tensor& mask) {
  check_defined(scores, "topk_key_mask scores");
  MT_CHECK(scores.dim() == 3 && scores.size(1) <= scores.size(2),
           "topk_key_mask scores must be [B, Sq, Sk] with Sq <= Sk, got ", scores.describe());
  check_rows(scores, scores.shape(), DType::F32, "topk_key_mask scores");
  check_rows(mask, scores.shape(), DType::U8, "topk_key_mask mask");
  MT_CHECK(k >= 1, "topk_key_mask k must be >= 1, got ", k);
  const Device device = operand_device("topk_key_mask", {&scores, &mask});
  MT_DISPATCH(device, topk_key_mask, scores, k, mask);
}

void indexer_kl(const Tensor& scores, const Tensor& target, const Tensor& key_mask, Tensor& kl,
                Tensor& dscores) {
  check_defined(scores, "indexer_kl scores");
  MT_CHECK(scores.dim() == 3 && scores.size(1) <= scores.size(2),
           "indexer_kl scores must be [B, Sq, Sk] with Sq <= Sk, got ", scores.describe());
  check_rows(scores, scores.shape(), DType::F32, "indexer_kl scores");
  check_rows(target, scores.shape(), DType::F32, "indexer_kl target");
  if (key_mask.defined()) check_rows(key_mask, scores.shape(), DType::U8, "indexer_kl key_mask");
  check_rows(kl, {scores.size(0), scores.size(1)}, DType::F32, "indexer_kl kl");
  check_rows(dscores, scores.shape(), DType::F32, "indexer_kl dscores");
  const Device device = operand_device("indexer_kl", {&scores, &target, &key_mask, &kl, &dscores});
  MT_DISPATCH(device, indexer_kl, scores, target, key_mask, kl, dscores);
}

}  // namespace megatron::kernels
