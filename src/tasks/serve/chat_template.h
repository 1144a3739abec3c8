// Chat templates: the Jinja2 templates that HF models ship in tokenizer_config.json
// ("chat_template") to turn a list of messages into the model's prompt text, rendered without
// Python. The subset real templates use (checked against python3-jinja2 on Llama-3, Qwen2,
// Mistral and ChatML templates kept in tests/data/chat_templates):
//   {{ expr }}, {% if/elif/else/endif %}, {% for x in xs %} ... {% endfor %} with loop.index,
//   loop.index0, loop.first, loop.last, loop.length, {% set name = expr %}, {# comments #},
//   whitespace control ({%- -%}, {{- -}}), trim_blocks/lstrip_blocks off (transformers' own
//   defaults are trim_blocks and lstrip_blocks on: both are applied, as transformers does);
//   expressions: string/number/bool/none literals, lists, names, .attr and [key] lookups,
//   + - * / % (and ~ concatenation), == != < <= > >=, and/or/not, in/not in, `is defined`,
//   `is none`, `is string`, inline `a if c else b`, filters trim, length, upper, lower,
//   capitalize, default, tojson, first, last, and the calls raise_exception(msg), x.strip(),
//   x.startswith(s), x.endswith(s), x.split(s), x.items(), range(n), namespace(...).
// Strings index, slice and count by character (code point), as Python's do; upper/lower use
// Unicode's simple case mappings, so the few characters whose Python mapping changes length
// (ß → SS) differ. Anything else is an error that names it, never a silent difference.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace megatron {

// Renders `source` with the variables of `context` (a JSON object: messages,
// add_generation_prompt, bos_token, eos_token, ...; its keys keep their order, as Python dicts
// do, for loops over a dict and tojson). Throws Error: a template outside the
// subset, or the message of the template's raise_exception() (a conversation it refuses).
std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& context);

}  // namespace megatron
