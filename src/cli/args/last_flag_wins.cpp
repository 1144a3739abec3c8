#include "cli/args/last_flag_wins.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <map>

namespace megatron::cli {

namespace {

// argparse takes "-1" or "-1e-5" as a value, anything else starting with '-' as an option.
bool looks_like_option(const std::string& token) {
  if (token.size() < 2 || token[0] != '-') return false;
  char* end = nullptr;
  std::strtod(token.c_str(), &end);
  return *end != '\0';
}

}  // namespace

CLI::Option* repeatable(CLI::Option* option) {
  return option->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

std::vector<std::string> keep_last_occurrences(const CLI::App& app,
                                               const std::vector<std::string>& args) {
  struct Span {
    size_t begin, end;
    const CLI::Option* option;
  };
  std::vector<Span> spans;                    // every recognised option with its values
  std::map<const CLI::Option*, size_t> last;  // option → index of its last span
  size_t i = 0;
  while (i < args.size() && args[i] != "--") {
    const std::string& token = args[i];
    const size_t eq = token.find('=');
    const CLI::Option* option =
        looks_like_option(token) ? app.get_option_no_throw(token.substr(0, eq)) : nullptr;
    if (option == nullptr) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (eq == std::string::npos) {
      const int max_values = option->get_items_expected_max();
      for (int taken = 0; taken < max_values && end < args.size() && args[end] != "--" &&
                          !looks_like_option(args[end]);
           ++taken)
        ++end;
    }
    // A repeatable option's occurrences all stay (repeatable() is the only TakeAll here).
    if (option->get_multi_option_policy() != CLI::MultiOptionPolicy::TakeAll) {
      last[option] = spans.size();
      spans.push_back({i, end, option});
    }
    i = end;
  }

  std::vector<bool> dropped(args.size(), false);
  for (size_t s = 0; s < spans.size(); ++s) {
    if (last[spans[s].option] == s) continue;  // the last occurrence of its option
    for (size_t t = spans[s].begin; t < spans[s].end; ++t) dropped[t] = true;
  }
  std::vector<std::string> kept;
  for (size_t t = 0; t < args.size(); ++t)
    if (!dropped[t]) kept.push_back(args[t]);
  return kept;
}

}  // namespace megatron::cli
