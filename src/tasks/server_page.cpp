// The web page of `megatron serve` (GET /): one self-contained HTML file, no external assets.
// It streams from POST /v1/completions (the text appears as it is generated) and shows the
// loaded model; the model's facts are written into the page as JSON.
#include <string_view>

#include "tasks/server.h"

namespace megatron {

std::string server_page_html(const nlohmann::json& model) {
  static const std::string_view page = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>megatron-cpp</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
         color: #222; }
  h1 { font-size: 1.3rem; }
  textarea { width: 100%; height: 7rem; font: inherit; padding: .5rem; box-sizing: border-box; }
  .controls { display: grid; grid-template-columns: 9rem 1fr 4rem; gap: .4rem 1rem;
              align-items: center; margin: 1rem 0; }
  output { font-variant-numeric: tabular-nums; }
  button { font: inherit; padding: .4rem 1.4rem; }
  #result { white-space: pre-wrap; border: 1px solid #ccc; border-radius: 4px; padding: .8rem;
            min-height: 4rem; background: #fafafa; }
  #result .prompt { color: #777; }
  #status { color: #777; margin: .5rem 0; min-height: 1.2rem; }
  #status.error { color: #b00; }
  #model { color: #555; margin: -.5rem 0 1rem; }
  #key_row { display: none; margin: 0 0 1rem; }
</style>
</head>
<body>
<h1>megatron-cpp text generation</h1>
<div id="model"></div>
<textarea id="prompt" placeholder="Type a prompt">The meaning of life is</textarea>
<div class="controls">
  <label for="tokens">tokens to generate</label>
  <input id="tokens" type="range" min="1" max="256" value="32">
  <output id="tokens_value" for="tokens"></output>
  <label for="temperature">temperature</label>
  <input id="temperature" type="range" min="0.05" max="2" step="0.05" value="1">
  <output id="temperature_value" for="temperature"></output>
  <label for="top_p">top-p (0: off)</label>
  <input id="top_p" type="range" min="0" max="1" step="0.05" value="0.9">
  <output id="top_p_value" for="top_p"></output>
  <label for="top_k">top-k (0: off, 1: greedy)</label>
  <input id="top_k" type="number" min="0" max="1000" value="0">
  <span></span>
</div>
<div id="key_row"><label for="api_key">API key</label> <input id="api_key" type="password"></div>
<button id="generate">Generate</button>
<div id="status"></div>
<div id="result"></div>
<script>
"use strict";
const MODEL = /*MODEL*/;
const $ = (id) => document.getElementById(id);
const count = (n) => n >= 1e9 ? (n / 1e9).toFixed(2) + "B" : n >= 1e6 ? (n / 1e6).toFixed(1) + "M"
  : n >= 1e3 ? (n / 1e3).toFixed(1) + "K" : String(n);
$("model").textContent = MODEL.name + " · " + count(MODEL.parameters) + " parameters · context " +
  MODEL.context_length + " tokens";
if (MODEL.api_key_required) $("key_row").style.display = "block";
// A prompt needs at least one token: at most context − 1 tokens can be generated.
$("tokens").max = String(Math.max(1, MODEL.context_length - 1));
$("tokens").value = String(Math.min(32, MODEL.context_length - 1));
for (const id of ["tokens", "temperature", "top_p"]) {
  const show = () => { $(id + "_value").textContent = $(id).value; };
  $(id).addEventListener("input", show);
  show();
}
// Reads the server-sent events of a streamed completion; calls onEvent with each JSON payload.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      onEvent(JSON.parse(event.slice(6)));
    }
  }
}
async function generate() {
  const prompt = $("prompt").value;
  const request = {
    model: MODEL.name,
    prompt: prompt,
    max_tokens: parseInt($("tokens").value, 10),
    temperature: parseFloat($("temperature").value),
    stream: true,
    stream_options: { include_usage: true },
  };
  const topK = parseInt($("top_k").value, 10) || 0;
  const topP = parseFloat($("top_p").value) || 0;
  if (topK > 0) request.top_k = topK; else if (topP > 0) request.top_p = topP;
  const headers = { "Content-Type": "application/json" };
  if ($("api_key").value) headers.Authorization = "Bearer " + $("api_key").value;
  $("generate").disabled = true;
  $("status").className = "";
  $("status").textContent = "generating...";
  const result = $("result");
  result.textContent = "";
  const p = document.createElement("span");
  p.className = "prompt";
  p.textContent = prompt;
  const generated = document.createTextNode("");
  result.append(p, generated);
  const started = performance.now();
  try {
    const response = await fetch("v1/completions", { method: "POST", headers, body: JSON.stringify(request) });
    if (!response.ok) throw new Error((await response.json()).error.message);
    let tokens = 0;
    await readEvents(response, (event) => {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) tokens = event.usage.completion_tokens;
      for (const choice of event.choices) generated.appendData(choice.text);
    });
    // Generated tokens only: the prompt's are not counted.
    $("status").textContent = tokens + " tokens in " + ((performance.now() - started) / 1000).toFixed(2) + " s";
  } catch (e) {
    $("status").className = "error";
    $("status").textContent = "error: " + e.message;
  } finally {
    $("generate").disabled = false;
  }
}
$("generate").addEventListener("click", generate);
</script>
</body>
</html>
)HTML";
  // The model's facts as a script literal: "<" escaped so that no name can close the script.
  std::string facts = model.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  std::string escaped;
  for (char c : facts) escaped += c == '<' ? std::string("\\u003c") : std::string(1, c);
  std::string html(page);
  const std::string_view marker = "/*MODEL*/";
  html.replace(html.find(marker), marker.size(), escaped);
  return html;
}

}  // namespace megatron
