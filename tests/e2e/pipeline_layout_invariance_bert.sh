#!/usr/bin/env bash
# Layout invariance of BERT pretraining with pipeline parallelism (pipeline_layout_invariance.sh
# for BERT): one seed, one global batch (8), dropout on, fp32, 4 layers, the tiny sentence-level
# corpus of pretrain_bert.sh — TP×PP×DP 1×1×1, 1×2×1, 2×2×1, 1×4×1, 1×2×2 (also with
# --overlap-grad-reduce and small buckets: bit for bit the run without), 1×2×1
# interleaved (2 chunks of 1 layer per rank), Megatron's uneven splits (1×2×1 with a first stage
# of 1 layer; 1×2×1 interleaved with the embedding and the loss counted as layers: 3 chunks per
# rank, the first holding the embedding alone and the last the heads alone; 1×2×1 with Megatron's
# layout string "E|t*3|t|L": virtual stages of 0, 3, 1, 0 layers), 1×1×4 with the
# distributed optimizer, and 2×1×2
# and 2×2×1 with sequence parallelism must log the same lm loss, sop loss and grad norm at each
# of 6 iterations (relative <= 1e-5), and the same validation losses; so must post-LN BERT
# (embedding LayerNorm) at 2×1×2 with sequence parallelism against its 1×1×1. A checkpoint
# saved at 2×2×1 resumes at 1×1×1 with the next losses of the uninterrupted run, so does 1×1×4's
# (distributed optimizer) at 1×1×2 with it, and so does 1×4×1's after
# `megatron convert --model-type bert` rewrote it at TP 2 × PP 2 (resumed at 2×2×1), and at
# 1×2×2 as distributed-optimizer shards (--use-distributed-optimizer --target-data-parallel-size
# 2, resumed at 1×2×2 sharded). 1×1×4's sharded checkpoint converted to whole buffers and back
# to 4 shards is the trainer's, byte for byte.
# Layers that do not split into the stages are the error pretrain-gpt gives; --sequence-parallel
# at TP 1 trains without it, with Megatron-LM's warning.
# Needs the files of scripts/fetch_data.sh (scripts/test.sh runs it first).
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_bert_data.bash"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run() {  # run NAME NP TP PP [FLAGS...]
  local name=$1 np=$2 tp=$3 pp=$4
  shift 4
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-bert \
    --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --data-path "$BERT_DATA" --vocab-file "$VOCAB" \
    --split 949,50,1 --micro-batch-size 2 --global-batch-size 8 --train-iters 6 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --tensor-model-parallel-size "$tp" \
    --pipeline-model-parallel-size "$pp" --log-interval 1 \
    --eval-interval 3 --eval-iters 1 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

for case in "3 0 --num-layers 3 is not divisible by --pipeline-model-parallel-size 2" \
            "4 3 --num-layers-per-virtual-pipeline-stage 3 must divide --num-layers 4"; do
  read -r layers per expected <<< "$case"
  virtual=()  # 0: no virtual stages
  [[ $per == 0 ]] || virtual=(--num-layers-per-virtual-pipeline-stage "$per")
  if out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
             "$MEGATRON_BINARY" pretrain-bert --num-layers "$layers" --hidden-size 32 \
             --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
             --data-path "$BERT_DATA" --vocab-file "$VOCAB" --micro-batch-size 2 \
             --global-batch-size 8 --train-iters 1 --lr 1e-3 --pipeline-model-parallel-size 2 \
             "${virtual[@]}" 2>&1); then
    echo "FAIL: --num-layers $layers (virtual stages of $per) trained"; exit 1
  fi
  [[ $out == *"$expected"* ]] || { echo "$out" | tail -3; echo "FAIL: expected '$expected'"; exit 1; }
done

