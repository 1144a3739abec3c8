// Checkpoint save/load under mpirun: round trips at every tensor-parallel size the world
// allows (with data-parallel replicas), resharding chains such as TP4 -> TP2 -> TP1 -> TP4,
// and the distributed optimizer's shards (every DP rank writes its own) loaded at every TP
// size, sharded or whole, every loaded element checked against the fixture's full tensors; and
// expert parameters saved at every expert grid (EP, and ETP other than TP) loaded at every other.
#include <unistd.h>

#include <filesystem>

#include "../common/checkpoint_fixture.h"
#include "checkpoint/async_save.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "distributed/parallel_state.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"
#include "mpi_test_util.h"
#include "optim/distributed_optimizer.h"
#include "parallel/full_tensors.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using namespace megatron::testing;

// A directory every rank agrees on (rank 0 names it), removed at the end of the test.
class SharedTempDir {
 public:
  SharedTempDir() {
    Tensor pid = Tensor::from_vector<int64_t>({int64_t(::getpid())}, {1});
    test::world()->broadcast(pid, 0);
    static int counter = 0;
    path_ =
        (fs::temp_directory_path() / ("megatron_ckpt_" + std::to_string(pid.data<int64_t>()[0]) +
                                      "_" + std::to_string(counter++)))
            .string();
    if (test::world_rank() == 0) fs::remove_all(path_);
    test::world()->barrier();
  }
  ~SharedTempDir() {
    test::world()->barrier();
    if (test::world_rank() == 0) fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Saves the fixture (values and optimizer buffers) at TP = `tp` into `dir` at `iteration`.
void save_fixture(const std::string& dir, int64_t iteration, int tp) {
  ParallelState ps = ParallelState::create(test::world(), tp, 1);
  ParameterStore store = make_fixture_store(ps.tp_rank, tp);
  fill_fixture(store, store.flat_values(), 0);
  auto optimizer = make_fixture_optimizer(store);
  fill_fixture_optimizer(store, optimizer);
  nlohmann::json state = {{"iteration", iteration}, {"saved_by_tp_rank", ps.tp_rank}};
  save_checkpoint(dir, iteration, store, optimizer, state, ps);
}

struct Loaded {
  int64_t value_mismatches = 0, optimizer_mismatches = 0;
  nlohmann::json state;
};

Loaded load_fixture(const std::string& dir, int64_t iteration, int tp) {
  ParallelState ps = ParallelState::create(test::world(), tp, 1);
  ParameterStore store = make_fixture_store(ps.tp_rank, tp);
  auto optimizer = make_fixture_optimizer(store);
  Loaded out;
  out.state = load_checkpoint(dir, iteration, store, &optimizer, ps);
  out.value_mismatches = count_fixture_mismatches(store, store.flat_values(), 0);
  out.optimizer_mismatches = count_fixture_optimizer_mismatches(store, optimizer);
  return out;
}

// Expert parameters on an expert grid (split over EP, their tensor split over an etp group of
// any size): a checkpoint saved at one (TP, EP, ETP) layout loads at any other, bit for bit —
// every rank's values and optimizer buffers equal its slices of a store initialised whole (the
// initialisation is layout-invariant, parallel/parameter.h), with the buffers derived from the
// values so that a mix-up between them shows.
struct ExpertStore {
  ParameterStore store;
  std::map<std::string, Tensor> optimizer;
};

struct ExpertGrid {
  int tp, ep, etp;
};

ExpertStore expert_store(const ParallelState& ps) {
  ExpertStore s{ParameterStore(ps.tp_rank, ps.tp_size), {}};
  s.store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
  s.store.add({.name = "dense.weight", .full_shape = {12, 3}, .partition_dim = 0});
  s.store.add({.name = "experts.linear_fc1.weight",
               .full_shape = {4, 12, 3},
               .partition_dim = 1,
               .expert = true});
  s.store.add({.name = "experts.linear_fc2.weight",
               .full_shape = {4, 3, 8},
               .partition_dim = 2,
               .expert = true});
  s.store.add({.name = "experts.linear_fc2.bias", .full_shape = {4, 3}, .expert = true});
  s.store.allocate();
  return s;
}

void fill_expert_store(ExpertStore& s) {
  for (Parameter& p : s.store.params()) init_normal(p, 77, 0.5f);
  Tensor m = s.store.flat_values().clone();
  kernels::scale(m, 3.0f);
  s.optimizer["exp_avg"] = m;
}

ParallelState expert_grid_state(const ExpertGrid& g) {
  return ParallelState::create(test::world(), g.tp, 1, RankOrder::kTpDpPp, 1, 0, g.ep, g.etp);
}

// Saves (with `async`, --async-save's: the experts gathered when it starts, the gathered
// snapshot written in the background) at every expert grid of the world, each loaded at every
// other: EP 1, 2, 4 with the experts split like the dense layers, and ETP other than TP (ETP 1
// at TP 2 with and without EP, ETP 2 at TP 1 with and without EP, ETP 1 at TP 4).
void check_expert_parallel_checkpoints(bool async) {
  const int n = test::world_size();
  ExpertStore reference =
      expert_store(ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1));
  fill_expert_store(reference);
  std::vector<ExpertGrid> grids;
  for (const ExpertGrid g : {ExpertGrid{1, 1, 1}, ExpertGrid{1, 2, 1}, ExpertGrid{1, 4, 1},
                             ExpertGrid{2, 1, 1}, ExpertGrid{2, 2, 1}, ExpertGrid{1, 1, 2},
                             ExpertGrid{1, 2, 2}, ExpertGrid{2, 2, 2}, ExpertGrid{4, 1, 1}})
    if (n % g.tp == 0 && n % (g.ep * g.etp) == 0) grids.push_back(g);
  for (const ExpertGrid& save : grids)
    for (const ExpertGrid& load : grids) {
      SCOPED_TRACE(::testing::Message()
                   << "saved at TP " << save.tp << " EP " << save.ep << " ETP " << save.etp
                   << ", loaded at TP " << load.tp << " EP " << load.ep << " ETP " << load.etp);
      SharedTempDir dir;
      {
        ParallelState ps = expert_grid_state(save);
        ExpertStore saved = expert_store(ps);
        fill_expert_store(saved);
        if (async) {
          AsyncCheckpointSave save(dir.path(), 2, saved.store, saved.optimizer, {{"iteration", 2}},
                                   ps, OptimizerShard{});
          // Training goes on while the writer writes: the files hold the snapshot.
          kernels::scale(saved.store.flat_values(), 0.0f);
          kernels::scale(saved.optimizer["exp_avg"], 0.0f);
          ASSERT_TRUE(save.try_commit(/*wait=*/true, [] {}));
        } else {
          save_checkpoint(dir.path(), 2, saved.store, saved.optimizer, {{"iteration", 2}}, ps);
        }
      }
      ParallelState ps = expert_grid_state(load);
      ExpertStore loaded = expert_store(ps);
      loaded.optimizer["exp_avg"] = Tensor::zeros({loaded.store.flat_values().numel()}, DType::F32);
      load_checkpoint(dir.path(), -1, loaded.store, &loaded.optimizer, ps);
      for (const Parameter& p : loaded.store.params()) {
        const Parameter& r = reference.store.get(p.spec.name);
        const Tensor want_m =
            reference.optimizer["exp_avg"]
                .slice(0, r.flat_offset, r.flat_offset + shape_numel(r.local_shape))
                .view(r.local_shape);
        EXPECT_EQ(p.value.to_vector<float>(), local_slice(p, r.value).clone().to_vector<float>())
            << p.spec.name;
        EXPECT_EQ(loaded.optimizer["exp_avg"]
                      .slice(0, p.flat_offset, p.flat_offset + shape_numel(p.local_shape))
                      .to_vector<float>(),
                  local_slice(p, want_m).clone().to_vector<float>())
            << p.spec.name;
      }
    }
}

TEST(CheckpointDist, ExpertParallelCheckpointsLoadAtEveryExpertParallelSize) {
  check_expert_parallel_checkpoints(/*async=*/false);
}

TEST(CheckpointDist, ExpertParallelAsyncSavesLoadAtEveryExpertParallelSize) {
  check_expert_parallel_checkpoints(/*async=*/true);
}

TEST(CheckpointDist, RoundTripAtEveryTensorParallelSize) {
  for (int tp : {1, 2, 4}) {
    if (test::world_size() % tp != 0) continue;
    SCOPED_TRACE(::testing::Message() << "tp=" << tp);
    SharedTempDir dir;
    save_fixture(dir.path(), 7, tp);
    Loaded got = load_fixture(dir.path(), -1, tp);
    EXPECT_EQ(got.value_mismatches, 0);
    EXPECT_EQ(got.optimizer_mismatches, 0);
    ParallelState ps = ParallelState::create(test::world(), tp, 1);
    EXPECT_EQ(got.state["iteration"], 7);
    EXPECT_EQ(got.state["saved_by_tp_rank"], ps.tp_rank);  // each rank gets its own state
    EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(7));
    std::vector<RankDir> dirs = list_rank_dirs(dir.path() + "/iter_0000007");
    EXPECT_EQ(int(dirs.size()), tp);
  }
}

