#!/usr/bin/env bash
# --save-retain-interval 3 with --save-interval 1 over 7 iterations: each save removes the
# previous checkpoint unless its iteration is a multiple of 3, so iterations 3, 6 and 7 (the
# newest) remain and the tracker names 7; a resumed run keeps the rule (its first save removes
# 7, not a multiple of 3). A retain interval that is not a multiple of the save interval is
# refused naming both flags.
set -euo pipefail
: "${MEGATRON_BINARY:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

train() {  # train ITERS [FLAGS...]
  local iters=$1
  shift
  "$MEGATRON_BINARY" pretrain-gpt --num-layers 1 --hidden-size 32 --num-attention-heads 2 \
    --seq-length 16 --max-position-embeddings 16 --mock-data --vocab-size 64 \
    --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --override-opt_param-scheduler \
    --train-iters "$iters" --eval-iters 0 \
    --log-interval 1 --save "$WORK/ckpt" --load "$WORK/ckpt" --save-interval 1 "$@"
}
iterations() { (cd "$WORK/ckpt" && ls -d iter_* | tr '\n' ' '); }

train 7 --save-retain-interval 3 > "$WORK/first.log" 2>&1 || { cat "$WORK/first.log"; exit 1; }
got="$(iterations)"
[ "$got" = "iter_0000003 iter_0000006 iter_0000007 " ] || {
  echo "FAIL: after 7 iterations the checkpoints are: $got"; exit 1; }
[ "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" = 7 ] || {
  echo "FAIL: the tracker does not name iteration 7"; exit 1; }
grep -q "removed the checkpoint of iteration 5" "$WORK/first.log" || {
  echo "FAIL: the removal is not logged"; exit 1; }

train 9 --save-retain-interval 3 > "$WORK/resume.log" 2>&1 || { cat "$WORK/resume.log"; exit 1; }
got="$(iterations)"
[ "$got" = "iter_0000003 iter_0000006 iter_0000009 " ] || {
  echo "FAIL: after resuming to 9 the checkpoints are: $got"; exit 1; }

if train 2 --save-retain-interval 3 --save-interval 2 > "$WORK/bad.log" 2>&1; then
  echo "FAIL: --save-retain-interval 3 with --save-interval 2 was accepted"; exit 1
fi
grep -q -- "--save-retain-interval 3 must be a positive multiple of --save-interval (2)" \
  "$WORK/bad.log" || { cat "$WORK/bad.log"; echo "FAIL: unclear refusal"; exit 1; }
echo "save retain interval: OK"
