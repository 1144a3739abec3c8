#!/usr/bin/env bash
# The distributed optimizer (--use-distributed-optimizer): the same run — one seed, global batch
# 8, dropout on — at TP×PP×DP 1×1×1 without it and at 1×1×4 and 1×2×2 with it logs the same
# lm loss and grad norm at each iteration (relative <= 1e-5). Its checkpoints hold each DP
# rank's own shard of the optimizer state (optimizer_dpRRR_of_DDD.safetensors, no gather), and
# resume at any layout, sharded or not, with the uninterrupted run's next losses:
#   1×1×4 sharded -> 1×1×2 unsharded, and -> 1×1×2 sharded, which saves again ->
#   1×2×1 (TP 2) unsharded; 1×1×1 -> 1×1×4 sharded; 1×2×2 (PP 2) sharded -> 1×1×4 sharded;
#   1×2×2 sharded, converted offline to TP 2 (`megatron convert`: whole buffers) -> 2×1×2
#   sharded.
# `megatron convert --use-distributed-optimizer --target-data-parallel-size D` writes the shards
# a sharded run saves: a trainer's sharded checkpoint (1×2×2 at iteration 4, 2×1×2 at iteration
# 8, fp16 1×1×2 with its fp32 master at iteration 4), converted to whole buffers at 1×1 and back
# to its own layout's shards, gives the trainer's files byte for byte (the same DpShard cut of
# the same flat space, the same writer); and the 1×1×1 run's unsharded checkpoint converted to
# 2×1×2 shards, and the round-tripped 1×2×2 one, resume with the next losses.
# --fp16 with the distributed optimizer: 1×1×2 sharded logs the same losses, grad norms, loss
# scales and skipped iterations as 1×1×2 unsharded, and its checkpoint (fp32 master shards and
# the loss scaler) resumes sharded at 1×1×4 and unsharded at 1×1×1 with the same next
# iterations.
#
# Why 1e-5 for fp32 and fp16 alike: the runs differ only in the order of the DP sum's additions
# and of the gradient norm's sum of squares (float rounding, ~1e-7 relative); fp16 rounds the
# weights to f16 after each step from fp32 masters that differ by that much, which can move a
# weight by one f16 ulp where a master sits on a rounding boundary — a few weights out of ~70k,
# far below 1e-5 of the loss. The skip decisions and loss scales must be equal.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

