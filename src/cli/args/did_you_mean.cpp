#include "cli/args/did_you_mean.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <vector>

namespace megatron::cli {

namespace {

// Every long flag of `app` and of its nameless subcommands (option groups), with "--".
void collect_flags(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames()) out.push_back("--" + name);
  for (const CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; }))
    if (group->get_name().empty()) collect_flags(*group, out);
}

}  // namespace

int edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: Levenshtein's table plus a transposition of neighbours.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = int(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string nearest_flag(const CLI::App& app, const std::string& word) {
  if (word.rfind("-", 0) != 0) return "";
  const std::string given = word.substr(0, word.find('='));
  std::vector<std::string> flags;
  collect_flags(app, flags);
  std::string best;
  int best_distance = 0;
  for (const std::string& flag : flags) {
    const int distance = edit_distance(given, flag);
    const int allowed = std::max<int>(2, int(std::max(given.size(), flag.size()) - 2) / 4);
    if (distance > allowed || (!best.empty() && distance >= best_distance)) continue;
    best = flag;
    best_distance = distance;
  }
  return best;
}

}  // namespace megatron::cli
