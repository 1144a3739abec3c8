// Drives headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: no
// WebSocket, no npm package) against `megatron serve`'s web page: types a prompt into the box,
// clicks "Generate" with the mouse and waits for the generated text.
//   node web_page_browser.js CHROMIUM URL PROMPT MODEL_NAME CONTEXT_LENGTH
// Exits 0 when the page names the model and its context (and its length slider stops there)
// and the result box shows the prompt followed by generated text, counted without the prompt's
// tokens; else prints why and exits 1. Bounded: gives up after 120 s.
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [chromium, url, prompt, modelName, contextText] = process.argv.slice(2);
const context = Number(contextText);
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "megatron-chromium-"));
const browser = spawn(chromium, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--no-default-browser-check", "--remote-debugging-pipe", `--user-data-dir=${profile}`,
  "about:blank",
], { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
let stderr = "";
browser.stderr.on("data", (d) => { stderr += d; });
let finished = false;
const finish = (code, message) => {
  if (finished) return;  // once: the browser's own exit comes back here after we kill it
  finished = true;
  if (message) console.log(message);
  // The profile is removed only once the browser is gone (it writes there until it exits).
  const done = () => {
    try { fs.rmSync(profile, { recursive: true, force: true }); } catch (e) { /* best effort */ }
    process.exit(code);
  };
  if (browser.exitCode !== null || browser.signalCode !== null) return done();
  browser.once("exit", done);
  browser.kill("SIGKILL");
  setTimeout(done, 10000);
};
setTimeout(() => finish(1, "FAIL: timed out\n" + stderr.slice(-2000)), 120000).unref();
browser.on("exit", (code) => finish(1, `FAIL: chromium exited (${code})\n` + stderr.slice(-2000)));

// The protocol: JSON messages terminated by NUL, commands on fd 3, answers and events on fd 4.
const toBrowser = browser.stdio[3], fromBrowser = browser.stdio[4];
let nextId = 1, buffer = "";
const pending = new Map(), listeners = [];
fromBrowser.on("data", (chunk) => {
  buffer += chunk.toString("utf8");
  let end;
  while ((end = buffer.indexOf("\0")) >= 0) {
    const message = JSON.parse(buffer.slice(0, end));
    buffer = buffer.slice(end + 1);
    if (message.id && pending.has(message.id)) {
      const { resolve, reject } = pending.get(message.id);
      pending.delete(message.id);
      message.error ? reject(new Error(JSON.stringify(message.error))) : resolve(message.result);
    } else {
      listeners.forEach((l) => l(message));
    }
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  toBrowser.write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const waitFor = (predicate) => new Promise((resolve) => listeners.push((m) => predicate(m) && resolve(m)));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  const page = (method, params) => send(method, params, sessionId);
  const evaluate = async (expression) =>
    (await page("Runtime.evaluate", { expression, returnByValue: true })).result.value;
  await page("Page.enable");
  const loaded = waitFor((m) => m.method === "Page.loadEventFired" && m.sessionId === sessionId);
  await page("Page.navigate", { url });
  await loaded;
  if ((await evaluate("document.title")) !== "megatron-cpp") finish(1, "FAIL: not the page");
  // The loaded model is shown, and the length slider stops where the context does.
  const model = await evaluate('document.getElementById("model").textContent');
  if (!model.includes(modelName) || !model.includes("context " + context + " tokens") || !/\d(\.\d)?[KMB]? parameters/.test(model))
    finish(1, `FAIL: the model line "${model}" does not name ${modelName} and context ${context}`);
  const max = await evaluate('document.getElementById("tokens").max');
  if (max !== String(context - 1)) finish(1, `FAIL: the length slider goes to ${max}, not ${context - 1}`);

  // Type the prompt: focus the box, select its text, insert ours as keyboard input would.
  await evaluate('document.getElementById("prompt").focus(); document.getElementById("prompt").select()');
  await page("Input.insertText", { text: prompt });
  await evaluate('document.getElementById("tokens").value = "8"; document.getElementById("tokens").dispatchEvent(new Event("input"))');
  // Click the button with the mouse, at its centre.
  const box = await evaluate('JSON.stringify(document.getElementById("generate").getBoundingClientRect())');
  const { x, y, width, height } = JSON.parse(box);
  for (const type of ["mousePressed", "mouseReleased"])
    await page("Input.dispatchMouseEvent", { type, x: x + width / 2, y: y + height / 2, button: "left", clickCount: 1 });

  for (let i = 0; i < 200; ++i) {
    await sleep(250);
    const status = await evaluate('document.getElementById("status").textContent');
    if (status.startsWith("error")) finish(1, "FAIL: the page shows " + status);
    const text = await evaluate('document.getElementById("result").textContent');
    if (status.includes("tokens in") && text) {
      if (!text.startsWith(prompt) || text.length <= prompt.length)
        finish(1, `FAIL: result "${text}" is not the prompt followed by generated text`);
      // At most the 8 tokens asked for: the prompt's are not counted.
      const n = parseInt(status, 10);
      if (!(n >= 1 && n <= 8)) finish(1, `FAIL: the page counts ${n} generated tokens for 8 asked`);
      finish(0, `page: "${text}" (${status})`);
    }
  }
  finish(1, "FAIL: no result on the page");
})().catch((e) => finish(1, "FAIL: " + e.message));
