#include "cli/plot/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace megatron::cli {

namespace {

AxisRange range_of(const ChartPanel& panel, bool y) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ChartLine& line : panel.lines) {
    for (const auto& [px, py] : line.xy) {
      const double v = y ? py : px;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!(lo <= hi)) return {0, 1};  // no points
  if (hi - lo < 1e-12) return {lo - 0.5, hi + 0.5};
  return {lo, hi};
}

}  // namespace

AxisRange x_range(const ChartPanel& panel) {
  return range_of(panel, false);
}

AxisRange y_range(const ChartPanel& panel) {
  AxisRange r = range_of(panel, true);
  const double pad = 0.05 * (r.hi - r.lo);
  return {r.lo - pad, r.hi + pad};
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const int exponent = int(std::floor(std::log10(raw)));
  int multiple = 1;  // the step is multiple x 10^exponent: the one nearest `raw`
  for (int m : {2, 5, 10}) {
    if (std::abs(std::log(m * std::pow(10.0, exponent) / raw)) <
        std::abs(std::log(multiple * std::pow(10.0, exponent) / raw)))
      multiple = m;
  }
  // k x multiple x 10^exponent, computed from integers so that 3 x 0.05 prints as 0.15.
  auto tick = [&](int64_t k) {
    return exponent >= 0 ? double(k * multiple) * std::pow(10.0, exponent)
                         : double(k * multiple) / std::pow(10.0, -exponent);
  };
  const double step = tick(1);
  std::vector<double> ticks;
  for (int64_t k = int64_t(std::ceil(lo / step - 1e-9)); tick(k) <= hi + 1e-9 * step; ++k)
    ticks.push_back(tick(k));
  return ticks;
}

std::string tick_label(double value, double step) {
  char buf[32];
  // One unit per axis, chosen by the step: 2000-apart ticks read "4k 6k 8k 10k".
  const char* suffix = "";
  double scale = 1;
  if (step >= 1e8) {
    suffix = "B";
    scale = 1e9;
  } else if (step >= 1e5) {
    suffix = "M";
    scale = 1e6;
  } else if (step >= 1e3) {
    suffix = "k";
    scale = 1e3;
  }
  // Enough decimals to tell ticks `step` apart.
  const double scaled_step = step / scale;
  int decimals = 0;
  while (decimals < 6 && std::abs(scaled_step * std::pow(10.0, decimals) -
                                  std::round(scaled_step * std::pow(10.0, decimals))) > 1e-6)
    ++decimals;
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value / scale, suffix);
  return buf;
}

}  // namespace megatron::cli
