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
// With REFERENCE_LOGPROBS (tools/reference/gguf_gpt2_gelu_reference.py's JSON) the per-token
// check is instead llama.cpp against its "fp16_gelu" values and megatron against its "exact"
// ones, each within REFERENCE_ATOL (default 1e-5): llama.cpp's gpt2 GeLU is an f16 table.
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
const referencePath = process.env.REFERENCE_LOGPROBS;
const referenceAtol = Number(process.env.REFERENCE_ATOL ?? "1e-5");
// llama.cpp's side of that comparison (default REFERENCE_ATOL): gguf_llama_cpp.sh widens it where
// ggml loads its AVX2 build, whose numbers the reference does not model exactly.
const llamaReferenceAtol = Number(process.env.LLAMA_CPP_REFERENCE_ATOL ?? referenceAtol);

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
// Every evaluation starts from an empty cache on the context's one sequence.
const sequence = context.getSequence();
const failures = [];
// A file exported without a tokenizer holds placeholder tokens "<|ID|>": megatron's prompts are
// then NullTokenizer ids, written "<|5|><|17|>" in llama.cpp.
const placeholders = model.fileInfo.metadata.tokenizer.ggml.tokens?.[0] === "<|0|>";
const llamaText = (text) => (placeholders ? text.trim().split(/\s+/).map((id) => `<|${id}|>`).join("") : text);
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Greedy: llama.cpp's most likely token after each prefix, generated one at a time.
async function greedy(prompt, count) {
  await sequence.clearHistory();
  const out = [];
  let input = prompt.slice(0, -1);
  let last = prompt[prompt.length - 1];
  for (let i = 0; i < count; ++i) {
    const results = await sequence.controlledEvaluate([...input, [last, { generateNext: { token: true } }]]);
    const next = results[results.length - 1].next.token;
    out.push(next);
    input = [];
    last = next;
  }
  return out;
}

// log p(tokens[i + 1] | tokens[..i]) for every i, from llama.cpp's full next-token distributions.
async function logprobs(tokens) {
  await sequence.clearHistory();
  const results = await sequence.controlledEvaluate(
    tokens.map((t, i) => (i + 1 < tokens.length ? [t, { generateNext: { probabilities: true } }] : t)));
  return tokens.slice(1).map((t, i) => Math.log(results[i].next.probabilities.get(t)));
}

for (const record of readJsonl(generatedPath)) {
  const prompt = record.prompt_tokens;
  const tokenized = Array.from(model.tokenize(llamaText(record.prompt), false));
  if (!same(tokenized, prompt))
    failures.push(`tokenization of ${JSON.stringify(record.prompt)}: llama.cpp [${tokenized}], megatron [${prompt}]`);
  const expected = record.generated_tokens;
  const got = await greedy(prompt, expected.length);
  const verdict = same(got, expected) ? "same" : "DIFFERENT";
  console.log(`greedy [${prompt}] -> llama.cpp [${got}], megatron [${expected}]: ${verdict}`);
  if (!same(got, expected)) failures.push(`greedy continuation of [${prompt}]`);
}

if (scoredPath) {
  const [scored] = readJsonl(scoredPath);
  const tokens = scored.prompt_tokens;
  const tokenized = Array.from(model.tokenize(llamaText(scored.prompt), false));
  if (!same(tokenized, tokens)) failures.push(`tokenization of the scored text (${tokenized.length} tokens, megatron ${tokens.length})`);
  const lp = await logprobs(tokens);
  const worst = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), a.length === b.length ? 0 : Infinity);
  const compare = (what, a, b, limit) => {
    const diff = worst(a, b);
    console.log(`per-token log-probabilities, ${what}: ${a.length} tokens, largest difference ${diff.toExponential(3)} (limit ${limit})`);
    if (!(diff <= limit)) failures.push(`per-token log-probabilities, ${what}, differ by ${diff}`);
  };
  if (referencePath) {
    // llama.cpp's gpt2 rounds its GeLU through an f16 table: its numbers are compared with a
    // float64 model doing the same, megatron's with the exact model, each within REFERENCE_ATOL.
    const reference = JSON.parse(fs.readFileSync(referencePath, "utf-8"));
    if (!same(reference.tokens, tokens)) failures.push("the reference scores other tokens");
    compare("llama.cpp vs the f16-GeLU reference", lp, reference.fp16_gelu, llamaReferenceAtol);
    compare("megatron vs the exact reference", scored.logprobs, reference.exact, referenceAtol);
  } else {
    compare("llama.cpp vs megatron", lp, scored.logprobs, logprobAtol);
  }

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
