#include "cli/plot/loss_curves.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

namespace megatron::cli {

namespace {

struct Term {
  const char* key;   // in the metrics rows
  const char* name;  // as Megatron's log line names it
};
constexpr Term kTerms[] = {{"lm_loss", "lm loss"}, {"sop_loss", "sop loss"}};

std::optional<double> value(const nlohmann::json& row, const char* key) {
  if (!row.contains(key) || !row[key].is_number()) return std::nullopt;
  const double v = row[key].get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

bool has_term(const std::vector<Run>& runs, const char* key) {
  for (const Run& r : runs)
    for (const nlohmann::json& row : r.rows)
      if (value(row, key)) return true;
  return false;
}

// Whether the runs' tokens make an x axis of their own: some row's consumed_tokens is not the
// same multiple of its iteration as the others' (a batch-size ramp, or runs of different batch
// sizes). With one constant multiple a tokens panel would repeat the iterations panel.
bool tokens_differ_from_iterations(const std::vector<Run>& runs) {
  std::optional<double> tokens_per_iteration;
  for (const Run& r : runs)
    for (const nlohmann::json& row : r.rows) {
      const std::optional<double> tokens = value(row, "consumed_tokens");
      const double iteration = row["iteration"].get<double>();
      if (!tokens || iteration <= 0) continue;
      const double ratio = *tokens / iteration;
      if (!tokens_per_iteration) tokens_per_iteration = ratio;
      if (std::abs(ratio - *tokens_per_iteration) > 1e-9 * *tokens_per_iteration) return true;
    }
  return false;
}

// The rows a line draws: "train", "validation" (the evaluations every --eval-interval) or
// "final validation" (the evaluation after the last iteration, metrics row "final": true,
// drawn as its own marker: it scored other batches than the interval evaluation of the same
// iteration, and joined to that one it would draw a vertical jump).
bool in_series(const nlohmann::json& row, const std::string& series) {
  const std::string type = row.value("type", std::string());
  const bool final = row.value("final", false);
  if (series == "train") return type == "train";
  if (series == "validation") return type == "validation" && !final;
  return type == "validation" && final;
}

ChartLine line(const Run& run, int color, const std::string& series, const char* key,
               bool by_tokens) {
  ChartLine l{run.label + " " + series, color, series != "train", {}};
  for (const nlohmann::json& row : run.rows) {
    if (!in_series(row, series)) continue;
    const std::optional<double> y = value(row, key);
    if (!y) continue;
    if (by_tokens && !row.contains("consumed_tokens")) continue;
    const double x =
        by_tokens ? row["consumed_tokens"].get<double>() : row["iteration"].get<double>();
    l.xy.emplace_back(x, *y);
  }
  return l;
}

std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string run_label(const std::string& metrics_path) {
  const std::filesystem::path p(metrics_path);
  const std::string stem = p.stem().string();
  const std::string parent = p.parent_path().filename().string();
  if ((stem == "metrics" || stem.empty()) && !parent.empty() && parent != "." && parent != "..")
    return parent;
  return stem.empty() ? metrics_path : stem;
}

std::vector<ChartPanel> loss_panels(const std::vector<Run>& runs) {
  std::vector<ChartPanel> panels;
  const bool tokens = tokens_differ_from_iterations(runs);
  for (const Term& term : kTerms) {
    if (!has_term(runs, term.key)) continue;
    for (bool by_tokens : {false, true}) {
      if (by_tokens && !tokens) continue;
      ChartPanel panel{std::string(term.name) + (by_tokens ? " vs tokens" : " vs iterations"),
                       by_tokens ? "tokens" : "iteration",
                       term.name,
                       {}};
      for (size_t i = 0; i < runs.size(); ++i)
        for (const char* series : {"train", "validation", "final validation"}) {
          ChartLine l = line(runs[i], int(i), series, term.key, by_tokens);
          if (!l.xy.empty()) panel.lines.push_back(std::move(l));
        }
      panels.push_back(std::move(panel));
    }
  }
  // The learning rate of each run, once loss panels exist (a file of evaluations alone has none).
  if (!panels.empty() && has_term(runs, "learning_rate")) {
    ChartPanel panel{"learning rate vs iterations", "iteration", "learning rate", {}};
    for (size_t i = 0; i < runs.size(); ++i) {
      ChartLine l = line(runs[i], int(i), "train", "learning_rate", false);
      if (!l.xy.empty()) panel.lines.push_back(std::move(l));
    }
    panels.push_back(std::move(panel));
  }
  return panels;
}

std::string loss_summary(const Run& run) {
  std::string out = run.label + ":";
  const ChartLine train = line(run, 0, "train", "lm_loss", false);
  const ChartLine valid = line(run, 0, "validation", "lm_loss", false);
  const ChartLine final = line(run, 0, "final validation", "lm_loss", false);
  if (train.xy.empty() && valid.xy.empty() && final.xy.empty()) return out + " no lm loss recorded";
  if (!train.xy.empty())
    out += " train lm loss " + fixed(train.xy.front().second, 3) + " -> " +
           fixed(train.xy.back().second, 3) + " (iterations " + fixed(train.xy.front().first, 0) +
           "-" + fixed(train.xy.back().first, 0) + ")";
  auto ppl = [](double loss) { return fixed(std::exp(std::min(loss, 20.0)), 1); };
  if (!valid.xy.empty()) {
    const auto& [first_it, first] = valid.xy.front();
    const auto& [last_it, last] = valid.xy.back();
    out += std::string(train.xy.empty() ? "" : ";") + " validation lm loss ";
    if (valid.xy.size() > 1 && first_it != last_it) {
      out += fixed(first, 3) + " -> " + fixed(last, 3) + ", perplexity " + ppl(first) + " -> " +
             ppl(last) + " (iterations " + fixed(first_it, 0) + "-" + fixed(last_it, 0) + ")";
    } else {
      out += fixed(last, 3) + ", perplexity " + ppl(last) + " at iteration " + fixed(last_it, 0);
    }
  }
  if (!final.xy.empty()) {
    const auto& [it, loss] = final.xy.back();
    out += std::string(train.xy.empty() && valid.xy.empty() ? "" : ";") +
           " final validation lm loss " + fixed(loss, 3) + ", perplexity " + ppl(loss) +
           " at iteration " + fixed(it, 0);
  }
  return out;
}

}  // namespace megatron::cli
