// BatchSizeSchedule against Megatron-LM's own StepBatchsizeNumMicroBatchesCalculator
// (tests/data/batch_schedule_golden.txt, written by tools/reference/megatron_batch_schedule.py)
// and against values worked out by hand from its rules.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "train/batch_size_schedule.h"

namespace megatron {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
    fields.push_back(line.substr(start, tab - start));
  fields.push_back(line.substr(start));
  return fields;
}

std::string steps_text(const BatchSizeSchedule& s) {
  std::string out;
  for (const auto& [threshold, batch] : s.steps())
    out += (out.empty() ? "" : " ") + std::to_string(threshold) + ":" + std::to_string(batch);
  return out;
}

TEST(BatchSizeSchedule, MatchesMegatronsCalculator) {
  std::ifstream golden(std::string(MEGATRON_TEST_SOURCE_DIR) +
                       "/tests/data/batch_schedule_golden.txt");
  ASSERT_TRUE(golden.good());
  int counts[4] = {0, 0, 0, 0};
  for (std::string line; std::getline(golden, line);) {
    const std::vector<std::string> f = split_tabs(line);
    ASSERT_GE(f.size(), 3u) << line;
    SCOPED_TRACE(line);
    const int64_t seq = std::stoll(f[2]);
    if (f[0] == "error") {
      EXPECT_THROW(BatchSizeSchedule::parse(f[1], seq), Error);
      ++counts[0];
      continue;
    }
    const BatchSizeSchedule s = BatchSizeSchedule::parse(f[1], seq);
    if (f[0] == "steps") {
      EXPECT_EQ(steps_text(s), f[3]);
      ++counts[1];
    } else if (f[0] == "batch") {
      EXPECT_EQ(s.global_batch_at(std::stoll(f[3])), std::stoll(f[4]));
      ++counts[2];
    } else {
      ASSERT_EQ(f[0], "iters");
      EXPECT_EQ(s.iterations_for_samples(std::stoll(f[3])), std::stoll(f[4]));
      ++counts[3];
    }
  }
  EXPECT_GE(counts[0], 5);
  EXPECT_GE(counts[1], 5);
  EXPECT_GE(counts[2], 40);
  EXPECT_GE(counts[3], 20);
}

// Megatron's GPT-3 example, by hand: 2.4e9 tokens / 2048 = 1171875 samples, and so on.
TEST(BatchSizeSchedule, Gpt3ExampleByHand) {
  const auto s =
      BatchSizeSchedule::parse("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048);
  ASSERT_EQ(s.steps().size(), 6u);
  EXPECT_EQ(s.steps()[1], (BatchSizeSchedule::Step{1171875, 320}));
  EXPECT_EQ(s.steps()[5], (BatchSizeSchedule::Step{5859375, 1536}));
  EXPECT_EQ(s.global_batch_at(1171874), 16);
  EXPECT_EQ(s.global_batch_at(1171875), 320);
  EXPECT_EQ(s.max_global_batch(), 1536);
  // ceil(1171875 / 16) = 73243 steps of 16 end at 1171888 samples; then batches of 320.
  EXPECT_EQ(s.iterations_for_samples(1171875), 73243);
  EXPECT_EQ(s.iterations_for_samples(1171889), 73244);
}

TEST(BatchSizeSchedule, MicroBatchesAndDivisibility) {
  const auto s = BatchSizeSchedule::parse("0:8 100:24 200:48", 0);
  EXPECT_EQ(s.num_micro_batches_at(0, 2, 2), 2);
  EXPECT_EQ(s.num_micro_batches_at(250, 2, 2), 12);
  try {
    s.num_micro_batches_at(100, 4, 4);
    ADD_FAILURE() << "24 is not a multiple of 16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("current global batch size (24) is not divisible by "
                                         "micro_batch_size (4) * data_parallel_size (4)"),
              std::string::npos)
        << e.what();
  }
  // From the start every batch must divide; a resumed run past a step no longer needs it.
  EXPECT_THROW(s.check_divisible_from(0, 1, 16), Error);
  EXPECT_NO_THROW(s.check_divisible_from(200, 1, 16));
  EXPECT_THROW(s.check_divisible_from(199, 1, 16), Error);
}

TEST(BatchSizeSchedule, ConstantAndMessages) {
  const auto c = BatchSizeSchedule::constant(32);
  EXPECT_TRUE(c.is_constant());
  EXPECT_EQ(c.global_batch_at(1000000), 32);
  EXPECT_THROW(BatchSizeSchedule::constant(0), Error);
  try {
    BatchSizeSchedule::parse("0:4 16", 0);
    ADD_FAILURE() << "an entry without ':' must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--step-batch-size-schedule: invalid schedule entry "
                                         "\"16\""),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megatron
