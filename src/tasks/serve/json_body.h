// Request bodies as JSON, safely: the nesting depth is measured by a flat scan before the parser
// sees the body (the request log printed a 100,000-deep array recursively and crashed), and the
// log shows a bounded summary rather than the whole body.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace megatron {

// A request needs at most 5 levels (chat: body, messages, a message, its parts, a part).
constexpr int kMaxJsonDepth = 32;

// Parses `body` into `out`; "" or the sentence for a 400 answer (too deep, not JSON).
std::string parse_json_body(std::string_view body, nlohmann::json& out);

// At most `max_chars` of the body's compact JSON, with "... (N bytes)" when cut.
std::string json_log_summary(const nlohmann::json& body, size_t max_chars = 2000);

}  // namespace megatron
