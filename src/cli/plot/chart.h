// Line charts for `megatron plot`: what to draw (panels of lines), independent of where it
// is drawn (svg_chart.h: a file for a browser; text_chart.h: the terminal).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace megatron::cli {

struct ChartLine {
  std::string label;                          // legend entry
  int color = 0;                              // index into the palette (one per run)
  bool dashed = false;                        // validation curves: dashed, with markers
  std::vector<std::pair<double, double>> xy;  // in drawing order
};

struct ChartPanel {
  std::string title;    // "lm loss"
  std::string x_label;  // "iteration", "tokens"
  std::string y_label;
  std::vector<ChartLine> lines;
};

struct AxisRange {
  double lo = 0, hi = 1;
};

// The x and y ranges covering every point of `panel`'s lines (y padded by 5%, never empty).
AxisRange x_range(const ChartPanel& panel);
AxisRange y_range(const ChartPanel& panel);

// About `target` round tick values (1, 2 or 5 x 10^k apart) inside [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

// A tick label of an axis whose ticks are `step` apart: "250", "0.5", "7.25", and for steps
// of a thousand or more "12k", "1.5M", "2B".
std::string tick_label(double value, double step);

}  // namespace megatron::cli
