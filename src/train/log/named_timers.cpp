#include "train/log/named_timers.h"

#include <algorithm>
#include <cstdio>

#include "core/device_runtime.h"
#include "core/error.h"
#include "core/tensor.h"

namespace megatron {

namespace {

// Megatron's training_log timers_to_log: level 1, then level 2.
constexpr const char* kReported[] = {
    "forward-backward",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "all-grads-sync",
    "params-all-gather",
    "optimizer-copy-to-main-grad",
    "optimizer-unscale-and-check-inf",
    "optimizer-clip-main-grad",
    "optimizer-count-zeros",
    "optimizer-inner-step",
    "optimizer-copy-main-to-model-params",
    "optimizer",
    "batch-generator",
    "forward-compute",
    "backward-compute",
    "forward-recv",
    "forward-send",
    "backward-recv",
    "backward-send",
    "forward-send-forward-recv",
    "forward-send-backward-recv",
    "backward-send-forward-recv",
    "backward-send-backward-recv",
    "forward-backward-send-forward-backward-recv",
};

// "name ........" padded to 48 characters, as Python's (name + ' ').ljust(48, '.').
std::string dotted(const std::string& name) {
  std::string s = name + " ";
  if (s.size() < 48) s.append(48 - s.size(), '.');
  return s;
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

TimingLogOption timing_log_option_from_name(const std::string& name) {
  if (name == "minmax") return TimingLogOption::kMinMax;
  if (name == "max") return TimingLogOption::kMax;
  if (name == "all") return TimingLogOption::kAll;
  MT_THROW("--timing-log-option must be minmax, max or all, got '", name, "'");
}

NamedTimers::NamedTimers(int log_level, TimingLogOption option, Device device)
    : log_level_(log_level), option_(option), device_(device) {
  MT_REQUIRE(log_level >= 0 && log_level <= 2, "--timing-log-level must be 0, 1 or 2, got ",
             log_level);
}

NamedTimers::Scope::Scope(NamedTimers& timers, const char* name, int level) : timers_(timers) {
  if (!timers.enabled(level)) return;
  timer_ = &timers.timers_[name];
  synchronize(timers.device_);
  timer_->start();
}

NamedTimers::Scope::~Scope() {
  if (timer_ == nullptr) return;
  synchronize(timers_.device_);
  timer_->stop();
}

NamedTimers::Report NamedTimers::report(Communicator& world, int64_t iterations, bool reset) {
  Report out;
  if (log_level_ == 0) return out;
  constexpr int64_t kNames = std::size(kReported);
  const int ranks = world.size();
  // [ranks, names] ms per iteration, each rank filling its row; summed to share every row.
  std::vector<double> table(size_t(ranks * kNames), 0.0);
  for (int64_t i = 0; i < kNames; ++i) {
    const auto it = timers_.find(kReported[i]);
    if (it != timers_.end())
      table[size_t(world.rank() * kNames + i)] =
          it->second.seconds() * 1000.0 / double(std::max<int64_t>(1, iterations));
  }
  Tensor t = Tensor::from_blob(table.data(), {ranks, kNames}, DType::F64);
  if (ranks > 1) world.all_reduce(t);
  if (reset)
    for (auto& [name, timer] : timers_) timer.reset();

  std::string body;
  for (int64_t i = 0; i < kNames; ++i) {
    double lo = 0, hi = 0;
    bool any = false;
    std::string per_rank;
    for (int r = 0; r < ranks; ++r) {
      const double ms = table[size_t(r * kNames + i)];
      if (ms <= 0) continue;  // Megatron leaves out ranks (and timers) without a time
      lo = any ? std::min(lo, ms) : ms;
      hi = any ? std::max(hi, ms) : ms;
      any = true;
      char buf[64];
      std::snprintf(buf, sizeof(buf), "\n     rank %2d: %.2f", r, ms);
      per_rank += buf;
    }
    if (!any) continue;
    out.max_ms.emplace_back(kReported[i], hi);
    switch (option_) {
      case TimingLogOption::kMinMax:
        body += "\n    " + dotted(kReported[i]) + ": (" + fixed2(lo) + ", " + fixed2(hi) + ")";
        break;
      case TimingLogOption::kMax:
        body += "\n    " + dotted(kReported[i]) + ": " + fixed2(hi);
        break;
      case TimingLogOption::kAll:
        body += "\n  " + std::string(kReported[i]) + ":" + per_rank;
        break;
    }
  }
  if (body.empty()) return out;
  const char* header = option_ == TimingLogOption::kMinMax ? "(min, max) time across ranks (ms):"
                       : option_ == TimingLogOption::kMax  ? "max time across ranks (ms):"
                                                           : "times across ranks (ms):";
  out.text = header + body;
  return out;
}

}  // namespace megatron
