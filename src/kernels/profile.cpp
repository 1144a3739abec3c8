#include "kernels/profile.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "core/dtype.h"

namespace megatron::kernels {

namespace {

std::atomic<bool> g_on{false};
std::thread::id g_thread;  // the thread whose calls are recorded
// The calls recorded, each with its start and end points: read into rows by kernel_profile,
// when a GPU's have been reached.
struct Call {
  std::string key;
  detail::KernelWork work;
  DeviceTimePoint start, end;
  double page_faults = 0;
};
std::vector<Call> g_calls;
bool g_inside = false;  // a profiled kernel is running

// Releases what the recorded calls hold (a GPU's events) without reading them.
void drop_calls() {
  for (Call& c : g_calls) elapsed_seconds(c.start, c.end);
  g_calls.clear();
}

double process_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_minflt + u.ru_majflt);
}

}  // namespace

void set_kernel_profiling(bool on) {
  if (on) {
    drop_calls();
    g_thread = std::this_thread::get_id();
  }
  g_on.store(on, std::memory_order_relaxed);
}

std::vector<KernelProfileRow> kernel_profile() {
  std::map<std::string, KernelProfileRow> by_key;
  for (Call& c : g_calls) {
    KernelProfileRow& row = by_key[c.key];
    row.name = c.key;
    row.calls += 1;
    row.seconds += elapsed_seconds(c.start, c.end);
    row.flops += c.work.flops;
    row.bytes += c.work.bytes;
    row.page_faults += c.page_faults;
  }
  g_calls.clear();
  std::vector<KernelProfileRow> rows;
  for (const auto& [name, row] : by_key) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const KernelProfileRow& a, const KernelProfileRow& b) {
    return a.seconds > b.seconds;
  });
  return rows;
}

namespace detail {

bool kernel_profiling_on() {
  return g_on.load(std::memory_order_relaxed) && !g_inside &&
         std::this_thread::get_id() == g_thread;
}

void add_work(KernelWork& w, const GemmProblem& p) {
  const double b = double(p.batch), m = double(p.m), n = double(p.n), k = double(p.k);
  w.flops += 2 * b * m * n * k;
  w.bytes += b * ((m * k + k * n) * double(dtype_size(p.ab_dtype)) +
                  m * n * double(dtype_size(p.c_dtype)) * (p.beta != 0.f ? 2 : 1));
  w.shape = (p.batch > 1 ? std::to_string(p.batch) + "x" : "") + std::to_string(p.m) + "x" +
            std::to_string(p.n) + "x" + std::to_string(p.k) + " " + (p.trans_a ? "T" : "N") +
            (p.trans_b ? "T" : "N") + (p.beta != 0.f ? " +C" : "");
}

}  // namespace detail

void KernelProfileScope::enter() {
  g_inside = true;
  start_faults_ = process_page_faults();
  start_ = device_time_point(work_.device);
}

KernelProfileScope::~KernelProfileScope() {
  if (!kernel_) return;
  Call c;
  c.end = device_time_point(work_.device);
  c.page_faults = process_page_faults() - start_faults_;
  g_inside = false;
  c.key = work_.shape.empty() ? kernel_ : std::string(kernel_) + " " + work_.shape;
  c.work = std::move(work_);
  c.start = start_;
  g_calls.push_back(std::move(c));
}

}  // namespace megatron::kernels
