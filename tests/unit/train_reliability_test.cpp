// Reliability (docs/reliability.md), one process: input errors read as sentences while
// internal checks keep their condition; CRC-32C; nan/inf spelled out in logs and metrics;
// the divergence guard; checkpoints refuse non-finite values and detect flipped bytes; --load
// and --save are checked before any compute; stale temporaries are removed; the exit-signal
// handler records and agrees on signals; the new argument rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "../common/checkpoint_fixture.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/housekeeping.h"
#include "checkpoint/layout.h"
#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/number_format.h"
#include "core/safetensors.h"
#include "data/atomic_file.h"
#include "distributed/agreement.h"
#include "distributed/solo_communicator.h"
#include "optim/divergence_guard.h"
#include "train/exit_signal.h"
#include "train/log/training_log.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace megatron::testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.report();
  }
  return "no error";
}

// ---- Errors: input errors are sentences, internal invariants name their check ----

TEST(Errors, InputErrorsHaveNoCheckText) {
  const int lr = -1;
  try {
    MT_REQUIRE(lr >= 0, "--lr must be >= 0, got ", lr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.report(), "--lr must be >= 0, got -1");
    EXPECT_EQ(e.message(), "--lr must be >= 0, got -1");
    EXPECT_FALSE(e.internal());
  }
}

TEST(Errors, InternalChecksKeepTheirCondition) {
  const int n = 3;
  try {
    MT_CHECK(n % 2 == 0, "n is odd");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "n is odd");
    EXPECT_EQ(e.report(), "n is odd (check `n % 2 == 0` failed)");
    EXPECT_STREQ(e.what(), "n is odd (check `n % 2 == 0` failed)");
    EXPECT_TRUE(e.internal());
  }
}

TEST(Errors, RunOnAllRanksMarksTheErrorCollective) {
  SoloCommunicator world;
  try {
    run_on_all_ranks(world, "loading", [] { MT_THROW("file 'x' is missing"); });
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(e.collective());
    EXPECT_TRUE(e.reporting());  // the only (lowest) failing rank reports
    EXPECT_EQ(e.report(), "loading: file 'x' is missing");
  }
  EXPECT_NO_THROW(run_on_all_ranks(world, "", [] {}));
}

// ---- CRC-32C ----

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(Crc32c, HardwareAndPortableAgreeOnEverySizeAndOffset) {
  std::mt19937 rng(7);
  std::vector<uint8_t> bytes(1000);
  for (uint8_t& b : bytes) b = uint8_t(rng());
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 500, 993}) {
      const uint32_t fast = crc32c(bytes.data() + offset, n);
      EXPECT_EQ(fast, detail::crc32c_extend_portable(0, bytes.data() + offset, n)) << n;
      // Extending over a split gives the CRC of the whole.
      const size_t half = n / 3;
      EXPECT_EQ(crc32c_extend(crc32c(bytes.data() + offset, half), bytes.data() + offset + half,
                              n - half),
                fast);
    }
  }
}

// ---- nan and inf are spelled out ----

TEST(NumberFormat, NonFiniteValuesAreSpelledOut) {
  EXPECT_EQ(format_number(kNaN, "%.6E"), "nan");
  EXPECT_EQ(format_number(-kNaN, "%.6E"), "nan");  // printf would say "-NAN"
  EXPECT_EQ(format_number(kInf, "%.3f"), "inf");
  EXPECT_EQ(format_number(-kInf, "%.3f"), "-inf");
  EXPECT_EQ(format_number(2.5, "%.3f"), "2.500");
  EXPECT_EQ(json_number(kNaN).dump(), "\"nan\"");
  EXPECT_EQ(json_number(-kInf).dump(), "\"-inf\"");
  EXPECT_EQ(json_number(0.5).dump(), "0.5");
}

TEST(NumberFormat, DivergedLossPrintsNanNotAPerplexity) {
  const std::string block = format_validation_block("iteration 10", -kNaN);
  EXPECT_THAT(block, HasSubstr("lm loss value: nan | lm loss PPL: nan |"));
  EXPECT_THAT(format_validation_block("iteration 10", kInf), HasSubstr("lm loss PPL: inf"));
  // A large finite loss keeps Megatron's cap of exp(20).
  EXPECT_THAT(format_validation_block("iteration 10", 50.0), HasSubstr("PPL: 4.851652E+08"));
  IterationStats s;
  s.lm_loss = kNaN;
  s.grad_norm = -kNaN;
  const std::string line = format_iteration_line(s);
  EXPECT_THAT(line, HasSubstr("lm loss: nan |"));
  EXPECT_THAT(line, HasSubstr("grad norm: nan |"));
}

