// Expert parameters in the ParameterStore (ParamSpec::expert): dim 0 split over the expert-
// parallel ranks, the partition dim over the expert tensor-parallel ones, an initialisation
// that gives every expert the values it has unsplit (checked by reassembling the slices of every
// rank of every layout against the unsplit store), and the norm's dense / expert runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "parallel/parameter.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

const std::vector<ParamSpec>& specs() {
  static const std::vector<ParamSpec> s = {
      {.name = "dense.weight", .full_shape = {6, 4}, .partition_dim = 0},
      {.name = "experts.linear_fc1.weight",
       .full_shape = {4, 6, 4},
       .partition_dim = 1,
       .expert = true},
      {.name = "experts.linear_fc2.weight",
       .full_shape = {4, 4, 6},
       .partition_dim = 2,
       .expert = true},
      {.name = "experts.linear_fc2.bias", .full_shape = {4, 4}, .expert = true},
      {.name = "norm.weight", .full_shape = {4}},
  };
  return s;
}

ParameterStore store_for(int tp_rank, int tp, int ep_rank, int ep, int etp_rank, int etp) {
  ParameterStore store(tp_rank, tp);
  store.set_expert_grid(ep_rank, ep, etp_rank, etp);
  for (const ParamSpec& s : specs()) store.add(s);
  store.allocate();
  for (Parameter& p : store.params()) init_normal(p, 1234, 0.02f);
  return store;
}

TEST(ExpertParametersTest, ExpertsSplitOverEpAndTheirTensorDimOverEtp) {
  // TP 2, EP 2, ETP 1: TP rank 1 (EP rank 1) holds experts 2 and 3, whole.
  const ParameterStore store = store_for(1, 2, 1, 2, 0, 1);
  const Parameter& fc1 = store.get("experts.linear_fc1.weight");
  EXPECT_EQ(fc1.local_shape, (Shape{2, 6, 4}));
  EXPECT_EQ(fc1.expert_start, 2);
  EXPECT_EQ(fc1.local_start, 0);
  const Parameter& dense = store.get("dense.weight");
  EXPECT_EQ(dense.local_shape, (Shape{3, 4}));
  EXPECT_EQ(dense.local_start, 3);
  EXPECT_TRUE(store.has_experts());
  // ETP 2: the expert's partition dim is split over it, the experts over EP.
  const ParameterStore split = store_for(0, 1, 0, 2, 1, 2);
  const Parameter& fc2 = split.get("experts.linear_fc2.weight");
  EXPECT_EQ(fc2.local_shape, (Shape{2, 4, 3}));
  EXPECT_EQ(fc2.expert_start, 0);
  EXPECT_EQ(fc2.local_start, 3);
}

// Every rank's slices, placed by expert_start and local_start, rebuild the unsplit store's
// values bit for bit, in every (tp, ep, etp) layout of 1, 2 and 4.
TEST(ExpertParametersTest, InitialisationIsTheSameInEveryLayout) {
  const ParameterStore whole = store_for(0, 1, 0, 1, 0, 1);
  for (int tp : {1, 2})
    for (int ep : {1, 2, 4})
      for (int etp : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "tp=" << tp << " ep=" << ep << " etp=" << etp);
        std::vector<std::vector<float>> rebuilt;
        for (const Parameter& p : whole.params())
          rebuilt.emplace_back(size_t(shape_numel(p.local_shape)), -1.0f);
        for (int t = 0; t < tp; ++t)
          for (int e = 0; e < ep; ++e)
            for (int et = 0; et < etp; ++et) {
              const ParameterStore part = store_for(t, tp, e, ep, et, etp);
              for (size_t i = 0; i < part.params().size(); ++i) {
                const Parameter& p = part.params()[i];
                const std::vector<float> values = p.value.to_vector<float>();
                for (int64_t k = 0; k < int64_t(values.size()); ++k)
                  rebuilt[i][size_t(full_element_index(p, k))] = values[size_t(k)];
              }
            }
        for (size_t i = 0; i < whole.params().size(); ++i)
          EXPECT_EQ(rebuilt[i], whole.params()[i].value.to_vector<float>())
              << whole.params()[i].spec.name;
      }
}