if ! out=$(timeout 60 "$MEGATRON_BINARY" pretrain-bert --num-layers 4 --hidden-size 32 \
           --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
           --data-path "$BERT_DATA" --vocab-file "$VOCAB" --micro-batch-size 2 \
           --global-batch-size 8 --train-iters 1 --lr 1e-3 --sequence-parallel 2>&1); then
  echo "$out" | tail -3; echo "FAIL: --sequence-parallel at TP 1 did not train"; exit 1
fi
[[ $out == *"WARNING: Disabling sequence parallelism because tensor model parallelism is disabled"* ]] ||
  { echo "$out" | tail -3; echo "FAIL: expected Megatron's TP 1 warning of --sequence-parallel"; exit 1; }

run t1p1d1 1 1 1
run t1p2d1 2 1 2
run t2p2d1 4 2 2 --save "$WORK/ckpt_t2p2" --save-interval 3 --exit-interval 3
run t1p4d1 4 1 4 --save "$WORK/ckpt_p4" --save-interval 3 --exit-interval 3
run t1p2d2 4 1 2
run t1p2d2_overlap 4 1 2 --overlap-grad-reduce --ddp-bucket-size 5000
run t1p2d1_interleaved 2 1 2 --num-layers-per-virtual-pipeline-stage 1
run t1p2d1_first1 2 1 2 --decoder-first-pipeline-num-layers 1
run t1p2d1_layout 2 1 2 --pipeline-model-parallel-layout "E|t*3|t|L"
run t1p2d1_interleaved_account 2 1 2 --num-layers-per-virtual-pipeline-stage 1 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
run t1p1d4_distopt 4 1 1 --use-distributed-optimizer --save "$WORK/ckpt_distopt" \
  --save-interval 3 --exit-interval 3
run t2p1d2_sp 4 2 1 --sequence-parallel
run t2p2d1_sp 4 2 2 --sequence-parallel
run postln_t1p1d1 1 1 1 --post-layernorm
run postln_t2p1d2_sp 4 2 1 --post-layernorm --sequence-parallel
for name in t2p2d1 t1p4d1 t1p1d4_distopt; do
  grep -q "exiting program at iteration 3" "$WORK/$name.log" || { echo "FAIL: $name no exit"; exit 1; }
done
run resumed_t1p1d1 1 1 1 --load "$WORK/ckpt_t2p2"
run resumed_t1p1d2_distopt 2 1 1 --use-distributed-optimizer --load "$WORK/ckpt_distopt"
"$MEGATRON_BINARY" convert --model-type bert --load "$WORK/ckpt_p4" --save "$WORK/ckpt_converted" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 > "$WORK/convert.log" 2>&1 ||
  { cat "$WORK/convert.log"; echo "FAIL: convert"; exit 1; }
[[ -d "$WORK/ckpt_converted/iter_0000003/mp_rank_01_001" ]] || { echo "FAIL: no TP2 x PP2 layout"; exit 1; }
run converted_t2p2d1 4 2 2 --load "$WORK/ckpt_converted"
bert_convert() {  # bert_convert LOG FLAGS...
  local log=$1
  shift
  "$MEGATRON_BINARY" convert --model-type bert "$@" > "$WORK/$log.log" 2>&1 ||
    { cat "$WORK/$log.log"; echo "FAIL: convert $*"; exit 1; }
}
bert_convert p4_to_p2d2 --load "$WORK/ckpt_p4" --save "$WORK/ckpt_p2d2" \
  --target-pipeline-parallel-size 2 --use-distributed-optimizer --target-data-parallel-size 2
[[ -f $WORK/ckpt_p2d2/iter_0000003/mp_rank_00_001/optimizer_dp001_of_002.safetensors ]] ||
  { ls -R "$WORK/ckpt_p2d2"; echo "FAIL: no distributed-optimizer shards"; exit 1; }
