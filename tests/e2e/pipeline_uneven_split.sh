#!/usr/bin/env bash
# Uneven pipeline splits and the interleaved schedule's micro-batch groups, with Megatron-LM's
# flags, on real text (a slice of the State of the Union corpus, GPT-2 BPE): a GPT of 8 layers,
# hidden 64, global batch 12 of micro-batches of 2 (6 per iteration), dropout on, fp32. Each
# split must log the single-stage run's lm loss and grad norm at each of 6 iterations
# (relative <= 1e-5), and its validation losses:
#   PP 3, --decoder-first/last-pipeline-num-layers 2           stages of 2, 4, 2 layers
#   PP 2, --num-virtual-stages-per-pipeline-rank 2, first 2,   virtual stages of 1, 3, 1, 3
#     last 6
#   PP 2, --num-layers-per-virtual-pipeline-stage 1 and both    10 virtual stages: the embedding
#     --account-for-*-in-pipeline-split                         alone, 8 of 1 layer, the loss alone
#   PP 3, --account-for-embedding-in-pipeline-split             2, 3, 3
#   PP 3, 3 virtual stages, --account-for-loss-in-pipeline-    1, 1, ..., 1, 0; groups of all 6
#     split, --microbatch-group-size-per-virtual-pipeline-     micro-batches
#     stage 6
#   PP 2, 2 virtual stages, group size 4                        groups of 4 and 2
# and Megatron's --pipeline-model-parallel-layout, which must also log the runs of the split
# flags it equals:
#   PP 3, "Ett|t*4|ttL"                                         2, 4, 2 (first/last 2)
#   PP 2, "E,t|(t*3|t|)*1t*3,L"                                 1, 3, 1, 3 (v 2, first 2, last 6)
#   PP 3, "Et*4||t*4L"                                          4, 0, 4: rank 1 holds nothing
#   PP 2, "E|t*4||t*4L"                                         0, 4, 0, 4: rank 0 the embedding
# A checkpoint saved at iteration 3 by PP 2 with --decoder-first-pipeline-num-layers 3 (3, 5)
# resumes at PP 2 with --decoder-last-pipeline-num-layers 1 (7, 1) with the uninterrupted run's
# losses for iterations 4-6, and so does that checkpoint rewritten by `megatron convert` at PP 4
# (even stages), and so does it at PP 2 with the layout "Et*7|tL" (7, 1). And with
# --step-batch-size-schedule "0:4 384:8" (batches of 4 for
# 384 tokens, 12 samples, then of 8) the interleaved schedule runs each of the schedule's batch
# sizes — the global batch size the schedule implies, 2, is one micro-batch, which it cannot
# interleave — with the losses of the same schedule at PP 1.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
"$MEGATRON_SOURCE_DIR/scripts/fetch_data.sh" > /dev/null
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"

head -n 12 "$DATA_DIR/sotu.jsonl" > "$WORK/sotu12.jsonl"
timeout 300 "$MEGATRON_BINARY" preprocess --input "$WORK/sotu12.jsonl" \
  --output-prefix "$WORK/sotu" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$DATA_DIR/gpt2-vocab.json" --merge-file "$DATA_DIR/gpt2-merges.txt" \
  --append-eod --workers 2 > "$WORK/preprocess.log" 2>&1 ||
  { cat "$WORK/preprocess.log"; echo "FAIL: preprocess"; exit 1; }

