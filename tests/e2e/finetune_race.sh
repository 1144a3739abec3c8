#!/usr/bin/env bash
# e2e: `megatron finetune --task RACE` on a synthetic task in RACE's exact format whose answers
# are recoverable from the passage (tools/synthetic_race.py, a 44-word vocabulary):
#  - a tiny BERT pretrained with `pretrain-bert` on the task's passages is finetuned from
#    --pretrained-checkpoint under a fresh multiple-choice head (logged), and reaches clearly
#    above chance (>= 50 %, chance 25 %) validation accuracy over two dev sets in 300 steps;
#    Megatron's per-epoch accuracy lines, per-epoch checkpoints and SAVE/best are written, and
#    a run stopped mid-epoch and resumed keeps the same best checkpoint;
#  - the same finetuning at TP 2, DP 2 and TP 2 x DP 2 logs the same losses (fp32, relative 1e-5, 10
#    iterations) and the same accuracy lines as at TP 1;
#  - --epochs 0 only evaluates; MNLI and QQP train and print their accuracy lines under
#    Megatron's dataset names; documented errors name the problem.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
BIN="$MEGATRON_BINARY"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none)
fail() { echo "FAIL: $*"; exit 1; }

python3 "$MEGATRON_SOURCE_DIR/tools/synthetic_race.py" "$WORK/data" 7
VOCAB="$WORK/data/vocab.txt"
RACE="$WORK/data/RACE"
MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 48
       --max-position-embeddings 48 --vocab-file "$VOCAB" --hidden-dropout 0
       --attention-dropout 0 --init-method-std 0.2 --seed 11)

# A pretrained body: a few iterations of BERT pretraining on the passages.
"$BIN" preprocess --input "$WORK/data/corpus.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" --split-sentences --output-prefix "$WORK/corpus" > /dev/null 2>&1 ||
  fail "preprocess"
"$BIN" pretrain-bert "${MODEL[@]}" --micro-batch-size 8 --train-iters 20 --lr 1e-3 \
  --data-path "$WORK/corpus_text_sentence" --split 98,1,1 --eval-iters 0 --log-interval 10 \
  --save "$WORK/pretrained" > "$WORK/pretrain.log" 2>&1 || { cat "$WORK/pretrain.log"; fail "pretrain"; }

finetune() {  # finetune NP TP EPOCHS OUT_DIR [flags...]
  local np="$1" tp="$2" epochs="$3" out="$4"
  shift 4
  "${MPIRUN[@]}" -np "$np" "$BIN" finetune --task RACE "${MODEL[@]}" \
    --tensor-model-parallel-size "$tp" --train-data "$RACE/train/middle" \
    --valid-data "$RACE/dev/middle" "$RACE/dev/high" --epochs "$epochs" --lr 2e-3 \
    --lr-decay-style constant --pretrained-checkpoint "$WORK/pretrained" \
    --metrics-file "$out.jsonl" "$@" > "$out.log" 2>&1 || { cat "$out.log"; fail "finetune $out"; }
}

# Learning: 200 questions, 8 per iteration -> 25 iterations per epoch, 12 epochs.
finetune 1 1 12 "$WORK/learn" --micro-batch-size 8 --log-interval 5 --save "$WORK/ckpt"
LOG="$WORK/learn.log"
grep -q "left to their initialisation: multichoice_head.weight, multichoice_head.bias" "$LOG" ||
  fail "the fresh head is not logged"
grep -q "in the checkpoint but not in the model (not loaded): .*binary_head.weight" "$LOG" ||
  fail "the unused pretraining heads are not logged"
grep -q "working on epoch 12 ..." "$LOG" || fail "no epoch 12"
grep -q "iteration      300/     300" "$LOG" || fail "not 300 iterations"
grep -Eq "^ > \|epoch: 11\| metrics for dev-middle: correct / total = [0-9]+ / 24 = [0-9.]+ %, elapsed time \(sec\): [0-9.]+$" "$LOG" ||
  fail "no dev-middle accuracy line"
grep -Eq "^ > \|epoch: 11\| metrics for dev-high: correct / total = [0-9]+ / 24 = " "$LOG" ||
  fail "no dev-high accuracy line"
