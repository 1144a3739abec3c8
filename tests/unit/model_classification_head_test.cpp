// ClassificationHead (MNLI/QQP classification, RACE multiple choice) against a naive
// double-precision reference: logits, mean cross-entropy, and the gradients of the weight, the
// bias and the pooled input, with and without dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/classification_head.h"

namespace megatron {
namespace {

struct Reference {
  std::vector<double> logits, dweight, dbias, dpooled;
  double loss = 0;
};

// x [n, h] (already dropped out and scaled), w [o, h], bias [o]; rows grouped k per logits row.
Reference reference(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& bias, const std::vector<int>& labels, int64_t n,
                    int64_t h, int64_t o, int64_t k, double grad_scale) {
  Reference r;
  std::vector<double> scores(size_t(n * o));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < o; ++j) {
      double s = bias[size_t(j)];
      for (int64_t d = 0; d < h; ++d) s += x[size_t(i * h + d)] * w[size_t(j * h + d)];
      scores[size_t(i * o + j)] = s;
    }
  r.logits = scores;
  const int64_t b = n / k, c = o * k;
  std::vector<double> dscores(scores.size());
  for (int64_t row = 0; row < b; ++row) {
    double mx = -1e300, z = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, scores[size_t(row * c + j)]);
    for (int64_t j = 0; j < c; ++j) z += std::exp(scores[size_t(row * c + j)] - mx);
    r.loss += (std::log(z) + mx - scores[size_t(row * c + labels[size_t(row)])]) / double(b);
    for (int64_t j = 0; j < c; ++j)
      dscores[size_t(row * c + j)] =
          grad_scale / double(b) *
          (std::exp(scores[size_t(row * c + j)] - mx) / z - (j == labels[size_t(row)] ? 1 : 0));
  }
  r.dweight.assign(size_t(o * h), 0);
  r.dbias.assign(size_t(o), 0);
  r.dpooled.assign(size_t(n * h), 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < o; ++j) {
      const double g = dscores[size_t(i * o + j)];
      r.dbias[size_t(j)] += g;
      for (int64_t d = 0; d < h; ++d) {
        r.dweight[size_t(j * h + d)] += g * x[size_t(i * h + d)];
        r.dpooled[size_t(i * h + d)] += g * w[size_t(j * h + d)];
      }
    }
  return r;
}

template <typename T>
std::vector<double> as_double(const Tensor& t) {
  const std::vector<T> v = t.to_vector<T>();
  return std::vector<double>(v.begin(), v.end());
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " " << i;
}

void check_head(int64_t outputs, int64_t choices, int64_t n, float dropout, bool train) {
  const int64_t h = 13;
  ParameterStore store(0, 1);
  ComputeWeights weights{store, DType::F32};
  const ClassificationHead head({"multichoice_head", h, outputs, choices, dropout, 0.5f}, store,
                                weights);
  store.allocate();
  head.init_weights(store, 7);
  weights.refresh();
  for (float& v :
       std::span(store.get("multichoice_head.bias").value.data<float>(), size_t(outputs)))
    v = 0.25f;  // a non-zero bias, so its use is checked

  std::vector<float> pooled(size_t(n * h));
  for (size_t i = 0; i < pooled.size(); ++i) pooled[i] = float(std::sin(0.7 * double(i) + 0.3));
  const int64_t b = n / choices;
  std::vector<int32_t> labels(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) labels[size_t(i)] = int32_t((i * 2 + 1) % (outputs * choices));

  Arena arena(Device::CPU);
  ClassificationHead::Ctx ctx;
  const DropoutScope scope{train, 99, 3, 40};
  const Tensor logits = head.forward(ctx, Tensor::from_vector(pooled, {n, h}), scope, arena);
  ASSERT_EQ(logits.shape(), (Shape{b, outputs * choices}));
  const float loss = head.loss(ctx, Tensor::from_vector(labels, {b}), arena);
  const Tensor dpooled = head.backward(ctx, 2.0f, arena);

  // The reference input: the pooled values, dropped out with the head's own mask.
  std::vector<double> x(pooled.begin(), pooled.end());
  std::vector<double> keep(x.size(), 1.0);
  if (train && dropout > 0) {
    ASSERT_TRUE(ctx.mask.defined());
    const std::vector<uint8_t> mask = ctx.mask.to_vector<uint8_t>();
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      keep[i] = mask[i] ? 1.0 / (1.0 - dropout) : 0.0;
      x[i] *= keep[i];
      kept += mask[i];
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, int64_t(x.size()));  // the mask drops some and keeps some
  }
  const std::vector<int> int_labels(labels.begin(), labels.end());
  Reference r = reference(x, as_double<float>(store.get("multichoice_head.weight").value),
                          as_double<float>(store.get("multichoice_head.bias").value), int_labels, n,
                          h, outputs, choices, 2.0);
  for (size_t i = 0; i < r.dpooled.size(); ++i) r.dpooled[i] *= keep[i];
  expect_near(as_double<float>(logits), r.logits, "logits");
  EXPECT_NEAR(loss, r.loss, 1e-5 * r.loss);
  expect_near(as_double<float>(store.get("multichoice_head.weight").grad), r.dweight, "dweight");
  expect_near(as_double<float>(store.get("multichoice_head.bias").grad), r.dbias, "dbias");
  expect_near(as_double<float>(dpooled), r.dpooled, "dpooled");
}

TEST(ClassificationHead, ClassesMatchReference) {
  check_head(3, 1, 5, 0.1f, false);
}
TEST(ClassificationHead, MultipleChoiceMatchesReference) {
  check_head(1, 4, 12, 0.1f, false);
}
TEST(ClassificationHead, DropoutMatchesReference) {
  check_head(1, 4, 8, 0.5f, true);
}

TEST(ClassificationHead, RejectsBadShapesAndLabels) {
  ParameterStore store(0, 1);
  ComputeWeights weights{store, DType::F32};
  EXPECT_THROW(ClassificationHead({"h", 4, 2, 4, 0.1f, 0.02f}, store, weights), Error);
  const ClassificationHead head({"classification_head", 4, 3, 1, 0.0f, 0.02f}, store, weights);
  store.allocate();
  head.init_weights(store, 1);
  weights.refresh();
  Arena arena(Device::CPU);
  ClassificationHead::Ctx ctx;
  head.forward(ctx, Tensor::zeros({2, 4}, DType::F32), DropoutScope{}, arena);
  EXPECT_THROW(head.loss(ctx, Tensor::from_vector(std::vector<int32_t>{0, 3}, {2}), arena), Error);
}

}  // namespace
}  // namespace megatron
