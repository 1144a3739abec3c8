// ComputeWeights: f32 compute weights are the master values themselves; bf16 ones are a
// rounded copy that changes only on refresh().
#include <gtest/gtest.h>

#include "parallel/compute_weights.h"

namespace megatron {
namespace {

TEST(ParallelComputeWeights, F32IsTheMasterValueWithoutCopy) {
  ParameterStore store(0, 1);
  const size_t w = store.add({"w", {2, 3}, 0});
  ComputeWeights weights(store, DType::F32);
  store.allocate();
  weights.refresh();
  EXPECT_EQ(weights.weight(w).raw_data(), store.params()[w].value.raw_data());
}

TEST(ParallelComputeWeights, Bf16IsARoundedCopyRefreshedOnDemand) {
  ParameterStore store(0, 1);
  store.add({"a", {3}, -1});
  const size_t b = store.add({"b", {2, 2}, 0});
  ComputeWeights weights(store, DType::BF16);
  EXPECT_THROW(weights.weight(b), Error);  // not bound before refresh()
  store.allocate();
  float* v = store.params()[b].value.data<float>();
  v[0] = 1.0f + 1.0f / 1024;  // rounds to 1 in bf16 (8 significant bits)
  v[3] = -3.0f;
  weights.refresh();
  const Tensor& c = weights.weight(b);
  ASSERT_EQ(c.dtype(), DType::BF16);
  ASSERT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(float(c.data<bf16>()[0]), 1.0f);
  EXPECT_EQ(float(c.data<bf16>()[3]), -3.0f);
  v[3] = 5.0f;
  EXPECT_EQ(float(c.data<bf16>()[3]), -3.0f);  // stale until refreshed
  weights.refresh();
  EXPECT_EQ(float(weights.weight(b).data<bf16>()[3]), 5.0f);
}

TEST(ParallelComputeWeights, RejectsUnsupportedDtype) {
  ParameterStore store(0, 1);
  EXPECT_THROW(ComputeWeights(store, DType::F16), Error);
}

}  // namespace
}  // namespace megatron
