#!/usr/bin/env bash
# Megatron-LM inference-script command lines (examples/inference/advanced/*.py: the training
# parser's flags plus --prompts, --num-tokens-to-generate, --output-path, ...) run unchanged as
# `megatron generate` on the tiny HF GPT-2 fixture (vocabulary 96, NullTokenizer: prompts are
# token ids): the model flags checked against the checkpoint (or yielding to it with
# --use-checkpoint-args), Megatron's results JSON equal to generate's own --output-file, stop
# words, termination id, truncation, repeats, TP 2 = TP 1, and the refusals.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none)
fail() { echo "FAIL: $*"; exit 1; }

"$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" \
  --save "$WORK/ckpt" --make-vocab-size-divisible-by 32 > "$WORK/convert.log" 2>&1 \
  || { cat "$WORK/convert.log"; fail "convert"; }
# As Megatron's inference configs pass them: the training script's model and run flags, the
# engine's flags, then the script's own.
MEGATRON=(--load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 --use-mcore-models
  --num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 32
  --seq-length 32 --micro-batch-size 1 --no-load-optim --transformer-impl transformer_engine
  --attention-backend flash --deterministic-mode --ckpt-format torch_dist --log-interval 1
  --distributed-backend mpi --sequence-parallel --inference-dynamic-batching-buffer-size-gb 20
  --incoming-requests-per-sec -1 --inference-logging-step-interval 1 --inference-ckpt-non-strict
  --temperature 1.0 --top_k 1 --num-tokens-to-generate 8 --return-log-probs)
generate() {  # generate NP LOG ARGS...
  local np=$1 log=$2
  shift 2
  "${MPIRUN[@]}" -np "$np" "$MEGATRON_BINARY" generate "$@" > "$log" 2>&1 || { cat "$log"; fail "generate $*"; }
}

echo "== the reference: generate's own flags, greedy, three prompts"
printf '1 2 3\n40 41 42 43\n7\n' > "$WORK/prompts.txt"
generate 1 "$WORK/ref.log" --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 \
  --prompt-file "$WORK/prompts.txt" --greedy --tokens-to-generate 8 --logprobs \
  --output-file "$WORK/ref.jsonl"

echo "== --prompt given three times: three prompts (each occurrence kept), as the file's"
generate 1 "$WORK/repeated.log" --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 \
  --prompt "1 2 3" --prompt "40 41 42 43" --prompt "7" --greedy --tokens-to-generate 8 --logprobs \
  --output-file "$WORK/repeated.jsonl"
cmp "$WORK/ref.jsonl" "$WORK/repeated.jsonl" || fail "--prompt repeated differs from --prompt-file"

echo "== Megatron's command line at TP 1 and TP 2: the same tokens and log-probabilities"
for np in 1 2; do
  generate $np "$WORK/megatron$np.log" "${MEGATRON[@]}" --tensor-model-parallel-size $np \
    --prompts "1 2 3" "40 41 42 43" "7" --output-path "$WORK/megatron$np.json"
done
node -e '
  const fs = require("fs");
  const ref = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
  for (const file of process.argv.slice(2)) {
    const got = JSON.parse(fs.readFileSync(file, "utf8"));
    if (Object.keys(got).join() !== "0,1,2") throw new Error(file + ": request ids " + Object.keys(got));
    ref.forEach((r, i) => {
      const g = got[String(i)];
      if (g.input_prompt !== ["1 2 3", "40 41 42 43", "7"][i]) throw new Error("prompt " + i);
      if (JSON.stringify(g.generated_tokens) !== JSON.stringify(r.generated_tokens))
        throw new Error(file + ": tokens of " + i + ": " + g.generated_tokens + " vs " + r.generated_tokens);
      if (g.generated_text !== r.generated_text) throw new Error("text of " + i);
      const n = r.prompt_tokens.length - 1;
      if (g.prompt_logprobs.length !== n || g.generated_logprobs.length !== 8)
        throw new Error("log-probability counts of " + i);
      const all = g.prompt_logprobs.concat(g.generated_logprobs);
      if (JSON.stringify(all) !== JSON.stringify(g.logprobs)) throw new Error("logprobs != prompt + generated");
      all.forEach((l, j) => {
        if (Math.abs(l - r.logprobs[j]) > 1e-4 * Math.abs(r.logprobs[j]) + 1e-6)
          throw new Error(file + ": logprob " + j + " of " + i);
      });
      if (!(g.latency >= 0)) throw new Error("latency");
    });
  }' "$WORK/ref.jsonl" "$WORK/megatron1.json" "$WORK/megatron2.json" || fail "Megatron results JSON"
grep -q "inference-dynamic-batching-buffer-size-gb has no effect here" "$WORK/megatron1.log" \
  || { cat "$WORK/megatron1.log"; fail "engine flag not logged as without effect"; }
grep -q -- "--seq-length has no effect here: a training option" "$WORK/megatron1.log" \
  || fail "training flag not logged as without effect"

