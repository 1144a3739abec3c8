// "did you mean `--hidden-size`?": the registered flag nearest to a misspelled one, for the
// "unrecognized arguments" error of every subcommand's parser (cli/args/arg_table.h
// parse_command_line). The candidates are the flags registered on the subcommand's App, which
// for the pretrain, finetune, eval and generate commands include every Megatron-LM flag
// (cli/args/megatron_flags.h).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace megatron::cli {

// The edit distance (insertions, deletions, substitutions and swaps of two neighbours, each 1)
// between `a` and `b`.
int edit_distance(const std::string& a, const std::string& b);

// The flag of `app` (or of its option groups) nearest to `word` ("--hiden-size",
// "--hidden_size=64": the part before '=' counts), when it is close enough to be a likely
// misspelling: at most 2 edits, or a quarter of the longer name's letters; else "". Ties go to
// the flag registered first.
std::string nearest_flag(const CLI::App& app, const std::string& word);

}  // namespace megatron::cli
