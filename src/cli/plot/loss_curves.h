// Loss curves of training runs, from their --metrics-file rows (train/log/metrics_file.h), as
// chart panels for `megatron plot`, and a one-line summary per run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/plot/chart.h"

namespace megatron::cli {

struct Run {
  std::string label;
  std::vector<nlohmann::json> rows;
};

// "own_tp2" for "runs/own_tp2/metrics.jsonl", else the file name without ".jsonl".
std::string run_label(const std::string& metrics_path);

// For every loss term the runs logged (lm loss, and BERT's sop loss) a panel against
// iterations and, when the rows' consumed_tokens are not one constant multiple of their
// iterations (a batch-size ramp, runs of different batch sizes), one against tokens: per run a
// solid training line, a dashed line of the evaluations every --eval-interval and a marker for
// the final evaluation (row "final": true). Then, when the rows record it, a panel of each
// run's learning rate against iterations. Rows without a finite value are skipped.
std::vector<ChartPanel> loss_panels(const std::vector<Run>& runs);

// "run: train lm loss 10.393 -> 6.671 (iterations 10-50); validation lm loss 7.569 -> 7.169,
// perplexity 1937.3 -> 1298.7 (iterations 25-50); final validation lm loss 7.150, perplexity
// 1274.1 at iteration 50" (one interval evaluation: "... at iteration 50").
std::string loss_summary(const Run& run);

}  // namespace megatron::cli
