// Hang detection's parts that run without a hang: the heartbeat line and its parser, the report
// the watchdog prints on a timeout (from given heartbeats), the observed communicator's
// enter/leave calls, and the heartbeat file's life. The timeout itself ends the process, so it
// is tested under mpirun: tests/e2e/hang_detection.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "distributed/observed_communicator.h"
#include "distributed/solo_communicator.h"
#include "distributed/watchdog.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

Heartbeat beat(int rank, const std::string& operation, double since, double beat_time) {
  Heartbeat h;
  h.rank = rank;
  h.host = "node" + std::to_string(rank / 2);
  h.pid = 1000 + rank;
  h.iteration = 7;
  h.operation = operation;
  h.group_rank = rank % 2;
  h.group_size = 2;
  h.operations = 40 + rank;
  h.since = since;
  h.beat = beat_time;
  return h;
}

TEST(Heartbeat, LineRoundTrips) {
  for (const std::string op : {"all_reduce", "wait(irecv)", ""}) {
    const Heartbeat h = beat(3, op, 1733580000.25, 1733580001.5);
    const std::optional<Heartbeat> back = parse_heartbeat(format_heartbeat(h));
    ASSERT_TRUE(back.has_value()) << format_heartbeat(h);
    EXPECT_EQ(back->rank, 3);
    EXPECT_EQ(back->host, "node1");
    EXPECT_EQ(back->pid, 1003);
    EXPECT_EQ(back->iteration, 7);
    EXPECT_EQ(back->operation, op);
    EXPECT_EQ(back->group_rank, 1);
    EXPECT_EQ(back->group_size, 2);
    EXPECT_EQ(back->operations, 43);
    EXPECT_DOUBLE_EQ(back->since, 1733580000.25);
    EXPECT_DOUBLE_EQ(back->beat, 1733580001.5);
  }
  EXPECT_THAT(format_heartbeat(beat(0, "", 1, 2)), HasSubstr(" operation=- "));
}

TEST(Heartbeat, OtherLinesAreNotHeartbeats) {
  const std::string good = format_heartbeat(beat(1, "barrier", 10, 11));
  EXPECT_FALSE(parse_heartbeat("").has_value());
  EXPECT_FALSE(parse_heartbeat(good.substr(0, good.find(" beat="))).has_value());  // cut short
  EXPECT_FALSE(parse_heartbeat(good + " colour=blue").has_value());
  EXPECT_FALSE(parse_heartbeat("rank=x" + good.substr(good.find(' '))).has_value());
  EXPECT_FALSE(parse_heartbeat("just some text").has_value());
}

TEST(HangReport, NamesTheRankThatStoppedBeating) {
  const double now = 1000;
  const Heartbeat self = beat(0, "all_reduce", now - 12, now);
  std::vector<std::optional<Heartbeat>> ranks = {self, beat(1, "", now - 30, now - 29)};
  const std::string report =
      hang_report(self, ranks, now, 10, 3, "--distributed-timeout-minutes 10", "/hb");
  EXPECT_THAT(report, HasSubstr("rank 0 has waited 12.0 s in all_reduce (member 0 of a group of "
                                "2, its operation #40), longer than the timeout of 10.0 s "
                                "(--distributed-timeout-minutes 10). Where every rank is "
                                "(heartbeats in /hb):"));
  EXPECT_THAT(report, HasSubstr("\n  rank 1 (host node0, pid 1001): computing for 30.0 s after "
                                "operation #41, iteration 7; no heartbeat for 29.0 s: stopped, "
                                "hung or dead"));
  EXPECT_THAT(report, HasSubstr("\nNot responding: rank 1."));
  EXPECT_THAT(report, Not(HasSubstr("Not in communication")));
  EXPECT_THAT(report, HasSubstr("resume from it with --load"));
}