run() {  # run NAME NP PP [FLAGS...]
  local name=$1 np=$2 pp=$3
  shift 3
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters 8 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --pipeline-model-parallel-size "$pp" --log-interval 1 \
    --eval-interval 1000 --eval-iters 0 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

run plain 1 1 --save "$WORK/ckpt_plain" --save-interval 4
run sharded_d4 4 1 --use-distributed-optimizer --save "$WORK/ckpt_d4" --save-interval 4 \
  --exit-interval 4
for r in 0 1 2 3; do
  [[ -f $WORK/ckpt_d4/iter_0000004/mp_rank_00/optimizer_dp00${r}_of_004.safetensors ]] ||
    { ls -R "$WORK/ckpt_d4"; echo "FAIL: DP rank $r did not write its optimizer shard"; exit 1; }
done
[[ ! -e $WORK/ckpt_d4/iter_0000004/mp_rank_00/optimizer.safetensors ]] ||
  { echo "FAIL: a sharded save wrote full optimizer buffers"; exit 1; }
run sharded_p2d2 4 2 --use-distributed-optimizer --save "$WORK/ckpt_p2d2" --save-interval 4
run resumed_d2 2 1 --load "$WORK/ckpt_d4"
run resumed_sharded_d2 2 1 --use-distributed-optimizer --load "$WORK/ckpt_d4" \
  --save "$WORK/ckpt_d2" --save-interval 2 --exit-interval 6
run resumed_tp2 2 1 --tensor-model-parallel-size 2 --load "$WORK/ckpt_d2"
only_iteration4() {  # only_iteration4 FROM TO: a checkpoint directory with FROM's iteration 4
  mkdir "$2" && cp -r "$1/iter_0000004" "$2/" && echo 4 > "$2/latest_checkpointed_iteration.txt"
}
only_iteration4 "$WORK/ckpt_plain" "$WORK/ckpt_plain4"
run resumed_sharded_d4 4 1 --use-distributed-optimizer --load "$WORK/ckpt_plain4"
only_iteration4 "$WORK/ckpt_p2d2" "$WORK/ckpt_p2d2_4"
run resumed_p2d2_d4 4 1 --use-distributed-optimizer --load "$WORK/ckpt_p2d2_4"
"$MEGATRON_BINARY" convert --model-type gpt --load "$WORK/ckpt_p2d2" --load-iteration 4 \
  --save "$WORK/ckpt_converted" --target-tensor-parallel-size 2 > "$WORK/convert.log" 2>&1 ||
  { cat "$WORK/convert.log"; echo "FAIL: convert"; exit 1; }
run resumed_converted 4 1 --tensor-model-parallel-size 2 --use-distributed-optimizer \
  --load "$WORK/ckpt_converted" --save "$WORK/ckpt_tp2d2" --save-interval 4

convert() {  # convert LOG FLAGS...
  local log=$1
  shift
  "$MEGATRON_BINARY" convert --model-type gpt "$@" > "$WORK/$log.log" 2>&1 ||
    { cat "$WORK/$log.log"; echo "FAIL: convert $*"; exit 1; }
}
# same_files A B: every file of checkpoint iteration directory B is A's, byte for byte
# (optimizer shards, model files, state.json), and A has no other.
same_files() {
  diff <(cd "$1" && find . -type f | sort) <(cd "$2" && find . -type f | sort) ||
    { echo "FAIL: $1 and $2 hold different files"; exit 1; }
  (cd "$1" && find . -type f) | while read -r f; do
    cmp "$1/$f" "$2/$f" || { echo "FAIL: converted $f differs from the trainer's"; exit 1; }
  done
}
# round_trip NAME CKPT ITERATION TP PP DP: CKPT's sharded iteration converted to whole buffers
# at 1×1, then back to TP×PP with DP distributed-optimizer shards, is the trainer's checkpoint.
round_trip() {
  local name=$1 ckpt=$2 iteration=$3 tp=$4 pp=$5 dp=$6
  convert "${name}_whole" --load "$ckpt" --load-iteration "$iteration" --save "$WORK/${name}_whole"
  local dir; dir=$WORK/${name}_whole/$(printf 'iter_%07d' "$iteration")/mp_rank_00
  [[ -f $dir/optimizer.safetensors && -z $(find "$dir" -name 'optimizer_dp*') ]] ||
    { ls -R "$dir"; echo "FAIL: convert without the flag wrote shards"; exit 1; }
  convert "${name}_sharded" --load "$WORK/${name}_whole" --save "$WORK/${name}_sharded" \
    --target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp" \
    --use-distributed-optimizer --target-data-parallel-size "$dp"
  echo "== $name: sharded -> whole 1x1 -> ${tp}x${pp}x${dp} shards: the trainer's files"
  local it; it=$(printf 'iter_%07d' "$iteration")
  same_files "$ckpt/$it" "$WORK/${name}_sharded/$it"
}
round_trip p2d2 "$WORK/ckpt_p2d2" 4 1 2 2
round_trip tp2d2 "$WORK/ckpt_tp2d2" 8 2 1 2
run resumed_round_trip_p2d2 4 2 --use-distributed-optimizer --load "$WORK/p2d2_sharded"
convert plain_to_tp2d2 --load "$WORK/ckpt_plain4" --save "$WORK/ckpt_plain_tp2d2" \
  --target-tensor-parallel-size 2 --use-distributed-optimizer --target-data-parallel-size 2
for r in 0 1; do
  for t in 00 01; do
    [[ -f $WORK/ckpt_plain_tp2d2/iter_0000004/mp_rank_$t/optimizer_dp00${r}_of_002.safetensors ]] ||
      { ls -R "$WORK/ckpt_plain_tp2d2"; echo "FAIL: no shard $r of mp_rank_$t"; exit 1; }
  done
done
run resumed_plain_tp2d2 4 1 --tensor-model-parallel-size 2 --use-distributed-optimizer \
  --load "$WORK/ckpt_plain_tp2d2"

# The scale starts at 2^18 and doubles after every 2 clean steps, so that the gradients overflow
# f16 now and then: here iterations 4 and 6 are skipped (checked below: some steps skip, some
# do not), one before the checkpoint and one after.
FP16=(--fp16 --initial-loss-scale 262144 --loss-scale-window 2)
run fp16_d2 2 1 "${FP16[@]}"
run fp16_sharded_d2 2 1 "${FP16[@]}" --use-distributed-optimizer --save "$WORK/ckpt_fp16" \
  --save-interval 4 --exit-interval 4
run fp16_resumed_d4 4 1 "${FP16[@]}" --use-distributed-optimizer --load "$WORK/ckpt_fp16"
run fp16_resumed_d1 1 1 "${FP16[@]}" --load "$WORK/ckpt_fp16"
round_trip fp16_d2 "$WORK/ckpt_fp16" 4 1 1 2
run bf16_d2 2 1 --bf16
run bf16_sharded_d2 2 1 --bf16 --use-distributed-optimizer --save "$WORK/ckpt_bf16" \
  --save-interval 4 --exit-interval 4
run bf16_resumed_d4 4 1 --bf16 --use-distributed-optimizer --load "$WORK/ckpt_bf16"
run bf16_resumed_d1 1 1 --bf16 --load "$WORK/ckpt_bf16"
round_trip bf16_d2 "$WORK/ckpt_bf16" 4 1 1 2

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
echo "== 1x1x1 vs 1x1x4 sharded (iterations 1-4, then it saves and exits)"
$CHECK "$WORK/plain.jsonl" "$WORK/sharded_d4.jsonl" --from 1 --to 4 --rtol 1e-5
echo "== 1x1x1 vs 1x2x2 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/sharded_p2d2.jsonl" --from 1 --to 8 --rtol 1e-5
echo "== 1x1x4 sharded checkpoint resumed at 1x1x2 unsharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_d2.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x1x4 sharded checkpoint resumed at 1x1x2 sharded (iterations 5-6, then it saves)"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_sharded_d2.jsonl" --from 5 --to 6 --rtol 1e-5
echo "== that 1x1x2 sharded checkpoint resumed at 1x2x1 (TP 2) unsharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_tp2.jsonl" --from 7 --to 8 --rtol 1e-5
echo "== 1x1x1 checkpoint resumed at 1x1x4 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_sharded_d4.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x2x2 (PP 2) sharded checkpoint resumed at 1x1x4 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_p2d2_d4.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x2x2 sharded checkpoint converted to TP 2, resumed at 2x1x2 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_converted.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x2x2 sharded checkpoint round-tripped through convert, resumed at 1x2x2 sharded"
$CHECK "$WORK/sharded_p2d2.jsonl" "$WORK/resumed_round_trip_p2d2.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x1x1 checkpoint converted to 2x1x2 shards, resumed at 2x1x2 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_plain_tp2d2.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== fp16: 1x1x2 unsharded vs 1x1x2 sharded (iterations 1-4, then it saves and exits)"
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
              .filter(x => x.type === "train");
  if (!r.some(x => x.skipped_iterations > 0) || !r.some(x => x.skipped_iterations === 0)) {
    console.error("FAIL: the fp16 reference run should both skip and take steps"); process.exit(1);
  }' "$WORK/fp16_d2.jsonl"
$CHECK "$WORK/fp16_d2.jsonl" "$WORK/fp16_sharded_d2.jsonl" --from 1 --to 4 --rtol 1e-5
echo "== fp16: 1x1x2 sharded checkpoint resumed at 1x1x4 sharded"
$CHECK "$WORK/fp16_d2.jsonl" "$WORK/fp16_resumed_d4.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== fp16: the same checkpoint resumed at 1x1x1 unsharded (the master shards joined)"
$CHECK "$WORK/fp16_d2.jsonl" "$WORK/fp16_resumed_d1.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== bf16: 1x1x2 unsharded vs 1x1x2 sharded (iterations 1-4, then it saves and exits)"
$CHECK "$WORK/bf16_d2.jsonl" "$WORK/bf16_sharded_d2.jsonl" --from 1 --to 4 --rtol 1e-5
echo "== bf16: 1x1x2 sharded checkpoint (fp32 master shards) resumed at 1x1x4 sharded"
$CHECK "$WORK/bf16_d2.jsonl" "$WORK/bf16_resumed_d4.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== bf16: the same checkpoint resumed at 1x1x1 unsharded (the master shards joined)"
$CHECK "$WORK/bf16_d2.jsonl" "$WORK/bf16_resumed_d1.jsonl" --from 5 --to 8 --rtol 1e-5
echo "distributed optimizer: OK"
