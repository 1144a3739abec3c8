// The web page of `megatron serve` (GET /): one self-contained HTML file, no external assets.
#include "tasks/server.h"

namespace megatron {

const std::string& server_page_html() {
  static const std::string page = R"HTML(<!DOCTYPE html>
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
</style>
</head>
<body>
<h1>megatron-cpp text generation</h1>
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
<button id="generate">Generate</button>
<div id="status"></div>
<div id="result"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
for (const id of ["tokens", "temperature", "top_p"]) {
  const show = () => { $(id + "_value").textContent = $(id).value; };
  $(id).addEventListener("input", show);
  show();
}
async function generate() {
  const prompt = $("prompt").value;
  const request = {
    prompts: [prompt],
    tokens_to_generate: parseInt($("tokens").value, 10),
    temperature: parseFloat($("temperature").value),
    no_log: false,
  };
  const topK = parseInt($("top_k").value, 10) || 0;
  const topP = parseFloat($("top_p").value) || 0;
  if (topK > 0) request.top_k = topK; else if (topP > 0) request.top_p = topP;
  $("generate").disabled = true;
  $("status").className = "";
  $("status").textContent = "generating...";
  const started = performance.now();
  try {
    const response = await fetch("api", {
      method: "PUT",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(typeof answer === "string" ? answer : JSON.stringify(answer));
    const text = answer.text[0];
    const result = $("result");
    result.textContent = "";
    const p = document.createElement("span");
    p.className = "prompt";
    p.textContent = text.startsWith(prompt) ? prompt : "";
    result.append(p, document.createTextNode(text.slice(p.textContent.length)));
    const n = answer.segments[0].length;
    $("status").textContent = n + " tokens in " + ((performance.now() - started) / 1000).toFixed(2) + " s";
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
  return page;
}

}  // namespace megatron
