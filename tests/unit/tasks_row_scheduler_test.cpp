// RowScheduler (tasks/serve/row_scheduler.h), the server's bookkeeping of continuous batching,
// with fake requests and slot numbers and a scripted order of boundaries: rows start oldest
// request first and in order, a request wider than the free slots starts the rest as slots free
// up (later requests wait behind it), rows leave one by one, a request is answered with every
// row's output in order when its last row ends, and a client that leaves cancels its running
// rows and starts no more.
#include <gtest/gtest.h>

#include <deque>

#include "tasks/serve/row_scheduler.h"

namespace megatron {
namespace {

std::shared_ptr<Job> fake_job(size_t rows, int32_t first_token) {
  auto job = std::make_shared<Job>();
  for (size_t r = 0; r < rows; ++r) job->prompts.push_back({first_token + int32_t(r)});
  return job;
}

// One row's output: its prompt and one generated token, `token`.
GenerationOutput row_output(const std::vector<int32_t>& prompt, int32_t token) {
  GenerationOutput out;
  std::vector<int32_t> tokens = prompt;
  tokens.push_back(token);
  out.tokens.push_back(tokens);
  out.prompt_lengths.push_back(int64_t(prompt.size()));
  return out;
}

// The server's boundary: fills the free slots (ascending) from the scheduler.
struct Boundary {
  RowScheduler& scheduler;
  std::deque<std::shared_ptr<Job>>& queue;
  std::vector<char>& used;
  std::vector<std::pair<int64_t, RowScheduler::Row>> fill() {
    std::vector<std::pair<int64_t, RowScheduler::Row>> started;
    for (int64_t slot = 0; slot < int64_t(used.size()); ++slot) {
      if (used[size_t(slot)]) continue;
      const auto row = scheduler.next_row([&]() -> std::shared_ptr<Job> {
        if (queue.empty()) return nullptr;
        auto job = queue.front();
        queue.pop_front();
        return job;
      });
      if (!row) break;
      scheduler.started(slot, *row);
      used[size_t(slot)] = 1;
      started.emplace_back(slot, *row);
    }
    return started;
  }
};

TEST(RowSchedulerTest, RowsStartInOrderAndRequestsAnswerWhenTheirLastRowEnds) {
  RowScheduler scheduler(3);
  std::vector<char> used(3, 0);
  auto a = fake_job(2, 10), b = fake_job(3, 20), c = fake_job(1, 30);
  std::deque<std::shared_ptr<Job>> queue = {a, b, c};
  Boundary boundary{scheduler, queue, used};

  // Boundary 1: a's two rows, then b's first; c waits behind b.
  auto started = boundary.fill();
  ASSERT_EQ(started.size(), 3u);
  EXPECT_EQ(started[0].second.job, a);
  EXPECT_EQ(started[0].second.row, 0u);
  EXPECT_EQ(started[1].second.job, a);
  EXPECT_EQ(started[1].second.row, 1u);
  EXPECT_EQ(started[2].second.job, b);
  EXPECT_EQ(started[2].second.row, 0u);
  EXPECT_EQ(scheduler.running_rows(), 3);
  EXPECT_EQ(queue.size(), 1u);

  // a's row 1 (slot 1) ends first: a is not answered yet; its slot goes to b's row 1.
  EXPECT_FALSE(scheduler.finished(1, row_output({11}, 5)));
  used[1] = 0;
  EXPECT_FALSE(a->finished);
  started = boundary.fill();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].first, 1);
  EXPECT_EQ(started[0].second.job, b);
  EXPECT_EQ(started[0].second.row, 1u);

  // a's row 0 ends: a is answered, rows in order.
  EXPECT_TRUE(scheduler.finished(0, row_output({10}, 4)));
  used[0] = 0;
  ASSERT_TRUE(a->finished);
  EXPECT_EQ(a->error, "");
  EXPECT_EQ(a->output.tokens, (std::vector<std::vector<int32_t>>{{10, 4}, {11, 5}}));
  // b's last row, then c.
  started = boundary.fill();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].second.job, b);
  EXPECT_EQ(started[0].second.row, 2u);
  EXPECT_TRUE(queue.size() == 1u);
  EXPECT_FALSE(scheduler.finished(2, row_output({20}, 1)));
  used[2] = 0;
  started = boundary.fill();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].second.job, c);
  EXPECT_EQ(scheduler.open_requests(), 2);
}

TEST(RowSchedulerTest, StreamingJobsSeeEachRowsTokens) {
  RowScheduler scheduler(2);
  std::vector<char> used(2, 0);
  auto job = fake_job(2, 7);
  job->streaming = true;
  std::deque<std::shared_ptr<Job>> queue = {job};
  Boundary{scheduler, queue, used}.fill();
  SequenceState state;
  state.spec.prompt = {8};
  state.tokens = {8, 40, 41};
  scheduler.advanced(1, state);
  EXPECT_EQ(job->generated.size(), 2u);
  EXPECT_EQ(job->generated[1], (std::vector<int32_t>{40, 41}));
  EXPECT_TRUE(job->generated[0].empty());
  EXPECT_EQ(job->steps, 1u);
}

TEST(RowSchedulerTest, AClientThatLeavesCancelsItsRowsAndStartsNoMore) {
  RowScheduler scheduler(2);
  std::vector<char> used(2, 0);
  auto wide = fake_job(4, 1), next = fake_job(1, 9), gone = fake_job(1, 50);
  std::deque<std::shared_ptr<Job>> queue = {wide, next};
  Boundary boundary{scheduler, queue, used};
  boundary.fill();  // wide's rows 0 and 1
  wide->cancelled = true;
  EXPECT_EQ(scheduler.cancelled_slots(), (std::vector<int64_t>{0, 1}));
  // The batch ends them at the next step: wide is answered, and its rows 2, 3 never start.
  EXPECT_FALSE(scheduler.finished(0, row_output({1}, 3)));
  EXPECT_TRUE(scheduler.finished(1, row_output({2}, 3)));
  EXPECT_TRUE(wide->finished);
  EXPECT_EQ(wide->error, "the client left");
  used = {0, 0};
  queue.push_front(gone);
  gone->cancelled = true;  // left while queued: answered, skipped
  const auto started = boundary.fill();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].second.job, next);
  EXPECT_TRUE(gone->finished);
  EXPECT_TRUE(scheduler.cancelled_slots().empty());
}

TEST(RowSchedulerTest, FailAllAnswersEveryOpenRequest) {
  RowScheduler scheduler(1);
  std::vector<char> used(1, 0);
  auto a = fake_job(2, 1);
  std::deque<std::shared_ptr<Job>> queue = {a};
  Boundary{scheduler, queue, used}.fill();
  scheduler.fail_all("the server is shutting down");
  EXPECT_TRUE(a->finished);
  EXPECT_EQ(a->error, "the server is shutting down");
  EXPECT_EQ(scheduler.running_rows(), 0);
  EXPECT_EQ(scheduler.open_requests(), 0);
}

}  // namespace
}  // namespace megatron
