// gtest main of the dist_tests binary, which CTest runs under mpirun with 1, 2 and 4 ranks.
//
// - Starts the DistRuntime (MPI) before any test and ends it after the last.
// - Only rank 0 prints gtest's normal output (N copies of it are unreadable); other ranks
//   print just their failures, prefixed "[rank N]", so a failure on any rank is visible.
// - After each test all ranks agree whether it failed anywhere; rank 0 names tests that
//   failed on other ranks only. This also keeps tests in lockstep (a barrier per test).
// - A watchdog thread ends the process when one test runs longer than
//   MEGATRON_DIST_TEST_TIMEOUT seconds (default 300): a rank that returned early from a
//   failed ASSERT leaves the others blocked in a collective, and mpirun then takes the whole
//   job down instead of hanging until CTest's timeout.
// - The exit code is non-zero when a test failed on ANY rank.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/runtime.h"

namespace {

std::string test_name(const testing::TestInfo& info) {
  return std::string(info.test_suite_name()) + "." + info.name();
}

// Replaces gtest's printer on ranks other than 0: prints failed assertions only.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s\n", rank_, test_name(info).c_str());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

// On every rank: agree after each test whether it failed on any rank.
class FailureAgreement : public testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const testing::TestInfo& info) override {
    auto world = megatron::world_communicator();
    const double failed_ranks =
        world->all_reduce_scalar(info.result()->Failed() ? 1.0 : 0.0, megatron::ReduceOp::SUM);
    if (world->rank() == 0 && failed_ranks > 0 && !info.result()->Failed()) {
      std::printf("[  FAILED  ] %s failed on %d other rank(s); see [rank N] lines on stderr\n",
                  test_name(info).c_str(), int(failed_ranks));
      std::fflush(stdout);
    }
  }
};

class HangWatchdog : public testing::EmptyTestEventListener {
 public:
  explicit HangWatchdog(int rank) : rank_(rank), timeout_(timeout_seconds()) {
    thread_ = std::thread([this] { watch(); });
  }
  ~HangWatchdog() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = test_name(info);
    deadline_ = std::chrono::steady_clock::now() + timeout_;
    cv_.notify_all();
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_.clear();
    cv_.notify_all();
  }

 private:
  static std::chrono::seconds timeout_seconds() {
    const char* s = std::getenv("MEGATRON_DIST_TEST_TIMEOUT");
    return std::chrono::seconds(s ? std::atoi(s) : 300);
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (current_.empty()) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && !current_.empty() &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr,
                     "[rank %d] test %s ran longer than %lld s; probably a rank skipped a "
                     "collective after a failed assertion. Ending the job.\n",
                     rank_, current_.c_str(), static_cast<long long>(timeout_.count()));
        std::fflush(nullptr);
        // Not MPI_Abort: the main thread may be inside MPI. A non-zero exit without
        // MPI_Finalize makes mpirun kill every other rank.
        std::_Exit(3);
      }
    }
  }

  int rank_;
  std::chrono::seconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string current_;
  std::chrono::steady_clock::time_point deadline_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  megatron::DistRuntime runtime(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  auto world = megatron::world_communicator();
  const int rank = world->rank();

  // gtest's listener list takes ownership of the raw pointers it is given (its API).
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new FailureAgreement);
  listeners.Append(new HangWatchdog(rank));

  const int local_result = RUN_ALL_TESTS();
  const double failed_ranks =
      world->all_reduce_scalar(local_result != 0 ? 1.0 : 0.0, megatron::ReduceOp::SUM);
  if (rank == 0 && failed_ranks > 0) {
    std::printf("dist_tests: tests failed on %d of %d rank(s)\n", int(failed_ranks), world->size());
  }
  return failed_ranks > 0 ? 1 : 0;
}
