// MegatronFlags: every flag of Megatron-LM's argument parser on a `pretrain-*` command line.
//
// A Megatron launch script must run with only its launcher replaced, so each flag of
// Megatron's `arguments.py` (the list in megatron_flag_list.inc, generated from Megatron's own
// parser by tools/reference/megatron_flags.py) is, on each pretrain subcommand, one of:
//   - implemented: the subcommand registered it itself (cli/args/args.h and the subcommand's file);
//   - accepted without effect: it only selects a GPU implementation, a fusion, an overlap or a
//     telemetry service, so ignoring it trains, logs and saves the same thing; logged once;
//   - rejected: it would change what is trained, logged, saved or loaded and is not supported;
//     the run stops before any work with "--flag: reason".
// Some flags have no effect only at their default value ("--context-parallel-size 1") and are
// rejected with any other value. docs/megatron-compat.md is this table, printed by
// `megatron pretrain-gpt --print-megatron-flags` (and -bert) through
// tools/megatron_compat_table.sh.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/language_model_config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace megatron::cli {

// How a Megatron flag that a subcommand does not implement is treated.
struct ForeignFlagRule {
  bool rejected = false;      // true: the run stops; false: accepted and logged as no effect
  std::string reason;         // why, in words ("mixture of experts is not supported")
  std::string neutral_value;  // non-empty: no effect with exactly this value, rejected otherwise
  // A model flag on a command whose model is a checkpoint's (cli/args/checkpoint_model_flags.h):
  // checked against the checkpoint by MegatronFlags::check_model_flags.
  bool model = false;
};

// What the subcommand does with Megatron's flags.
enum class FlagContext {
  // pretrain-gpt, pretrain-bert, finetune: they register the flags they implement; every other
  // flag has a rule in the table.
  kTraining,
  // generate (Megatron's inference scripts take the training script's flags): the model is the
  // checkpoint's, so the model flags are checked against it and the training flags that the
  // pretrain commands implement have no effect.
  kCheckpointModel,
};

// The rule for `flag` in `context`, or nullopt when the table does not classify it (a unit test
// keeps every Megatron flag classified for the pretrain commands; in kCheckpointModel every flag
// has a rule).
std::optional<ForeignFlagRule> classify_megatron_flag(std::string_view flag,
                                                      FlagContext context = FlagContext::kTraining);

// Number of values a Megatron flag takes: 0 (a switch), N, or kMegatronList (one or more).
constexpr int kMegatronList = -1;
struct MegatronFlag {
  const char* name;
  int arity;
};
const std::vector<MegatronFlag>& megatron_flag_list();

class MegatronFlags {
 public:
  // Registers on `app` every Megatron flag that `app` does not already have, so that parsing
  // accepts it; call after the subcommand registered all of its own flags.
  explicit MegatronFlags(CLI::App& app, FlagContext context = FlagContext::kTraining);

  // After parsing: stops (megatron::Error "--flag: reason") at the first rejected flag given,
  // and logs each given flag that has no effect here.
  void check() const;

  // kCheckpointModel, once the model is built from the checkpoint `load`: each model flag given
  // must agree with `config`, else an Error naming every one that differs; with
  // `use_checkpoint_args` the checkpoint's values stand and each difference is logged
  // (Megatron's --use-checkpoint-args).
  void check_model_flags(const LanguageModelConfig& config, bool use_checkpoint_args,
                         const std::string& load) const;

  // Whether `flag`, one of the flags registered here (not implemented), was given.
  bool given(std::string_view flag) const;

  // Parses the command line into the app (cli/args/args.h parse_command_line: argparse's rules)
  // and, for --print-megatron-flags, prints table(). Returns the exit code when the command
  // stops here (help, a parse error, the table), else -1.
  int parse(int argc, char** argv);

  // One line per Megatron flag: "flag<TAB>status<TAB>note", status being "supported",
  // "no effect", "rejected" or "no effect if VALUE"; notes are the help text or the reason.
  std::string table() const;

 private:
  struct Foreign {
    const char* name;
    CLI::Option* option;
    ForeignFlagRule rule;
    std::vector<std::string> values;  // as given (empty for a switch)
  };
  CLI::App& app_;
  std::vector<Foreign> foreign_;
  bool print_table_ = false;
};

}  // namespace megatron::cli
