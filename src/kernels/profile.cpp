#include "kernels/profile.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "core/dtype.h"

namespace megatron::kernels {

namespace {

std::atomic<bool> g_on{false};
std::thread::id g_thread;  // the thread whose calls are recorded
std::map<std::string, KernelProfileRow> g_rows;
bool g_inside = false;  // a profiled kernel is running

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double process_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_minflt + u.ru_majflt);
}

}  // namespace

void set_kernel_profiling(bool on) {
  if (on) {
    g_rows.clear();
    g_thread = std::this_thread::get_id();
  }
  g_on.store(on, std::memory_order_relaxed);
}

std::vector<KernelProfileRow> kernel_profile() {
  std::vector<KernelProfileRow> rows;
  for (const auto& [name, row] : g_rows) rows.push_back(row);
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
  start_ = now();
}

KernelProfileScope::~KernelProfileScope() {
  if (!kernel_) return;
  const double seconds = now() - start_;
  const double faults = process_page_faults() - start_faults_;
  g_inside = false;
  const std::string key = work_.shape.empty() ? kernel_ : std::string(kernel_) + " " + work_.shape;
  KernelProfileRow& row = g_rows[key];
  row.name = key;
  row.calls += 1;
  row.seconds += seconds;
  row.flops += work_.flops;
  row.bytes += work_.bytes;
  row.page_faults += faults;
}

}  // namespace megatron::kernels