accuracy=$(sed -n 's/^ >> |epoch: 11| overall: correct \/ total = [0-9]* \/ 48 = \([0-9.]*\) %$/\1/p' "$LOG")
[[ -n "$accuracy" ]] || fail "no overall accuracy line"
python3 -c "import sys; a = float(sys.argv[1]); sys.exit(0 if a >= 50 else 1)" "$accuracy" ||
  fail "accuracy $accuracy % after 12 epochs is not clearly above chance (25 %)"
echo "synthetic RACE accuracy after 12 epochs: $accuracy %"
[[ "$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt")" == "300" ]] || fail "no final save"
[[ -d "$WORK/ckpt/iter_0000025" ]] || fail "no checkpoint at the end of epoch 1"
[[ -f "$WORK/ckpt/best/latest_checkpointed_iteration.txt" ]] || fail "no best checkpoint"
grep -q "best score so far" "$LOG" || fail "the best checkpoint is not logged"

# Resume mid-epoch keeps the best score: stopped in the middle of an epoch e that was not a new
# best (so a run that forgot the best would call e one) and resumed, the run announces the same
# best epochs from e on as the uninterrupted run, and keeps the same SAVE/best.
best_epochs() { sed -n 's/^ > best score so far ([0-9.]*, epoch \([0-9]*\)).*/\1/p' "$1"; }
resume_epoch=""
for e in $(seq 1 11); do
  best_epochs "$LOG" | grep -qx "$e" || { resume_epoch=$e; break; }
done
[[ -n "$resume_epoch" ]] || fail "every epoch was a new best: no epoch to resume in that tests the best score"
finetune 1 1 12 "$WORK/part1" --micro-batch-size 8 --log-interval 5 --save "$WORK/resumed" \
  --exit-interval $((resume_epoch * 25 + 10))
finetune 1 1 12 "$WORK/part2" --micro-batch-size 8 --log-interval 5 --save "$WORK/resumed" \
  --load "$WORK/resumed"
diff <(best_epochs "$LOG" | awk -v e="$resume_epoch" '$1 >= e') <(best_epochs "$WORK/part2.log") ||
  fail "the resumed run (from epoch $resume_epoch) announces other best epochs than the uninterrupted run"
diff "$WORK/ckpt/best/latest_checkpointed_iteration.txt" \
  "$WORK/resumed/best/latest_checkpointed_iteration.txt" || fail "the resumed run kept another best"

# --epochs 0: evaluation only, from the best checkpoint (the same accuracy as logged for it).
finetune 1 1 0 "$WORK/evalonly" --micro-batch-size 8 --load "$WORK/ckpt/best"
grep -q "evaluation only mode, setting epoch to -1" "$WORK/evalonly.log" || fail "no eval-only"
best_iter=$(cat "$WORK/ckpt/best/latest_checkpointed_iteration.txt")
best_epoch=$((best_iter / 25 - 1))
want=$(sed -n "s/^ >> |epoch: $best_epoch| overall: \(.*\)$/\1/p" "$LOG")
got=$(sed -n 's/^ >> |epoch: -1| overall: \(.*\)$/\1/p' "$WORK/evalonly.log")
[[ -n "$want" && "$want" == "$got" ]] || fail "best checkpoint: '$got', logged '$want'"

# Layout invariance: an epoch (50 iterations) at TP 1 (micro-batch 4, DP 1), TP 2, DP 2 and
# TP 2 x DP 2 (micro-batch 2): the same losses and grad norms over the first 10 iterations (later ones
# drift apart by float rounding, as in every layout test) and the same accuracy.
finetune 1 1 1 "$WORK/tp1" --micro-batch-size 4 --log-interval 1
finetune 2 2 1 "$WORK/tp2" --micro-batch-size 4 --log-interval 1
finetune 2 1 1 "$WORK/dp2" --micro-batch-size 2 --log-interval 1
finetune 4 2 1 "$WORK/tp2dp2" --micro-batch-size 2 --log-interval 1
for run in tp2 dp2 tp2dp2; do
  node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/tp1.jsonl" "$WORK/$run.jsonl" \
    --from 1 --to 10 --rtol 1e-5 || fail "$run losses differ from TP 1"
  diff <(grep "correct / total" "$WORK/tp1.log" | sed 's/, elapsed.*//') \
       <(grep "correct / total" "$WORK/$run.log" | sed 's/, elapsed.*//') ||
    fail "$run accuracy differs from TP 1"
done

# MNLI and QQP on the GLUE-format fixtures of tests/data/finetune (the BERT uncased vocabulary
# of scripts/fetch_data.sh): 3 and 2 classes, Megatron's dataset names from the paths.
BERT_VOCAB="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/bert-base-uncased-vocab.txt"
[[ -f "$BERT_VOCAB" ]] || fail "missing $BERT_VOCAB: run scripts/fetch_data.sh"
mkdir -p "$WORK/glue/MNLI" "$WORK/glue/QQP"
cp "$MEGATRON_SOURCE_DIR/tests/data/finetune/mnli_train.tsv" "$WORK/glue/MNLI/dev_matched.tsv"
cp "$MEGATRON_SOURCE_DIR/tests/data/finetune/qqp_train.tsv" "$WORK/glue/QQP/dev.tsv"
for task in MNLI QQP; do
  file=$( [[ $task == MNLI ]] && echo dev_matched.tsv || echo dev.tsv )
  "$BIN" finetune --task "$task" --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
    --seq-length 32 --max-position-embeddings 32 --vocab-file "$BERT_VOCAB" \
    --train-data "$WORK/glue/$task/$file" --valid-data "$WORK/glue/$task/$file" --epochs 1 \
    --micro-batch-size 2 --lr 1e-3 --log-interval 1 > "$WORK/$task.log" 2>&1 ||
    { cat "$WORK/$task.log"; fail "finetune $task"; }
done
grep -q "classification_head: 3 classes" "$WORK/MNLI.log" || fail "MNLI is not 3 classes"
grep -Eq "^ > \|epoch: 0\| metrics for dev-matched: correct / total = [0-9] / 4 = " "$WORK/MNLI.log" ||
  fail "no MNLI dev-matched accuracy"
grep -q "classification_head: 2 classes" "$WORK/QQP.log" || fail "QQP is not 2 classes"
# Megatron's name of QQP/dev.tsv is "de": .strip('.tsv') also takes the "v" of "dev".
grep -Eq "^ >> \|epoch: 0\| overall: correct / total = [0-9]+ / [0-9]+ = " "$WORK/QQP.log" &&
  grep -q "metrics for de: " "$WORK/QQP.log" || fail "no QQP accuracy under Megatron's name"

# Errors.
if "$BIN" finetune --task RACE "${MODEL[@]}" --micro-batch-size 4 --train-data "$RACE/train/middle" \
     --valid-data "$RACE/dev/middle" --epochs 1 --lr 1e-3 --train-iters 5 > "$WORK/e1.log" 2>&1; then
  fail "--train-iters was accepted"
fi
grep -q "trains --epochs passes over --train-data" "$WORK/e1.log" || fail "--train-iters message"
if "$BIN" finetune --task RACE "${MODEL[@]}" --micro-batch-size 4 --train-data "$RACE/train/middle" \
     --valid-data "$RACE/dev/middle" --epochs 1 --lr 1e-3 \
     --pretrained-checkpoint "$WORK/nothing" > "$WORK/e2.log" 2>&1; then
  fail "a missing --pretrained-checkpoint was accepted"
fi
grep -q "$WORK/nothing" "$WORK/e2.log" || fail "missing checkpoint message: $(cat "$WORK/e2.log")"
# A body of another shape than the flags (2 heads instead of 4, the last flag winning: the
# same tensor shapes).
if "$BIN" finetune --task RACE "${MODEL[@]}" --num-attention-heads 2 --micro-batch-size 4 \
     --train-data "$RACE/train/middle" --valid-data "$RACE/dev/middle" --epochs 1 --lr 1e-3 \
     --pretrained-checkpoint "$WORK/pretrained" > "$WORK/e3.log" 2>&1; then
  fail "a pretrained checkpoint of another head count was accepted"
fi
grep -q "has another model shape than the flags" "$WORK/e3.log" &&
  grep -q "num_attention_heads: checkpoint 4, flags 2" "$WORK/e3.log" ||
  fail "shape mismatch message: $(cat "$WORK/e3.log")"
echo "finetune RACE e2e OK"
