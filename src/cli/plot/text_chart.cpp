#include "cli/plot/text_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace megatron::cli {

namespace {

constexpr const char kSolid[] = "*+x#%&";
constexpr const char kDashed[] = "o@O$";

char mark(const ChartLine& line) {
  return line.dashed ? kDashed[line.color % (sizeof(kDashed) - 1)]
                     : kSolid[line.color % (sizeof(kSolid) - 1)];
}

std::string pad_left(const std::string& s, size_t n) {
  return s.size() >= n ? s : std::string(n - s.size(), ' ') + s;
}

}  // namespace

std::string render_text(const ChartPanel& panel, int width, int height) {
  width = std::max(width, 16);
  height = std::max(height, 4);
  const AxisRange xr = x_range(panel), yr = y_range(panel);
  auto col = [&](double x) {
    return std::clamp(int(std::lround((x - xr.lo) / (xr.hi - xr.lo) * (width - 1))), 0, width - 1);
  };
  auto row = [&](double y) {  // 0 = top
    return std::clamp(int(std::lround((yr.hi - y) / (yr.hi - yr.lo) * (height - 1))), 0,
                      height - 1);
  };
  std::vector<std::string> grid(size_t(height), std::string(size_t(width), ' '));
  // Solid lines first, so validation markers stay visible on top of them.
  std::vector<const ChartLine*> order;
  for (const ChartLine& l : panel.lines)
    if (!l.dashed) order.push_back(&l);
  for (const ChartLine& l : panel.lines)
    if (l.dashed) order.push_back(&l);
  for (const ChartLine* line : order) {
    const char c = mark(*line);
    for (size_t i = 0; i < line->xy.size(); ++i) {
      const auto [x, y] = line->xy[i];
      grid[size_t(row(y))][size_t(col(x))] = c;
      if (line->dashed || i + 1 == line->xy.size()) continue;
      // Join to the next point through the columns in between.
      const auto [nx, ny] = line->xy[i + 1];
      const int c0 = col(x), c1 = col(nx);
      for (int k = c0 + 1; k < c1; ++k) {
        const double t = double(k - c0) / double(c1 - c0);
        grid[size_t(row(y + t * (ny - y)))][size_t(k)] = c;
      }
    }
  }

  const std::vector<double> yt = nice_ticks(yr.lo, yr.hi, std::max(2, height / 4));
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  std::vector<std::string> labels(static_cast<size_t>(height));
  for (double t : yt) labels[size_t(row(t))] = tick_label(t, ystep);
  size_t label_width = 0;
  for (const std::string& l : labels) label_width = std::max(label_width, l.size());

  // The legend follows the title, wrapped at the chart's width.
  std::string out = panel.title + "   (";
  const size_t indent = out.size(), wrap = std::max<size_t>(label_width + 2 + size_t(width), 40);
  size_t column = indent;
  for (size_t i = 0; i < panel.lines.size(); ++i) {
    std::string entry(1, mark(panel.lines[i]));
    entry += ' ';
    entry += panel.lines[i].label;
    if (i > 0 && column + 2 + entry.size() + 1 > wrap) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (i > 0) {
      out += "  ";
      column += 2;
    }
    out += entry;
    column += entry.size();
  }
  out += ")\n";
  for (int r = 0; r < height; ++r)
    out += pad_left(labels[size_t(r)], label_width) + " |" + grid[size_t(r)] + "\n";
  out += std::string(label_width + 1, ' ') + "+" + std::string(size_t(width), '-') + "\n";
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 5);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  // The ends are data, not round ticks: whole numbers as they are, others one digit finer.
  auto end_label = [&](double v) {
    return v == std::floor(v) && std::abs(v) < 1e4 ? std::to_string(int64_t(v))
                                                   : tick_label(v, xstep / 10);
  };
  const std::string lo = end_label(xr.lo), hi = end_label(xr.hi);
  std::string axis = std::string(label_width + 2, ' ') + lo;
  const size_t middle = label_width + 2 + size_t(width) / 2 - panel.x_label.size() / 2;
  if (axis.size() + 1 < middle)
    axis += std::string(middle - axis.size(), ' ');
  else
    axis += " ";
  axis += panel.x_label;
  const size_t end = label_width + 2 + size_t(width);
  axis += std::string(end > axis.size() + hi.size() ? end - axis.size() - hi.size() : 1, ' ');
  out += axis + hi + "\n";
  return out;
}

}  // namespace megatron::cli
