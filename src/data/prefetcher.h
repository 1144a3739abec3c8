// Prefetcher<T>: serves items 0, 1, 2, ... of a pure function `make(n)` in order, computing
// up to `depth` of them ahead on a background thread (the data loader's worker).
//
// Because item n depends only on n, prefetching never changes what is served, only when it
// is computed. An exception thrown by make(n) is rethrown by the next() that asks for item n.
// depth 0 computes each item in next() on the caller's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace megatron {

template <typename T>
class Prefetcher {
 public:
  Prefetcher(std::function<T(int64_t)> make, int depth) : make_(std::move(make)), depth_(depth) {
    if (depth_ > 0) worker_ = std::thread([this] { run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  T next() {
    if (depth_ <= 0) return make_(served_++);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !ready_.empty() || error_; });
    if (ready_.empty()) std::rethrow_exception(error_);
    T item = std::move(ready_.front());
    ready_.pop_front();
    ++served_;
    changed_.notify_all();
    return item;
  }

 private:
  void run() {
    int64_t n = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || int64_t(ready_.size()) < depth_; });
        if (stop_) return;
      }
      try {
        T item = make_(n++);
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(item));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        changed_.notify_all();
        return;
      }
      changed_.notify_all();
    }
  }

  std::function<T(int64_t)> make_;
  int depth_;
  int64_t served_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<T> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace megatron
