// Pipeline schedules (pipeline/schedule.h): hand-derived orders for small cases, the invariants
// every schedule must hold (each forward and backward once, backward after forward, bounded
// in-flight micro-batches) and deadlock freedom of all ranks' schedules together, by simulating
// the executor's rule — an operation runs once its input has been sent; sends never wait — for
// p ∈ {2, 4}, m ∈ {1, p, 3p}, with and without interleaving, and with the interleaved
// schedule's micro-batch groups larger than p (--microbatch-group-size-per-virtual-pipeline-stage).
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace megatron {
namespace {

std::string names(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops) {
    if (!s.empty()) s += ' ';
    s += op_name(op);
  }
  return s;
}

TEST(PipelineSchedule, NoPipeliningAlternates) {
  EXPECT_EQ(names(no_pipelining_schedule(3)), "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2");
}

TEST(PipelineSchedule, OneFOneBWarmsUpByTheStagesAfterIt) {
  // p = 2: rank 0 runs one forward ahead, rank 1 (the last) none.
  EXPECT_EQ(names(one_f_one_b_schedule(2, 0, 4)), "F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3");
  EXPECT_EQ(names(one_f_one_b_schedule(2, 1, 4)), "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3");
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(names(one_f_one_b_schedule(4, 0, 2)), "F0.0 F0.1 B0.0 B0.1");
}

TEST(PipelineSchedule, InterleavedGoesChunkByChunkInGroupsOfP) {
  // p = 2, v = 2, m = 4, rank 0: warm-up 2·(p − 1) + (v − 1)·p = 4 forwards: micro-batches 0, 1
  // on chunk 0, then on chunk 1; backwards start from the last chunk.
  EXPECT_EQ(names(interleaved_schedule(2, 0, 2, 4)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3");
  // m = p: everything is warm-up.
  EXPECT_EQ(names(interleaved_schedule(2, 1, 2, 2)), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
}

// The forwards of rank 0 in groups of g micro-batches: Megatron-LM's documented table for
// p = 2, v = 2, g = 3, m = 5 (micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1),
// the last group taking the 2 that remain; backwards in the same order, chunks reversed.
TEST(PipelineSchedule, InterleavedGroupsOfG) {
  std::vector<std::string> forwards, backwards;
  for (const PipelineOp& op : interleaved_schedule(2, 0, 2, 5, 3))
    (op.kind == PipelineOp::kForward ? forwards : backwards).push_back(op_name(op));
  EXPECT_THAT(forwards, ::testing::ElementsAre("F0.0", "F0.1", "F0.2", "F1.0", "F1.1", "F1.2",
                                               "F0.3", "F0.4", "F1.3", "F1.4"));
  EXPECT_THAT(backwards, ::testing::ElementsAre("B1.0", "B1.1", "B1.2", "B0.0", "B0.1", "B0.2",
                                                "B1.3", "B1.4", "B0.3", "B0.4"));
  // Warm-up 2·(p − r − 1) + (v − 1)·g = 5 forwards on rank 0, 3 on rank 1.
  EXPECT_EQ(names(interleaved_schedule(2, 1, 2, 5, 3)),
            "F0.0 F0.1 F0.2 F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F0.3 B0.0 F0.4 B0.1 F1.3 B0.2 F1.4 "
            "B1.3 B1.4 B0.3 B0.4");
  // g = p is the default.
  EXPECT_EQ(interleaved_schedule(2, 0, 2, 4, 2), interleaved_schedule(2, 0, 2, 4));
}

// Megatron-LM's rules for the group size: p <= g <= m, and a last group of 0 or >= p.
TEST(PipelineSchedule, InterleavedGroupSizeRules) {
  auto message = [](int p, int64_t m, int64_t g) {
    try {
      check_interleaved_micro_batches(p, m, g);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(2, 5, 3), "accepted");
  EXPECT_EQ(message(4, 10, 5), "accepted");  // Megatron's tunable_overlap CI config
  EXPECT_EQ(message(2, 6, 6), "accepted");
  EXPECT_THAT(message(4, 10, 3),
              ::testing::HasSubstr("--microbatch-group-size-per-virtual-pipeline-stage 3 must "
                                   "lie between --pipeline-model-parallel-size 4 and the "
                                   "number of micro-batches (10"));
  EXPECT_THAT(message(2, 4, 5), ::testing::HasSubstr("must lie between"));
  EXPECT_THAT(message(4, 9, 4), ::testing::HasSubstr("leaves a last group of 1, fewer than "
                                                     "--pipeline-model-parallel-size 4"));
  EXPECT_THAT(message(4, 6, 0), ::testing::HasSubstr("multiple of --pipeline-model-parallel-size"));
}

TEST(PipelineSchedule, InterleavedNeedsAMultipleOfPMicroBatches) {
  try {
    interleaved_schedule(4, 0, 2, 6);
    FAIL() << "6 micro-batches accepted for 4 pipeline ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("multiple of --pipeline-model-parallel-size 4"));
  }
}

// Runs the p ranks' schedules as the executor would and returns the operations each rank
// completed; fails the test on a deadlock (no rank can move and some have not finished).
std::vector<std::vector<PipelineOp>> simulate(int p, int v, int64_t m,
                                              const std::vector<std::vector<PipelineOp>>& ops) {
  // Messages sent and not yet consumed: (is_gradient, receiving rank, chunk, micro-batch).
  std::set<std::tuple<bool, int, int, int64_t>> sent;
  std::vector<size_t> next(size_t(p), 0);
  std::vector<std::vector<PipelineOp>> done(static_cast<size_t>(p));
  const int last_rank = p - 1;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      if (next[size_t(r)] == ops[size_t(r)].size()) continue;
      const PipelineOp op = ops[size_t(r)][next[size_t(r)]];
      const bool first_stage = op.chunk == 0 && r == 0;
      const bool last_stage = op.chunk == v - 1 && r == last_rank;
      const bool backward = op.kind == PipelineOp::kBackward;
      const bool needs_input = backward ? !last_stage : !first_stage;
      const auto input = std::make_tuple(backward, r, op.chunk, op.micro_batch);
      if (needs_input && sent.count(input) == 0) continue;  // blocked in a receive
      sent.erase(input);
      if (!backward && !last_stage)
        sent.insert({false, (r + 1) % p, r == last_rank ? op.chunk + 1 : op.chunk, op.micro_batch});
      if (backward && !first_stage)
        sent.insert({true, (r + p - 1) % p, r == 0 ? op.chunk - 1 : op.chunk, op.micro_batch});
      done[size_t(r)].push_back(op);
      ++next[size_t(r)];
      moved = true;
    }
  }
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(next[size_t(r)], ops[size_t(r)].size())
        << "deadlock: rank " << r << " stuck before "
        << (next[size_t(r)] < ops[size_t(r)].size() ? op_name(ops[size_t(r)][next[size_t(r)]])
                                                    : "the end")
        << " (p=" << p << ", v=" << v << ", m=" << m << ")";
  EXPECT_TRUE(sent.empty()) << "messages nobody received";
  return done;
}

// Each (chunk, micro-batch) forward once, its backward once after it (when `backward`); returns
// the largest number of micro-batches alive (forward done, backward not yet) at once.
int64_t check_complete(const std::vector<PipelineOp>& ops, int v, int64_t m, bool backward) {
  std::map<std::pair<int, int64_t>, int> state;  // 1: forward done, 2: backward done
  int64_t alive = 0, peak = 0;
  for (const PipelineOp& op : ops) {
    int& s = state[{op.chunk, op.micro_batch}];
    if (op.kind == PipelineOp::kForward) {
      EXPECT_EQ(s, 0) << op_name(op) << " twice";
      s = 1;
      peak = std::max(peak, ++alive);
    } else {
      EXPECT_EQ(s, 1) << op_name(op) << " without (or twice after) its forward";
      s = 2;
      --alive;
    }
  }
  EXPECT_EQ(int64_t(state.size()), v * m);
  for (const auto& [key, s] : state) EXPECT_EQ(s, backward ? 2 : 1);
  return peak;
}

TEST(PipelineSchedule, EveryLayoutCompletesWithoutDeadlock) {
  for (int p : {2, 4})
    for (int v : {1, 2, 3})
      for (int64_t m : {int64_t(1), int64_t(p), int64_t(3 * p), int64_t(3 * p + 1)})
        for (int64_t g : {int64_t(0), int64_t(p + 1), int64_t(2 * p), m}) {
          if (v == 1 && g != 0) continue;  // the group is the interleaved schedule's
          try {
            if (v > 1) check_interleaved_micro_batches(p, m, g);
          } catch (const Error&) {
            continue;  // counts Megatron-LM refuses
          }
          SCOPED_TRACE(::testing::Message() << "p=" << p << " v=" << v << " m=" << m << " g=" << g);
          std::vector<std::vector<PipelineOp>> ops;
          for (int r = 0; r < p; ++r) ops.push_back(training_schedule(p, r, v, m, g));
          simulate(p, v, m, ops);
          for (int r = 0; r < p; ++r) {
            const int64_t peak = check_complete(ops[size_t(r)], v, m, true);
            // 1F1B's memory bound: rank r holds at most p − r micro-batches (Narayanan et al.).
            if (v == 1) {
              EXPECT_LE(peak, std::min<int64_t>(p - r, m)) << "rank " << r;
            }
          }
          std::vector<std::vector<PipelineOp>> eval;
          for (int r = 0; r < p; ++r) eval.push_back(forward_only_schedule(v, m));
          simulate(p, v, m, eval);
          for (int r = 0; r < p; ++r) check_complete(eval[size_t(r)], v, m, false);
        }
}

// The check can fail: rank 0 waiting for a gradient that rank 1 never sends is reported.
TEST(PipelineSchedule, SimulationDetectsADeadlock) {
  const std::vector<std::vector<PipelineOp>> stuck = {{{PipelineOp::kBackward, 0, 0}}, {}};
  EXPECT_NONFATAL_FAILURE(simulate(2, 1, 1, stuck), "deadlock: rank 0 stuck before B0.0");
}

}  // namespace
}  // namespace megatron
