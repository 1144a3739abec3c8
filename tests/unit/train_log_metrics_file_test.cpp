// The --metrics-file after a resume: rows past the starting iteration are removed atomically,
// nothing changes without such rows, bad files are reported by line; TrainingLog::start_at.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "../common/temp_dir.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "train/log/metrics_file.h"
#include "train/log/training_log.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<int64_t> iterations(const std::string& path) {
  std::vector<int64_t> out;
  for (const nlohmann::json& row : read_metrics_file(path))
    out.push_back(row["iteration"].get<int64_t>());
  return out;
}

const char* const kRun =
    "{\"type\":\"train\",\"iteration\":10,\"lm_loss\":9.5}\n"
    "{\"type\":\"validation\",\"iteration\":10,\"lm_loss\":9.6}\n"
    "{\"type\":\"train\",\"iteration\":20,\"lm_loss\":8.5}\n"
    "{\"type\":\"validation\",\"iteration\":20,\"lm_loss\":8.6}\n"
    "{\"type\":\"train\",\"iteration\":25,\"lm_loss\":8.1}\n";

TEST(MetricsFile, TruncateKeepsRowsUpToTheIterationAndNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.write("m.jsonl", kRun);
  EXPECT_EQ(truncate_metrics_file(path, 20), 1);
  EXPECT_EQ(iterations(path), (std::vector<int64_t>{10, 10, 20, 20}));
  EXPECT_EQ(read_file(path, "test"),
            "{\"type\":\"train\",\"iteration\":10,\"lm_loss\":9.5}\n"
            "{\"type\":\"validation\",\"iteration\":10,\"lm_loss\":9.6}\n"
            "{\"type\":\"train\",\"iteration\":20,\"lm_loss\":8.5}\n"
            "{\"type\":\"validation\",\"iteration\":20,\"lm_loss\":8.6}\n");
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);  // the rewrite was renamed over the original
  EXPECT_EQ(truncate_metrics_file(path, 0), 4);
  EXPECT_TRUE(read_metrics_file(path).empty());
}

TEST(MetricsFile, TruncateWithoutRowsPastTheIterationChangesNothing) {
  TempDir dir;
  const std::string path = dir.write("m.jsonl", kRun);
  const auto before = std::filesystem::last_write_time(path);
  EXPECT_EQ(truncate_metrics_file(path, 25), 0);
  EXPECT_EQ(std::filesystem::last_write_time(path), before);
  EXPECT_EQ(truncate_metrics_file(dir.file("absent.jsonl"), 0), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.file("absent.jsonl")));
}

TEST(MetricsFile, BadLinesAreReportedWithTheirNumber) {
  TempDir dir;
  const std::string path = dir.write("m.jsonl", "{\"iteration\":1}\n\n{\"type\":\"train\"}\n");
  try {
    read_metrics_file(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("line 3 is not a metrics row"));
  }
  dir.write("m.jsonl", "{\"iteration\":1}\nnot json\n");
  try {
    truncate_metrics_file(path, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("line 2 is not JSON"));
  }
}

TEST(MetricsFile, ResumedLogLeavesOneRowPerIteration) {
  TempDir dir;
  const std::string path = dir.write("m.jsonl", kRun);
  {
    TrainingLog log(true, path, "");
    log.start_at(20);  // resumed from the checkpoint of iteration 20
    IterationStats s;
    s.iteration = 21;  // the resumed run's first iteration: printed only
    s.lm_loss = 8.1;
    s.first_of_run = s.console_only = true;
    log.iteration(s);
    s.iteration = 25;
    s.lm_loss = 8.0;
    s.first_of_run = s.console_only = false;
    log.iteration(s);
    log.validation("iteration 25", 25, /*consumed_samples=*/25, 25 * 128, 8.2);
    log.final_validation("iteration 25 on validation set", 25, 25, 25 * 128, 8.25);
  }
  EXPECT_EQ(iterations(path), (std::vector<int64_t>{10, 10, 20, 20, 25, 25, 25}));
  const std::vector<nlohmann::json> rows = read_metrics_file(path);
  EXPECT_EQ(rows[4]["lm_loss"], 8.0);
  EXPECT_EQ(rows[5]["consumed_tokens"], 25 * 128);
  EXPECT_FALSE(rows[5].contains("final"));
  EXPECT_EQ(rows[6]["type"], "validation");
  EXPECT_EQ(rows[6]["final"], true);
  EXPECT_EQ(rows[6]["lm_loss"], 8.25);
}

TEST(TrainingLog, ProgressLineGivesTheTimeLeft) {
  // 30 iterations in 90 s: 3 s each, 370 to go.
  EXPECT_EQ(format_progress_line({30, 0, 400, 90.0, 0.0}),
            " progress: iteration 30/400, 1m30s elapsed, about 18m30s left");
  // The 6-minute limit comes first: 270 s left = 90 more iterations, stopping after the 121st.
  EXPECT_EQ(format_progress_line({30, 0, 400, 90.0, 360.0}),
            " progress: 1m30s of the 6m00s time limit, about 4m30s left (the run stops near "
            "iteration 121 of 400)");
  // Past the limit: this iteration is the last.
  EXPECT_EQ(format_progress_line({50, 0, 400, 361.0, 360.0}),
            " progress: 6m01s of the 6m00s time limit, about 0s left (the run stops near "
            "iteration 50 of 400)");
  // A resumed run counts its own pace: 10 iterations since 20, in 20 s.
  EXPECT_EQ(format_progress_line({30, 20, 40, 20.0, 3600.0}),
            " progress: iteration 30/40, 20s elapsed, about 20s left");
  EXPECT_EQ(format_progress_line({20, 20, 40, 0.0, 0.0}), "");  // nothing measured yet
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(7325), "2h02m");
}

}  // namespace
}  // namespace megatron