TEST(NumberFormat, MetricsFileRecordsNanAsAString) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    TrainingLog log(true, path, "");
    IterationStats s;
    s.iteration = 3;
    s.lm_loss = kNaN;
    s.grad_norm = -kInf;
    log.iteration(s);
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_THAT(line, HasSubstr("\"lm_loss\":\"nan\""));
  EXPECT_THAT(line, HasSubstr("\"grad_norm\":\"-inf\""));
}

TEST(MetricsFile, AFullDiskIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TrainingLog log(true, "/dev/full", "");
  EXPECT_THAT(error_of([&] { log.iteration(IterationStats{}); }),
              HasSubstr("cannot write --metrics-file '/dev/full': No space left on device"));
}

// ---- the divergence guard ----

TEST(DivergenceGuard, NonFiniteLossOrGradNormStopsEveryRank) {
  ParallelState ps = solo();
  DivergenceGuard guard(true, /*fp16=*/false);
  EXPECT_NO_THROW(guard.check_loss_and_grad(4, {{"lm loss", 3.0}, {"grad norm", 1.0}}, ps, ""));
  try {
    guard.check_loss_and_grad(7, {{"lm loss", kNaN}, {"grad norm", kInf}}, ps,
                              "the newest checkpoint is iteration 5 in 'ck'");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(e.collective());
    EXPECT_THAT(e.report(), HasSubstr("training diverged at iteration 7: the lm loss is nan and "
                                      "the grad norm is inf"));
    EXPECT_THAT(e.report(), HasSubstr("the newest checkpoint is iteration 5 in 'ck'"));
    EXPECT_THAT(e.report(), Not(HasSubstr("check `")));
  }
  // Off, or fp16 (the loss scaler skips such steps): no stop.
  EXPECT_NO_THROW(
      DivergenceGuard(false, false).check_loss_and_grad(7, {{"lm loss", kNaN}}, ps, ""));
  EXPECT_NO_THROW(DivergenceGuard(true, true).check_loss_and_grad(7, {{"lm loss", kNaN}}, ps, ""));
}

TEST(DivergenceGuard, NonFiniteWeightsStopInEveryPrecision) {
  ParallelState ps = solo();
  ParameterStore store = make_fixture_store(0, 1);
  fill_fixture(store, store.flat_values(), 0);
  DivergenceGuard fp16_guard(true, /*fp16=*/true);
  EXPECT_NO_THROW(fp16_guard.check_weights(3, store, Tensor(), ps, ""));
  store.get("layers.0.self_attention.dense.bias").value.data<float>()[2] = float(kInf);
  const std::string message =
      error_of([&] { fp16_guard.check_weights(3, store, Tensor(), ps, ""); });
  EXPECT_THAT(message, HasSubstr("training diverged at iteration 3: parameter "
                                 "layers.0.self_attention.dense.bias hold inf or nan"));
  EXPECT_THAT(message, HasSubstr("f16 weights overflowed"));
}

// ---- checkpoints: never non-finite, and verified ----

void save_fixture(const std::string& dir, int64_t iteration, float poison = 0.0f) {
  ParameterStore store = make_fixture_store(0, 1);
  fill_fixture(store, store.flat_values(), 0);
  auto optimizer = make_fixture_optimizer(store);
  fill_fixture_optimizer(store, optimizer);
  if (poison != 0.0f) optimizer.at("exp_avg_sq").data<float>()[5] = poison;
  save_checkpoint(dir, iteration, store, optimizer, {{"iteration", iteration}}, solo());
}

TEST(CheckpointGuard, NonFiniteValuesAreNeverCommitted) {
  TempDir dir;
  save_fixture(dir.path(), 5);
  const std::string message =
      error_of([&] { save_fixture(dir.path(), 10, std::numeric_limits<float>::quiet_NaN()); });
  EXPECT_THAT(message, HasSubstr("refusing to save the checkpoint of iteration 10: optimizer "
                                 "state 'exp_avg_sq' of embedding.word_embeddings.weight hold "
                                 "inf or nan"));
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(5));
  EXPECT_EQ(complete_checkpoint_iterations(dir.path()), std::vector<int64_t>{5});
}

