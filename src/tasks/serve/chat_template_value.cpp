#include "tasks/serve/chat_template_value.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megatron::jinja {

const Value kUndefined = Value(Value::value_t::discarded);

bool is_undefined(const Value& v) {
  return v.is_discarded();
}

bool truthy(const Value& v) {
  if (is_undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

// Python's repr of a float: the shortest text that reads back the same, with ".0" for integers.
std::string float_text(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  std::string s = Value(d).dump();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// Python's str() of a value, as {{ }} prints it.
std::string text_of(const Value& v) {
  if (is_undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return float_text(v.get<double>());
  return repr(v);
}

std::string repr(const Value& v) {
  if (v.is_string()) {
    std::string s = "'";
    for (char c : v.get<std::string>()) {
      if (c == '\'' || c == '\\') s += '\\';
      if (c == '\n') {
        s += "\\n";
        continue;
      }
      s += c;
    }
    return s + "'";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + repr(v[i]);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false)
      s += (first ? "" : ", ") + repr(Value(it.key())) + ": " + repr(it.value());
    return s + "}";
  }
  return text_of(v);
}

[[noreturn]] void fail(const std::string& what) {
  MT_THROW("chat template: ", what);
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent): ", " and ": " between items
// without an indent, "," and newlines with one. Recursion is bounded by the request's JSON
// depth (tasks/serve/json_body.h).
std::string python_json(const Value& v, int indent, int level) {
  if (v.is_number_float()) return float_text(v.get<double>());
  if (!v.is_array() && !v.is_object())
    return v.dump(-1, ' ', false, Value::error_handler_t::replace);
  if (v.empty()) return v.is_array() ? "[]" : "{}";
  // A newline and the next level's indent (indent ≥ 0 only).
  const auto newline = [&](int depth) {
    std::string line(1, '\n');
    line.append(size_t(std::max(indent * depth, 0)), ' ');
    return line;
  };
  const std::string pad = indent < 0 ? std::string() : newline(level + 1);
  const std::string sep = indent < 0 ? ", " : ",";
  std::string s(1, v.is_array() ? '[' : '{');
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false) {
    s += (first ? "" : sep) + pad;
    if (v.is_object())
      s += Value(it.key()).dump(-1, ' ', false, Value::error_handler_t::replace) + ": ";
    s += python_json(it.value(), indent, level + 1);
  }
  if (indent >= 0) s += newline(level);
  return s + (v.is_array() ? ']' : '}');
}

}  // namespace megatron::jinja
