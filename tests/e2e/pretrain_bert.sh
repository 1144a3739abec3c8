#!/usr/bin/env bash
# e2e: `megatron pretrain-bert` at TP=2 on a small sentence-level corpus (40 SOTU speeches,
# BERT uncased WordPiece):
#  - a few iterations log finite `lm loss` and `sop loss` (checked in the metrics file);
#  - the checkpoint is written (both TP shards) and reloads: a second run resumes at the saved
#    iteration and continues;
#  - a post-LN model exports to HF BERT and imports back (TP 2) to the same tensors, and
#    pretraining continues from the import; a pre-LN one round-trips through HF's
#    MegatronBertForPreTraining.
# Needs the files of scripts/fetch_data.sh (scripts/test.sh runs it first).
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_bert_data.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

COMMON=(--tensor-model-parallel-size 2 --num-layers 2 --hidden-size 32 --num-attention-heads 4
        --seq-length 32 --max-position-embeddings 32 --micro-batch-size 4 --global-batch-size 8
        --lr 1e-3 --data-path "$BERT_DATA" --vocab-file "$VOCAB"
        --split 949,50,1 --log-interval 1 --eval-interval 2 --eval-iters 1)
bert() { mpirun --oversubscribe --bind-to none -np 2 "$BIN" pretrain-bert "$@"; }

# Train 3 iterations, save, then resume to 5.
bert "${COMMON[@]}" --train-iters 3 --save "$WORK/ckpt" --metrics-file "$WORK/m1.jsonl" \
  > "$WORK/run1.log"
grep -q "lm loss: .* | sop loss: " "$WORK/run1.log"
[[ "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" == "3" ]]
[[ -f "$WORK/ckpt/iter_0000003/mp_rank_00/model.safetensors" ]]
[[ -f "$WORK/ckpt/iter_0000003/mp_rank_01/model.safetensors" ]]
node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
  const train = lines.map(JSON.parse).filter((j) => j.type === "train");
  if (train.length !== 3) throw new Error("expected 3 logged iterations, got " + train.length);
  for (const j of train)
    if (!Number.isFinite(j.lm_loss) || !Number.isFinite(j.sop_loss) || j.lm_loss <= 0)
      throw new Error("bad losses in " + JSON.stringify(j));
' "$WORK/m1.jsonl"

# Two iterations more than the checkpoint's run: the schedule of this command line.
bert "${COMMON[@]}" --train-iters 5 --load "$WORK/ckpt" --save "$WORK/ckpt" \
  --override-opt_param-scheduler > "$WORK/run2.log"
grep -q "loaded checkpoint from .* at iteration 3" "$WORK/run2.log"
grep -q "iteration        5/       5" "$WORK/run2.log"
! grep -q "iteration        3/" "$WORK/run2.log"
[[ "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" == "5" ]]

# Post-LN: export to HF, import at TP 2, export again: the same tensors; then continue.
bert "${COMMON[@]}" --post-layernorm --train-iters 2 --save "$WORK/post" > /dev/null
"$BIN" convert --model-type bert --from megatron --to hf --load "$WORK/post" --save "$WORK/hf1"
"$BIN" convert --model-type bert --from hf --load "$WORK/hf1" --save "$WORK/imported" \
  --target-tensor-parallel-size 2
"$BIN" convert --model-type bert --from megatron --to hf --load "$WORK/imported" --save "$WORK/hf2"
cmp "$WORK/hf1/model.safetensors" "$WORK/hf2/model.safetensors"
grep -q '"BertForPreTraining"' "$WORK/hf1/config.json"
bert "${COMMON[@]}" --post-layernorm --train-iters 2 --load "$WORK/imported" --finetune \
  > "$WORK/run3.log"
grep -q "loaded checkpoint from .* (finetune: weights only)" "$WORK/run3.log"
grep -q "iteration        2/       2" "$WORK/run3.log"

# A pre-LN model is HF's MegatronBertForPreTraining (Megatron-LM's BERT): export, import, export
# again: the same tensors.
"$BIN" convert --model-type bert --from megatron --to hf --load "$WORK/ckpt" --save "$WORK/hf3"
grep -q '"MegatronBertForPreTraining"' "$WORK/hf3/config.json"
"$BIN" convert --model-type bert --from hf --load "$WORK/hf3" --save "$WORK/pre_imported"
"$BIN" convert --model-type bert --from megatron --to hf --load "$WORK/pre_imported" \
  --save "$WORK/hf4"
cmp "$WORK/hf3/model.safetensors" "$WORK/hf4/model.safetensors"
echo "pretrain-bert e2e OK"
