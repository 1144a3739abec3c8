// The official `openai` npm client (unmodified) against `megatron serve`:
//   node serve_openai_client.js NODE_MODULES_DIR BASE_URL API_KEY MODEL
// Completions and chat, whole and streamed (the streamed chunks reassemble to the whole text
// under greedy decoding), n > 1, seeds, stop sequences, logprobs, echo, usage, /v1/models, and
// the errors the client raises. Exits 0 when every check passed, else prints why and exits 1.
"use strict";
const path = require("path");
const [modules, baseURL, apiKey, model] = process.argv.slice(2);
const OpenAI = require(path.join(modules, "openai"));
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let failures = 0;
const check = (ok, what) => {
  console.log((ok ? "ok   " : "FAIL ") + what);
  if (!ok) failures++;
};
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// Reassembles a streamed completion or chat: per choice index, its text, finish_reason and
// logprobs (each chunk's lists joined: completions' tokens, token_logprobs, top_logprobs,
// text_offset; chat's content), and how many chunks carried logprobs.
async function collect(stream, chat) {
  const choices = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const slot = choices[c.index] ||
        (choices[c.index] = { text: "", finish_reason: null, logprobs: null, logprob_chunks: 0 });
      slot.text += chat ? (c.delta.content || "") : c.text;
      if (c.finish_reason) slot.finish_reason = c.finish_reason;
      if (c.logprobs) {
        slot.logprob_chunks++;
        if (!slot.logprobs) slot.logprobs = {};
        for (const [key, list] of Object.entries(c.logprobs))
          slot.logprobs[key] = (slot.logprobs[key] || []).concat(list);
      }
    }
  }
  return { choices, usage, chunks };
}

// Two logprobs objects agree: the same tokens and offsets, log-probabilities within 1e-6.
function sameLogprobs(a, b) {
  const close = (x, y) => (x === null || y === null ? x === y : Math.abs(x - y) < 1e-6);
  const sameTop = (x, y) => same(Object.keys(x || {}), Object.keys(y || {})) &&
    Object.keys(x || {}).every((k) => close(x[k], y[k]));
  if (a.content || b.content)
    return a.content.length === b.content.length && a.content.every((e, j) => {
      const f = b.content[j];
      return e.token === f.token && close(e.logprob, f.logprob) && same(e.bytes, f.bytes) &&
        e.top_logprobs.length === f.top_logprobs.length &&
        e.top_logprobs.every((t, k) => t.token === f.top_logprobs[k].token && close(t.logprob, f.top_logprobs[k].logprob));
    });
  return same(a.tokens, b.tokens) && same(a.text_offset, b.text_offset) &&
    a.token_logprobs.length === b.token_logprobs.length &&
    a.token_logprobs.every((x, j) => close(x, b.token_logprobs[j])) &&
    a.top_logprobs.length === b.top_logprobs.length && a.top_logprobs.every((m, j) => sameTop(m, b.top_logprobs[j]));
}

async function expectError(what, status, call) {
  try {
    await call();
    check(false, `${what}: no error`);
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === status && e.error && e.error.message,
      `${what}: ${e.constructor.name} ${e.status} "${e.error && e.error.message}"`);
  }
}

