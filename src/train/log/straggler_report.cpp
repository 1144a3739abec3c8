#include "train/log/straggler_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace megatron {

namespace {

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// "min 10.0 (rank 3), 10.2 (rank 0) | median 11.0 | max 15.1 (rank 1)".
std::string spread(std::span<const double> v, int count) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[a] < v[b]; });
  const int n = int(order.size()), k = std::min(count, n);
  auto ranked = [&](int i) { return ms(v[order[i]]) + " (rank " + std::to_string(order[i]) + ")"; };
  std::string s = "min ";
  for (int i = 0; i < k; ++i) s += (i ? ", " : "") + ranked(i);
  const double median = n % 2 ? v[order[n / 2]] : (v[order[n / 2 - 1]] + v[order[n / 2]]) / 2;
  s += " | median " + ms(median) + " | max ";
  for (int i = 0; i < k; ++i) s += (i ? ", " : "") + ranked(n - 1 - i);
  return s;
}

}  // namespace

std::string straggler_report(int64_t iteration, int64_t iterations,
                             std::span<const double> compute_ms,
                             std::span<const double> communication_ms, int minmax_count) {
  MT_CHECK(!compute_ms.empty() && compute_ms.size() == communication_ms.size() && minmax_count > 0,
           "straggler_report needs one compute and one communication time per rank");
  std::vector<double> sorted(compute_ms.begin(), compute_ms.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::string slow;
  for (size_t r = 0; r < compute_ms.size(); ++r)
    if (compute_ms[r] > 1.1 * median)
      slow +=
          (slow.empty() ? "" : ", ") + std::to_string(r) + " (" + ms(compute_ms[r] / median) + "x)";
  return "straggler report, iterations " + std::to_string(iteration - iterations + 1) + "-" +
         std::to_string(iteration) + ", ms per iteration: compute " +
         spread(compute_ms, minmax_count) + "; communication " +
         spread(communication_ms, minmax_count) + "; stragglers (compute > 1.1x the median): " +
         (slow.empty()
              ? "none"
              : "rank" + std::string(slow.find(',') == std::string::npos ? " " : "s ") + slow);
}

}  // namespace megatron
