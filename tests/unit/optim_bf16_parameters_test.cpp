// --bf16 training keeps its parameters in bf16 and the fp32 master weights in AdamW (as
// Megatron's bf16 params + fp32 main params): the update is the fp32 update, bit for bit, with
// the store holding its rounding; checkpoints keep the exact master; and a checkpoint without a
// master (an f32 run's) hands its exact f32 values to the master.
#include <gtest/gtest.h>

#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"
#include "optim/optimizer.h"

namespace megatron {
namespace {

using megatron::testing::TempDir;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

// Two parameters, one with weight decay and one without, 37 elements in all.
ParameterStore make_store(DType values) {
  ParameterStore store(0, 1);
  store.add({"w", {5, 7}, 0});
  ParamSpec bias{"b", {2}, -1};
  bias.weight_decay = false;
  store.add(bias);
  store.allocate(1, values);
  return store;
}

// Element i: a value that bf16 cannot hold exactly (offset 1/1000 of the value).
std::vector<float> exact_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (0.25f + 0.01f * float(i)) * (i % 2 ? -1 : 1);
  return v;
}

void set_values(ParameterStore& store, const std::vector<float>& v) {
  Tensor host = Tensor::from_vector(v, {int64_t(v.size())});
  assign_values_from_host_f32(store.flat_values(), host);
}

std::vector<float> values_f32(const ParameterStore& store) {
  return values_on_host_f32(store.flat_values()).to_vector<float>();
}

std::vector<float> rounded_to_bf16(const std::vector<float>& v) {
  std::vector<float> r;
  for (float x : v) r.push_back(float(bf16(x)));
  return r;
}

void set_grads(ParameterStore& store, int step) {
  float* g = store.flat_grads().data<float>();
  for (int64_t i = 0; i < store.flat_grads().numel(); ++i)
    g[i] = 0.01f * float((i * 7 + step * 3) % 11) - 0.05f;
}

TEST(TrainBf16Parameters, StoreValuesAreBf16AndTheMasterIsTheF32Update) {
  ParameterStore f32 = make_store(DType::F32);
  ParameterStore b16 = make_store(DType::BF16);
  ASSERT_EQ(b16.flat_values().dtype(), DType::BF16);
  ASSERT_EQ(b16.params()[0].value.dtype(), DType::BF16);
  const std::vector<float> start = rounded_to_bf16(exact_values(37));  // what init leaves
  set_values(f32, start);
  set_values(b16, start);
  AdamWConfig config;
  AdamW reference(f32, config), bf(b16, config);
  EXPECT_FALSE(reference.separate_master());
  ASSERT_TRUE(bf.separate_master());
  ASSERT_EQ(bf.flat_buffers().count(kMasterWeightsBuffer), 1u);
  for (int step = 1; step <= 3; ++step) {
    set_grads(f32, step);
    set_grads(b16, step);
    reference.step(1e-2);
    bf.step(1e-2);
    const std::vector<float> master = bf.flat_buffers().at(kMasterWeightsBuffer).to_vector<float>();
    EXPECT_EQ(master, values_f32(f32)) << "step " << step;  // the fp32 update, to the bit
    EXPECT_EQ(values_f32(b16), rounded_to_bf16(master)) << "step " << step;
    EXPECT_NE(values_f32(b16), master) << "the store holds the bf16 rounding";
  }
}

TEST(TrainBf16Parameters, ShardsOfTheMasterUpdateAsTheWhole) {
  ParameterStore whole_store = make_store(DType::BF16), sharded_store = make_store(DType::BF16);
  set_values(whole_store, exact_values(37));
  set_values(sharded_store, exact_values(37));
  AdamW whole(whole_store, {});
  // Two DP ranks' shards, cutting the weight: each updates its range of the same store.
  AdamW low(sharded_store, {}, {0, 19}), high(sharded_store, {}, {19, 37});
  set_grads(whole_store, 1);
  set_grads(sharded_store, 1);
  whole.step(1e-2);
  low.step(1e-2);
  high.step(1e-2);
  std::vector<float> master = low.flat_buffers().at(kMasterWeightsBuffer).to_vector<float>();
  const std::vector<float> rest = high.flat_buffers().at(kMasterWeightsBuffer).to_vector<float>();
  master.insert(master.end(), rest.begin(), rest.end());
  EXPECT_EQ(master, whole.flat_buffers().at(kMasterWeightsBuffer).to_vector<float>());
  EXPECT_EQ(values_f32(sharded_store), values_f32(whole_store));
}

TEST(TrainBf16Parameters, CheckpointKeepsTheExactMaster) {
  TempDir dir;
  ParameterStore saved_store = make_store(DType::BF16);
  set_values(saved_store, exact_values(37));
  AdamW saved(saved_store, {});
  set_grads(saved_store, 1);
  saved.step(1e-2);
  save_checkpoint(dir.path(), 1, saved_store, saved.flat_buffers(), {{"iteration", 1}}, solo());

  ParameterStore loaded_store = make_store(DType::BF16);
  AdamW loaded(loaded_store, {});
  std::map<std::string, Tensor> buffers = loaded.flat_buffers();
  load_checkpoint(dir.path(), 1, loaded_store, &buffers, solo());
  for (const auto& [name, buffer] : saved.flat_buffers())
    EXPECT_EQ(buffers.at(name).to_vector<float>(), buffer.to_vector<float>()) << name;
  EXPECT_EQ(values_f32(loaded_store), values_f32(saved_store));
}

TEST(TrainBf16Parameters, ACheckpointWithoutMasterGivesItsF32ValuesToTheMaster) {
  TempDir dir;
  ParameterStore f32 = make_store(DType::F32);
  const std::vector<float> exact = exact_values(37);
  set_values(f32, exact);
  AdamW f32_adam(f32, {});
  ASSERT_EQ(f32_adam.flat_buffers().count(kMasterWeightsBuffer), 0u);
  save_checkpoint(dir.path(), 1, f32, f32_adam.flat_buffers(), {{"iteration", 1}}, solo());

  ParameterStore b16 = make_store(DType::BF16);
  AdamW bf(b16, {});
  std::map<std::string, Tensor> buffers = bf.flat_buffers();
  load_checkpoint(dir.path(), 1, b16, &buffers, solo());
  EXPECT_EQ(buffers.at(kMasterWeightsBuffer).to_vector<float>(), exact);  // not its rounding
  EXPECT_EQ(values_f32(b16), rounded_to_bf16(exact));

  // Without any optimizer state (imported, --no-save-optim) it is still an error.
  TempDir bare;
  save_checkpoint(bare.path(), 1, f32, {}, {{"iteration", 1}}, solo());
  EXPECT_THROW(load_checkpoint(bare.path(), 1, b16, &buffers, solo()), Error);
}

}  // namespace
}  // namespace megatron
