#include "cli/args/arg_table.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>

#include "cli/args/last_flag_wins.h"
#include "core/logging.h"
#include "core/number_format.h"

namespace megatron::cli {

namespace {

// Megatron's attribute name of a flag: "--hidden-size" → "hidden_size".
// "--save-interval,--persistent-save-interval" (aliases) → "save_interval".
std::string attribute_name(const std::string& flag) {
  std::string name = flag.substr(0, flag.find(','));
  name = name.substr(name.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Values print as Python prints them in Megatron's argument dump.
std::string show(const std::string& v) {
  return v.empty() ? "None" : v;
}
std::string show(bool v) {
  return v ? "True" : "False";
}
std::string show(int v) {
  return std::to_string(v);
}
std::string show(int64_t v) {
  return std::to_string(v);
}
std::string show(uint64_t v) {
  return std::to_string(v);
}
std::string show(double v) {
  return python_float_repr(v);
}
template <typename T>
std::string show(const std::optional<T>& v) {
  return v ? show(*v) : "None";
}
std::string show(const std::vector<int>& v) {
  if (v.empty()) return "None";
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string show(const std::vector<std::string>& v) {
  if (v.empty()) return "None";
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", '" : "'") + v[i] + "'";
  return s + "]";
}

// A list of floats as Megatron's argument dump prints one (--moe-aux-loss-coeff): one value
// alone (Megatron unwraps a list of one), else Python's list repr.
std::string show(const std::vector<double>& v) {
  if (v.size() == 1) return show(v[0]);
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + show(v[i]);
  return s + "]";
}

// Python's repr of a list of ints, as Megatron's argument dump prints --iterations-to-skip.
std::string show(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

template <typename T>
nlohmann::json to_json_value(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
template <typename T>
nlohmann::json to_json_value(const T& v) {
  return nlohmann::json(v);
}

// CLI11 converts integers with strtoll/strtoull, which saturate out-of-range values, wrap
// negative ones into unsigned types and read "010" as octal; and it takes "nan" and "inf" as
// numbers. Values are therefore checked first: a decimal integer that fits the field, or a
// finite number.
template <typename T>
CLI::Validator number_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if constexpr (std::is_integral_v<T>) {
          T v{};
          const char* begin = value.data() + (value.size() > 1 && value[0] == '+');
          const char* end = value.data() + value.size();
          const auto [ptr, ec] = std::from_chars(begin, end, v);
          if (ec == std::errc() && ptr == end) {
            value = std::to_string(v);  // plain decimal for CLI11 ("010" is not octal)
            return "";
          }
          if (std::is_unsigned_v<T> && !value.empty() && value[0] == '-')
            return "'" + value + "' is negative, expected a non-negative integer";
          return "'" + value + "' is not an integer in [" +
                 std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "]";
        } else {
          char* end = nullptr;
          const double v = std::strtod(value.c_str(), &end);
          if (value.empty() || end != value.c_str() + value.size())
            return "'" + value + "' is not a number";
          if (!std::isfinite(v)) return "'" + value + "' is not a finite number";
          return "";
        }
      },
      std::is_integral_v<T> ? "INT" : "FLOAT", "number");
}

template <typename T>
constexpr bool is_optional_v = false;
template <typename T>
constexpr bool is_optional_v<std::optional<T>> = true;

}  // namespace

template <typename T>
void ArgTable::add(const std::string& flag, T& field, const std::string& help) {
  if constexpr (is_optional_v<T>) {
    using Value = typename T::value_type;
    app_.add_option_function<Value>(
            flag, [&field](const Value& v) { field = v; }, help)
        ->transform(number_validator<Value>());
  } else if constexpr (std::is_arithmetic_v<T>) {
    app_.add_option(flag, field, help)->transform(number_validator<T>());
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    // "2 2" as one argument (how Megatron's CI scripts quote a YAML value with spaces) is two.
    app_.add_option(flag, field, help)->delimiter(' ');
  } else {
    app_.add_option(flag, field, help);
  }
  const std::string name = attribute_name(flag);
  printers_.emplace_back(name, [&field] { return show(field); });
  jsoners_.emplace_back(name, [&field] { return to_json_value(field); });
}

template void ArgTable::add(const std::string&, int&, const std::string&);
template void ArgTable::add(const std::string&, int64_t&, const std::string&);
template void ArgTable::add(const std::string&, uint64_t&, const std::string&);
template void ArgTable::add(const std::string&, double&, const std::string&);
template void ArgTable::add(const std::string&, std::string&, const std::string&);
template void ArgTable::add(const std::string&, std::optional<double>&, const std::string&);
template void ArgTable::add(const std::string&, std::optional<int>&, const std::string&);
template void ArgTable::add(const std::string&, std::vector<std::string>&, const std::string&);
template void ArgTable::add(const std::string&, std::vector<int64_t>&, const std::string&);
template void ArgTable::add(const std::string&, std::vector<int>&, const std::string&);
template void ArgTable::add(const std::string&, std::vector<double>&, const std::string&);

void ArgTable::add_flag(const std::string& flag, bool& field, const std::string& help) {
  app_.add_flag(flag, field, help);
  const std::string name = attribute_name(flag);
  printers_.emplace_back(name, [&field] { return show(field); });
  jsoners_.emplace_back(name, [&field] { return nlohmann::json(field); });
}

void ArgTable::add_negatable_flag(const std::string& flag, const std::string& negation, bool& field,
                                  const std::string& help) {
  app_.add_flag(flag + ",!" + negation, field, help);
  const std::string name = attribute_name(flag);
  printers_.emplace_back(name, [&field] { return show(field); });
  jsoners_.emplace_back(name, [&field] { return nlohmann::json(field); });
}

std::string ArgTable::format() const {
  std::vector<std::string> lines;
  for (const auto& [name, print] : printers_) {
    const size_t dots = name.size() < 48 ? 48 - name.size() : 1;
    lines.push_back("  " + name + " " + std::string(dots, '.') + " " + print());
  }
  std::sort(lines.begin(), lines.end(), [](const std::string& a, const std::string& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      return std::tolower(x) < std::tolower(y);
    });
  });
  std::string out = "------------------------ arguments ------------------------\n";
  for (const std::string& l : lines) out += l + "\n";
  out += "-------------------- end of arguments ---------------------";
  return out;
}

nlohmann::json ArgTable::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : jsoners_) j[name] = value();
  return j;
}

int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    // argparse's rule (cli/args/last_flag_wins.h); CLI11 takes its arguments in reverse order.
    std::vector<std::string> args =
        keep_last_occurrences(app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
    std::reverse(args.begin(), args.end());
    app.parse(std::move(args));
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the extra words in reverse; say it as argparse does, in command-line order.
    if (log_rank() == 0) {
      std::string words;
      for (const std::string& w : app.remaining()) words += (words.empty() ? "" : " ") + w;
      std::fprintf(stderr,
                   "%s: error: unrecognized arguments: %s\nRun with --help for more "
                   "information.\n",
                   app.get_name().c_str(), words.c_str());
    }
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same command line: one of them prints the help or the error.
    return log_rank() == 0 ? app.exit(e) : e.get_exit_code();
  }
  return -1;
}

}  // namespace megatron::cli
