#!/usr/bin/env bash
# Megatron's checkpoint and data flags end to end (pretrain-gpt, TP 2):
#  - --train-data-path / --valid-data-path / --test-data-path use each dataset whole, and the
#    run ends with Megatron's evaluation "on test set";
#  - --no-save-optim / --no-save-rng leave the optimizer files and the RNG state out;
#  - such a checkpoint loads with --no-load-optim, and --skip-train only evaluates: no
#    iteration, no new checkpoint;
#  - GPT-2 BPE is pretrain-gpt's default tokenizer.
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
for f in sotu.jsonl gpt2-vocab.json gpt2-merges.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
TOK=(--vocab-file "$DATA/gpt2-vocab.json" --merge-file "$DATA/gpt2-merges.txt")
head -n 20 "$DATA/sotu.jsonl" > "$WORK/train.jsonl"
sed -n 21,24p "$DATA/sotu.jsonl" > "$WORK/valid.jsonl"
for s in train valid; do
  "$BIN" preprocess --input "$WORK/$s.jsonl" --tokenizer-type GPT2BPETokenizer "${TOK[@]}" \
    --append-eod --output-prefix "$WORK/$s" 2> /dev/null
done
gpt() { mpirun --oversubscribe --bind-to none -np 2 "$BIN" pretrain-gpt "$@"; }
COMMON=(--tensor-model-parallel-size 2 --num-layers 2 --hidden-size 32 --num-attention-heads 4
        --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
        --eval-iters 1 --eval-interval 1000 "${TOK[@]}"
        --train-data-path "$WORK/train_text_document" --valid-data-path "$WORK/valid_text_document"
        --test-data-path "$WORK/valid_text_document")

gpt "${COMMON[@]}" --train-iters 2 --save "$WORK/ckpt" --no-save-optim --no-save-rng --log-args \
  > "$WORK/run1.log" 2>&1 || { cat "$WORK/run1.log" >&2; exit 1; }
grep -q "  tokenizer_type .* GPT2BPETokenizer" "$WORK/run1.log"
grep -q "validation loss at iteration 2 on validation set" "$WORK/run1.log"
grep -q "validation loss at iteration 2 on test set" "$WORK/run1.log"  # the final test evaluation
[[ -f "$WORK/ckpt/iter_0000002/mp_rank_01/model.safetensors" ]]
[[ ! -e "$WORK/ckpt/iter_0000002/mp_rank_00/optimizer.safetensors" ]]
! grep -q '"rng"\|"optimizer"\|"scheduler"' "$WORK/ckpt/iter_0000002/mp_rank_00/state.json"

gpt "${COMMON[@]}" --train-iters 4 --load "$WORK/ckpt" --no-load-optim --skip-train \
  --save "$WORK/ckpt" > "$WORK/run2.log" 2>&1 || { cat "$WORK/run2.log" >&2; exit 1; }
grep -q "loaded checkpoint from .* at iteration 2" "$WORK/run2.log"
grep -q "validation loss at iteration 2 on validation set" "$WORK/run2.log"
! grep -q "iteration        3/" "$WORK/run2.log"
[[ "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" == "2" ]]
[[ ! -e "$WORK/ckpt/iter_0000004" ]]

# Megatron's "release" tracker: release/ loads weights-only and training starts at iteration 0.
mkdir "$WORK/rel"
cp -r "$WORK/ckpt/iter_0000002" "$WORK/rel/release"
echo release > "$WORK/rel/latest_checkpointed_iteration.txt"
gpt "${COMMON[@]}" --train-iters 1 --load "$WORK/rel" --save "$WORK/rel2" \
  > "$WORK/run6.log" 2>&1 || { cat "$WORK/run6.log" >&2; exit 1; }
grep -q "loaded checkpoint from .*/rel at iteration 2 (release: weights only)" "$WORK/run6.log"
grep -q "iteration        1/       1 |" "$WORK/run6.log"

# Per-split paths and --data-path exclude each other, as in Megatron.
if gpt "${COMMON[@]}" --train-iters 1 --data-path "$WORK/train_text_document" \
     > "$WORK/run3.log" 2>&1; then
  echo "FAIL: --data-path with --train-data-path was accepted" >&2; exit 1
fi
grep -q -- "--data-path cannot be combined with --train-data-path" "$WORK/run3.log"
echo "ok: Megatron's checkpoint and data flags"