TEST(ExpertParametersTest, NormRunsSeparateDenseAndExpertParameters) {
  // ETP rank 1 of 2 at TP rank 0: the dense replicated norm counts here (TP rank 0), the
  // expert replicated bias does not (etp rank 1).
  const ParameterStore store = store_for(0, 2, 0, 1, 1, 2);
  auto range_of = [&](const char* name) {
    const Parameter& p = store.get(name);
    return std::pair<int64_t, int64_t>{p.flat_offset, p.flat_offset + shape_numel(p.local_shape)};
  };
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  // The dense parameters are laid out before the experts, so the two dense ones are one run.
  EXPECT_EQ(store.norm_ranges(false),
            (Ranges{{range_of("dense.weight").first, range_of("norm.weight").second}}));
  // fc1 and fc2 are adjacent: one run.
  EXPECT_EQ(store.norm_ranges(true), (Ranges{{range_of("experts.linear_fc1.weight").first,
                                              range_of("experts.linear_fc2.weight").second}}));
}

TEST(ExpertParametersTest, ExpertPartFollowsTheDensePartPaddedForTheDistributedOptimizer) {
  // TP 1, EP 2, ETP 1: dense.weight (24) and norm.weight (4), then rank 0's two experts' fc1
  // (2·6·4), fc2 (2·4·6) and bias (2·4), in registration order within each part.
  const ParameterStore plain = store_for(0, 1, 0, 2, 0, 1);
  EXPECT_EQ(plain.get("dense.weight").flat_offset, 0);
  EXPECT_EQ(plain.get("norm.weight").flat_offset, 24);
  EXPECT_EQ(plain.get("experts.linear_fc1.weight").flat_offset, 28);
  EXPECT_EQ(plain.get("experts.linear_fc2.weight").flat_offset, 76);
  EXPECT_EQ(plain.get("experts.linear_fc2.bias").flat_offset, 124);
  EXPECT_EQ(plain.dense_part().begin, 0);
  EXPECT_EQ(plain.dense_part().end, 28);
  EXPECT_EQ(plain.expert_part().begin, 28);
  EXPECT_EQ(plain.expert_part().end, 132);
  EXPECT_EQ(plain.flat_values().numel(), 132);
  // The distributed optimizer's padding: the dense part to a multiple of 3 (a gap of 2 zeros
  // that belong to no parameter), the expert part to a multiple of 5.
  ParameterStore store(0, 1);
  store.set_expert_grid(0, 2, 0, 1);
  for (const ParamSpec& s : specs()) store.add(s);
  store.allocate(3, DType::F32, 5);
  EXPECT_EQ(store.dense_part().end, 28);
  EXPECT_EQ(store.expert_part().begin, 30);
  EXPECT_EQ(store.expert_part().end, 134);
  EXPECT_EQ(store.get("experts.linear_fc1.weight").flat_offset, 30);
  EXPECT_EQ(store.flat_values().numel(), 134);
  EXPECT_EQ(store.padded_flat_values().numel(), 30 + 105);
}

TEST(ExpertParametersTest, ExpertsMustDivideOverTheExpertParallelRanks) {
  ParameterStore store(0, 1);
  store.set_expert_grid(0, 3, 0, 1);
  try {
    store.add(specs()[1]);
    ADD_FAILURE() << "accepted 4 experts over 3 ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("its 4 experts are not divisible by the "
                                       "expert-model-parallel size 3"));
  }
  ParamSpec along_experts = specs()[1];
  along_experts.partition_dim = 0;
  EXPECT_THROW(ParameterStore(0, 1).add(along_experts), Error);
  ParameterStore registered(0, 1);
  registered.add(specs()[0]);
  EXPECT_THROW(registered.set_expert_grid(0, 2, 0, 1), Error);  // after add()
}

}  // namespace
}  // namespace megatron
