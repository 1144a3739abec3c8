#include "tasks/serve/job_queue.h"

#include <chrono>

namespace megatron {

void Job::record_row(size_t row, const std::vector<int32_t>& sequence, int64_t prompt_length,
                     const std::vector<float>& logprobs,
                     const std::vector<std::vector<std::pair<int32_t, float>>>& top_logprobs) {
  {
    std::lock_guard lock(mutex);
    const size_t rows = prompts.size();
    generated.resize(rows);
    generated_logprobs.resize(rows);
    generated_top_logprobs.resize(rows);
    generated[row].assign(sequence.begin() + prompt_length, sequence.end());
    // logprobs[j] is the log-probability of sequence[j + 1].
    const auto generated_part = [&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      return v.empty() ? V() : V(v.begin() + (prompt_length - 1), v.end());
    };
    generated_logprobs[row] = generated_part(logprobs);
    generated_top_logprobs[row] = generated_part(top_logprobs);
    ++steps;
  }
  changed.notify_all();
}

void Job::finish(std::string error_message, GenerationOutput result) {
  {
    std::lock_guard lock(mutex);
    error = std::move(error_message);
    output = std::move(result);
    finished = true;
  }
  changed.notify_all();
}

bool Job::wait(const std::function<bool()>& client_left) {
  std::unique_lock lock(mutex);
  while (!changed.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished; }))
    if (client_left()) {
      cancelled = true;
      return false;
    }
  return true;
}

std::string JobQueue::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return "the server is shutting down";
    if (int64_t(queue_.size()) >= max_queued_)
      return "the server is busy: too many queued requests (--max-queued-requests); retry later";
    queue_.push_back(std::move(job));
  }
  ready_.notify_one();
  return "";
}

std::shared_ptr<Job> JobQueue::pop(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, wait, [&] { return !queue_.empty(); })) return nullptr;
  std::shared_ptr<Job> job = std::move(queue_.front());
  queue_.pop_front();
  return job;
}

void JobQueue::close() {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    left.swap(queue_);
  }
  for (auto& job : left) job->finish("the server is shutting down", {});
}

}  // namespace megatron
