#!/usr/bin/env bash
# --sample-interval: text written by the model being trained, every N iterations (issue 40).
# On 10 State of the Union documents (GPT-2 BPE), a tiny GPT trains 6 iterations with greedy
# samples every 3 from two prompts:
# - the samples are printed after their iteration's line and written to the metrics file as
#   {"type":"samples","iteration":3|6,"samples":[{"prompt","text"}]}, each text starting with its
#   prompt, with 8 tokens more (no EOD drawn here) — two prompts, two texts;
# - they are the model's: `megatron generate --greedy` on the checkpoint saved at iteration 6,
#   the two prompts in one batch as the samples are, writes the same texts;
# - the same at tensor parallelism 2 (2 ranks, every rank generating its slice) and with data
#   parallelism 2 (two replicas generating the same), and the losses are those of the run
#   without samples, bit for bit: generating leaves the training untouched;
# - refused before any work, with the flag and the fix named: no prompt, a prompt too long for
#   the positions, pipeline parallelism, --sequence-parallel, --mock-data without a tokenizer.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
fail() { echo "FAIL: $*"; exit 1; }
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_gpt_data.bash"
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json"
     --merge-file "$DATA_DIR/gpt2-merges.txt")
GPT=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
     --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 6
     --lr 3e-3 --lr-decay-style constant --data-path "$GPT_DATA" --split 80,20,0
     --log-interval 1 --eval-interval 3 --eval-iters 1 --hidden-dropout 0 --attention-dropout 0
     "${TOK[@]}")
SAMPLES=(--sample-interval 3 --sample-prompt "The Congress" --sample-prompt "Our economy is"
         --sample-tokens 8)
run() {  # run NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "${GPT[@]}" --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}

echo "== samples at TP 1, TP 2, DP 2, and a run without them"
run tp1 1 "${SAMPLES[@]}" --save "$WORK/ckpt" --save-interval 6
run tp2 2 "${SAMPLES[@]}" --tensor-model-parallel-size 2
run dp2 2 "${SAMPLES[@]}"
run none 1
for name in tp1 tp2 dp2; do
  [[ $(grep -c "^ samples at iteration [36]:$" "$WORK/$name.log") == 2 ]] || {
    cat "$WORK/$name.log"; fail "$name: not two sample blocks in the log"; }
done
grep -A2 "^ samples at iteration 3:$" "$WORK/tp1.log" | tail -2 | grep -q '^   "The Congress' \
  || fail "the first sample line does not start with its prompt"
# The samples come after their iteration's line and evaluation.
awk '/ iteration        3\/       6 \|/ {it = NR} /validation loss at iteration 3 / {v = NR}
     /^ samples at iteration 3:$/ {s = NR} END {exit !(it && v && s && it < v && v < s)}' \
  "$WORK/tp1.log" || fail "the samples of iteration 3 are not after its line and evaluation"
$CHECK "$WORK/none.jsonl" "$WORK/tp1.jsonl" --from 1 --to 6 --exact
$CHECK "$WORK/tp1.jsonl" "$WORK/dp2.jsonl" --from 1 --to 6 --rtol 1e-5
$CHECK "$WORK/tp1.jsonl" "$WORK/tp2.jsonl" --from 1 --to 6 --rtol 1e-5

echo "== the samples are the model's: megatron generate on the checkpoint of iteration 6"
timeout 300 "$MEGATRON_BINARY" generate --load "$WORK/ckpt" --greedy --tokens-to-generate 8 \
  --micro-batch-size 2 --prompt "The Congress" --prompt "Our economy is" \
  --output-file "$WORK/generated.jsonl" > "$WORK/generate.log" 2>&1 \
  || { cat "$WORK/generate.log"; fail "generate"; }
node - "$WORK" <<'JS'
const fs = require('fs');
const dir = process.argv[2];
const rows = (f) => fs.readFileSync(`${dir}/${f}`, 'utf8').trim().split('\n').map(JSON.parse);
const samples = (f) => rows(f).filter((r) => r.type === 'samples');
const generated = rows('generated.jsonl').map((r) => r.text);
for (const f of ['tp1.jsonl', 'tp2.jsonl', 'dp2.jsonl']) {
  const s = samples(f);
  if (JSON.stringify(s.map((r) => r.iteration)) !== '[3,6]') throw new Error(`${f}: sample rows at ${s.map((r) => r.iteration)}`);
  for (const r of s) {
    if (JSON.stringify(r.samples.map((x) => x.prompt)) !== '["The Congress","Our economy is"]')
      throw new Error(`${f}: prompts ${JSON.stringify(r.samples)}`);
    for (const x of r.samples)
      if (!x.text.startsWith(x.prompt) || x.text.length <= x.prompt.length)
        throw new Error(`${f}: text ${JSON.stringify(x.text)} does not continue ${x.prompt}`);
  }
  const last = s[1].samples.map((x) => x.text);
  if (JSON.stringify(last) !== JSON.stringify(generated))
    throw new Error(`${f}: samples at 6 ${JSON.stringify(last)} != generate ${JSON.stringify(generated)}`);
}
console.log('samples at 6 = megatron generate:', JSON.stringify(generated));
JS

echo "== refused before any work"
expect_error() {  # expect_error "TEXT" NP FLAGS...: pretrain-gpt FLAGS on NP ranks
  local text=$1 np=$2
  shift 2
  local rc=0
  timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "$@" > "$WORK/err.log" 2>&1 || rc=$?
  [[ $rc != 0 ]] || fail "exit 0 with: $*"
  grep -qF -- "$text" "$WORK/err.log" || { cat "$WORK/err.log"; fail "no '$text' with: $*"; }
  ! grep -q " iteration        1/" "$WORK/err.log" || fail "trained before refusing: $*"
  echo "ok: $text"
}
expect_error "--sample-interval needs at least one --sample-prompt TEXT" 1 "${GPT[@]}" \
  --sample-interval 3
expect_error "--sample-prompt / --sample-tokens: Length of prompt + tokens_to_generate longer than allowed" \
  1 "${GPT[@]}" "${SAMPLES[@]}" --sample-tokens 64
expect_error "--sample-interval with --pipeline-model-parallel-size 2 splits the model" 2 \
  "${GPT[@]}" "${SAMPLES[@]}" --pipeline-model-parallel-size 2
expect_error "--sample-interval with --sequence-parallel splits the model" 2 \
  "${GPT[@]}" "${SAMPLES[@]}" --tensor-model-parallel-size 2 --sequence-parallel
expect_error "--sample-interval needs a tokenizer" 1 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 --train-iters 6 --lr 1e-3 \
  --mock-data --vocab-size 128 "${SAMPLES[@]}"
echo "PASS"
