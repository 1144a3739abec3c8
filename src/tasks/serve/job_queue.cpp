#include "tasks/serve/job_queue.h"

#include <chrono>

namespace megatron {

void Job::record_step(const std::vector<int32_t>& tokens, const std::vector<char>& generated_now) {
  {
    std::lock_guard lock(mutex);
    generated.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      if (generated_now[i]) generated[i].push_back(tokens[i]);
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

size_t JobQueue::take(const std::function<bool(const std::shared_ptr<Job>&)>& join) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, std::chrono::milliseconds(200), [&] { return !queue_.empty(); });
  const size_t before = queue_.size();
  for (auto it = queue_.begin(); it != queue_.end();)
    it = join(*it) ? queue_.erase(it) : std::next(it);
  return before - queue_.size();
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
