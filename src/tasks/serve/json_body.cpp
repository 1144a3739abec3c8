#include "tasks/serve/json_body.h"

#include <algorithm>

namespace megatron {

namespace {

// The deepest nesting of arrays and objects in `text`, counted without recursion; brackets
// inside strings (escapes included) do not count. Stops counting past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::string parse_json_body(std::string_view body, nlohmann::json& out) {
  if (nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    return "the request body nests arrays and objects deeper than " +
           std::to_string(kMaxJsonDepth) + " levels";
  try {
    out = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    return std::string("the request body is not valid JSON: ") + e.what();
  }
  return "";
}

std::string json_log_summary(const nlohmann::json& body, size_t max_chars) {
  std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_chars)
    text = text.substr(0, max_chars) + "... (" + std::to_string(text.size()) + " bytes)";
  return text;
}

}  // namespace megatron