TEST(CheckpointChecksums, EveryTensorRecordsItsCrc) {
  TempDir dir;
  save_fixture(dir.path(), 1);
  SafetensorsReader r(dir.file("iter_0000001/mp_rank_00/model.safetensors"));
  for (const std::string& name : r.names()) {
    const nlohmann::json placement = nlohmann::json::parse(r.metadata_value(name));
    const Tensor t = r.get(name);
    EXPECT_EQ(placement.at("crc32c").get<uint32_t>(), crc32c(t.raw_data(), t.nbytes())) << name;
  }
  EXPECT_FALSE(r.metadata_value("state_crc32c").empty());
}

TEST(CheckpointChecksums, AFlippedByteIsReportedWithFileAndTensor) {
  TempDir dir;
  save_fixture(dir.path(), 1);
  // The last tensor of the data section (tensors are sorted by name within one dtype).
  const std::string file = dir.file("iter_0000001/mp_rank_00/model.safetensors");
  flip_byte(file, 3);
  ParameterStore store = make_fixture_store(0, 1);
  const std::string message =
      error_of([&] { load_checkpoint(dir.path(), -1, store, nullptr, solo()); });
  EXPECT_THAT(message, HasSubstr("checkpoint file '" + file + "' is corrupt: the data of tensor"));
  EXPECT_THAT(message, HasSubstr("does not match its checksum"));
  EXPECT_THAT(message, Not(HasSubstr("check `")));
}

TEST(CheckpointChecksums, AFlippedByteInTheOptimizerOrStateIsReported) {
  TempDir dir;
  save_fixture(dir.path(), 1);
  flip_byte(dir.file("iter_0000001/mp_rank_00/optimizer.safetensors"), 100);
  ParameterStore store = make_fixture_store(0, 1);
  auto buffers = make_fixture_optimizer(store);
  EXPECT_THAT(error_of([&] { load_checkpoint(dir.path(), -1, store, &buffers, solo()); }),
              HasSubstr("optimizer.safetensors' is corrupt"));

  TempDir dir2;
  save_fixture(dir2.path(), 1);
  const std::string state = dir2.file("iter_0000001/mp_rank_00/state.json");
  std::string text;
  {
    std::ifstream in(state);
    std::getline(in, text, '\0');
  }
  text.replace(text.find('1'), 1, "2");  // "iteration": 1 -> 2, still valid JSON
  std::ofstream(state, std::ios::trunc) << text;
  ParameterStore store2 = make_fixture_store(0, 1);
  EXPECT_THAT(error_of([&] { load_checkpoint(dir2.path(), -1, store2, nullptr, solo()); }),
              HasSubstr("state file '" + state + "' is corrupt"));
}

// ---- --load and --save before any compute ----

TEST(LoadPlan, ResolvesOrRefuses) {
  TempDir dir;
  // Nothing there: a warning — or an error with --finetune.
  LoadPlan none = plan_load(dir.file("missing"), false);
  EXPECT_FALSE(none.iteration);
  EXPECT_THAT(none.warning, HasSubstr("does not exist: starting from random weights"));
  EXPECT_THAT(error_of([&] { plan_load(dir.file("missing"), true); }),
              HasSubstr("--finetune starts from the weights of a checkpoint and needs one"));
  EXPECT_THAT(error_of([&] { plan_load(dir.path(), true); }),
              HasSubstr("holds no checkpoint (no latest_checkpointed_iteration.txt"));
  // A tracker: its iteration.
  save_fixture(dir.path(), 4);
  save_fixture(dir.path(), 8);
  EXPECT_EQ(plan_load(dir.path(), false).iteration, std::optional<int64_t>(8));
  // Checkpoints without a tracker: refuse, naming the newest and how to resume from it.
  fs::remove(dir.file(kTrackerFileName));
  const std::string message = error_of([&] { plan_load(dir.path(), false); });
  EXPECT_THAT(message, HasSubstr("has no latest_checkpointed_iteration.txt but holds complete "
                                 "checkpoints (iterations 4, 8)"));
  EXPECT_THAT(message, HasSubstr("echo 8 > " + dir.file(kTrackerFileName)));
  // A file instead of a directory.
  EXPECT_THAT(error_of([&] { plan_load(dir.write("f", "x"), false); }),
              HasSubstr("is not a directory"));
}

