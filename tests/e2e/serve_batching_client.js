// Concurrent clients against `megatron serve`'s /v1/completions:
//   node serve_batching_client.js BASE_URL MODEL CLIENTS [LENGTH_SCALE]
// CLIENTS different requests (prompts of 1 to 5 tokens, 2 to 12 tokens to generate, greedy or
// sampled with one seed, some with a stop string or n = 2), first one at a time, then all at
// once: every answer at once must equal the same request's answer alone (the server batches
// them; each row keeps what it gets alone). Prints both wall times and generated tokens/s
// (bench/serve_concurrency.sh uses it too). Exits 1 on a difference.
"use strict";
const http = require("http");
const [base, model, clientsText, scaleText] = process.argv.slice(2);
const clients = Number(clientsText);
const scale = Number(scaleText || 1);  // multiplies every max_tokens
const url = new URL(base + "/completions");

function post(body) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST",
      timeout: 120000, headers: { "Content-Type": "application/json", "Content-Length": data.length } },
    (res) => {
      let text = "";
      res.on("data", (d) => { text += d; });
      res.on("end", () => (res.statusCode === 200 ? resolve(JSON.parse(text))
        : reject(new Error(res.statusCode + " " + text))));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(data);
  });
}

const requests = Array.from({ length: clients }, (_, i) => {
  const prompt = Array.from({ length: 1 + (i % 5) }, (_, k) => String((i * 7 + k * 3) % 90)).join(" ");
  const r = { model, prompt, max_tokens: Math.round((2 + ((i * 5) % 11)) * scale) };
  if (i % 2 === 0) r.temperature = 0; else { r.temperature = 0.9; r.seed = 7; }
  if (i % 8 === 3) r.n = 2;
  if (i % 8 === 5) r.stop = [" 1"];
  return r;
});
const answer = (res) => JSON.stringify(res.choices.map((c) => [c.text, c.finish_reason])) +
  JSON.stringify(res.usage);

(async () => {
  const t0 = Date.now();
  const alone = [];
  for (const r of requests) alone.push(answer(await post(r)));
  const t1 = Date.now();
  const answers = await Promise.all(requests.map(post));
  const together = answers.map(answer);
  const t2 = Date.now();
  let differ = 0;
  together.forEach((a, i) => {
    if (a !== alone[i]) {
      differ++;
      console.log(`FAIL request ${i} ${JSON.stringify(requests[i])}: alone ${alone[i]}, concurrent ${a}`);
    }
  });
  const tokens = answers.reduce((n, a) => n + a.usage.completion_tokens, 0);
  const rate = (ms) => (tokens / (ms / 1000)).toFixed(1);
  console.log(`${clients} requests, ${tokens} generated tokens: one at a time ${t1 - t0} ms ` +
    `(${rate(t1 - t0)} tokens/s), all at once ${t2 - t1} ms (${rate(t2 - t1)} tokens/s)`);
  if (differ) process.exit(1);
  console.log(`all ${clients} concurrent answers equal the answers alone`);
})().catch((e) => { console.log("FAIL: " + e.message); process.exit(1); });
