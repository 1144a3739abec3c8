// check_replicas_agree (optim/replica_check.h) under mpirun: the whole world as one
// data-parallel group. Identical parameters pass; a single flipped element on one replica is
// reported on every rank, naming that replica and the iteration; the hash is CRC-32C of the
// stored bytes, checked against crc32c over the same bytes. --test-mode's TP check, with the
// world as one TP group: the ranks' own slices of split parameters may differ, their
// replicated parameters may not. Expert parameters are compared over the expert data-parallel
// group passed for them, not over the dense replicas.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "../common/checkpoint_fixture.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "kernels/elementwise.h"
#include "mpi_test_util.h"
#include "optim/replica_check.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

ParameterStore filled_store(float value) {
  ParameterStore store = testing::make_fixture_store(0, 1);
  kernels::fill(store.flat_values(), value);
  return store;
}

TEST(ReplicaCheck, IdenticalReplicasAgree) {
  auto world = test::world();
  ParameterStore store = filled_store(0.25f);
  EXPECT_NO_THROW(check_replicas_agree(store, *world, *world, 7));
  EXPECT_EQ(parameter_hash(store),
            crc32c(store.flat_values().raw_data(), store.flat_values().nbytes()));
}

TEST(ReplicaCheck, ADivergedReplicaIsNamedOnEveryRank) {
  auto world = test::world();
  if (world->size() < 2) GTEST_SKIP() << "needs two replicas";
  ParameterStore store = filled_store(0.25f);
  if (world->rank() == 1) store.flat_values().data<float>()[3] = 0.25000003f;  // one ulp
  try {
    check_replicas_agree(store, *world, *world, 12);
    ADD_FAILURE() << "no error for a replica that differs";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("at iteration 12 the parameters of data-parallel replica "
                                       "1 differ from replica 0's"));
  }
}

TEST(ReplicaCheck, TensorParallelRanksMustAgreeOnReplicatedParametersOnly) {
  auto world = test::world();
  if (world->size() < 2) GTEST_SKIP() << "needs two TP ranks";
  const std::vector<ParamSpec> specs = {{.name = "split", .full_shape = {8, 4}, .partition_dim = 0},
                                        {.name = "replicated", .full_shape = {4}}};
  ParameterStore store = testing::make_fixture_store(world->rank(), world->size(), specs);
  kernels::fill(store.flat_values(), 0.5f);
  store.get("split").value.data<float>()[0] = float(world->rank());  // each rank its own slice
  EXPECT_NO_THROW(check_tp_replicated_agree(store, *world, 3));
  if (world->rank() == 1) store.get("replicated").value.data<float>()[2] = 0.50000006f;
  try {
    check_tp_replicated_agree(store, *world, 4);
    ADD_FAILURE() << "no error for a TP rank whose replicated parameter differs";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--test-mode: at iteration 4 the replicated parameters"));
    EXPECT_THAT(e.message(), HasSubstr("tensor-parallel rank 1 differ from TP rank 0's"));
  }
}

TEST(ReplicaCheck, ExpertParametersAreComparedOverTheirOwnReplicas) {
  auto world = test::world();
  if (world->size() < 2) GTEST_SKIP() << "needs two replicas";
  // Every rank its own experts (expert parallelism over the world): the dense parameters agree
  // over the world, the expert ones only within each rank's own (singleton) edp group.
  ParamSpec expert{.name = "experts.weight", .full_shape = {world->size(), 3}, .expert = true};
  ParameterStore store(0, 1);
  store.set_expert_grid(world->rank(), world->size(), 0, 1);
  store.add({.name = "dense", .full_shape = {4}});
  store.add(expert);
  store.allocate();
  kernels::fill(store.flat_values(), 0.25f);
  kernels::fill(store.get("experts.weight").value, float(world->rank()));
  const std::unique_ptr<Communicator> own = world->split(world->rank(), 0);
  EXPECT_NO_THROW(check_replicas_agree(store, *world, *own, 5));
  EXPECT_NO_THROW(check_tp_replicated_agree(store, *world, 5));  // experts are not TP's
  try {
    check_replicas_agree(store, *world, *world, 6);
    ADD_FAILURE() << "no error for expert replicas that differ";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("the expert parameters of expert-data-parallel replica"));
  }
}

}  // namespace
}  // namespace megatron
