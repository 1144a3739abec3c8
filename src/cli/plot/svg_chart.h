// Renders chart panels (chart.h) as one standalone SVG document: a title, a legend, and the
// panels in a grid of `columns`, each with axes, round ticks and a light grid. Opens in any
// browser; needs no fonts or scripts beyond the browser's own.
#pragma once

#include <string>
#include <vector>

#include "cli/plot/chart.h"

namespace megatron::cli {

std::string render_svg(const std::string& title, const std::vector<ChartPanel>& panels,
                       int columns);

}  // namespace megatron::cli
