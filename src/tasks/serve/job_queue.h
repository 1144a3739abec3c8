// The hand-over between the HTTP threads of `megatron serve` and the thread that generates:
// a bounded queue of jobs (one request's prompts and options each), taken one at a time as
// slots of the running batch free up (tasks/serve/row_scheduler.h), and per job the tokens as
// they are generated (for streaming) and the result.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tasks/generation.h"

namespace megatron {

struct Job {
  std::vector<std::vector<int32_t>> prompts;
  GenerationOptions options;
  bool streaming = false;  // record each step's tokens in `generated`
  // Set by the request's thread when its client has left: the job's rows end at the next step.
  std::atomic<bool> cancelled{false};

  // Written by the generating thread, read by the request's thread; guarded by `mutex`.
  std::mutex mutex;
  std::condition_variable changed;
  // Per row, the tokens generated so far and, with logprobs, theirs (and the most likely
  // tokens' at each, with top_logprobs).
  std::vector<std::vector<int32_t>> generated;
  std::vector<std::vector<float>> generated_logprobs;
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> generated_top_logprobs;
  uint64_t steps = 0;  // bumps with every change of `generated`
  bool finished = false;
  std::string error;  // when finished: "" or why the generation failed
  GenerationOutput output;

  // The generating thread's side: row `row` of the job has generated `tokens` (its whole
  // sequence `sequence`, `prompt_length` tokens of prompt, and with logprobs their
  // log-probabilities, generate_tokens' layout).
  void record_row(size_t row, const std::vector<int32_t>& sequence, int64_t prompt_length,
                  const std::vector<float>& logprobs,
                  const std::vector<std::vector<std::pair<int32_t, float>>>& top_logprobs);
  void finish(std::string error_message, GenerationOutput result);
  // The request's side: waits until finished, or until `client_left` says so (asked every
  // 100 ms; the job is then cancelled). Returns whether the job finished.
  bool wait(const std::function<bool()>& client_left);
};

class JobQueue {
 public:
  explicit JobQueue(int64_t max_queued) : max_queued_(max_queued) {}
  // "" when queued; else why not (full, or shutting down) for a 503.
  std::string submit(std::shared_ptr<Job> job);
  // The oldest job, waiting up to `wait` for one; null when none came.
  std::shared_ptr<Job> pop(std::chrono::milliseconds wait);
  // Refuses new jobs and fails the queued ones.
  void close();

 private:
  int64_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool closed_ = false;
};

}  // namespace megatron
