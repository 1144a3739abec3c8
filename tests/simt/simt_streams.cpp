// Streams and events of the emulated GPU (contract: simt_streams.h).
#include "simt_streams.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "simt_device_memory.h"

namespace megatron::simt {

namespace {

struct Stream {
  struct Item {
    uint64_t seq;
    std::function<void()> work;
  };
  std::deque<Item> queue;
  uint64_t issued = 0;  // sequence number of the last item queued
};

struct Event {
  Stream* stream = nullptr;  // null: never recorded (waiting on it waits for nothing)
  uint64_t mark = 0;
  // With timing: the host clock when the stream reached the latest record (shared with the
  // queued stamp, which may run after the event is destroyed); negative until then.
  bool timing = false;
  std::shared_ptr<double> reached;
};

// One lock for all queues: work may wait on another stream, which runs that stream's queue.
std::recursive_mutex& lock() {
  static std::recursive_mutex m;
  return m;
}

std::deque<Stream*>& streams() {
  static std::deque<Stream*> all;
  return all;
}

// Runs `s`'s items up to `mark`, in order.
void run_until(Stream& s, uint64_t mark) {
  std::lock_guard<std::recursive_mutex> guard(lock());
  if (s.queue.empty() || s.queue.front().seq > mark) return;
  DeviceAccess access;  // queued work reads and writes device memory: one window for the run
  while (!s.queue.empty() && s.queue.front().seq <= mark) {
    std::function<void()> work = std::move(s.queue.front().work);
    s.queue.pop_front();
    work();
  }
}

Stream* as_stream(cudaStream_t stream) {
  return reinterpret_cast<Stream*>(stream);
}

}  // namespace

cudaStream_t new_stream() {
  std::lock_guard<std::recursive_mutex> guard(lock());
  auto* s = new Stream;  // streams live as long as the process, as the context's do
  streams().push_back(s);
  return reinterpret_cast<cudaStream_t>(s);
}

void enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> guard(lock());
  if (!stream) {
    DeviceAccess access;
    work();
    return;
  }
  Stream* s = as_stream(stream);
  s->queue.push_back({++s->issued, std::move(work)});
}

void synchronize(cudaStream_t stream) {
  if (stream) run_until(*as_stream(stream), UINT64_MAX);
}

void synchronize_all() {
  std::lock_guard<std::recursive_mutex> guard(lock());
  for (Stream* s : streams()) run_until(*s, UINT64_MAX);
}

cudaEvent_t new_event(bool timing) {
  auto* e = new Event;
  e->timing = timing;
  return reinterpret_cast<cudaEvent_t>(e);
}

void destroy_event(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
}

void record(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> guard(lock());
  MT_CHECK(stream != nullptr, "simt: events on the null stream are not emulated");
  auto* e = reinterpret_cast<Event*>(event);
  e->stream = as_stream(stream);
  if (e->timing) {
    e->reached = std::make_shared<double>(-1.0);
    enqueue(stream, [reached = e->reached] {
      *reached = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                     .count();
    });
  }
  e->mark = e->stream->issued;
}

double seconds_reached(cudaEvent_t event) {
  const auto* e = reinterpret_cast<const Event*>(event);
  return e->timing && e->reached ? *e->reached : -1.0;
}

void wait(cudaStream_t stream, cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> guard(lock());
  const Event mark = *reinterpret_cast<Event*>(event);  // the record as of now
  if (!mark.stream) return;
  enqueue(stream, [mark] { run_until(*mark.stream, mark.mark); });
}

void synchronize(cudaEvent_t event) {
  const Event mark = *reinterpret_cast<Event*>(event);
  if (mark.stream) run_until(*mark.stream, mark.mark);
}

}  // namespace megatron::simt
