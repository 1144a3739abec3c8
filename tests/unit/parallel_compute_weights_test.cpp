// ComputeWeights: f32 compute weights are the master values themselves; bf16 ones are a
// rounded copy that changes only on refresh(); with bf16 values they are the values, and only
// the parameters read in f32 get an f32 copy.
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

TEST(ParallelComputeWeights, Bf16ValuesAreTheWeightsAndF32ReadsGetACopy) {
  ParameterStore store(0, 1);
  const size_t w = store.add({"w", {2, 2}, 0});
  const size_t gamma = store.add({"gamma", {3}, -1});
  ComputeWeights weights(store, DType::BF16);
  store.allocate(1, DType::BF16);
  Tensor& g = store.params()[gamma].value;
  g.data<bf16>()[1] = bf16(1.5f);
  weights.refresh();
  EXPECT_EQ(weights.weight(w).raw_data(), store.params()[w].value.raw_data());
  const Tensor& f32 = weights.master(gamma);
  ASSERT_EQ(f32.dtype(), DType::F32);
  ASSERT_EQ(f32.shape(), (Shape{3}));
  EXPECT_EQ(f32.data<float>()[1], 1.5f);
  EXPECT_EQ(&weights.master(gamma), &f32);  // made once
  g.data<bf16>()[1] = bf16(-2.0f);
  EXPECT_EQ(f32.data<float>()[1], 1.5f);  // stale until refreshed
  weights.refresh();
  EXPECT_EQ(weights.master(gamma).data<float>()[1], -2.0f);
  // f32 compute cannot be served from bf16 values.
  ComputeWeights f32_weights(store, DType::F32);
  EXPECT_THROW(f32_weights.refresh(), Error);
}

TEST(ParallelComputeWeights, RejectsUnsupportedDtype) {
  ParameterStore store(0, 1);
  EXPECT_THROW(ComputeWeights(store, DType::F16), Error);
}

}  // namespace
}  // namespace megatron
