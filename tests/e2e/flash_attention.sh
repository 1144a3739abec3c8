#!/usr/bin/env bash
# The fused attention through the binary (model/attention.h, kernels/flash_attention.h):
# --use-flash-attn and Megatron's --attention-backend flash train a small GPT to the unfused
# run's losses (f32, dropout on: the same mask), at TP 1 and TP 2 with sequence parallelism and
# in a BERT (padding masks); the theoretical memory report (the planner, which keeps only the
# log-sum-exp for the fused core) equals the allocated tensors; contradictory or unknown
# attention backends are refused with a sentence.
set -euo pipefail
: "${MEGATRON_BINARY:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
GPT=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 96
     --mock-data --vocab-size 500 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
     --log-interval 1 --eval-iters 0 --train-iters 3)
# BERT reads real sentences (20 SOTU speeches, scripts/fetch_data.sh): padded samples.
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
VOCAB="$DATA/bert-base-uncased-vocab.txt"
for f in sotu.jsonl bert-base-uncased-vocab.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
head -n 20 "$DATA/sotu.jsonl" > "$WORK/in.jsonl"
"$MEGATRON_BINARY" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" --split-sentences --output-prefix "$WORK/sotu" 2> /dev/null
BERT=(pretrain-bert --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
      --max-position-embeddings 64 --data-path "$WORK/sotu_text_sentence" --vocab-file "$VOCAB"
      --split 1000,0,0 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
      --eval-iters 0 --train-iters 3)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}
losses() { grep -o 'lm loss: [0-9.E+-]*' "$WORK/$1.log" | awk '{print $3}'; }
# same_losses A B: every iteration's loss agrees to 1e-5 relative (the printed 7 digits).
same_losses() {
  paste <(losses "$1") <(losses "$2") | awk -v a="$1" -v b="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print a " vs " b ": " $1 " " $2; bad = 1 } }
    END { exit !(n == 3 && !bad) }' || fail "$1 and $2 trained differently"
  echo "   $1 = $2: $(losses "$1" | tr '\n' ' ')"
}

echo "== GPT: unfused and fused attention"
run gpt 1 "${GPT[@]}"
run gpt_flash 1 "${GPT[@]}" --use-flash-attn
run gpt_backend 1 "${GPT[@]}" --attention-backend flash
same_losses gpt gpt_flash
same_losses gpt gpt_backend
run gpt_tp2_sp_flash 2 "${GPT[@]}" --use-flash-attn --tensor-model-parallel-size 2 --sequence-parallel
same_losses gpt gpt_tp2_sp_flash

echo "== BERT: padding masks"
run bert 1 "${BERT[@]}"
run bert_flash 1 "${BERT[@]}" --use-flash-attn
same_losses bert bert_flash

echo "== the theoretical memory report with the fused core"
THEORY_LINE='^Theoretical memory footprints: weight and optimizer=[0-9.]+ MB, activation=[0-9.]+ MB, total=[0-9.]+ MB$'
MEMORY_LINE='^\[Rank 0\] \(after 1 iterations\) memory \(MB\) \| allocated: [0-9.]+ '
for name in gpt_flash bert_flash; do
  total=$(grep -E "$THEORY_LINE" "$WORK/$name.log" | sed 's/.*total=\([0-9.]*\) MB/\1/')
  allocated=$(grep -E "$MEMORY_LINE" "$WORK/$name.log" | awk -F'[:|]' '{print $3}')
  awk -v t="$total" -v a="$allocated" 'BEGIN { d = t - a; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01 * a + 0.03) }' ||
    fail "$name: theoretical total $total MB, allocated $allocated MB"
  echo "   $name: theoretical total $total MB, allocated $allocated MB"
done
unfused=$(grep -E "$THEORY_LINE" "$WORK/gpt.log" | sed 's/.*activation=\([0-9.]*\) MB.*/\1/')
fused=$(grep -E "$THEORY_LINE" "$WORK/gpt_flash.log" | sed 's/.*activation=\([0-9.]*\) MB.*/\1/')
awk -v u="$unfused" -v f="$fused" 'BEGIN { exit !(f < u) }' || fail "fused activations $fused MB, unfused $unfused MB"

echo "== refused backends"
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1
  shift
  if "$MEGATRON_BINARY" "${GPT[@]}" "$@" > "$WORK/err.log" 2>&1; then fail "accepted: $*"; fi
  grep -q "$pattern" "$WORK/err.log" || { cat "$WORK/err.log"; fail "no '$pattern' for: $*"; }
}
expect_error "is not known: expected auto, flash, fused, unfused or local" --attention-backend fa3
expect_error "give one of them" --use-flash-attn --attention-backend unfused
echo "PASS"
