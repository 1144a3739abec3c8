// Distributed-optimizer checkpoints in one process: each data-parallel rank's shard of the
// optimizer state in its own file (written offline here, as save_checkpoint's DP ranks write
// them), loaded at other TP sizes, sharded at other DP sizes or whole; a load reads and
// checksums only the pieces that overlap what it holds; a missing shard file is named; and
// checkpoints with whole optimizer buffers load into shards. Every element is checked against
// the fixture's full tensors (tests/common/checkpoint_fixture.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/checkpoint_fixture.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "distributed/solo_communicator.h"
#include "optim/distributed_optimizer.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace megatron::testing;

// The fixture at TP = `tp`; the optimizer state in `dp` shards per rank (dp 1: whole buffers).
void save_sharded(const std::string& dir, int tp, int dp) {
  CheckpointTransaction t(dir, 3, 7);
  for (int r = 0; r < tp; ++r) {
    ParameterStore store = make_fixture_store(r, tp);
    fill_fixture(store, store.flat_values(), 0);
    const RankCoordinates coords{r, tp, 0, 1};
    std::map<std::string, Tensor> whole;
    if (dp == 1) {
      whole = make_fixture_optimizer(store);
      fill_fixture_optimizer(store, whole);
    }
    write_checkpoint_rank(t.path(), 3, store, whole, {{"iteration", 3}}, coords);
    for (int d = 0; dp > 1 && d < dp; ++d) {
      const FlatRange range = DpShard::of(store.flat_values().numel(), dp, d).range;
      auto shard = make_fixture_optimizer(store, range);
      fill_fixture_optimizer(store, shard, range);
      write_optimizer_shard(t.path() + "/" + rank_dir_name(r, 0, 1), 3, store, shard,
                            {range, d, dp}, coords);
    }
  }
  t.commit();
}

struct Loaded {
  int64_t value_mismatches = 0, optimizer_mismatches = 0;
};

// Loads TP rank `tp_rank` of `tp` holding DP shard `dp_rank` of `dp` of the optimizer state.
Loaded load_shard(const std::string& dir, int tp_rank, int tp, int dp_rank, int dp) {
  ParameterStore store = make_fixture_store(tp_rank, tp);
  const FlatRange range = DpShard::of(store.flat_values().numel(), dp, dp_rank).range;
  auto buffers = make_fixture_optimizer(store, range);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  check_checkpoint_matches(reader, store, true);
  read_parameters(reader, store, &buffers, {}, range);
  return {count_fixture_mismatches(store, store.flat_values(), 0),
          count_fixture_optimizer_mismatches(store, buffers, range)};
}

TEST(CheckpointOptimizerShards, EachDataParallelRankWritesItsOwnShardFile) {
  TempDir dir;
  save_sharded(dir.path(), 2, 3);
  for (const char* rank : {"mp_rank_00", "mp_rank_01"}) {
    const std::string rank_dir = dir.file(std::string("iter_0000003/") + rank);
    EXPECT_FALSE(fs::exists(rank_dir + "/optimizer.safetensors"));
    EXPECT_EQ(optimizer_files(rank_dir),
              (std::vector<std::string>{rank_dir + "/optimizer_dp000_of_003.safetensors",
                                        rank_dir + "/optimizer_dp001_of_003.safetensors",
                                        rank_dir + "/optimizer_dp002_of_003.safetensors"}));
  }
}

TEST(CheckpointOptimizerShards, LoadAtEveryTensorAndDataParallelLayout) {
  for (const int saved_dp : {1, 3}) {
    TempDir dir;
    save_sharded(dir.path(), 2, saved_dp);
    for (const int tp : {1, 2, 4})
      for (const int dp : {1, 2, 4})
        for (int tp_rank = 0; tp_rank < tp; ++tp_rank)
          for (int dp_rank = 0; dp_rank < dp; ++dp_rank) {
            SCOPED_TRACE(::testing::Message()
                         << "saved TP 2 DP " << saved_dp << ", loaded TP rank " << tp_rank << " of "
                         << tp << ", DP shard " << dp_rank << " of " << dp);
            const Loaded got = load_shard(dir.path(), tp_rank, tp, dp_rank, dp);
            EXPECT_EQ(got.value_mismatches, 0);
            EXPECT_EQ(got.optimizer_mismatches, 0);
          }
  }
}

TEST(CheckpointOptimizerShards, ALoadReadsOnlyThePiecesThatOverlapIt) {
  TempDir dir;
  save_sharded(dir.path(), 2, 3);
  const std::string damaged =
      dir.file("iter_0000003/mp_rank_01/optimizer_dp001_of_003.safetensors");
  flip_byte(damaged, 3);
  // TP rank 0 reads its own slices and the replicated tensors from mp_rank_00 only.
  const Loaded rank0 = load_shard(dir.path(), 0, 2, 0, 1);
  EXPECT_EQ(rank0.optimizer_mismatches, 0);
  try {
    load_shard(dir.path(), 1, 2, 0, 1);
    ADD_FAILURE() << "the damaged shard was not detected";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("checkpoint file '" + damaged + "' is corrupt"));
  }
}

TEST(CheckpointOptimizerShards, AMissingShardFileIsNamed) {
  TempDir dir;
  save_sharded(dir.path(), 1, 4);
  fs::remove(dir.file("iter_0000003/mp_rank_00/optimizer_dp002_of_004.safetensors"));
  try {
    load_shard(dir.path(), 0, 1, 0, 1);
    ADD_FAILURE() << "the missing shard was not detected";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("lacks 1 of its 4 distributed-optimizer shard files: "
                                       "optimizer_dp002_of_004.safetensors"));
  }
}

}  // namespace
}  // namespace megatron
