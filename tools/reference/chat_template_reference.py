#!/usr/bin/env python3
"""Reference for the chat-template renderer of `megatron serve` (src/tasks/serve/chat_template.h;
tests/unit/tasks_chat_template_test.cpp): Debian's python3-jinja2, configured as HF transformers
renders chat templates (a sandboxed environment with trim_blocks and lstrip_blocks, the
loopcontrols extension, raise_exception(), and tojson as json.dumps without ASCII escaping,
keys in their order), independently of the C++ code.

Renders the real chat templates of tests/data/chat_templates/*_tokenizer_config.json (Llama-3,
Qwen2, Mistral, ChatML) on a set of conversations, and small templates written here that use
each construct of the supported subset (whitespace control, scoping, namespace, loop variables,
filters, tests, slices, methods), and writes tests/data/chat_templates/golden.json:
[{"name", "template", "context", "output"} or {..., "error": message}].

Usage: /usr/bin/python3 tools/reference/chat_template_reference.py tests/data/chat_templates
"""
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


ENV = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                   extensions=[jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What is 2 + 2?"}],
    "user": [{"role": "user", "content": "Hello!"}],
    "multi_turn": [{"role": "user", "content": "Name a colour."},
                   {"role": "assistant", "content": "Blue."},
                   {"role": "user", "content": "Another one?"}],
    "whitespace": [{"role": "user", "content": "  padded question \n\n"}],
    # Non-ASCII text (no ß: upper() maps it to "SS" in Python, to itself in the C++ renderer,
    # which documents it).
    "unicode": [{"role": "user", "content": "Grüezi Ωmega, 世界 — \"quotes\" and 'apostrophes' \\ 🙂"}],
}

# Small templates for each construct of the subset (the real templates above use only some).
FEATURES = {
    "whitespace_control": (
        "{%- for m in messages %}\n"
        "    {%- if m.role == 'user' %}\n"
        "        {{- '<user>' + m.content }}\n"
        "    {%- else %}\n"
        "<other>{{ m.content }}\n"
        "    {%- endif %}\n"
        "  {# a comment #}\n"
        "{%- endfor %}\n"
        "{% if add_generation_prompt %}\n"
        "  <assistant>\n"
        "{% endif %}\n"),
    "blocks_trim_lstrip": (
        "start\n"
        "  {% for m in messages %}\n"
        "  [{{ m.role }}]\n"
        "  {% endfor %}\n"
        "end {{ messages | length }}\n"),
    "scoping_namespace": (
        "{% set count = 0 %}{% set ns = namespace(count=0, last='') %}"
        "{% for m in messages %}{% set count = count + 1 %}{% set ns.count = ns.count + 1 %}"
        "{% set ns.last = m.role %}{% endfor %}"
        "{{ count }} {{ ns.count }} {{ ns.last }}"),
    "loop_variables": (
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} "
        "{{ loop.revindex }} {{ loop.first }} {{ loop.last }}|{% endfor %}"),
    "filters": (
        "{% for m in messages %}{{ m.content | trim | upper }} {{ m.role | capitalize }} "
        "{{ m.content | length }} {{ m.name | default('anon') }} "
        "{{ [m.role, 'x'] | join('-') }} {{ m | tojson }}\n{% endfor %}"
        "{{ messages | first | tojson(indent=2) }} {{ (messages | last).role }}"),
    "tests_and_operators": (
        "{% for m in messages %}{{ m.name is defined }} {{ m.content is string }} "
        "{{ 'user' in m.role }} {{ m.role not in ['system'] }} {{ loop.index is odd }} "
        "{{ (loop.index0 % 2 == 0) != (m.role == 'user') }} "
        "{{ 'yes' if m.role == 'user' else 'no' }} {{ loop.index * 3 - 1 }} {{ 7 // 2 }} "
        "{{ -7 % 3 }} {{ 1 / 4 }} {{ m.role ~ '!' ~ loop.index }}\n{% endfor %}"),
    "slices_and_methods": (
        "{% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}"
        "{% set system = messages[0].content.strip() %}{% else %}{% set rest = messages %}"
        "{% set system = '' %}{% endif %}[{{ system }}]"
        "{% for m in rest %}{{ m.content.startswith('What') }} {{ m.content.split(' ')[0] }} "
        "{{ m.content[:4] }} {{ m.content[-2:] }}{% for k, v in m.items() %} {{ k }}={{ v }}"
        "{% endfor %};{% endfor %}"),
    "loop_controls_and_else": (
        "{% for m in messages if m.role != 'system' %}{% if loop.index > 2 %}{% break %}"
        "{% endif %}{% if m.role == 'assistant' %}{% continue %}{% endif %}{{ m.content }};"
        "{% else %}none{% endfor %}{% for i in range(3) %}{{ i }}{% endfor %}"
        "{% for x in [] %}x{% else %}empty{% endfor %}"),
    "raise": (
        "{% for m in messages %}{% if m.role == 'system' %}"
        "{{ raise_exception('System messages are not supported: ' + m.role) }}{% endif %}"
        "{% endfor %}ok"),
}


def render(template, context):
    try:
        return {"output": ENV.from_string(template).render(**context)}
    except TemplateError as e:
        return {"error": str(e)}


def main(directory):
    cases = []
    for path in sorted(glob.glob(os.path.join(directory, "*_tokenizer_config.json"))):
        config = json.load(open(path))
        name = os.path.basename(path)[:-len("_tokenizer_config.json")]
        for conversation, messages in CONVERSATIONS.items():
            for add in (True, False):
                context = {"messages": messages, "add_generation_prompt": add,
                           "bos_token": config.get("bos_token") or "",
                           "eos_token": config.get("eos_token") or ""}
                case = {"name": f"{name}/{conversation}/{'gen' if add else 'nogen'}",
                        "template": config["chat_template"], "context": context}
                case.update(render(config["chat_template"], context))
                cases.append(case)
    for name, template in FEATURES.items():
        for conversation, messages in CONVERSATIONS.items():
            context = {"messages": messages, "add_generation_prompt": True,
                       "bos_token": "<s>", "eos_token": "</s>"}
            case = {"name": f"{name}/{conversation}", "template": template, "context": context}
            case.update(render(template, context))
            cases.append(case)
    with open(os.path.join(directory, "golden.json"), "w") as f:
        json.dump(cases, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} refusals")


if __name__ == "__main__":
    main(sys.argv[1])