async function main() {
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === model, `models: ${JSON.stringify(models.data)}`);

  const request = { model, prompt: "1 2 3", max_tokens: 8, temperature: 0 };
  // Errors, as the client raises them (none reaches the model).
  await expectError("unknown model", 404, () => client.completions.create({ ...request, model: "gpt-4" }));
  await expectError("too long", 400, () => client.completions.create({ ...request, max_tokens: 100000 }));
  await expectError("n = 0", 400, () => client.completions.create({ ...request, n: 0 }));
  await expectError("bad message", 400, () => client.chat.completions.create({ model, messages: [] }));
  const wrongKey = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await expectError("wrong API key", 401, () => wrongKey.models.list());

  // Completions: greedy, whole and streamed.
  const whole = await client.completions.create(request);
  const text = whole.choices[0].text;
  check(whole.object === "text_completion" && text.length > 0 && whole.usage.prompt_tokens === 3 &&
    whole.usage.completion_tokens === 8 && whole.usage.total_tokens === 11,
  `completion: "${text}" ${JSON.stringify(whole.usage)} ${whole.choices[0].finish_reason}`);
  const streamed = await collect(await client.completions.create({ ...request, stream: true,
    stream_options: { include_usage: true } }), false);
  check(streamed.choices[0].text === text && streamed.choices[0].finish_reason === whole.choices[0].finish_reason &&
    streamed.chunks > 2 && same(streamed.usage, whole.usage),
  `streamed completion reassembles: "${streamed.choices[0].text}" in ${streamed.chunks} chunks`);

  // n > 1 with a seed: three choices, reproducible, streamed alike.
  const sampled = { model, prompt: ["1 2", "3 4"], max_tokens: 6, n: 3, temperature: 1, seed: 5 };
  const a = await client.completions.create(sampled);
  const b = await client.completions.create(sampled);
  check(a.choices.length === 6 && a.choices.every((c, i) => c.index === i) &&
    same(a.choices.map((c) => c.text), b.choices.map((c) => c.text)) &&
    new Set(a.choices.slice(0, 3).map((c) => c.text)).size > 1,
  `n = 3 × 2 prompts, seed 5: ${JSON.stringify(a.choices.map((c) => c.text))}`);
  const s = await collect(await client.completions.create({ ...sampled, stream: true }), false);
  check(same(Object.values(s.choices).map((c) => c.text), a.choices.map((c) => c.text)),
    "n > 1 streamed equals whole");

  // Stop sequences: the greedy text cut before the first occurrence.
  const words = text.trim().split(" ");
  const stop = " " + words[2];
  const cutAt = text.indexOf(stop);
  const stopped = await client.completions.create({ ...request, stop: [stop, "never"] });
  check(stopped.choices[0].text === text.slice(0, cutAt) && stopped.choices[0].finish_reason === "stop",
    `stop "${stop}": "${stopped.choices[0].text}" (${stopped.choices[0].finish_reason})`);
  const stoppedStream = await collect(await client.completions.create({ ...request, stop: stop, stream: true }), false);
  check(stoppedStream.choices[0].text === text.slice(0, cutAt), `stop streamed: "${stoppedStream.choices[0].text}"`);

  // logprobs and echo.
  const lp = await client.completions.create({ ...request, logprobs: 0, echo: true });
  const l = lp.choices[0].logprobs;
  check(lp.choices[0].text === "1 2 3" + text && l.tokens.length === 11 && l.token_logprobs[0] === null &&
    l.token_logprobs.slice(1).every((x) => x < 0), `echo + logprobs: ${JSON.stringify(l.token_logprobs)}`);

  // The two most likely tokens at each position: the greedy token is the first, with its own
  // log-probability; at the first generated position they are the two best of the whole
  // distribution, scored independently through Megatron's API (all 96 continuations of the
  // prompt, tokens_to_generate 0).
  const top = await client.completions.create({ ...request, logprobs: 2 });
  const t = top.choices[0].logprobs;
  const best = (m) => Object.entries(m).sort((x, y) => y[1] - x[1]);
  check(t.tokens.length === 8 && t.top_logprobs.every((m, j) => {
    const b = best(m);
    return b.length === 2 && b[0][0] === t.tokens[j] && Math.abs(b[0][1] - t.token_logprobs[j]) < 1e-6;
  }), `logprobs 2: the greedy token is the most likely: ${JSON.stringify(t.top_logprobs.slice(0, 2))}`);
  // Streamed, each chunk carries its tokens' log-probabilities (a fast model may finish in one
  // chunk: steps coalesce while the connection thread sleeps); joined, they are the whole
  // answer's (OpenAI's chunk format: the same logprobs object per chunk).
  const topStream = await collect(await client.completions.create({ ...request, logprobs: 2, stream: true }), false);
  const ts = topStream.choices[0];
  check(ts.text === top.choices[0].text && ts.logprob_chunks >= 1 && sameLogprobs(ts.logprobs, t),
    `streamed logprobs 2 join to the whole answer's in ${ts.logprob_chunks} chunks: ${JSON.stringify(ts.logprobs.token_logprobs)}`);
  const scored = await new Promise((resolve, reject) => {
    const u = new URL(baseURL.replace(/\/v1$/, "/api"));
    const body = JSON.stringify({ prompts: Array.from({ length: 96 }, (_, id) => `1 2 3 ${id}`),
      tokens_to_generate: 0, logprobs: true });
    const req = require("http").request({ host: u.hostname, port: u.port, path: u.pathname, method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + apiKey } }, (res) => {
      let text = "";
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve(JSON.parse(text)));
    });
    req.on("error", reject);
    req.end(body);
  });
  const full = scored.logprobs.map((l, id) => [String(id), l[l.length - 1]]).sort((x, y) => y[1] - x[1]);
  const first = best(t.top_logprobs[0]);
  check(first.every((e, k) => e[0] === full[k][0] && Math.abs(e[1] - full[k][1]) < 1e-4),
    `top 2 at the first position ${JSON.stringify(first)} = the best of all 96 scored ${JSON.stringify(full.slice(0, 2))}`);

  // Chat (the model's template: contents joined, then its turn).
  const chatRequest = { model, messages: [{ role: "system", content: "1" }, { role: "user", content: "2 3" }],
    max_tokens: 6, temperature: 0 };
  const chat = await client.chat.completions.create(chatRequest);
  const reply = chat.choices[0].message;
  check(chat.object === "chat.completion" && reply.role === "assistant" && reply.content.length > 0 &&
    chat.usage.completion_tokens === 6, `chat: "${reply.content}" ${JSON.stringify(chat.usage)}`);
  const chatStream = await collect(await client.chat.completions.create({ ...chatRequest, stream: true }), true);
  check(chatStream.choices[0].text === reply.content && chatStream.choices[0].finish_reason === chat.choices[0].finish_reason,
    `streamed chat reassembles: "${chatStream.choices[0].text}"`);

  // Chat log-probabilities, whole and streamed.
  const chatLp = await client.chat.completions.create({ ...chatRequest, logprobs: true, top_logprobs: 2 });
  const chatLpStream = await collect(await client.chat.completions.create({ ...chatRequest, logprobs: true,
    top_logprobs: 2, stream: true }), true);
  const cs = chatLpStream.choices[0];
  check(chatLp.choices[0].logprobs.content.length === 6 && cs.logprob_chunks >= 1 &&
    sameLogprobs(cs.logprobs, chatLp.choices[0].logprobs),
  `streamed chat logprobs join to the whole answer's: ${JSON.stringify(cs.logprobs.content.map((e) => e.logprob))}`);

  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log("openai client: all checks passed");
}
main().catch((e) => { console.log("FAIL: " + (e.stack || e)); process.exit(1); });
