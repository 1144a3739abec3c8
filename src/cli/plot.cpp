// `megatron plot` — training and validation loss of one or more runs, from their
// --metrics-file, against iterations and against tokens: an SVG file to open in a browser,
// and the same curve as text on the terminal.
//
//   megatron plot runs/a/metrics.jsonl [runs/b/metrics.jsonl ...] [--output loss.svg]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/args/arg_table.h"
#include "cli/plot/loss_curves.h"
#include "cli/plot/svg_chart.h"
#include "cli/plot/text_chart.h"
#include "cli/subcommands.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "train/log/metrics_file.h"

namespace megatron::cli {

int run_plot(int argc, char** argv) {
  CLI::App app{"Plot training and validation loss from --metrics-file JSONL files (SVG + text)",
               "megatron plot"};
  std::vector<std::string> files, labels;
  std::string output, title = "training and validation loss";
  int width = 64, height = 14;
  bool no_text = false;
  app.add_option("metrics_files", files, "--metrics-file JSONL of each run to draw")->required();
  app.add_option("-o,--output", output,
                 "SVG file to write (default: the first metrics file with .svg)");
  app.add_option("--label", labels,
                 "legend name of each run, in order (default: its directory or file name)");
  app.add_option("--title", title, "title of the SVG")->capture_default_str();
  app.add_option("--text-width", width, "columns of the terminal chart")->capture_default_str();
  app.add_option("--text-height", height, "rows of the terminal chart")->capture_default_str();
  app.add_flag("--no-text", no_text, "do not print the terminal chart");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  MT_REQUIRE(labels.empty() || labels.size() == files.size(), "--label was given ", labels.size(),
             " times for ", files.size(), " metrics files: give one per file, or none");

  std::vector<Run> runs;
  for (size_t i = 0; i < files.size(); ++i)
    runs.push_back({labels.empty() ? run_label(files[i]) : labels[i], read_metrics_file(files[i])});
  const std::vector<ChartPanel> panels = loss_panels(runs);
  MT_REQUIRE(!panels.empty(), "no loss values in ", files.front(),
             files.size() > 1 ? " or the other files" : "",
             ": was it written by pretrain-gpt/pretrain-bert --metrics-file, and did a log "
             "interval (--log-interval) pass?");

  if (output.empty())
    output = std::filesystem::path(files.front()).replace_extension(".svg").string();
  const auto parent = std::filesystem::path(output).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  // Two columns: iterations on the left, tokens on the right (when the rows record them;
  // else BERT's lm and sop loss side by side).
  const int columns = panels.size() > 1 ? 2 : 1;
  write_file_durably(output, render_svg(title, panels, columns));

  if (!no_text) std::printf("%s\n", render_text(panels.front(), width, height).c_str());
  for (const Run& run : runs) std::printf("%s\n", loss_summary(run).c_str());
  std::printf("wrote %s (open it in a web browser)\n", output.c_str());
  return 0;
}

}  // namespace megatron::cli
