// ArgTable: the flags a subcommand registers on its CLI::App, each with a way to print its
// current value, so that the shared and the subcommand's own flags are validated, printed
// (Megatron's "arguments" block; unset optional values print as "None", as Megatron prints
// them) and stored in checkpoints alike. And the parse itself, with argparse's rule for
// repeated flags.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace megatron::cli {

// The flags registered on an App, each with a way to print its current value. Lets
// subcommands add their own flags next to the shared ones and print/serialise all of them.
class ArgTable {
 public:
  explicit ArgTable(CLI::App& app) : app_(app) {}
  template <typename T>
  void add(const std::string& flag, T& field, const std::string& help);
  // A flag given once per value, every occurrence kept (argparse's action="append";
  // cli/args/last_flag_wins.h repeatable()).
  void add_repeatable(const std::string& flag, std::vector<std::string>& field,
                      const std::string& help);
  void add_flag(const std::string& flag, bool& field, const std::string& help);
  // `flag` sets `field`, `negation` clears it; printed under `flag`'s name.
  void add_negatable_flag(const std::string& flag, const std::string& negation, bool& field,
                          const std::string& help);

  // A numeric flag whose unset value (0) stands for a default: given, it must be positive —
  // Megatron's None default has no spelling on the command line, and 0 given there is not
  // the default. `omitted`: what leaving the flag out gives, for the message.
  void require_positive(const std::string& flag, const std::string& omitted);

  // Megatron's "arguments" block: `  name ......... value`, sorted by name.
  std::string format() const;
  nlohmann::json to_json() const;

 private:
  CLI::App& app_;
  std::vector<std::pair<std::string, std::function<std::string()>>> printers_;
  std::vector<std::pair<std::string, std::function<nlohmann::json()>>> jsoners_;
};

// Parses argv into `app` with argparse's rule for repeated flags: the last occurrence wins
// (cli/args/last_flag_wins.h). Returns -1 to continue, else the exit code (0 for --help, non-zero
// for an unknown flag or bad value, after printing the message — on rank 0 only: every rank
// parses the same command line).
int parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace megatron::cli
