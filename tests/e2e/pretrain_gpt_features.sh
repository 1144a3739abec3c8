#!/usr/bin/env bash
# pretrain-gpt features end to end on a tiny mock-data model: fp16 loss scaling (early steps
# skipped, scale comes down, training proceeds), bf16 + full recompute at TP 2, TensorBoard
# output, --finetune, and the model-shape check when loading a checkpoint.
set -euo pipefail
: "${MEGATRON_BINARY:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
       --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --log-interval 1
       --eval-interval 1000 --eval-iters 1)
fail() { echo "FAIL: $*"; exit 1; }
model_with() {  # model_with FLAG VALUE: MODEL with FLAG's value replaced (CLI11 rejects repeats)
  local out=() i=0
  while (( i < ${#MODEL[@]} )); do
    if [[ ${MODEL[i]} == "$1" ]]; then out+=("$1" "$2"); i=$((i + 2))
    else out+=("${MODEL[i]}"); i=$((i + 1)); fi
  done
  printf '%s\n' "${out[@]}"
}
run() {  # run NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "$@" --metrics-file "$WORK/$name.jsonl" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}
# js EXPRESSION FILE: evaluates EXPRESSION with r = the file's train records, v = validation.
js() {
  node -e '
    const lines = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n")
                    .map(JSON.parse);
    const r = lines.filter(x => x.type === "train"), v = lines.filter(x => x.type === "validation");
    if (!(eval(process.argv[1]))) { console.error("check failed:", process.argv[1]);
      console.error(JSON.stringify(r.map(x => [x.iteration, x.lm_loss, x.loss_scale, x.skipped_iterations])));
      process.exit(1); }' "$1" "$2"
}

echo "== fp16: dynamic loss scale starts at 2^32, skips overflowing steps, then trains"
run fp16 1 "${MODEL[@]}" --fp16 --train-iters 30
js 'r.length === 30 && r[0].skipped_iterations === 1 && r[0].grad_norm === null' "$WORK/fp16.jsonl"
js 'r[0].loss_scale === 4294967296 && r[0].lm_loss === null && r[29].loss_scale < r[0].loss_scale' "$WORK/fp16.jsonl"
js 'r[29].skipped_iterations === 0 && r[29].grad_norm > 0 && r[29].lm_loss < r.find(x => x.lm_loss !== null).lm_loss' "$WORK/fp16.jsonl"
grep -q "number of skipped iterations:   1" "$WORK/fp16.log" || fail "skip not in the log line"

echo "== bf16 + full recompute at TP 2: the loss falls, TensorBoard file written"
run bf16 2 "${MODEL[@]}" --bf16 --recompute-granularity full --tensor-model-parallel-size 2 \
  --train-iters 20 --tensorboard-dir "$WORK/tb" --save "$WORK/ckpt"
js 'r.length === 20 && r[19].lm_loss < r[0].lm_loss - 0.1 && r[0].loss_scale === 1' "$WORK/bf16.jsonl"
tb=$(ls "$WORK"/tb/events.out.tfevents.* | head -1)
[[ -s $tb ]] || fail "no TensorBoard event file"
grep -q "lm loss" "$tb" || fail "TensorBoard file lacks the lm loss tag"

echo "== --finetune loads the weights and starts at iteration 1"
run finetune 1 "${MODEL[@]}" --train-iters 3 --load "$WORK/ckpt" --finetune
js 'r.length === 3 && r[0].iteration === 1 && r[0].consumed_samples === 8' "$WORK/finetune.jsonl"
js 'r[0].lm_loss < 4.6' "$WORK/finetune.jsonl"  # trained weights, not a fresh init (ln 128 = 4.85)

echo "== a checkpoint of another shape is refused with the list of differences"
set +e
out=$(timeout 120 "$MEGATRON_BINARY" pretrain-gpt "${MODEL[@]}" --train-iters 3 \
      --load "$WORK/ckpt" --ffn-hidden-size 128 2>&1)
status=$?
set -e
[[ $status != 0 ]] || fail "loading another ffn size succeeded"
[[ $out == *"layers.0.mlp.dense_h_to_4h.weight"* ]] || { echo "$out" | tail; fail "no shape list"; }
set +e
mapfile -t TWO_HEADS < <(model_with --num-attention-heads 2)
out=$(timeout 120 "$MEGATRON_BINARY" pretrain-gpt "${TWO_HEADS[@]}" --train-iters 3 \
      --load "$WORK/ckpt" 2>&1)
status=$?
set -e
[[ $status != 0 ]] || fail "loading another head count succeeded"
[[ $out == *"num_attention_heads: checkpoint 4, flags 2"* ]] || { echo "$out" | tail; fail "no head-count difference"; }
echo "features: OK"
