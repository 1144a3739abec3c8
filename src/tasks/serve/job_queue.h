// The hand-over between the HTTP threads of `megatron serve` and the thread that generates:
// a bounded queue of jobs (one request's prompts and options each), taken a batch at a time
// (tasks/serve/batch.h), and per job the tokens as they are generated (for streaming) and the
// result.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
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
  std::vector<std::vector<int32_t>> generated;  // per row, the tokens generated so far
  uint64_t steps = 0;                           // bumps with every change of `generated`
  bool finished = false;
  std::string error;  // when finished: "" or why the generation failed
  GenerationOutput output;

  // The generating thread's side.
  void record_step(const std::vector<int32_t>& tokens, const std::vector<char>& generated_now);
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
  // Waits up to ~200 ms for a job; hands the oldest to `join`, then every other queued job in
  // order, and removes those it accepted (the first always is). Returns how many it took.
  size_t take(const std::function<bool(const std::shared_ptr<Job>&)>& join);
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