TEST(LoadPlan, OnlyCompleteCheckpointsCount) {
  TempDir dir;
  save_fixture(dir.path(), 4);
  fs::create_directories(dir.file("iter_0000009/mp_rank_00"));  // killed before any file
  fs::create_directories(dir.file("iter_0000012.tmp-00000000deadbeef/mp_rank_00"));
  EXPECT_EQ(complete_checkpoint_iterations(dir.path()), std::vector<int64_t>{4});
}

TEST(SaveDir, UnwritableSaveIsFoundAtOnce) {
  TempDir dir;
  EXPECT_NO_THROW(check_save_dir_writable(dir.file("new/sub"), 0));
  EXPECT_TRUE(fs::is_directory(dir.file("new/sub")));
  EXPECT_TRUE(fs::is_empty(dir.file("new/sub")));  // the probe is gone
  const std::string file = dir.write("a_file", "x");
  EXPECT_THAT(error_of([&] { check_save_dir_writable(file + "/ck", 0); }),
              HasSubstr("--save '" + file + "/ck' cannot be created"));
  if (fs::exists("/proc/self")) {
    EXPECT_THAT(error_of([&] { check_save_dir_writable("/proc/self", 0); }),
                HasSubstr("--save '/proc/self' is not writable"));
  }
}

TEST(SaveDir, AnotherRunsCheckpointsAreNotOverwritten) {
  TempDir dir;
  EXPECT_NO_THROW(check_save_dir_not_foreign(dir.path(), ""));
  save_fixture(dir.path(), 6);
  EXPECT_THAT(error_of([&] { check_save_dir_not_foreign(dir.path(), ""); }),
              HasSubstr("already holds the checkpoints of another run (iteration 6)"));
  EXPECT_NO_THROW(check_save_dir_not_foreign(dir.path(), dir.path() + "/."));  // resuming it
}

// ---- stale temporaries ----

TEST(StaleTemporaries, ASaveRemovesThoseOfKilledSaves) {
  TempDir dir;
  save_fixture(dir.path(), 2);
  fs::create_directories(dir.file("iter_0000003.tmp-00000000deadbeef/mp_rank_00"));
  dir.write("iter_0000003.tmp-00000000deadbeef/mp_rank_00/model.safetensors", "partial");
  fs::create_directories(dir.file("iter_0000002.tmp-0000000000c0ffee.old"));
  save_fixture(dir.path(), 4);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"iter_0000002", "iter_0000004",
                                          "latest_checkpointed_iteration.txt"}));
}

// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(StaleTemporaries, AtomicFileTemporariesOfDeadProcessesAreRemoved) {
  TempDir dir;
  const std::string target = dir.file("corpus_text_document.bin");
  const std::string dead = target + ".tmp." + std::to_string(dead_pid()) + ".0";
  const std::string alive = target + ".tmp." + std::to_string(::getppid()) + ".3";
  const std::string other = dir.file("other.bin.tmp.1.0");
  for (const std::string& p : {dead, alive, other}) std::ofstream(p) << "x";
  EXPECT_EQ(remove_stale_temporaries(target), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));  // its process still runs: perhaps still writing
  EXPECT_TRUE(fs::exists(other));  // another file's
}

// ---- the exit-signal handler ----

