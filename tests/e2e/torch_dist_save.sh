#!/usr/bin/env bash
# --save with --ckpt-format torch_dist (checkpoint/megatron_lm_torch_dist_writer.h): a run that
# stops after saving at iteration 4 in Megatron-LM's torch_dist format, then resumes from that
# directory (--load detects the format), logs iterations 5-8 bit for bit as the uninterrupted
# run — at TP 2 (f32, the non-distributed optimizer), at DP 2 with --bf16 and the distributed
# optimizer (each DP rank writes the part of Adam's state its shard holds) and at PP 2 (each
# stage its layers; the last stage's tied embedding copy not written). The files are
# Megatron-Core's (.metadata, one __R_0.distcp per writing rank, common.pt, metadata.json). Also
# mixture-of-experts models: at EP 2 (each EP rank writes its experts) with the expert bias, a
# gated shared expert and MoE layers mixed with dense ones (one key per layer), and at TP 2 with
# QK norms and a multi-token-prediction depth; multi-latent attention at DP 2 with the distributed
# optimizer (its rope rows permuted to Megatron's pairing and back, a shard that cuts them
# written row by row). Muon's momentum, which the format has no name for,
# is saved in megatron-cpp's format and --async-save saves torch_dist synchronously, each with a
# warning; the flag's errors.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

run() {  # run NAME [FLAGS...] — always 2 processes
  local name=$1
  shift
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters 8 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.01 \
    --hidden-dropout 0.1 --attention-dropout 0.1 --seed 7 --log-interval 1 \
    --eval-interval 100 --eval-iters 1 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"

MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2)
EP2_MOE=("${MOE[@]}" --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate --moe-layer-freq '[1,0]')
for layout in tp2 dp2 pp2 moe_ep2 moe_tp2 mla_dp2; do
  case $layout in
    tp2) FLAGS=(--tensor-model-parallel-size 2) ;;
    dp2) FLAGS=(--bf16 --use-distributed-optimizer) ;;
    pp2) FLAGS=(--pipeline-model-parallel-size 2) ;;
    moe_ep2) FLAGS=("${EP2_MOE[@]}" --expert-model-parallel-size 2) ;;
    moe_tp2) FLAGS=("${MOE[@]}" --tensor-model-parallel-size 2 --qk-layernorm --mtp-num-layers 1) ;;
    mla_dp2) FLAGS=(--use-distributed-optimizer --multi-latent-attention --q-lora-rank 32
      --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 12
      --disable-bias-linear) ;;
  esac
  echo "== $layout: save at 4 in torch_dist, resume from it: iterations 5-8 bit for bit"
  run "full_$layout" "${FLAGS[@]}"
  run "first_$layout" "${FLAGS[@]}" --save "$WORK/$layout" --save-interval 4 --exit-interval 4 \
    --ckpt-format torch_dist
  it="$WORK/$layout/iter_0000004"
  [[ $(cat "$WORK/$layout/latest_checkpointed_iteration.txt") == 4 ]] || fail "tracker"
  for f in .metadata common.pt metadata.json __0_0.distcp; do
    [[ -s $it/$f ]] || fail "$layout: no $f"
  done
  # Each rank writes: its TP slices, its DP shard's optimizer state, its pipeline stage.
  [[ -s $it/__1_0.distcp ]] || fail "$layout: rank 1 wrote nothing"
  ls "$WORK/$layout" | grep -q "mp_rank\|\.tmp" && fail "$layout: leftovers or megatron-cpp files"
  [[ $layout == moe_ep2 ]] && cp -r "$WORK/$layout" "$WORK/moe_ep2_at4"  # resharded below
  run "resumed_$layout" "${FLAGS[@]}" --load "$WORK/$layout" --save "$WORK/$layout" \
    --save-interval 4 --ckpt-format torch_dist
  grep -q "loaded checkpoint from .* at iteration 4$" "$WORK/resumed_$layout.log" \
    || { cat "$WORK/resumed_$layout.log"; fail "$layout: not resumed at iteration 4"; }
  $CHECK "$WORK/full_$layout.jsonl" "$WORK/resumed_$layout.jsonl" --from 5 --to 8 --exact
  [[ $(cat "$WORK/$layout/latest_checkpointed_iteration.txt") == 8 ]] || fail "tracker at 8"
done

echo "== resharded: the EP 2 save resumes at TP 2 (EP 1), iterations 5-8 as the EP 2 resume's"
# (to rounding: TP 2 sums the experts' partial products in another order than EP 2)
run reshard_tp2 "${EP2_MOE[@]}" --tensor-model-parallel-size 2 --load "$WORK/moe_ep2_at4"
grep -q "loaded checkpoint from .* at iteration 4$" "$WORK/reshard_tp2.log" \
  || { cat "$WORK/reshard_tp2.log"; fail "resharded: not resumed at iteration 4"; }
$CHECK "$WORK/resumed_moe_ep2.jsonl" "$WORK/reshard_tp2.jsonl" --from 5 --to 8 --rtol 1e-4

echo "== the resumed run's own torch_dist save (iteration 8) resumes too"
cp -r "$WORK/tp2" "$WORK/tp2_again"
rm -rf "$WORK/tp2_again.megatron-cpp"
run again --tensor-model-parallel-size 2 --load "$WORK/tp2_again" --train-iters 8
grep -q "loaded checkpoint from .* at iteration 8$" "$WORK/again.log" \
  || { cat "$WORK/again.log"; fail "not resumed at iteration 8"; }

echo "== errors"
expect_error() {
  local message=$1
  shift
  if "$MEGATRON_BINARY" "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data
      --vocab-size 128 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3
      --save "$WORK/err_ckpt")
expect_error "--ckpt-format zarr is not a format megatron-cpp writes" pretrain-gpt "${BASE[@]}" \
  --ckpt-format zarr
echo "== Megatron's command lines carry torch_dist for every model: what it cannot hold falls back"
# (each warned): --async-save saves torch_dist synchronously; Muon's momentum (no torch_dist
# name) saves megatron-cpp's format.
warned_run() {  # warned_run NAME MESSAGE FLAGS...
  local name=$1 message=$2
  shift 2
  "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]/$WORK\/err_ckpt/$WORK/$name}" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "$name"; }
  grep -qF -- "$message" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: no warning"; }
}
warned_run async "--async-save: torch_dist checkpoints are written synchronously" \
  --ckpt-format torch_dist --async-save --save-interval 1
[[ -f $WORK/async/iter_0000001/.metadata ]] || fail "--async-save: no torch_dist checkpoint"
warned_run muon "has no name in Megatron-Core's torch_dist checkpoints" --ckpt-format torch_dist \
  --save-interval 1 --optimizer muon
[[ -f $WORK/muon/iter_0000001/mp_rank_00/state.json && ! -e $WORK/muon/iter_0000001/.metadata ]] \
  || fail "--optimizer muon: not saved in megatron-cpp's format"
echo "PASS"