TEST(CheckpointDist, ReshardingChainReproducesTheFullTensors) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  // World 4: 4 -> 2 -> 1 -> 4; world 2: 2 -> 1 -> 2. Each step loads the previous step's
  // checkpoint at a new TP size, checks it against the fixture, and saves it again.
  std::vector<int> chain =
      test::world_size() == 4 ? std::vector<int>{4, 2, 1, 4} : std::vector<int>{2, 1, 2};
  SharedTempDir dir;
  save_fixture(dir.path() + "/step0", 1, chain[0]);
  for (size_t i = 1; i < chain.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "TP" << chain[i - 1] << " -> TP" << chain[i]);
    const int tp = chain[i];
    ParallelState ps = ParallelState::create(test::world(), tp, 1);
    ParameterStore store = make_fixture_store(ps.tp_rank, tp);
    auto optimizer = make_fixture_optimizer(store);
    nlohmann::json state =
        load_checkpoint(dir.path() + "/step" + std::to_string(i - 1), -1, store, &optimizer, ps);
    EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
    EXPECT_EQ(count_fixture_optimizer_mismatches(store, optimizer), 0);
    EXPECT_EQ(state["iteration"], 1);
    save_checkpoint(dir.path() + "/step" + std::to_string(i), 1, store, optimizer, state, ps);
  }
}

