#!/usr/bin/env bash
# Layout invariance of `megatron finetune` (RACE, the synthetic task of finetune_race.sh) with
# pipeline parallelism, sequence parallelism and the distributed optimizer: a 4-layer BERT
# pretrained at 1×1×1 is finetuned for one epoch (25 iterations of a global batch of 8
# questions, dropout on, fp32) at TP×PP×DP 1×1×1, 1×2×1, 2×2×1, 1×2×2, 1×4×1, 2×1×2 and
# 2×2×1 with --sequence-parallel, and 1×1×4 with --use-distributed-optimizer; each must log
# the same losses and grad norms over the first 10 iterations (relative <= 1e-5; later ones
# drift apart by float rounding, as in every layout test) and the same validation accuracy
# lines. At PP 2 the log names the fresh head and the unread pretraining heads of the whole
# model (every stage's report merged). A checkpoint saved mid-epoch at 2×2×1 resumes at 1×1×1
# and at 1×2×2 with the next losses and the accuracy of the uninterrupted run; 1×1×1's final
# checkpoint evaluated (--epochs 0) at 1×2×2 prints 1×1×1's accuracy; a body pretrained at
# PP 2 loads into a finetune at 1×1×1 and at 1×2×1 alike. Layers that do not split into the
# stages, --sequence-parallel at TP 1, the interleaved schedule and a world size that TP × PP
# does not divide are errors that name the problem.
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
MODEL=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 48
       --max-position-embeddings 48 --vocab-file "$VOCAB" --init-method-std 0.2 --seed 11)

"$BIN" preprocess --input "$WORK/data/corpus.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" --split-sentences --output-prefix "$WORK/corpus" > /dev/null 2>&1 ||
  fail "preprocess"
pretrain() {  # pretrain NP PP OUT_DIR
  "${MPIRUN[@]}" -np "$1" "$BIN" pretrain-bert "${MODEL[@]}" --micro-batch-size 8 \
    --train-iters 10 --lr 1e-3 --data-path "$WORK/corpus_text_sentence" --split 98,1,1 \
    --eval-iters 0 --log-interval 10 --pipeline-model-parallel-size "$2" --save "$3" \
    > "$3.log" 2>&1 || { cat "$3.log"; fail "pretrain $3"; }
}
pretrain 1 1 "$WORK/pretrained"
pretrain 2 2 "$WORK/pretrained_pp2"

finetune() {  # finetune NAME NP TP PP MICRO_BATCH [flags...]
  local name="$1" np="$2" tp="$3" pp="$4" mb="$5"
  shift 5
  "${MPIRUN[@]}" -np "$np" "$BIN" finetune --task RACE "${MODEL[@]}" \
    --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp" \
    --micro-batch-size "$mb" --train-data "$RACE/train/middle" \
    --valid-data "$RACE/dev/middle" "$RACE/dev/high" --epochs 1 --lr 2e-3 \
    --lr-decay-style constant --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 \
    --metrics-file "$WORK/$name.jsonl" "$@" > "$WORK/$name.log" 2>&1 ||
    { cat "$WORK/$name.log"; fail "finetune $name"; }
}

# Errors, before any training.
expect_error() {  # expect_error EXPECTED NP FLAGS...
  local expected="$1" np="$2"
  shift 2
  if out=$("${MPIRUN[@]}" -np "$np" "$BIN" finetune --task RACE "${MODEL[@]}" \
             --train-data "$RACE/train/middle" --valid-data "$RACE/dev/middle" --epochs 1 \
             --lr 1e-3 --micro-batch-size 4 "$@" 2>&1); then
    fail "finetune $* trained"
  fi
  [[ $out == *"$expected"* ]] || { echo "$out" | tail -3; fail "expected '$expected'"; }
}
expect_error "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2" 2 \
  --num-layers 3 --pipeline-model-parallel-size 2
expect_error "the interleaved schedule needs a multiple of --pipeline-model-parallel-size micro-batches" \
  2 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
expect_error "is not a multiple of --tensor-model-parallel-size 2 x --pipeline-model-parallel-size 2" \
  2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2

