// The rerun state machine's decisions (train/rerun_state_machine.h), one process: which
// iterations run again, the verdicts (transient, persistent, correct), the exit codes, the
// checkpointed state that a restarted job continues from, the injected faults, the tracker
// file and the iterations it makes the next job skip. Expected values are Megatron-Core's
// (megatron/core/rerun_state_machine.py), written out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../common/temp_dir.h"
#include "core/error.h"
#include "train/rerun_error_injector.h"
#include "train/rerun_state_machine.h"
#include "train/rerun_tracker.h"

namespace megatron {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::string kLayout = "tp1 cp1 pp1 dp1";

bool is_nan(double v) {
  return std::isnan(v);
}

// A machine on one rank (node `node`), counting its save/restore callbacks.
struct Harness {
  int saves = 0, restores = 0;
  std::unique_ptr<RerunStateMachine> m;

  explicit Harness(RerunConfig config, const std::string& node = "node-a") {
    m = std::make_unique<RerunStateMachine>(
        std::move(config), RerunPlacement{0, {node}, {"cpu"}}, [this] { ++saves; },
        [this] { ++restores; });
  }

  // Runs iteration `iteration`: its k-th (re)run computes results[k] (the last one again
  // if it runs more often), checked for NaN (fatal) or by `rejected`. Returns the number of
  // forward/backward runs and the exit decision.
  std::pair<int, RerunExit> iterate(int64_t iteration, std::vector<double> results,
                                    bool fatal = true, const RejectionFunc& rejected = is_nan) {
    int runs = 0;
    while (m->should_run_forward_backward({iteration, (iteration - 1) * 8, 8})) {
      const double r = results[std::min<size_t>(size_t(runs), results.size() - 1)];
      ++runs;
      m->validate_result(r, rejected, "found NaN in the lm loss", 0.0, fatal);
      EXPECT_LE(runs, 2) << "an iteration runs at most twice";
      if (runs > 2) break;
    }
    return {runs, m->should_checkpoint_and_exit()};
  }
};

RerunConfig validate(const std::string& tracker = "") {
  RerunConfig c;
  c.mode = RerunMode::kValidateResults;
  c.tracker_file = tracker;
  c.seed = 1234;
  return c;
}

RerunConfig injecting(RerunDiagnostic type, const std::string& tracker = "") {
  RerunConfig c = validate(tracker);
  c.error_injection_rate = 1;  // every validation draws a fault
  c.error_injection_type = type;
  return c;
}

std::vector<std::string> lines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(RerunStateMachine, ModeAndTypeNamesAreMegatrons) {
  EXPECT_EQ(rerun_mode_from_name("validate_results"), RerunMode::kValidateResults);
  EXPECT_EQ(rerun_mode_from_name("report_determinism_stats"), RerunMode::kReportDeterminismStats);
  EXPECT_EQ(rerun_mode_from_name("disabled"), RerunMode::kDisabled);
  EXPECT_EQ(rerun_diagnostic_from_name("persistent_error"), RerunDiagnostic::kPersistentError);
  try {
    rerun_mode_from_name("validate");
    FAIL() << "accepted an unknown mode";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rerun-mode must be disabled, validate_results or "
                                         "report_determinism_stats, got 'validate'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rerun_diagnostic_from_name("transient"), Error);
  EXPECT_EQ(kExitResumeToDisambiguate, 16);
  EXPECT_EQ(kExitFailedOnResultValidation, 17);
}

TEST(RerunStateMachine, DisabledChecksButNeverReruns) {
  testing::TempDir dir;
  const std::string tracker = dir.file("tracker.txt");
  RerunConfig c;
  c.tracker_file = tracker;
  Harness h(c);
  for (int64_t it = 1; it <= 3; ++it) {
    const auto [runs, stop] = h.iterate(it, {kNaN});
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(stop.exit);
  }
  EXPECT_EQ(h.saves, 0);
  EXPECT_EQ(h.restores, 0);
  // Every rejection is recorded (the divergence guard stops the run, not the machine).
  ASSERT_EQ(lines(tracker).size(), 3u);
  EXPECT_NE(lines(tracker)[0].find(" rank=0 iteration=1 status=rerun_disabled result=nan "
                                   "message='found NaN in the lm loss' samples=0..7"),
            std::string::npos)
      << lines(tracker)[0];
  EXPECT_TRUE(h.m->state_json(kLayout).is_null()) << "nothing to checkpoint when disabled";
}

TEST(RerunStateMachine, GoodResultsRunOnceAndTheFirstIterationIsNotValidated) {
  Harness h(validate());
  // The job's first iteration: a NaN is not validated (no checkpoint could be taken yet).
  auto [runs, stop] = h.iterate(1, {kNaN});
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(stop.exit);
  for (int64_t it = 2; it <= 4; ++it) {
    std::tie(runs, stop) = h.iterate(it, {2.5});
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(stop.exit);
  }
  EXPECT_EQ(h.saves, 4) << "the state is recorded before every iteration";
  EXPECT_EQ(h.restores, 0);
}

TEST(RerunStateMachine, ReproducibleFatalResultCheckpointsThenACorrectVerdictElsewhere) {
  testing::TempDir dir;
  const std::string tracker = dir.file("tracker.txt");
  nlohmann::json saved;
  {
    Harness h(validate(tracker));
    h.iterate(1, {3.0});
    const auto [runs, stop] = h.iterate(2, {kNaN, kNaN});
    EXPECT_EQ(runs, 2) << "a rejected result is re-run in place";
    EXPECT_EQ(h.restores, 2) << "before the re-run, and after it for the checkpoint";
    EXPECT_TRUE(stop.checkpoint);
    EXPECT_TRUE(stop.exit);
    EXPECT_EQ(stop.code, kExitResumeToDisambiguate);
    EXPECT_EQ(h.m->state(), RerunState::kWillRerunFromCheckpoint);
    saved = h.m->state_json(kLayout);
  }
  // Restarted on the same node: restart again, without a new checkpoint.
  {
    Harness h(validate(tracker));
    h.m->load_state_json(saved, kLayout);
    const auto [runs, stop] = h.iterate(2, {kNaN});
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(stop.checkpoint);
    EXPECT_TRUE(stop.exit);
    EXPECT_EQ(stop.code, kExitResumeToDisambiguate);
  }
  // Restarted elsewhere: the same result again, so it was correct; fatal: exit 17.
  {
    Harness h(validate(tracker), "node-b");
    h.m->load_state_json(saved, kLayout);
    const auto [runs, stop] = h.iterate(2, {kNaN});
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(stop.checkpoint);
    EXPECT_TRUE(stop.exit);
    EXPECT_EQ(stop.code, kExitFailedOnResultValidation);
  }
  const std::vector<std::string> records = lines(tracker);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NE(records[0].find("node=node-a device=cpu jobID="), std::string::npos) << records[0];
  EXPECT_NE(records[0].find("iteration=2 status=initial_run result=nan"), std::string::npos);
  EXPECT_NE(records[1].find("iteration=2 status=first_rerun_reproducible"), std::string::npos);
  EXPECT_NE(records[2].find("iteration=2 status=second_rerun_reproducible"), std::string::npos);
  EXPECT_NE(records[2].find("samples=8..15"), std::string::npos) << "names the batch";
  // The data is at fault: the next job skips the iteration.
  EXPECT_EQ(iterations_to_skip_from_tracker(tracker), std::vector<int64_t>{2});
}

TEST(RerunStateMachine, IrreproducibleResultIsTransient) {
  // Fatal: exit 17, nothing saved (resume from the previous checkpoint).
  Harness fatal(validate());
  fatal.iterate(1, {1.0});
  const auto reject_first = [](double v) { return v == 7.0; };
  auto [runs, stop] = fatal.iterate(2, {7.0, 2.0}, true, reject_first);
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(stop.exit);
  EXPECT_FALSE(stop.checkpoint);
  EXPECT_EQ(stop.code, kExitFailedOnResultValidation);
  // Not fatal: training continues with the re-run's result.
  Harness lenient(validate());
  lenient.iterate(1, {1.0});
  std::tie(runs, stop) = lenient.iterate(2, {7.0, 2.0}, false, reject_first);
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(stop.exit);
  EXPECT_EQ(lenient.m->state(), RerunState::kNotRunningYet);
  std::tie(runs, stop) = lenient.iterate(3, {2.0}, false, reject_first);
  EXPECT_EQ(runs, 1);
}

TEST(RerunStateMachine, InjectedTransientErrorExits17) {
  Harness h(injecting(RerunDiagnostic::kTransientError));
  h.iterate(1, {1.0});  // never injected: not validated
  const auto [runs, stop] = h.iterate(2, {1.0, 1.0});
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(stop.exit);
  EXPECT_FALSE(stop.checkpoint);
  EXPECT_EQ(stop.code, kExitFailedOnResultValidation);
}

TEST(RerunStateMachine, InjectedPersistentErrorIsAttributedToTheDevice) {
  testing::TempDir dir;
  const std::string tracker = dir.file("tracker.txt");
  Harness first(injecting(RerunDiagnostic::kPersistentError, tracker));
  first.iterate(1, {1.0});
  auto [runs, stop] = first.iterate(2, {1.0, 1.0});
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(stop.checkpoint);
  EXPECT_EQ(stop.code, kExitResumeToDisambiguate);
  const nlohmann::json saved = first.m->state_json(kLayout);
  EXPECT_EQ(saved["error_injector"]["injected_error_type"], "persistent_error");
  // The restarted job (on another node) runs without the injection flags: the pending
  // injection comes from the checkpoint.
  Harness second(validate(tracker), "node-b");
  second.m->load_state_json(saved, kLayout);
  std::tie(runs, stop) = second.iterate(2, {1.0});
  EXPECT_TRUE(stop.exit);
  EXPECT_EQ(stop.code, kExitFailedOnResultValidation);
  const std::vector<std::string> records = lines(tracker);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NE(records[2].find("status=second_rerun_not_reproducible"), std::string::npos);
  // A device fault: the data is fine, nothing is skipped.
  EXPECT_TRUE(iterations_to_skip_from_tracker(tracker).empty());
}

TEST(RerunStateMachine, InjectedFaultIntoANonFatalCheckContinues) {
  for (RerunDiagnostic type : {RerunDiagnostic::kCorrectResult, RerunDiagnostic::kTransientError,
                               RerunDiagnostic::kPersistentError}) {
    Harness h(injecting(type));
    h.iterate(1, {1.0}, false);
    const auto [runs, stop] = h.iterate(2, {1.0, 1.0}, false);
    EXPECT_EQ(runs, 2) << rerun_diagnostic_name(type);
    EXPECT_FALSE(stop.exit) << rerun_diagnostic_name(type);
    EXPECT_EQ(h.m->state(), RerunState::kNotRunningYet);
  }
}

TEST(RerunStateMachine, InjectionDrawsDependOnSeedRankAndIteration) {
  // Rate 4: about a quarter of the draws inject; the same (seed, iteration, call) always
  // gives the same answer, and which rank injects is known to every rank.
  int injected = 0;
  for (int64_t it = 1; it <= 400; ++it) {
    RerunErrorInjector a(4, RerunDiagnostic::kTransientError, 7);
    RerunErrorInjector b(4, RerunDiagnostic::kTransientError, 7);
    const std::optional<int> ra = a.maybe_inject(it, 0, 1), rb = b.maybe_inject(it, 0, 1);
    EXPECT_EQ(ra, rb);
    if (ra) ++injected;
  }
  EXPECT_GT(injected, 60);
  EXPECT_LT(injected, 140);
  RerunErrorInjector once(1, RerunDiagnostic::kCorrectResult, 7);
  EXPECT_EQ(once.maybe_inject(5, 0, 4), 0);
  EXPECT_FALSE(once.maybe_inject(5, 1, 4)) << "one injection pending at a time";
}

TEST(RerunStateMachine, ReportDeterminismStatsRerunsEveryIteration) {
  RerunConfig c;
  c.mode = RerunMode::kReportDeterminismStats;
  Harness h(c);
  for (int64_t it = 1; it <= 3; ++it) {
    const auto [runs, stop] = h.iterate(it, {2.0, 2.0});
    EXPECT_EQ(runs, 2);
    EXPECT_FALSE(stop.exit);
  }
  EXPECT_EQ(h.restores, 3);
}

TEST(RerunStateMachine, PendingRerunIsIgnoredAtAnotherLayoutOrWhenSkipped) {
  Harness first(injecting(RerunDiagnostic::kCorrectResult));
  first.iterate(1, {1.0});
  EXPECT_EQ(first.iterate(2, {1.0, 1.0}).second.code, kExitResumeToDisambiguate);
  const nlohmann::json saved = first.m->state_json(kLayout);
  Harness other(validate(), "node-b");
  other.m->load_state_json(saved, "tp2 cp1 pp1 dp1");
  EXPECT_EQ(other.m->state(), RerunState::kNotRunningYet);
  Harness skipping(validate(), "node-b");
  skipping.m->load_state_json(saved, kLayout);
  EXPECT_EQ(skipping.m->state(), RerunState::kWillRerunFromCheckpoint);
  skipping.m->abandon_pending_rerun(2);
  EXPECT_EQ(skipping.m->state(), RerunState::kNotRunningYet);
  // The checkpoint's injector goes with the abandoned re-run: this job injects nothing.
  for (int64_t it = 3; it <= 5; ++it) {
    const auto [runs, stop] = skipping.iterate(it, {1.0});
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(stop.exit);
  }
}

TEST(RerunStateMachine, UnexpectedlyLargeAgainstTheMaxOfTheFirstSamples) {
  Harness h(validate());
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(h.m->is_unexpectedly_large(1.0 + i, 10.0, "loss", 5));
  EXPECT_FALSE(h.m->is_unexpectedly_large(49.9, 10.0, "loss", 5));
  EXPECT_TRUE(h.m->is_unexpectedly_large(-50.0, 10.0, "loss", 5));
  EXPECT_FALSE(h.m->is_unexpectedly_large(kNaN, 10.0, "loss", 5)) << "NaN has its own check";
  EXPECT_FALSE(h.m->is_unexpectedly_large(1e9, 10.0, "grads", 5)) << "contexts are separate";
}

TEST(RerunTracker, SkipsOnlyWhatOneRankReproduced) {
  testing::TempDir dir;
  const auto line = [](const std::string& job, int rank, int it, const std::string& status) {
    return "ts=2026-01-01 00:00:00.000000 node=n device=0 jobID=" + job +
           " rank=" + std::to_string(rank) + " iteration=" + std::to_string(it) +
           " status=" + status + " result=nan message='m'\n";
  };
  // Megatron's spelling of the enum and ours; iteration 5 seen on two ranks of one job.
  const std::string file =
      dir.write("t.txt", line("1", 0, 3, "RerunValidationStatus.FIRST_RERUN_REPRODUCIBLE") +
                             line("2", 0, 3, "second_rerun_reproducible") +
                             line("1", 0, 4, "initial_run") + line("2", 0, 4, "initial_run") +
                             line("1", 0, 5, "rerun_disabled") + line("1", 1, 5, "rerun_disabled") +
                             line("2", 0, 5, "rerun_disabled") + "garbage line\n");
  EXPECT_EQ(iterations_to_skip_from_tracker(file), std::vector<int64_t>{3});
  EXPECT_TRUE(iterations_to_skip_from_tracker(dir.file("missing.txt")).empty());
  EXPECT_THROW(check_tracker_appendable(dir.file("no/such/dir/t.txt")), Error);
}

}  // namespace
}  // namespace megatron