# run NAME NP PP [FLAGS...]: 6 iterations (validation every 3) at pipeline size PP on NP ranks.
run() {
  local name=$1 np=$2 pp=$3
  shift 3
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --micro-batch-size 2 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 7 --data-path "$WORK/sotu_text_document" --split 949,50,1 \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
    --merge-file "$DATA_DIR/gpt2-merges.txt" --train-iters 6 --eval-interval 3 --eval-iters 1 \
    --pipeline-model-parallel-size "$pp" --log-interval 1 --metrics-file "$WORK/$name.jsonl" \
    "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

run p1 1 1 --global-batch-size 12
run p3_first2_last2 3 3 --global-batch-size 12 --decoder-first-pipeline-num-layers 2 \
  --decoder-last-pipeline-num-layers 2
run p2v2_first2_last6 2 2 --global-batch-size 12 --num-virtual-stages-per-pipeline-rank 2 \
  --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 6
run p2_account_both 2 2 --global-batch-size 12 --num-layers-per-virtual-pipeline-stage 1 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
run p3_account_embedding 3 3 --global-batch-size 12 --account-for-embedding-in-pipeline-split
run p3v3_account_loss_group6 3 3 --global-batch-size 12 --num-virtual-stages-per-pipeline-rank 3 \
  --account-for-loss-in-pipeline-split --microbatch-group-size-per-virtual-pipeline-stage 6
run p2v2_group4 2 2 --global-batch-size 12 --num-layers-per-virtual-pipeline-stage 2 \
  --microbatch-group-size-per-virtual-pipeline-stage 4
run p3_layout 3 3 --global-batch-size 12 --pipeline-model-parallel-layout "Ett|t*4|ttL"
run p2v2_layout 2 2 --global-batch-size 12 --pipeline-model-parallel-layout "E,t|(t*3|t|)*1t*3,L"
run p3_layout_empty_rank 3 3 --global-batch-size 12 --pipeline-model-parallel-layout "Et*4||t*4L"
run p2v2_layout_empty_stages 2 2 --global-batch-size 12 \
  --pipeline-model-parallel-layout "E|t*4||t*4L"
run p2_first3_save 2 2 --global-batch-size 12 --decoder-first-pipeline-num-layers 3 \
  --save "$WORK/ckpt_first3" --save-interval 3 --exit-interval 3
grep -q "exiting program at iteration 3" "$WORK/p2_first3_save.log" ||
  { echo "FAIL: p2_first3_save did not exit at 3"; exit 1; }
run resumed_p2_last1 2 2 --global-batch-size 12 --decoder-last-pipeline-num-layers 1 \
  --load "$WORK/ckpt_first3"
run resumed_p2_layout 2 2 --global-batch-size 12 --pipeline-model-parallel-layout "Et*7|tL" \
  --load "$WORK/ckpt_first3" --save "$WORK/ckpt_layout" --save-interval 6
# Rewritten at PP 4, its layout no longer applies either: reset as an unset flag is saved.
"$MEGATRON_BINARY" convert --model-type gpt --load "$WORK/ckpt_layout" \
  --save "$WORK/ckpt_layout_p4" --target-pipeline-parallel-size 4 > "$WORK/convert_layout.log" 2>&1 ||
  { cat "$WORK/convert_layout.log"; echo "FAIL: convert the layout's checkpoint"; exit 1; }
node -e '
  const args = f => JSON.parse(require("fs").readFileSync(f, "utf8")).args;
  const [before, after] = process.argv.slice(1).map(args);
  if (before.pipeline_model_parallel_layout !== "Et*7|tL" ||
      after.pipeline_model_parallel_layout !== "") {
    console.error("layout before/after convert:", before.pipeline_model_parallel_layout,
                  after.pipeline_model_parallel_layout);
    process.exit(1);
  }' "$WORK/ckpt_layout/iter_0000006/mp_rank_00_001/state.json" \
  "$WORK/ckpt_layout_p4/iter_0000006/mp_rank_00_003/state.json"
# `megatron convert` rewrites the uneven checkpoint at PP 4, even stages of 2 layers: the split
# flags of its state.json no longer apply and are reset; resumed there, the same losses.
"$MEGATRON_BINARY" convert --model-type gpt --load "$WORK/ckpt_first3" --save "$WORK/ckpt_p4" \
  --target-pipeline-parallel-size 4 > "$WORK/convert.log" 2>&1 ||
  { cat "$WORK/convert.log"; echo "FAIL: convert"; exit 1; }
node -e '
  const a = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).args;
  if (a.pipeline_model_parallel_size !== 4 || a.decoder_first_pipeline_num_layers !== null) {
    console.error("converted args:", a.pipeline_model_parallel_size, a.decoder_first_pipeline_num_layers);
    process.exit(1);
  }' "$WORK/ckpt_p4/iter_0000003/mp_rank_00_003/state.json"
run converted_p4 4 4 --global-batch-size 12 --load "$WORK/ckpt_p4"
run schedule_p1 1 1 --step-batch-size-schedule "0:4 384:8"
run schedule_p2v2 2 2 --step-batch-size-schedule "0:4 384:8" --num-layers-per-virtual-pipeline-stage 2

for name in p3_first2_last2 p2v2_first2_last6 p2_account_both p3_account_embedding \
  p3v3_account_loss_group6 p2v2_group4 p3_layout p2v2_layout p3_layout_empty_rank \
  p2v2_layout_empty_stages; do
  echo "== p1 vs $name"
  $CHECK "$WORK/p1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== the layouts vs the split flags they equal"
$CHECK "$WORK/p3_first2_last2.jsonl" "$WORK/p3_layout.jsonl" --from 1 --to 6 --rtol 1e-5
$CHECK "$WORK/p2v2_first2_last6.jsonl" "$WORK/p2v2_layout.jsonl" --from 1 --to 6 --rtol 1e-5
echo "== p1 vs p2_first3_save (iterations 1-3, then it saves and exits)"
$CHECK "$WORK/p1.jsonl" "$WORK/p2_first3_save.jsonl" --from 1 --to 3 --rtol 1e-5
echo "== resumed at PP 2 with the last stage of 1 layer from the checkpoint of first stage 3"
$CHECK "$WORK/p1.jsonl" "$WORK/resumed_p2_last1.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== resumed at PP 2 with the layout Et*7|tL from the checkpoint of first stage 3"
$CHECK "$WORK/p1.jsonl" "$WORK/resumed_p2_layout.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== resumed at PP 4 (even) from the checkpoint of first stage 3 converted to PP 4"
$CHECK "$WORK/p1.jsonl" "$WORK/converted_p4.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== batch-size schedule: PP 1 vs PP 2 interleaved"
$CHECK "$WORK/schedule_p1.jsonl" "$WORK/schedule_p2v2.jsonl" --from 1 --to 6 --rtol 1e-5
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_validation.js" "$WORK/p1.jsonl" \
  "$WORK/p3_first2_last2.jsonl" "$WORK/p2v2_first2_last6.jsonl" "$WORK/p2_account_both.jsonl" \
  "$WORK/p3_account_embedding.jsonl" "$WORK/p3v3_account_loss_group6.jsonl" \
  "$WORK/p2v2_group4.jsonl" "$WORK/resumed_p2_last1.jsonl" "$WORK/converted_p4.jsonl" \
  "$WORK/p3_layout.jsonl" "$WORK/p2v2_layout.jsonl" "$WORK/p3_layout_empty_rank.jsonl" \
  "$WORK/p2v2_layout_empty_stages.jsonl" "$WORK/resumed_p2_layout.jsonl"
# The check must be able to fail: the loss has to move over the 6 iterations.
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/p1.jsonl"
echo "pipeline uneven split: OK"
