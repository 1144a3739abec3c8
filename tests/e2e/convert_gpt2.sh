#!/usr/bin/env bash
# `megatron convert` end to end on the tiny HF GPT-2 fixture: import at TP 2, reshard to TP 4
# and TP 1, export each back to HF (all three byte-identical, and stable under re-import),
# train from the imported checkpoint with pretrain-gpt at TP 2, and each documented error
# (distributed-optimizer shard conversions: tests/e2e/distributed_optimizer.sh).
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
HF="$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf"
fail() { echo "FAIL: $*"; exit 1; }
convert() { "$MEGATRON_BINARY" convert --model-type gpt "$@" > "$WORK/last.log" 2>&1 \
              || { cat "$WORK/last.log"; fail "convert $*"; }; }
# expect_error MESSAGE FLAGS...: convert must fail with MESSAGE on stderr.
expect_error() {
  local message=$1
  shift
  if "$MEGATRON_BINARY" convert "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}

echo "== import HF GPT-2 at TP 2 (vocabulary 96 padded to 128)"
convert --from hf --load "$HF" --save "$WORK/tp2" --target-tensor-parallel-size 2 \
  --make-vocab-size-divisible-by 32
[[ $(cat "$WORK/tp2/latest_checkpointed_iteration.txt") == 0 ]] || fail "tracker"
for f in mp_rank_00/model.safetensors mp_rank_01/model.safetensors mp_rank_01/state.json; do
  [[ -s $WORK/tp2/iter_0000000/$f ]] || fail "missing $f"
done

echo "== reshard TP 2 -> 4 -> 1"
convert --load "$WORK/tp2" --save "$WORK/tp4" --target-tensor-parallel-size 4
[[ -d $WORK/tp4/iter_0000000/mp_rank_03 ]] || fail "TP 4 layout"
convert --load "$WORK/tp4" --save "$WORK/tp1" --target-tensor-parallel-size 1
[[ -d $WORK/tp1/iter_0000000/mp_rank_00 && ! -d $WORK/tp1/iter_0000000/mp_rank_01 ]] \
  || fail "TP 1 layout"

echo "== Megatron's tools/checkpoint/convert.py spellings give the same checkpoint"
"$MEGATRON_BINARY" convert --model-type GPT --loader mcore --saver megatron --load-dir "$WORK/tp4" \
  --save-dir "$WORK/tp1_megatron_spelling" --target-tensor-parallel-size 1 \
  --target-pipeline-parallel-size 1 --megatron-path /nonexistent --max-queue-size 50 \
  || fail "convert with Megatron's spellings"
cmp "$WORK/tp1/iter_0000000/mp_rank_00/model.safetensors" \
  "$WORK/tp1_megatron_spelling/iter_0000000/mp_rank_00/model.safetensors" \
  || fail "Megatron spellings give another checkpoint"

echo "== export each back to HF: identical files"
for tp in 1 2 4; do convert --from megatron --to hf --load "$WORK/tp$tp" --save "$WORK/hf$tp"; done
cmp "$WORK/hf1/model.safetensors" "$WORK/hf2/model.safetensors" || fail "TP1 vs TP2 export"
cmp "$WORK/hf1/model.safetensors" "$WORK/hf4/model.safetensors" || fail "TP1 vs TP4 export"
cmp "$WORK/hf1/config.json" "$WORK/hf4/config.json" || fail "config.json differs"
convert --from hf --load "$WORK/hf1" --save "$WORK/again" --make-vocab-size-divisible-by 32
convert --from megatron --to hf --load "$WORK/again" --save "$WORK/hf_again"
cmp "$WORK/hf1/model.safetensors" "$WORK/hf_again/model.safetensors" || fail "re-import drifted"

echo "== pretrain-gpt starts from the imported checkpoint"
# HF GPT-2's gelu_new is the tanh form: Megatron's --openai-gelu.
TRAIN=(pretrain-gpt --openai-gelu --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 32 --mock-data --vocab-size 96 --make-vocab-size-divisible-by 32
       --micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 1e-4 --log-interval 1
       --eval-interval 1000 --eval-iters 1 --tensor-model-parallel-size 2 --load "$WORK/tp2")
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" "${TRAIN[@]}" --finetune --save "$WORK/trained" --save-interval 2 \
  > "$WORK/train.log" 2>&1 \
  || { cat "$WORK/train.log"; fail "pretrain-gpt --finetune from the import"; }
grep -q "loaded checkpoint from" "$WORK/train.log" || { cat "$WORK/train.log"; fail "no load"; }
grep -q "iteration        2/       2" "$WORK/train.log" || { cat "$WORK/train.log"; fail "no step"; }
echo "== a trained checkpoint (TP 2, with optimizer state) exports and reshards"
convert --from megatron --to hf --load "$WORK/trained" --save "$WORK/hf_trained"
grep -q '"n_layer": 2' "$WORK/hf_trained/config.json" || fail "exported config.json"
grep -q '"vocab_size": 96' "$WORK/hf_trained/config.json" || fail "exported vocabulary"
convert --load "$WORK/trained" --save "$WORK/trained_tp1" --target-tensor-parallel-size 1
[[ $(cat "$WORK/trained_tp1/latest_checkpointed_iteration.txt") == 2 ]] || fail "iteration kept"
[[ -s $WORK/trained_tp1/iter_0000002/mp_rank_00/optimizer.safetensors ]] || fail "optimizer kept"
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" "${TRAIN[@]}" --no-load-optim --no-load-rng > "$WORK/train3.log" 2>&1 \
  || { cat "$WORK/train3.log"; fail "pretrain-gpt --no-load-optim --no-load-rng from the import"; }
grep -q "iteration        2/       2" "$WORK/train3.log" || { cat "$WORK/train3.log"; fail "no step"; }
# Without either the trainer asks for optimizer state, which an import does not have.
if timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
     "$MEGATRON_BINARY" "${TRAIN[@]}" > "$WORK/train2.log" 2>&1; then
  fail "loading optimizer state from an import should fail"
fi
grep -q "holds no optimizer buffer" "$WORK/train2.log" || { cat "$WORK/train2.log"; fail "message"; }

echo "== errors"
expect_error "--model-type t5 is not supported" --model-type t5 --load "$HF" --save "$WORK/x"
expect_error "--target-pipeline-parallel-size 2 is supported when resharding checkpoints (megatron to megatron)" \
  --model-type gpt --from hf --load "$HF" --save "$WORK/x" --target-pipeline-parallel-size 2
expect_error "--num-layers 2 is not divisible by --pipeline-model-parallel-size 4" \
  --model-type gpt --load "$WORK/tp2" --save "$WORK/x" --target-pipeline-parallel-size 4
expect_error "is not divisible by the tensor-model-parallel size 3" --model-type gpt \
  --load "$WORK/tp2" --save "$WORK/x" --target-tensor-parallel-size 3
expect_error "no checkpoint to load in '$WORK/missing'" --model-type gpt --load "$WORK/missing" \
  --save "$WORK/x"
expect_error "HF config file '$WORK/missing/config.json'" --model-type gpt --from hf \
  --load "$WORK/missing" --save "$WORK/x"
expect_error "--load and --save are both" --model-type gpt --load "$WORK/tp2" --save "$WORK/tp2"
expect_error "--model-type is required" --load "$WORK/tp2" --save "$WORK/x"
expect_error "--target-data-parallel-size must be >= 1, got 0" --model-type gpt \
  --load "$WORK/tp2" --save "$WORK/x" --use-distributed-optimizer --target-data-parallel-size 0
expect_error "--target-data-parallel-size 2 needs --use-distributed-optimizer" --model-type gpt \
  --load "$WORK/tp2" --save "$WORK/x" --target-data-parallel-size 2
expect_error "--use-distributed-optimizer is supported when resharding checkpoints (megatron to megatron)" \
  --model-type gpt --from hf --load "$HF" --save "$WORK/x" --use-distributed-optimizer
expect_error "--use-distributed-optimizer is supported when resharding checkpoints (megatron to megatron)" \
  --model-type gpt --to hf --load "$WORK/tp2" --save "$WORK/x" --use-distributed-optimizer
expect_error "state.json has no model.num_tokentypes (needed to rebuild the model)" \
  --model-type bert --load "$WORK/trained" \
  --save "$WORK/x" --use-distributed-optimizer --target-data-parallel-size 2
expect_error "holds no optimizer state (saved with --no-save-optim, or imported)" --model-type gpt \
  --load "$WORK/tp2" --save "$WORK/x" --use-distributed-optimizer --target-data-parallel-size 2
echo "PASS"
