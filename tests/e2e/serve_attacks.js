// Hostile clients against `megatron serve` (issue 38's list), each followed by a check that the
// server still answers a good request:
//   node serve_attacks.js PORT REQUEST_TIMEOUT MAX_CONNECTIONS
// Bounded: every socket and request has a timeout; exits 0 when every check passed, else prints
// why and exits 1. Plain node (net, http), loopback only.
"use strict";
const net = require("net");
const http = require("http");
const [port, requestTimeout, maxConnections] = process.argv.slice(2).map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let failures = 0;
const check = (ok, what) => {
  console.log((ok ? "ok   " : "FAIL ") + what);
  if (!ok) failures++;
};

// Sends raw bytes, returns {status, text, ms} once the server closes (or after timeoutMs).
function raw(data, timeoutMs = 15000) {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect(port, "127.0.0.1");
    let text = "";
    socket.on("data", (d) => { text += d.toString("latin1"); });
    const done = () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, text, ms: Date.now() - started });
    };
    socket.on("close", done);
    socket.on("error", () => {});
    socket.setTimeout(timeoutMs, () => socket.destroy());
    if (data) socket.write(data);
  });
}

function request(method, path, body, headers = {}) {
  return new Promise((resolve) => {
    const data = Buffer.from(body);
    const req = http.request({ host: "127.0.0.1", port, method, path, timeout: 60000,
      headers: { "Content-Type": "application/json", "Content-Length": data.length, ...headers } },
    (res) => {
      let text = "";
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", (e) => resolve({ status: 0, text: e.message }));
    req.end(data);
  });
}

const good = '{"prompts": ["1 2 3"], "tokens_to_generate": 3, "top_k": 1}';
async function stillServing(after) {
  const r = await request("PUT", "/api", good);
  check(r.status === 200 && r.text.includes('"text"'), `still serving after ${after}: ${r.status}`);
}

function put(body, extra = "") {
  return `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

async function main() {
  // 1. The largest int64 as a length: refused by the length check, not an overflow.
  for (const [path, body] of [
    ["/api", '{"prompts": ["1"], "tokens_to_generate": 9223372036854775807}'],
    ["/api", '{"prompts": ["1"], "tokens_to_generate": 18446744073709551616}'],
    ["/v1/completions", '{"prompt": "1", "max_tokens": 9223372036854775807}'],
    ["/v1/completions", '{"prompt": "1", "max_tokens": 1e400}'],
    ["/v1/completions", '{"prompt": "1", "n": -1}'],
    ["/v1/completions", '{"prompt": "1", "seed": 99999999999999999999999}'],
  ]) {
    const r = await request(path === "/api" ? "PUT" : "POST", path, body);
    check(r.status === 400, `huge number to ${path} ${body.slice(0, 60)}: ${r.status} ${r.text.trim().slice(0, 100)}`);
  }
  await stillServing("huge numbers");

  // 2. 200 KB of nested arrays (depth 100,000): a 400, no recursion anywhere.
  const deep = "[".repeat(100000) + "]".repeat(100000);
  for (const [method, path, body] of [["PUT", "/api", deep],
    ["POST", "/v1/completions", `{"prompt": ${deep}}`]]) {
    const r = await request(method, path, body);
    check(r.status === 400 && r.text.includes("deeper than 32 levels"), `depth 100000 to ${path}: ${r.status}`);
  }
  await stillServing("deep nesting");

  // 3. Slow clients: a header line every second. Each is cut at the request deadline, and a
  // good request meanwhile is answered at once.
  const slow = [];
  for (let i = 0; i < 12; ++i) {
    slow.push(new Promise((resolve) => {
      const started = Date.now();
      const s = net.connect(port, "127.0.0.1");
      let text = "";
      s.on("error", () => {});
      s.on("data", (d) => { text += d; });
      s.write("PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\n");
      const timer = setInterval(() => s.write(`X-Slow-${i}: ${Date.now()}\r\n`), 1000);
      s.on("close", () => { clearInterval(timer); resolve({ ms: Date.now() - started, text }); });
      s.setTimeout(60000, () => s.destroy());
    }));
  }
  await sleep(500);
  const t0 = Date.now();
  const meanwhile = await request("PUT", "/api", good);
  check(meanwhile.status === 200 && Date.now() - t0 < 5000,
    `a good request beside 12 slow clients: ${meanwhile.status} in ${Date.now() - t0} ms`);
  const cut = await Promise.all(slow);
  const limit = (requestTimeout + 3) * 1000;
  check(cut.every((c) => c.ms < limit && c.text.startsWith("HTTP/1.1 408")),
    `slow clients answered 408 and closed within ${limit} ms: ${cut.map((c) => c.ms + " " + JSON.stringify(c.text.slice(0, 12))).join(", ")}`);

  // 4. Framing.
  const body = '{"prompts": ["1"], "tokens_to_generate": 2}';
  const framing = [
    ["two different Content-Length", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\nContent-Length: 5\r\n\r\n${body}`, 400, "two different Content-Length"],
    ["Content-Length with chunked", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${body}`, 400, "Transfer-Encoding"],
    ["chunked", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`, 400, "Transfer-Encoding"],
    ["Content-Length not a number", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +5\r\n\r\n{}`, 400, "Content-Length"],
    ["obsolete line folding", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b\r\n c\r\nContent-Length: 2\r\n\r\n{}`, 400, "folding"],
    ["a second request behind the first", put(body) + put(body), 400, "one request per connection"],
    ["a request line without a version", "GET /\r\n\r\n", 400, "request line"],
    ["the same Content-Length twice", put(body, `Content-Length: ${body.length}\r\n`), 200, '"text"'],
    ["a body past --max-request-bytes", `PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999\r\n\r\n`, 413, "--max-request-bytes"],
    ["headers past 16 KiB", `GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${"a".repeat(20000)}\r\n\r\n`, 431, "headers"],
  ];
  for (const [what, data, status, needle] of framing) {
    const r = await raw(data);
    check(r.status === status && r.text.includes(needle), `${what}: ${r.status} ${r.text.split("\r\n\r\n")[1] || ""}`.trim());
  }
  await stillServing("bad framing");

  // 5. DNS rebinding: a loopback server answers only loopback Host and Origin names.
  for (const [what, headers] of [["Host evil.example", { Host: "evil.example:5000" }],
    ["Origin http://evil.example", { Origin: "http://evil.example" }]]) {
    const r = await request("PUT", "/api", good, headers);
    check(r.status === 403, `${what}: ${r.status} ${r.text.trim().slice(0, 90)}`);
  }
  const v1 = await request("POST", "/v1/completions", '{"prompt": "1"}', { Host: "evil.example" });
  check(v1.status === 403 && JSON.parse(v1.text).error.type === "invalid_request_error",
    `Host evil.example on /v1 answers OpenAI's error JSON: ${v1.text.trim().slice(0, 80)}`);
  const page = await request("GET", "/", "", { Host: "localhost:1234" });
  check(page.status === 200, `Host localhost: ${page.status}`);

  // 6. The connection limit: with every slot held, one more connection is answered 503 at once.
  const held = [];
  for (let i = 0; i < maxConnections; ++i) {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => {});
    held.push(new Promise((resolve) => s.on("connect", () => resolve(s))));
  }
  await Promise.all(held);
  await sleep(1000);  // the server has accepted them all (well within their 3 s deadline)
  const over = await raw(put(body), 5000);
  check(over.status === 503 && over.ms < 2000, `connection ${maxConnections + 1}: ${over.status} in ${over.ms} ms`);
  (await Promise.all(held)).forEach((s) => s.destroy());
  await sleep(500);
  await stillServing("the connection limit");

  // 7. Fuzz: random and mutated bodies; every one answered, never a 500.
  let seed = 12345;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const values = [0, -1, 1, 2.5, -0.0, 1e308, -1e308, 9223372036854775807, 18446744073709551615,
    "", "1 2", "x", null, true, false, [], {}, [1, 2], ["1", "2"], [[[]]], { a: 1 }, 64, 127, 128, 129];
  const seeds = [
    ["PUT", "/api", { prompts: ["1 2 3"], tokens_to_generate: 4, top_k: 1, logprobs: true }],
    ["PUT", "/api", { prompts: ["4 5", "6"], tokens_to_generate: 2, top_p: 0.5, random_seed: 3 }],
    ["POST", "/v1/completions", { model: "ckpt", prompt: ["1 2", "3"], max_tokens: 3, n: 2, stop: ["5"], logprobs: 2, echo: true }],
    ["POST", "/v1/chat/completions", { messages: [{ role: "user", content: "1 2" }], max_tokens: 2, logprobs: true, top_logprobs: 3, stream: true }],
    ["POST", "/v1/completions", { prompt: "7 8", max_tokens: 2, stream: true, stream_options: { include_usage: true } }],
    ["POST", "/v1/chat/completions", { messages: [{ role: "user", content: "1 2" }], max_tokens: 2 }],
  ];
  const statuses = {};
  for (let i = 0; i < 300; ++i) {
    const [method, path, base] = seeds[rand(seeds.length)];
    let text;
    const kind = rand(4);
    if (kind === 0) {  // a field replaced by a random value, or added, or removed
      const o = JSON.parse(JSON.stringify(base));
      const keys = Object.keys(o).concat(["n", "max_tokens", "temperature", "top_p", "top_k", "seed", "messages", "prompt"]);
      const key = keys[rand(keys.length)];
      if (rand(5) === 0) delete o[key]; else o[key] = values[rand(values.length)];
      text = JSON.stringify(o);
    } else if (kind === 1) {  // bytes flipped
      const b = Buffer.from(JSON.stringify(base));
      for (let k = 0; k < 1 + rand(4); ++k) b[rand(b.length)] = rand(256);
      text = b.toString("latin1");
    } else if (kind === 2) {  // cut short
      const s = JSON.stringify(base);
      text = s.slice(0, rand(s.length));
    } else {  // random bytes
      text = Array.from({ length: rand(64) }, () => String.fromCharCode(rand(256))).join("");
    }
    const r = await request(method, path, Buffer.from(text, "latin1"));
    statuses[r.status] = (statuses[r.status] || 0) + 1;
    if (![200, 400, 404].includes(r.status)) {
      check(false, `fuzz ${method} ${path} ${JSON.stringify(text).slice(0, 200)}: ${r.status} ${r.text.slice(0, 200)}`);
      break;
    }
  }
  check(Object.keys(statuses).every((s) => ["200", "400", "404"].includes(s)),
    `300 fuzzed requests answered: ${JSON.stringify(statuses)}`);
  await stillServing("the fuzz");

  // 8. Fuzz of the HTTP request parser: valid requests with bytes flipped, CR/LF inserted,
  // lines repeated or cut, or random bytes, each sent and then the write side closed (so a cut
  // request ends at once instead of at the deadline). Every one is answered with a status or
  // closed without an answer; never a crash, never a hang.
  const valid = [put('{"prompts": ["1 2"], "tokens_to_generate": 2, "top_k": 1}'),
    "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
    'Content-Length: 36\r\n\r\n{"prompt": "1 2", "max_tokens": 2}  '];
  const httpStatuses = {};
  for (let round = 0; round < 30; ++round) {
    await Promise.all(Array.from({ length: 10 }, async () => {
      let b = Buffer.from(valid[rand(valid.length)], "latin1");
      const kind = rand(5);
      if (kind === 0) for (let k = 0; k < 1 + rand(3); ++k) b[rand(b.length)] = rand(256);
      else if (kind === 1) { const at = rand(b.length); b = Buffer.concat([b.subarray(0, at), Buffer.from(["\r", "\n", "\r\n", ":", " "][rand(5)]), b.subarray(at)]); }
      else if (kind === 2) { const lines = b.toString("latin1").split("\r\n"); const i = rand(lines.length); lines.splice(i, 0, lines[i]); b = Buffer.from(lines.join("\r\n"), "latin1"); }
      else if (kind === 3) b = b.subarray(0, rand(b.length));
      else b = Buffer.from(Array.from({ length: rand(200) }, () => rand(256)));
      const r = await new Promise((resolve) => {
        const socket = net.connect(port, "127.0.0.1");
        let text = "";
        socket.on("data", (d) => { text += d.toString("latin1"); });
        socket.on("error", () => {});
        socket.on("close", () => resolve(text));
        socket.setTimeout(10000, () => { text = "HUNG"; socket.destroy(); });
        socket.end(b);
      });
      const m = /^HTTP\/1\.1 (\d{3})/.exec(r);
      const key = m ? m[1] : r === "" ? "closed" : r === "HUNG" ? "hung" : "garbage";
      httpStatuses[key] = (httpStatuses[key] || 0) + 1;
    }));
  }
  check(!httpStatuses.hung && !httpStatuses.garbage && !httpStatuses["500"],
    `300 fuzzed raw requests: ${JSON.stringify(httpStatuses)}`);
  await stillServing("the HTTP fuzz");
  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log("all attacks answered");
}
main().catch((e) => { console.log("FAIL: " + e.stack); process.exit(1); });