TEST(CheckpointDist, FailureOnOneRankFailsEveryRankAndKeepsThePreviousCheckpoint) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  SharedTempDir dir;
  const int tp = 2;
  save_fixture(dir.path(), 3, tp);
  ParallelState ps = ParallelState::create(test::world(), tp, 1);
  ParameterStore store = make_fixture_store(ps.tp_rank, tp);
  std::map<std::string, Tensor> optimizer = make_fixture_optimizer(store);
  if (ps.tp_rank == 1) optimizer["exp_avg"] = Tensor::zeros({3}, DType::F32);  // wrong size
  EXPECT_THROW(save_checkpoint(dir.path(), 4, store, optimizer, {}, ps), Error);
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(3));
  test::world()->barrier();
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir.path()))
    leftovers += e.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_EQ(leftovers, 0);
  Loaded got = load_fixture(dir.path(), -1, tp);
  EXPECT_EQ(got.value_mismatches, 0);
}

TEST(CheckpointDist, DistributedOptimizerShardsLoadAtEveryLayoutShardedOrWhole) {
  for (int tp : {1, 2}) {
    if (test::world_size() % tp != 0) continue;
    SCOPED_TRACE(::testing::Message() << "saved at tp=" << tp);
    SharedTempDir dir;
    {
      ParallelState ps = ParallelState::create(test::world(), tp, 1);
      ParameterStore store = make_fixture_store(ps.tp_rank, tp);
      fill_fixture(store, store.flat_values(), 0);
      const FlatRange range =
          DpShard::of(store.flat_values().numel(), ps.dp_size, ps.dp_rank).range;
      auto optimizer = make_fixture_optimizer(store, range);
      fill_fixture_optimizer(store, optimizer, range);
      save_checkpoint(dir.path(), 5, store, optimizer, {{"iteration", 5}}, ps,
                      {range, ps.dp_rank, ps.dp_size});
      const std::string rank_dir = dir.path() + "/iter_0000005/" + rank_dir_name(ps.tp_rank, 0, 1);
      EXPECT_EQ(optimizer_files(rank_dir).size(), size_t(ps.dp_size));
      EXPECT_EQ(fs::exists(rank_dir + "/optimizer.safetensors"), ps.dp_size == 1);
    }
    for (int load_tp : {1, 2, 4}) {
      if (test::world_size() % load_tp != 0) continue;
      for (bool sharded : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "loaded at tp=" << load_tp << (sharded ? " sharded" : ""));
        ParallelState ps = ParallelState::create(test::world(), load_tp, 1);
        ParameterStore store = make_fixture_store(ps.tp_rank, load_tp);
        const FlatRange range =
            sharded ? DpShard::of(store.flat_values().numel(), ps.dp_size, ps.dp_rank).range
                    : FlatRange{};
        auto optimizer = make_fixture_optimizer(store, range);
        load_checkpoint(dir.path(), -1, store, &optimizer, ps, range);
        EXPECT_EQ(count_fixture_mismatches(store, store.flat_values(), 0), 0);
        EXPECT_EQ(count_fixture_optimizer_mismatches(store, optimizer, range), 0);
      }
    }
  }
}

