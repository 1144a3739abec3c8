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

// Reassembles a streamed completion or chat: per choice index, its text and finish_reason.
async function collect(stream, chat) {
  const choices = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const slot = choices[c.index] || (choices[c.index] = { text: "", finish_reason: null });
      slot.text += chat ? (c.delta.content || "") : c.text;
      if (c.finish_reason) slot.finish_reason = c.finish_reason;
    }
  }
  return { choices, usage, chunks };
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

  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log("openai client: all checks passed");
}
main().catch((e) => { console.log("FAIL: " + (e.stack || e)); process.exit(1); });
