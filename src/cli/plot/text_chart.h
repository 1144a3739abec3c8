// Renders one chart panel (chart.h) as plain text for the terminal, so a run's loss curve can
// be looked at where it ran:
//
//   lm loss   (* train  o validation)
//     10.96 |*
//           | **
//      8.50 |   ***o
//           |      ******o******
//      6.04 |                   ****o*****o
//           +----------------------------------
//            0        iteration             400
//
// Each line is drawn with its own character: solid lines with "*+x#%&", dashed (validation)
// ones with "o@O$", by color index, points joined column by column.
#pragma once

#include <string>

#include "cli/plot/chart.h"

namespace megatron::cli {

std::string render_text(const ChartPanel& panel, int width, int height);

}  // namespace megatron::cli