P=(--pretrained-checkpoint "$WORK/pretrained")
finetune t1p1d1 1 1 1 8 "${P[@]}" --save "$WORK/ckpt_t1p1"
finetune t1p2d1 2 1 2 8 "${P[@]}"
finetune t2p2d1 4 2 2 8 "${P[@]}" --save "$WORK/ckpt_t2p2" --save-interval 5 --exit-interval 5
finetune t1p2d2 4 1 2 4 "${P[@]}"
finetune t1p4d1 4 1 4 8 "${P[@]}"
finetune t2p1d2_sp 4 2 1 4 "${P[@]}" --sequence-parallel
finetune t2p2d1_sp 4 2 2 8 "${P[@]}" --sequence-parallel
finetune t1p1d4_distopt 4 1 1 2 "${P[@]}" --use-distributed-optimizer
grep -q "exiting program at iteration 5" "$WORK/t2p2d1.log" || fail "t2p2d1 did not exit at 5"
finetune resumed_t1p1d1 1 1 1 8 "${P[@]}" --load "$WORK/ckpt_t2p2"
finetune resumed_t1p2d2 4 1 2 4 "${P[@]}" --load "$WORK/ckpt_t2p2"
# Evaluation only (--epochs 0) of 1×1×1's checkpoint at 1×2×2 with micro-batches of 8: each DP
# rank's 12 questions per set are a whole micro-batch and a remainder of 4 through the pipeline.
finetune evalonly_t1p2d2 4 1 2 8 --epochs 0 --load "$WORK/ckpt_t1p1"
# A body pretrained at PP 2, finetuned at PP 1 and PP 2.
finetune from_pp2_t1p1d1 1 1 1 8 --pretrained-checkpoint "$WORK/pretrained_pp2"
finetune from_pp2_t1p2d1 2 1 2 8 --pretrained-checkpoint "$WORK/pretrained_pp2"

# The load report of a split model is the whole model's (rank 0 holds only the first stage).
grep -q "left to their initialisation: multichoice_head.weight, multichoice_head.bias;" \
  "$WORK/t1p2d1.log" || fail "PP 2 does not name the fresh head"
grep -Eq "in the checkpoint but not in the model \(not loaded\): .*binary_head.weight" \
  "$WORK/t1p2d1.log" || fail "PP 2 does not name the unread pretraining heads"
grep -Eq "not in the model \(not loaded\): .*layers\." "$WORK/t1p2d1.log" &&
  fail "PP 2 reports the other stage's layers as not loaded"

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
accuracy() { grep "correct / total" "$1" | sed 's/, elapsed.*//'; }
for name in t1p2d1 t1p2d2 t1p4d1 t2p1d2_sp t2p2d1_sp t1p1d4_distopt; do
  echo "== t1p1d1 vs $name"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 10 --rtol 1e-5 ||
    fail "$name losses differ from 1x1x1"
  diff <(accuracy "$WORK/t1p1d1.log") <(accuracy "$WORK/$name.log") ||
    fail "$name accuracy differs from 1x1x1"
done
echo "== t1p1d1 vs t2p2d1 (iterations 1-5, then it saves and exits)"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/t2p2d1.jsonl" --from 1 --to 5 --rtol 1e-5 ||
  fail "t2p2d1 losses differ from 1x1x1"
for name in resumed_t1p1d1 resumed_t1p2d2; do
  echo "== $name from 2x2x1's checkpoint of iteration 5"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 6 --to 10 --rtol 1e-5 ||
    fail "$name losses differ from the uninterrupted run"
  diff <(accuracy "$WORK/t1p1d1.log") <(accuracy "$WORK/$name.log") ||
    fail "$name accuracy differs from the uninterrupted run"
done
echo "== 1x1x1's checkpoint evaluated at 1x2x2"
diff <(accuracy "$WORK/t1p1d1.log" | sed 's/epoch: 0/epoch: -1/') <(accuracy "$WORK/evalonly_t1p2d2.log") ||
  fail "1x1x1's checkpoint evaluates to another accuracy at 1x2x2"
echo "== a body pretrained at PP 2: finetuned at 1x1x1 vs 1x2x1"
$CHECK "$WORK/from_pp2_t1p1d1.jsonl" "$WORK/from_pp2_t1p2d1.jsonl" --from 1 --to 10 --rtol 1e-5 ||
  fail "the PP 2 body finetunes differently at PP 1 and PP 2"
diff <(accuracy "$WORK/from_pp2_t1p1d1.log") <(accuracy "$WORK/from_pp2_t1p2d1.log") ||
  fail "the PP 2 body's accuracy differs at PP 1 and PP 2"

# The checks must be able to fail: each of the 10 compared iterations has a loss of its own
# (a run that trained on other samples or with other dropout masks would not match), and the
# accuracy lines are there.
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(x => x.type === "train");
  const first10 = new Set(r.slice(0, 10).map(x => x.lm_loss));
  if (r.length !== 25 || first10.size !== 10 || !(r[0].grad_norm > 0)) {
    console.error("not 25 iterations of distinct losses:", r.map(x => x.lm_loss));
    process.exit(1);
  }' "$WORK/t1p1d1.jsonl"
[[ $(accuracy "$WORK/t1p1d1.log" | wc -l) == 3 ]] || fail "not 3 accuracy lines: $(accuracy "$WORK/t1p1d1.log")"
echo "finetune pipeline layout invariance: OK"
