#include "cli/plot/svg_chart.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace megatron::cli {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr int kPanelWidth = 480, kPanelHeight = 320;
constexpr int kLeft = 64, kRight = 16, kTop = 30, kBottom = 46;

const char* color(int index) {
  return kPalette[index % int(std::size(kPalette))];
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void draw_panel(std::ostringstream& svg, const ChartPanel& panel, double ox, double oy) {
  const double w = kPanelWidth - kLeft - kRight, h = kPanelHeight - kTop - kBottom;
  const double x0 = ox + kLeft, y0 = oy + kTop;
  const AxisRange xr = x_range(panel), yr = y_range(panel);
  auto sx = [&](double x) { return x0 + (x - xr.lo) / (xr.hi - xr.lo) * w; };
  auto sy = [&](double y) { return y0 + h - (y - yr.lo) / (yr.hi - yr.lo) * h; };

  svg << "<text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(oy + 18)
      << "\" text-anchor=\"middle\" font-weight=\"bold\">" << escape(panel.title) << "</text>\n";
  svg << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\"" << num(w)
      << "\" height=\"" << num(h) << "\" fill=\"none\" stroke=\"#444\"/>\n";
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 5), yt = nice_ticks(yr.lo, yr.hi, 6);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : xt) {
    svg << "<line x1=\"" << num(sx(t)) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(sx(t))
        << "\" y2=\"" << num(y0 + h) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << num(sx(t)) << "\" y=\"" << num(y0 + h + 16)
        << "\" text-anchor=\"middle\" font-size=\"11\">" << tick_label(t, xstep) << "</text>\n";
  }
  for (double t : yt) {
    svg << "<line x1=\"" << num(x0) << "\" y1=\"" << num(sy(t)) << "\" x2=\"" << num(x0 + w)
        << "\" y2=\"" << num(sy(t)) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << num(x0 - 6) << "\" y=\"" << num(sy(t) + 4)
        << "\" text-anchor=\"end\" font-size=\"11\">" << tick_label(t, ystep) << "</text>\n";
  }
  svg << "<text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(y0 + h + 36)
      << "\" text-anchor=\"middle\" font-size=\"12\">" << escape(panel.x_label) << "</text>\n";
  svg << "<text transform=\"translate(" << num(ox + 16) << " " << num(y0 + h / 2)
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << escape(panel.y_label)
      << "</text>\n";

  for (const ChartLine& line : panel.lines) {
    if (line.xy.empty()) continue;
    svg << "<polyline fill=\"none\" stroke=\"" << color(line.color) << "\" stroke-width=\"1.5\"";
    if (line.dashed) svg << " stroke-dasharray=\"5 3\"";
    svg << " points=\"";
    for (const auto& [x, y] : line.xy) svg << num(sx(x)) << "," << num(sy(y)) << " ";
    svg << "\"><title>" << escape(line.label) << "</title></polyline>\n";
    if (!line.dashed) continue;
    for (const auto& [x, y] : line.xy)
      svg << "<circle cx=\"" << num(sx(x)) << "\" cy=\"" << num(sy(y)) << "\" r=\"2.5\" fill=\""
          << color(line.color) << "\"/>\n";
  }
}

}  // namespace

std::string render_svg(const std::string& title, const std::vector<ChartPanel>& panels,
                       int columns) {
  columns = std::max(1, std::min<int>(columns, int(panels.size())));
  const int rows = (int(panels.size()) + columns - 1) / columns;

  // The legend: every distinct (label, color, dashed) once, in order of appearance.
  std::vector<const ChartLine*> legend;
  std::set<std::string> seen;
  for (const ChartPanel& p : panels)
    for (const ChartLine& l : p.lines)
      if (seen.insert(l.label + "\n" + std::to_string(l.color) + (l.dashed ? "d" : "s")).second)
        legend.push_back(&l);
  // Wide enough for the title too (about 9 px per character of the 16 px bold font).
  const int width = std::max(columns * kPanelWidth, int(title.size()) * 9 + 40);
  const int per_row = std::max(1, width / 240);
  const int legend_rows = (int(legend.size()) + per_row - 1) / per_row;
  const int top = 40 + 20 * legend_rows;
  const int height = top + rows * kPanelHeight;

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << width / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\""
      << " font-weight=\"bold\">" << escape(title) << "</text>\n";
  for (size_t i = 0; i < legend.size(); ++i) {
    const double x = 20 + double(i % per_row) * 240, y = 44 + double(i / per_row) * 20;
    svg << "<line x1=\"" << num(x) << "\" y1=\"" << num(y - 4) << "\" x2=\"" << num(x + 28)
        << "\" y2=\"" << num(y - 4) << "\" stroke=\"" << color(legend[i]->color)
        << "\" stroke-width=\"2\"" << (legend[i]->dashed ? " stroke-dasharray=\"5 3\"" : "")
        << "/>\n";
    svg << "<text x=\"" << num(x + 34) << "\" y=\"" << num(y) << "\" font-size=\"12\">"
        << escape(legend[i]->label) << "</text>\n";
  }
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(svg, panels[i], double(int(i) % columns) * kPanelWidth,
               top + double(int(i) / columns) * kPanelHeight);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace megatron::cli