TEST(HangReport, NamesTheRanksOutsideCommunicationAndThoseItCannotSee) {
  const double now = 500;
  const Heartbeat self = beat(0, "wait(irecv)", now - 70, now);
  std::vector<std::optional<Heartbeat>> ranks = {self, beat(1, "all_reduce", now - 65, now - 0.5),
                                                 beat(2, "", now - 66, now - 0.2), std::nullopt,
                                                 beat(4, "", now - 61, now - 0.9)};
  const std::string report = hang_report(self, ranks, now, 60, 3, "flag", "/hb");
  EXPECT_THAT(report, HasSubstr("\n  rank 1 (host node0, pid 1001): in all_reduce (member 1 of 2) "
                                "for 65.0 s, operation #41, iteration 7\n"));
  EXPECT_THAT(report, HasSubstr("\n  rank 3: no heartbeat file"));
  EXPECT_THAT(report, HasSubstr("give --heartbeat-dir a shared directory"));
  EXPECT_THAT(report, HasSubstr("\nNot in communication (the ranks the others wait for, or stuck "
                                "in computation): ranks 2, 4."));
  EXPECT_THAT(report, Not(HasSubstr("Not responding")));
}

TEST(HangReport, EveryRankInsideCommunicationIsAMismatch) {
  const double now = 50;
  const Heartbeat self = beat(0, "broadcast", now - 20, now);
  std::vector<std::optional<Heartbeat>> ranks = {self, beat(1, "all_gather", now - 19, now - 0.1)};
  EXPECT_THAT(hang_report(self, ranks, now, 10, 3, "flag", "/hb"),
              HasSubstr("Every rank is inside communication: they wait in operations that do "
                        "not match"));
}

// Records what it is told.
class RecordingObserver final : public CommunicationObserver {
 public:
  void enter(const char* operation, int group_rank, int group_size) override {
    calls.push_back(std::string(operation) + " " + std::to_string(group_rank) + "/" +
                    std::to_string(group_size));
  }
  void leave() override { calls.push_back("leave"); }
  std::vector<std::string> calls;
};

TEST(ObservedCommunicator, TellsTheObserverOfEveryOperationOfEveryGroup) {
  auto observer = std::make_shared<RecordingObserver>();
  ObservedCommunicator world(std::make_shared<SoloCommunicator>(), observer);
  Tensor t = Tensor::zeros({4}, DType::F32);
  world.all_reduce(t);
  std::unique_ptr<Communicator> group = world.split(0, 0);
  group->barrier();
  std::unique_ptr<CommRequest> request = group->iall_reduce(t);
  request->wait();
  EXPECT_THAT(observer->calls,
              ElementsAre("all_reduce 0/1", "leave", "split 0/1", "leave", "barrier 0/1", "leave",
                          "iall_reduce 0/1", "leave", "wait(iall_reduce) 0/1", "leave"));
}

TEST(CollectiveWatchdog, BeatsWhereTheRankIsAndCleansUp) {
  const fs::path base =
      fs::temp_directory_path() /
      ("watchdog_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(base);
  SoloCommunicator solo;
  const std::string dir = make_heartbeat_dir(solo, base.string());
  EXPECT_EQ(fs::path(dir).parent_path(), base);
  EXPECT_THAT(fs::path(dir).filename().string(), HasSubstr("megatron-heartbeat-"));
  {
    WatchdogOptions options;
    options.timeout_seconds = 3600;
    options.heartbeat_dir = dir;
    options.heartbeat_seconds = 0.02;
    CollectiveWatchdog watchdog(options);
    watchdog.set_iteration(5);
    watchdog.enter("all_gather", 0, 1);
    std::optional<Heartbeat> seen;
    for (int i = 0; i < 500 && !(seen && seen->operation == "all_gather"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::ifstream in(fs::path(dir) / "rank_0.heartbeat");
      std::string line;
      if (std::getline(in, line)) seen = parse_heartbeat(line);
    }
    ASSERT_TRUE(seen.has_value());
    EXPECT_EQ(seen->operation, "all_gather");
    EXPECT_EQ(seen->iteration, 5);
    EXPECT_EQ(seen->operations, 1);
    watchdog.leave();
  }
  EXPECT_FALSE(fs::exists(dir)) << "the last rank out removes the heartbeat directory";
  fs::remove_all(base);
}

TEST(CollectiveWatchdog, AnUnwritableBaseIsASentence) {
  SoloCommunicator solo;
  try {
    make_heartbeat_dir(solo, "/proc/no-such-dir");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot create the heartbeat directory under "
                                    "'/proc/no-such-dir'"));
    EXPECT_THAT(e.what(), HasSubstr("give --heartbeat-dir a writable directory"));
  }
}

}  // namespace
}  // namespace megatron