echo "== model flags: checked against the checkpoint, or the checkpoint's with --use-checkpoint-args"
expect_error() {  # expect_error MESSAGE ARGS...: generate fails with MESSAGE
  local message=$1
  shift
  if "$MEGATRON_BINARY" generate "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
expect_error "--hidden-size 64 differs from the checkpoint's 32" "${MEGATRON[@]}" --prompts "1" --hidden-size 64
expect_error "--swiglu differs from the checkpoint's (--swiglu off)" "${MEGATRON[@]}" --prompts "1" --swiglu
expect_error "--normalization RMSNorm differs from the checkpoint's LayerNorm" "${MEGATRON[@]}" --prompts "1" \
  --normalization RMSNorm
generate 1 "$WORK/ckargs.log" "${MEGATRON[@]}" --hidden-size 1152 --swiglu --use-checkpoint-args \
  --prompts "1 2 3" --output-path "$WORK/ckargs.json"
grep -q "the checkpoint's is used (--use-checkpoint-args)" "$WORK/ckargs.log" || fail "override not logged"
node -e '
  const fs = require("fs");
  const a = JSON.parse(fs.readFileSync(process.argv[1], "utf8"))["0"];
  const b = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))["0"];
  if (JSON.stringify(a.generated_tokens) !== JSON.stringify(b.generated_tokens)) throw new Error("differs");
  ' "$WORK/ckargs.json" "$WORK/megatron1.json" || fail "--use-checkpoint-args changed the model"

echo "== --stop-words and --termination-id end the sequence where the tokens appear"
node -e '
  const fs = require("fs");
  const g = JSON.parse(fs.readFileSync(process.argv[1], "utf8"))["0"].generated_tokens;
  fs.writeFileSync(process.argv[2], g.join(" ") + "\n");' "$WORK/megatron1.json" "$WORK/greedy.txt"
read -ra G < "$WORK/greedy.txt"
generate 1 "$WORK/stop.log" "${MEGATRON[@]}" --prompts "1 2 3" --stop-words "${G[2]} ${G[3]}" "90 91 92" \
  --output-path "$WORK/stop.json"
generate 1 "$WORK/term.log" "${MEGATRON[@]}" --prompts "1 2 3" --termination-id "${G[4]}" \
  --output-path "$WORK/term.json"
node -e '
  const fs = require("fs");
  const read = (f) => JSON.parse(fs.readFileSync(f, "utf8"))["0"];
  const g = fs.readFileSync(process.argv[1], "utf8").split(" ").map(Number);
  // Stop words: the first k >= 2 (generated tokens only) where g[k-1], g[k] are the word; the
  // output ends before it.
  let k = 1;
  while (!(g[k - 1] === g[2] && g[k] === g[3])) ++k;
  const stop = read(process.argv[2]);
  if (JSON.stringify(stop.generated_tokens) !== JSON.stringify(g.slice(0, k - 1)))
    throw new Error("stop words: " + stop.generated_tokens + " from " + g);
  if (stop.generated_logprobs.length !== k - 1) throw new Error("stop words: logprobs not trimmed");
  // Termination id: up to and including its first occurrence.
  const t = g.indexOf(g[4]);
  const term = read(process.argv[3]);
  if (JSON.stringify(term.generated_tokens) !== JSON.stringify(g.slice(0, t + 1)))
    throw new Error("termination id: " + term.generated_tokens + " from " + g);
  ' "$WORK/greedy.txt" "$WORK/stop.json" "$WORK/term.json" || fail "stop words / termination id"

echo "== --prompt-file-num-truncate, --output-every-n-results, --inference-repeat-n"
printf '{"text": "1 2 3"}\n{"text": "40 41 42 43"}\n{"text": "7"}\n{"text": "9 9"}\n' > "$WORK/prompts.jsonl"
generate 1 "$WORK/trunc.log" "${MEGATRON[@]}" --prompt-file "$WORK/prompts.jsonl" --prompt-file-num-truncate 3 \
  --output-every-n-results 2 --inference-repeat-n 2 --output-path "$WORK/trunc.json"
grep -q "run 2 of 2" "$WORK/trunc.log" || { cat "$WORK/trunc.log"; fail "no second run"; }
node -e '
  const fs = require("fs");
  const got = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  const ref = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  if (Object.keys(got).join() !== "0,2") throw new Error("request ids " + Object.keys(got));
  for (const id of ["0", "2"])
    if (JSON.stringify(got[id].generated_tokens) !== JSON.stringify(ref[id].generated_tokens))
      throw new Error("request " + id);
  ' "$WORK/trunc.json" "$WORK/megatron1.json" || fail "truncate / every n / repeat"

echo "== refusals name the flag"
expect_error "--pipeline-model-parallel-size 2: generation runs on tensor-parallel ranks only" \
  "${MEGATRON[@]}" --prompts "1" --pipeline-model-parallel-size 2
expect_error "--top-n-logprobs 5: top-n log-probabilities are not supported" "${MEGATRON[@]}" --prompts "1" \
  --top-n-logprobs 5
expect_error "--num-experts 8 differs from the checkpoint's 0" "${MEGATRON[@]}" --prompts "1" --num-experts 8
expect_error "--num-tokens-to-prompt: Megatron's synthetic prompts are not supported" "${MEGATRON[@]}" \
  --num-tokens-to-prompt 16 32 < /dev/null
expect_error "is longer than --inference-max-seq-length 9" "${MEGATRON[@]}" --prompts "1 2" \
  --inference-max-seq-length 9
echo "PASS"