TEST(ExitSignal, RecordsTheSignalAndAgrees) {
  SoloCommunicator world;
  {
    ExitSignalHandler handler;
    EXPECT_EQ(handler.received(), 0);
    EXPECT_EQ(handler.agreed(world, 1), 0);
    std::raise(SIGTERM);  // handled: the process goes on
    EXPECT_EQ(handler.received(), SIGTERM);
    EXPECT_EQ(handler.agreed(world, 2), SIGTERM);
  }
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  // The previous disposition is back once the handler is gone.
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// ---- argument rules ----

struct Parsed {
  CLI::App app;
  cli::Args args;
  cli::ArgTable table{app};
  std::string parse_error;
  explicit Parsed(std::vector<std::string> extra) {
    cli::add_training_args(table, args);
    std::vector<std::string> flags = {
        "--num-layers", "2",  "--hidden-size",      "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--micro-batch-size", "2",  "--mock-data",           "--vocab-size",
        "128"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    std::vector<char*> argv{const_cast<char*>("pretrain-gpt")};
    for (std::string& f : flags) argv.push_back(f.data());
    try {
      app.parse(int(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      parse_error = e.what();
    }
  }
  std::string validation_error() {
    return error_of([&] { cli::validate_training_args(args, 1); });
  }
};

TEST(ArgRules, NumbersMustBeFiniteAndFit) {
  EXPECT_THAT(Parsed({"--train-iters", "2", "--lr", "nan"}).parse_error,
              HasSubstr("'nan' is not a finite number"));
  EXPECT_THAT(Parsed({"--train-iters", "2", "--lr", "inf"}).parse_error,
              HasSubstr("'inf' is not a finite number"));
  EXPECT_THAT(Parsed({"--train-iters", "2", "--lr", "1e-3", "--seed", "-1"}).parse_error,
              HasSubstr("'-1' is negative, expected a non-negative integer"));
  EXPECT_THAT(Parsed({"--train-iters", "99999999999999999999", "--lr", "1e-3"}).parse_error,
              HasSubstr("'99999999999999999999' is not an integer in [-9223372036854775808, "
                        "9223372036854775807]"));
  EXPECT_EQ(Parsed({"--train-iters", "+12", "--lr", "1e-3"}).args.train_iters, 12);
  EXPECT_EQ(Parsed({"--train-iters", "010", "--lr", "1e-3"}).args.train_iters, 10);  // not octal
}

TEST(ArgRules, RangesAreSentences) {
  auto error = [](std::vector<std::string> extra) {
    if (std::find(extra.begin(), extra.end(), "--train-iters") == extra.end())
      extra.insert(extra.end(), {"--train-iters", "2"});
    Parsed p(extra);
    EXPECT_EQ(p.parse_error, "");
    return p.validation_error();
  };
  EXPECT_EQ(error({"--lr", "-1e-3"}), "--lr must be >= 0, got -0.001");
  EXPECT_EQ(error({}), "--lr must be given (the peak learning rate)");
  EXPECT_THAT(error({"--lr", "1e-3", "--adam-eps", "0"}),
              HasSubstr("--adam-eps must be > 0, got 0"));
  EXPECT_THAT(error({"--lr", "1e-3", "--layernorm-epsilon", "-1"}),
              HasSubstr("--layernorm-epsilon must be > 0, got -1"));
  EXPECT_THAT(error({"--lr", "1e-3", "--adam-beta2", "1"}),
              HasSubstr("--adam-beta2 must be in [0, 1), got 1"));
  EXPECT_THAT(error({"--lr", "1e-3", "--train-iters", "4611686018427387904"}),
              HasSubstr("is too large"));
  // 0 or less given for a flag whose unset value means a default is refused while parsing.
  EXPECT_THAT(Parsed({"--train-iters", "2", "--lr", "1e-3", "--ffn-hidden-size", "-4"}).parse_error,
              HasSubstr("'-4' is not positive; leave the flag out for 4 x --hidden-size"));
}

TEST(ArgRules, DivergenceGuardIsOnByDefault) {
  Parsed on({"--train-iters", "2", "--lr", "1e-3"});
  EXPECT_TRUE(on.args.check_for_nan_in_loss_and_grad);
  EXPECT_FALSE(on.args.exit_signal_handler);
  EXPECT_EQ(on.table.to_json()["check_for_nan_in_loss_and_grad"], true);
  Parsed off({"--train-iters", "2", "--lr", "1e-3", "--no-check-for-nan-in-loss-and-grad",
              "--exit-signal-handler"});
  EXPECT_FALSE(off.args.check_for_nan_in_loss_and_grad);
  EXPECT_TRUE(off.args.exit_signal_handler);
  EXPECT_EQ(off.validation_error(), "no error");
  const TrainerConfig cfg = cli::trainer_config(off.args, off.table);
  EXPECT_FALSE(cfg.check_for_nan_in_loss_and_grad);
  EXPECT_TRUE(cfg.exit_signal_handler);
}

}  // namespace
}  // namespace megatron