// The fixture's parameters split over two pipeline stages: embeddings and the QKV projection
// on stage 0, the rest on stage 1.
std::vector<ParamSpec> stage_specs(int pp_rank) {
  std::vector<ParamSpec> out;
  for (const ParamSpec& s : fixture_specs()) {
    const bool first =
        s.name.rfind("embedding.", 0) == 0 || s.name.find("query_key_value") != std::string::npos;
    if (first == (pp_rank == 0)) out.push_back(s);
  }
  return out;
}

TEST(CheckpointDist, PipelineLayoutSavesPerStageAndLoadsIntoTheWholeModel) {
  SKIP_UNLESS_WORLD_SIZE(4);
  SharedTempDir dir;
  {
    ParallelState ps = ParallelState::create(test::world(), 2, 2);
    ParameterStore store = make_fixture_store(ps.tp_rank, 2, stage_specs(ps.pp_rank));
    fill_fixture(store, store.flat_values(), 0);
    save_checkpoint(dir.path(), 2, store, {}, {{"pp_rank", ps.pp_rank}}, ps);
  }
  std::vector<RankDir> dirs = list_rank_dirs(dir.path() + "/iter_0000002");
  ASSERT_EQ(dirs.size(), 4u);
  EXPECT_EQ(fs::path(dirs[3].path).filename(), "mp_rank_01_001");
  EXPECT_EQ(dirs[3].tp_rank, 1);
  EXPECT_EQ(dirs[3].pp_rank, 1);

  // Back into the same stages (other stages' parameters are not "extra" there) ...
  ParallelState pp2 = ParallelState::create(test::world(), 2, 2);
  ParameterStore stage = make_fixture_store(pp2.tp_rank, 2, stage_specs(pp2.pp_rank));
  nlohmann::json state = load_checkpoint(dir.path(), -1, stage, nullptr, pp2);
  EXPECT_EQ(count_fixture_mismatches(stage, stage.flat_values(), 0), 0);
  EXPECT_EQ(state["pp_rank"], pp2.pp_rank);
  // ... and into the whole model at TP 4, PP 1.
  ParallelState tp4 = ParallelState::create(test::world(), 4, 1);
  ParameterStore whole = make_fixture_store(tp4.tp_rank, 4);
  load_checkpoint(dir.path(), -1, whole, nullptr, tp4);
  EXPECT_EQ(count_fixture_mismatches(whole, whole.flat_values(), 0), 0);
}

}  // namespace
}  // namespace megatron
