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

bool has_tokens(const std::vector<Run>& runs) {
  for (const Run& r : runs)
    for (const nlohmann::json& row : r.rows)
      if (row.contains("consumed_tokens")) return true;
  return false;
}

ChartLine line(const Run& run, int color, const char* type, const char* key, bool by_tokens) {
  const bool validation = std::string(type) == "validation";
  ChartLine l{run.label + (validation ? " validation" : " train"), color, validation, {}};
  for (const nlohmann::json& row : run.rows) {
    if (row.value("type", std::string()) != type) continue;
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
  const bool tokens = has_tokens(runs);
  for (const Term& term : kTerms) {
    if (!has_term(runs, term.key)) continue;
    for (bool by_tokens : {false, true}) {
      if (by_tokens && !tokens) continue;
      ChartPanel panel{std::string(term.name) + (by_tokens ? " vs tokens" : " vs iterations"),
                       by_tokens ? "tokens" : "iteration",
                       term.name,
                       {}};
      for (size_t i = 0; i < runs.size(); ++i)
        for (const char* type : {"train", "validation"}) {
          ChartLine l = line(runs[i], int(i), type, term.key, by_tokens);
          if (!l.xy.empty()) panel.lines.push_back(std::move(l));
        }
      panels.push_back(std::move(panel));
    }
  }
  return panels;
}

std::string loss_summary(const Run& run) {
  std::string out = run.label + ":";
  const ChartLine train = line(run, 0, "train", "lm_loss", false);
  const ChartLine valid = line(run, 0, "validation", "lm_loss", false);
  if (train.xy.empty() && valid.xy.empty()) return out + " no lm loss recorded";
  if (!train.xy.empty())
    out += " train lm loss " + fixed(train.xy.front().second, 3) + " -> " +
           fixed(train.xy.back().second, 3) + " (iterations " + fixed(train.xy.front().first, 0) +
           "-" + fixed(train.xy.back().first, 0) + ")";
  if (!valid.xy.empty()) {
    auto ppl = [](double loss) { return fixed(std::exp(std::min(loss, 20.0)), 1); };
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
  return out;
}

}  // namespace megatron::cli