run converted_t1p2d2_distopt 4 1 2 --use-distributed-optimizer --load "$WORK/ckpt_p2d2"
bert_convert distopt_whole --load "$WORK/ckpt_distopt" --save "$WORK/distopt_whole"
bert_convert distopt_sharded --load "$WORK/distopt_whole" --save "$WORK/distopt_sharded" \
  --use-distributed-optimizer --target-data-parallel-size 4
echo "== 1x1x4's sharded checkpoint -> whole buffers -> 4 shards: the trainer's files"
diff <(cd "$WORK/ckpt_distopt/iter_0000003" && find . -type f | sort) \
     <(cd "$WORK/distopt_sharded/iter_0000003" && find . -type f | sort) ||
  { echo "FAIL: the converted checkpoint holds other files"; exit 1; }
for f in $(cd "$WORK/ckpt_distopt/iter_0000003" && find . -type f); do
  cmp "$WORK/ckpt_distopt/iter_0000003/$f" "$WORK/distopt_sharded/iter_0000003/$f" ||
    { echo "FAIL: converted $f differs from the trainer's"; exit 1; }
done

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
echo "== t1p2d2 with and without --overlap-grad-reduce (bit for bit)"
$CHECK "$WORK/t1p2d2.jsonl" "$WORK/t1p2d2_overlap.jsonl" --from 1 --to 6 --exact
for name in t1p2d1 t1p2d2 t1p2d1_interleaved t1p2d1_first1 t1p2d1_interleaved_account t2p1d2_sp \
  t2p2d1_sp t1p2d2_overlap t1p2d1_layout; do
  echo "== t1p1d1 vs $name"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== post-LN: t1p1d1 vs t2p1d2 with sequence parallelism"
$CHECK "$WORK/postln_t1p1d1.jsonl" "$WORK/postln_t2p1d2_sp.jsonl" --from 1 --to 6 --rtol 1e-5
for name in t2p2d1 t1p4d1 t1p1d4_distopt; do
  echo "== t1p1d1 vs $name (iterations 1-3, then it saves and exits)"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 3 --rtol 1e-5
done
echo "== resumed at 1x1x1 from 2x2x1's checkpoint of iteration 3"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t1p1d1.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== resumed at 1x1x2 from 1x1x4's checkpoint of iteration 3 (distributed optimizer)"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t1p1d2_distopt.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== resumed at 2x2x1 from 1x4x1's checkpoint converted to TP 2 x PP 2"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/converted_t2p2d1.jsonl" --from 4 --to 6 --rtol 1e-5
echo "== resumed at 1x2x2 sharded from 1x4x1's checkpoint converted to 1x2x2 shards"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/converted_t1p2d2_distopt.jsonl" --from 4 --to 6 --rtol 1e-5
# Validation losses (lm and sop) agree too, matched by iteration and order.
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_validation.js" "$WORK/t1p1d1.jsonl" \
     "$WORK/t1p2d1.jsonl" "$WORK/t2p2d1.jsonl" "$WORK/t1p4d1.jsonl" "$WORK/t1p2d2.jsonl" \
     "$WORK/t1p2d1_interleaved.jsonl" "$WORK/t1p2d1_first1.jsonl" "$WORK/t1p2d1_layout.jsonl" \
     "$WORK/t1p2d1_interleaved_account.jsonl" "$WORK/resumed_t1p1d1.jsonl" \
     "$WORK/t1p1d4_distopt.jsonl" "$WORK/t2p1d2_sp.jsonl" "$WORK/t2p2d1_sp.jsonl" \
     "$WORK/resumed_t1p1d2_distopt.jsonl"
# The check must be able to fail: the losses have to move over the 6 iterations.
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(x => x.type === "train");
  if (r.length !== 6 || !(r[5].lm_loss < r[0].lm_loss) || !(r[0].sop_loss > 0)) {
    console.error("losses did not move over 6 iterations:", r.map(x => [x.lm_loss, x.sop_loss]));
    process.exit(1);
  }' "$WORK/t1p1d1.jsonl"
echo "bert pipeline layout invariance: OK"
