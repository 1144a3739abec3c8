// Argparse's rule for a repeated flag, for CLI11: the last occurrence wins.
//
// Megatron-LM parses with argparse, where `--weight-decay 0.1 ... --weight-decay 0.01` sets
// 0.01: its own example scripts repeat flags, and users append overrides to a script's flag
// list. CLI11 instead rejects a repeated single-value option and concatenates a repeated list
// option. This drops every occurrence of an option (with its values) but the last, so that
// CLI11 then sees each option at most once. Both spellings of an option (`--flag` and its
// `--no-flag` negation, or two aliases) are one option: the last of either wins. An option
// made repeatable (argparse's action="append", e.g. generate's --prompt) keeps every occurrence.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace megatron::cli {

// Makes `option` (a vector option) take one value per occurrence and keep every occurrence,
// in order: `--prompt a --prompt b` gives {a, b}. Returns `option`.
CLI::Option* repeatable(CLI::Option* option);

// `args` without the program name. An option's values are the tokens after it that do not
// look like options (a '-' followed by anything but a number), at most as many as it takes;
// `--flag=value` is one token. Unknown tokens are kept for CLI11 to report; everything after
// "--" is kept as is.
std::vector<std::string> keep_last_occurrences(const CLI::App& app,
                                               const std::vector<std::string>& args);

}  // namespace megatron::cli
