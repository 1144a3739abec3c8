// Runs a GGUF file in llama.cpp (the prebuilt llama.cpp of npm's node-llama-cpp, CPU only) and
// compares it with what megatron-cpp computed for the same model (gguf_llama_cpp.sh):
//
//   node llama_cpp_check.mjs MODULE_DIR MODEL.gguf GENERATED.jsonl [SCORED.jsonl EVAL.jsonl]
//
// GENERATED.jsonl: `megatron generate --top-k 1 --output-file` records (prompt, prompt_tokens,
// generated_tokens): llama.cpp's greedy continuation of prompt_tokens must be the same tokens.
// When the file holds a tokenizer (tokenizer.ggml.model != "none"), llama.cpp's tokenization of
// each prompt's text must also be prompt_tokens.
// SCORED.jsonl: one `megatron generate --logprobs --tokens-to-generate 0` record (a text's
// prompt_tokens and the log-probability of each token after the first) and EVAL.jsonl the
// metrics of `megatron eval --task WIKITEXT103` on the same text: llama.cpp's log-probabilities
// of the same tokens give the perplexity, which must equal eval's within PPL_RTOL (relative;
// environment, default 1e-4), and each token's within LOGPROB_ATOL (default 1e-4, absolute).
// Without them (bf16/f16 files) only the greedy continuations are compared.
//
// Exit status 0 when everything agrees, 1 with a line per disagreement otherwise.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [moduleDir, modelPath, generatedPath, scoredPath, evalPath] = process.argv.slice(2);
if (!generatedPath) {
  console.error("usage: llama_cpp_check.mjs MODULE_DIR MODEL.gguf GENERATED.jsonl [SCORED.jsonl EVAL.jsonl]");
  process.exit(2);
}
const readJsonl = (p) => fs.readFileSync(p, "utf-8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const pplRtol = Number(process.env.PPL_RTOL ?? "1e-4");
const logprobAtol = Number(process.env.LOGPROB_ATOL ?? "1e-4");

const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(moduleDir, "node_modules/node-llama-cpp/dist/index.js")).href);
// CPU, the shipped binaries only (never a build), one thread: the same arithmetic every run.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const contextSize = model.trainContextSize;
// f32 keys and values (llama.cpp's default cache is f16), no flash attention, the whole context
// in one batch.
const context = await model.createContext({
  contextSize, batchSize: contextSize, threads: 1, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const hasTokenizer = model.fileInfo.metadata.tokenizer?.ggml?.model !== "none";
const failures = [];
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Greedy: llama.cpp's most likely token after each prefix, generated one at a time.
async function greedy(prompt, count) {
  const sequence = context.getSequence();
  try {
    const out = [];
    let input = prompt.slice(0, -1).map((t) => t);
    let last = prompt[prompt.length - 1];
    for (let i = 0; i < count; ++i) {
      const results = await sequence.controlledEvaluate([...input, [last, { generateNext: { token: true } }]]);
      const next = results[results.length - 1].next.token;
      out.push(next);
      input = [];
      last = next;
    }
    return out;
  } finally {
    sequence.dispose();
  }
}

// log p(tokens[i + 1] | tokens[..i]) for every i, from llama.cpp's full next-token distributions.
async function logprobs(tokens) {
  const sequence = context.getSequence();
  try {
    const results = await sequence.controlledEvaluate(
      tokens.map((t, i) => (i + 1 < tokens.length ? [t, { generateNext: { probabilities: true } }] : t)));
    return tokens.slice(1).map((t, i) => Math.log(results[i].next.probabilities.get(t)));
  } finally {
    sequence.dispose();
  }
}

for (const record of readJsonl(generatedPath)) {
  const prompt = record.prompt_tokens;
  if (hasTokenizer) {
    const tokenized = Array.from(model.tokenize(record.prompt, false));
    if (!same(tokenized, prompt))
      failures.push(`tokenization of ${JSON.stringify(record.prompt)}: llama.cpp [${tokenized}], megatron [${prompt}]`);
  }
  const expected = record.generated_tokens;
  const got = await greedy(prompt, expected.length);
  const verdict = same(got, expected) ? "same" : "DIFFERENT";
  console.log(`greedy [${prompt}] -> llama.cpp [${got}], megatron [${expected}]: ${verdict}`);
  if (!same(got, expected)) failures.push(`greedy continuation of [${prompt}]`);
}

if (scoredPath) {
  const [scored] = readJsonl(scoredPath);
  const tokens = scored.prompt_tokens;
  if (hasTokenizer) {
    const tokenized = Array.from(model.tokenize(scored.prompt, false));
    if (!same(tokenized, tokens)) failures.push(`tokenization of the scored text (${tokenized.length} tokens, megatron ${tokens.length})`);
  }
  const lp = await logprobs(tokens);
  let worst = 0;
  lp.forEach((x, i) => { worst = Math.max(worst, Math.abs(x - scored.logprobs[i])); });
  console.log(`per-token log-probabilities: ${lp.length} tokens, largest difference ${worst.toExponential(3)} (limit ${logprobAtol})`);
  if (!(worst <= logprobAtol)) failures.push(`per-token log-probabilities differ by ${worst}`);

  const [metrics] = readJsonl(evalPath);
  if (metrics.num_tokenized_tokens !== tokens.length)
    failures.push(`megatron eval scored ${metrics.num_tokenized_tokens} tokens, generate ${tokens.length}`);
  const ppl = Math.exp(-lp.reduce((a, b) => a + b, 0) / lp.length);
  const rel = Math.abs(ppl - metrics.ppl) / metrics.ppl;
  console.log(`perplexity: llama.cpp ${ppl}, megatron eval ${metrics.ppl}, relative difference ${rel.toExponential(3)} (limit ${pplRtol})`);
  if (!(rel <= pplRtol)) failures.push(`perplexity differs by ${rel} relative`);
}

await context.dispose();
await model.dispose();
await llama.dispose();
for (const f of failures) console.log(`FAIL: ${f}`);
process.exit(failures.length ? 1 : 0);
