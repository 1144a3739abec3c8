// llama.cpp baseline for `megatron bench --mode generate` (bench/generate_vs_pytorch.sh): the
// prebuilt CPU llama.cpp of npm's node-llama-cpp (scripts/fetch_llama_cpp.sh) decoding a GGUF
// file greedily with its KV cache.
//
//   node llama_cpp_generate_bench.mjs MODULE_DIR MODEL.gguf DTYPE [--threads N] [--prompt 128]
//        [--tokens 32] [--repeats 3] [--batches 1,8] [--json-file F]
//
// Per batch size b: b sequences of one context each evaluate a prompt of --prompt tokens
// (prefill: all b at once, which node-llama-cpp batches into one llama_decode) and then
// --tokens greedy steps, each step one token per sequence, the b evaluations of a step batched
// into one decode. Best of --repeats. Prints (and with --json-file appends) one JSON object per
// batch with megatron bench --mode generate's fields: prefill_tokens_per_s,
// decode_ms_per_token, decode_tokens_per_s. DTYPE only labels the records (the file's type
// decides).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [moduleDir, modelPath, dtype, ...rest] = process.argv.slice(2);
if (!dtype) {
  console.error("usage: llama_cpp_generate_bench.mjs MODULE_DIR MODEL.gguf DTYPE [options]");
  process.exit(2);
}
const options = { threads: 2, prompt: 128, tokens: 32, repeats: 3, batches: "1,8", "json-file": "" };
for (let i = 0; i < rest.length; i += 2) {
  const key = rest[i].replace(/^--/, "");
  if (!(key in options) || i + 1 >= rest.length) {
    console.error(`unknown or incomplete option ${rest[i]}`);
    process.exit(2);
  }
  options[key] = typeof options[key] === "number" ? Number(rest[i + 1]) : rest[i + 1];
}
const batches = options.batches.split(",").map(Number);

const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(moduleDir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const now = () => Number(process.hrtime.bigint()) / 1e9;

// Greedy steps of one sequence: the prompt's last token first, then each generated one.
async function step(sequence, token) {
  const results = await sequence.controlledEvaluate([[token, { generateNext: { token: true } }]]);
  return results[results.length - 1].next.token;
}

for (const b of batches) {
  const context = await model.createContext({
    contextSize: options.prompt + options.tokens + 8, sequences: b, threads: options.threads,
    batchSize: b * options.prompt, flashAttention: false,
  });
  const sequences = Array.from({ length: b }, () => context.getSequence());
  // The same ids megatron bench --mode generate prompts with: (i * 7919 + 13) mod vocabulary.
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const prompts = sequences.map((_, s) =>
    Array.from({ length: options.prompt }, (_, j) => ((s * options.prompt + j) * 7919 + 13) % vocab));
  let bestPrefill = Infinity, bestDecode = Infinity;
  for (let rep = 0; rep <= options.repeats; ++rep) {  // rep 0 warms up
    await Promise.all(sequences.map((s) => s.clearHistory()));
    let t0 = now();
    let next = await Promise.all(sequences.map(async (s, i) => {
      const prompt = prompts[i];
      const r = await s.controlledEvaluate(
        [...prompt.slice(0, -1), [prompt.at(-1), { generateNext: { token: true } }]]);
      return r[r.length - 1].next.token;
    }));
    const prefill = now() - t0;
    t0 = now();
    for (let t = 0; t < options.tokens; ++t)
      next = await Promise.all(sequences.map((s, i) => step(s, next[i])));
    const decode = (now() - t0) / options.tokens;
    if (rep > 0) {
      bestPrefill = Math.min(bestPrefill, prefill);
      bestDecode = Math.min(bestDecode, decode);
    }
  }
  await context.dispose();
  const record = {
    impl: "llama.cpp", dtype, batch: b, prompt: options.prompt, tokens: options.tokens,
    prefill_tokens_per_s: (b * options.prompt) / bestPrefill,
    decode_ms_per_token: bestDecode * 1e3, decode_tokens_per_s: b / bestDecode,
  };
  console.log(JSON.stringify(record));
  if (options["json-file"]) fs.appendFileSync(options["json-file"], JSON.stringify(record) + "\n");
}
