// Concurrent clients of `megatron serve`, with the official `openai` npm client (unmodified):
//   node serve_batching_client.js NODE_MODULES_DIR BASE_URL MODEL CLIENTS [LENGTH_SCALE] [LONG]
// CLIENTS different /v1/completions requests (prompts of 1 to 5 tokens, 2 to 12 tokens to
// generate, greedy or sampled with one seed, some with a stop string or n = 2), and 4 long ones
// (LONG tokens each, default 100):
//   1. every request one at a time;
//   2. the CLIENTS requests all at once;
//   3. staggered: the 4 long ones streamed, and the CLIENTS requests sent once every long stream
//      has its first chunk — so they arrive while the long ones are mid-decode and must join the
//      running batch at token boundaries.
// Every answer of 2 and 3 must equal the same request's answer alone (continuous batching keeps
// each row's own draws, positions and stop rules). Prints the wall time and generated tokens/s
// of each phase (bench/serve_concurrency.sh reads the "all at once" line) and how many long
// streams were still decoding when the others were sent. Exits 1 on a difference.
"use strict";
const path = require("path");
const [modules, baseURL, model, clientsText, scaleText, longText] = process.argv.slice(2);
const OpenAI = require(path.join(modules, "openai"));
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 300000 });
const clients = Number(clientsText);
const scale = Number(scaleText || 1);  // multiplies every max_tokens

const requests = Array.from({ length: clients }, (_, i) => {
  const prompt = Array.from({ length: 1 + (i % 5) }, (_, k) => String((i * 7 + k * 3) % 90)).join(" ");
  const r = { model, prompt, max_tokens: Math.round((2 + ((i * 5) % 11)) * scale) };
  if (i % 2 === 0) r.temperature = 0; else { r.temperature = 0.9; r.seed = 7; }
  if (i % 8 === 3) r.n = 2;
  if (i % 8 === 5) r.stop = [" 1"];
  return r;
});
const longRequests = Array.from({ length: 4 }, (_, i) => {
  const r = { model, prompt: `${i + 1} ${i * 13 % 90}`, max_tokens: Number(longText || 100) };
  if (i % 2 === 0) r.temperature = 0; else { r.temperature = 0.8; r.seed = 11; }
  return r;
});
const answer = (choices, usage) =>
  JSON.stringify(choices.map((c) => [c.text, c.finish_reason])) + JSON.stringify(usage);
const whole = async (r) => {
  const res = await client.completions.create(r);
  return { answer: answer(res.choices, res.usage), tokens: res.usage.completion_tokens };
};
// A streamed request: resolves `started` at its first chunk, returns its reassembled answer and
// whether it was still running when `peek()` was called.
function streamed(r) {
  let markStarted;
  const started = new Promise((resolve) => { markStarted = resolve; });
  const done = (async () => {
    const stream = await client.completions.create({ ...r, stream: true, stream_options: { include_usage: true } });
    const choices = [];
    let usage = null;
    for await (const chunk of stream) {
      markStarted();
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        const slot = choices[c.index] || (choices[c.index] = { text: "", finish_reason: null });
        slot.text += c.text;
        if (c.finish_reason) slot.finish_reason = c.finish_reason;
      }
    }
    markStarted();
    return { answer: answer(choices, usage), tokens: usage.completion_tokens };
  })();
  return { started, done };
}

(async () => {
  const phase = async (name, run) => {
    const t0 = Date.now();
    const results = await run();
    const ms = Date.now() - t0;
    const tokens = results.reduce((n, a) => n + a.tokens, 0);
    console.log(`${name}: ${clients} requests, ${tokens} generated tokens in ${ms} ms ` +
      `(${(tokens / (ms / 1000)).toFixed(1)} tokens/s)`);
    return results;
  };
  const alone = await phase("one at a time", async () => {
    const out = [];
    for (const r of requests) out.push(await whole(r));
    return out;
  });
  const longAlone = [];
  for (const r of longRequests) longAlone.push(await whole(r));
  const together = await phase("all at once", () => Promise.all(requests.map(whole)));
  let stillRunning = 0, longTogether = [];
  const staggered = await phase("staggered", async () => {
    const long = longRequests.map(streamed);
    await Promise.all(long.map((s) => s.started));
    // Every long stream has started; count those not finished as the others are sent.
    const finished = await Promise.all(long.map((s) =>
      Promise.race([s.done.then(() => true), new Promise((resolve) => setImmediate(() => resolve(false)))])));
    stillRunning = finished.filter((f) => !f).length;
    const others = await Promise.all(requests.map(whole));
    longTogether = await Promise.all(long.map((s) => s.done));
    return others;
  });
  let differ = 0;
  const compare = (name, answers, expected, list) => answers.forEach((a, i) => {
    if (a.answer !== expected[i].answer) {
      differ++;
      console.log(`FAIL ${name}: request ${JSON.stringify(list[i])}: alone ${expected[i].answer}, ` +
        `concurrent ${a.answer}`);
    }
  });
  compare("all at once", together, alone, requests);
  compare("staggered", staggered, alone, requests);
  compare("staggered long", longTogether, longAlone, longRequests);
  // (serve_batching.sh requires some: with one slot, as bench/ runs it, there may be none.)
  console.log(`staggered: ${stillRunning} of the 4 long streams were mid-decode when the others were sent`);
  if (differ) process.exit(1);
  console.log(`all ${clients} concurrent answers, all at once and staggered, equal the answers alone`);
})().catch((e) => { console.log("FAIL: " + (e.stack || e)); process.exit(1); });
