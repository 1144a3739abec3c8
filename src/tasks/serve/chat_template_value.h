// Values of the chat-template renderer (tasks/serve/chat_template.h): JSON values that keep
// their keys' order, as Python dicts do, and Python's views of them (truth, str(), repr(),
// json.dumps).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace megatron::jinja {

// "undefined" (a name that is not set) is the discarded value.
using Value = nlohmann::ordered_json;
extern const Value kUndefined;

bool is_undefined(const Value& v);
bool truthy(const Value& v);          // Python's bool()
std::string text_of(const Value& v);  // str(), as {{ }} prints it ("" when undefined)
std::string repr(const Value& v);     // repr()
std::string float_text(double d);     // repr() of a float
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none), from nesting `level`.
std::string python_json(const Value& v, int indent, int level);
// Throws Error "chat template: <what>".
[[noreturn]] void fail(const std::string& what);

}  // namespace megatron::jinja
