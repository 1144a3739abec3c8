#!/usr/bin/env bash
# `megatron convert` to and from Megatron-LM's torch format on the checkpoints PyTorch wrote
# (tests/data/megatron_lm_gpt_tiny): the legacy TP 2 x PP 2 import holds the weights of the HF
# import of the same model and trains on with the same losses, also when pretrain-gpt --load
# names the Megatron-LM directory itself (converted once next to it); with its FP32 Adam state it
# resumes at iteration 10 without --finetune, and so does the same state as the distributed
# optimizer's distrib_optim.pt, which is written back as Megatron saves it; exports at other
# layouts and in both namings re-import unchanged; HF <-> Megatron-LM directly; the errors.
source "$(dirname "$0")/convert_megatron_lm_setup.bash"
# same_model CKPT_A CKPT_B: the same weights (their HF exports are byte-identical files; the
# shards themselves differ in the state.json checksum they carry).
same_model() {
  for c in "$1" "$2"; do
    [[ -e $c.hf ]] || convert --to hf --load "$c" --save "$c.hf" --vocab-size 96
  done
  cmp "$1.hf/model.safetensors" "$2.hf/model.safetensors" || fail "$1 and $2 differ"
}

echo "== Megatron-LM legacy TP 2 x PP 2 -> megatron-cpp TP 2: the HF import's weights"
convert --from megatron-lm --load "$MLM/legacy_tp2_pp2" --save "$WORK/mlm" \
  --target-tensor-parallel-size 2
grep -qF "imported at iteration 10 with its optimizer state (2 buffers, step 10)" "$WORK/last.log" \
  || { cat "$WORK/last.log"; fail "the import names the optimizer state"; }
grep -q "rng_state not converted" "$WORK/last.log" || fail "no warning about the RNG state"
convert --from hf --load "$HF" --save "$WORK/hf" --target-tensor-parallel-size 2 \
  --make-vocab-size-divisible-by 64
same_model "$WORK/mlm" "$WORK/hf"
convert --from megatron-lm --load "$MLM/mcore_tp1" --save "$WORK/mcore" \
  --target-tensor-parallel-size 2
same_model "$WORK/mcore" "$WORK/hf"

echo "== training from either gives the same losses"
TRAIN=(pretrain-gpt --openai-gelu --num-layers 2 --hidden-size 32 --num-attention-heads 4
       --seq-length 16 --max-position-embeddings 32 --mock-data --vocab-size 96
       --make-vocab-size-divisible-by 64 --micro-batch-size 2 --global-batch-size 2
       --train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 1000 --eval-iters 1)
TRAIN_NO_FINETUNE=("${TRAIN[@]}")
TRAIN+=(--finetune)
for src in mlm hf; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${TRAIN[@]}" --tensor-model-parallel-size 2 --load "$WORK/$src" \
    > "$WORK/train_$src.log" 2>&1 \
    || { cat "$WORK/train_$src.log"; fail "pretrain-gpt --finetune from $src"; }
  grep -o "lm loss: [0-9.E+-]*" "$WORK/train_$src.log" > "$WORK/loss_$src.txt"
done
[[ $(wc -l < "$WORK/loss_mlm.txt") == 3 ]] || { cat "$WORK/train_mlm.log"; fail "3 losses"; }
diff "$WORK/loss_mlm.txt" "$WORK/loss_hf.txt" || fail "losses differ"

echo "== pretrain-gpt --load of the Megatron-LM directory itself: converted once, same losses"
cp -r "$MLM/legacy_tp2_pp2" "$WORK/mlm_direct"
for run in 1 2; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${TRAIN[@]}" --tensor-model-parallel-size 2 --load "$WORK/mlm_direct" \
    > "$WORK/train_direct$run.log" 2>&1 \
    || { cat "$WORK/train_direct$run.log"; fail "pretrain-gpt --load Megatron-LM (run $run)"; }
  grep -o "lm loss: [0-9.E+-]*" "$WORK/train_direct$run.log" > "$WORK/loss_direct.txt"
  diff "$WORK/loss_direct.txt" "$WORK/loss_hf.txt" || fail "losses differ (run $run)"
done
grep -q "converted Megatron-LM checkpoint" "$WORK/train_direct1.log" || fail "not converted"
if grep -q "converted Megatron-LM checkpoint" "$WORK/train_direct2.log"; then
  fail "the conversion was not reused"
fi
[[ -s $WORK/mlm_direct.megatron-cpp/latest_checkpointed_iteration.txt ]] || fail "no copy"
# --use-checkpoint-args: the model's shape comes from the Megatron-LM args.
timeout 300 "$MEGATRON_BINARY" pretrain-gpt --use-checkpoint-args --load "$WORK/mlm_direct" \
  --finetune --mock-data --vocab-size 96 --seq-length 16 --micro-batch-size 2 \
  --global-batch-size 2 --train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 1000 \
  --eval-iters 1 > "$WORK/train_args.log" 2>&1 \
  || { cat "$WORK/train_args.log"; fail "pretrain-gpt --use-checkpoint-args"; }
grep -o "lm loss: [0-9.E+-]*" "$WORK/train_args.log" | diff - "$WORK/loss_hf.txt" \
  || fail "--use-checkpoint-args: losses differ"

echo "== resuming the Megatron-LM run (FP32 Adam state, iteration 10) without --finetune"
# The checkpoint's schedule (cosine, 8 warmup and 80 decay samples) taken whole; iterations 11
# and 12 at 4 samples each, from the directory itself and from its import: the same losses, and
# iteration 11 logs (as Megatron, after its step) the learning rate of Megatron's cosine at 44
# samples, 1e-4 + 9e-4 * (1 + cos(pi * (44 - 8) / 72)) / 2 = 5.5e-4.
RESUME=(pretrain-gpt --openai-gelu --num-layers 2 --hidden-size 32 --num-attention-heads 4
        --seq-length 16 --max-position-embeddings 32 --mock-data --vocab-size 96
        --make-vocab-size-divisible-by 64 --micro-batch-size 2 --global-batch-size 4
        --train-iters 12 --lr 1e-3 --log-interval 1 --eval-interval 1000 --eval-iters 1
        --use-checkpoint-opt_param-scheduler --tensor-model-parallel-size 2)
for src in mlm_direct mlm; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${RESUME[@]}" --load "$WORK/$src" > "$WORK/resume_$src.log" 2>&1 \
    || { cat "$WORK/resume_$src.log"; fail "resume from $src"; }
  grep -q "loaded checkpoint from .* at iteration 10$" "$WORK/resume_$src.log" \
    || { cat "$WORK/resume_$src.log"; fail "$src: not resumed at iteration 10"; }
  grep -o "lm loss: [0-9.E+-]*" "$WORK/resume_$src.log" > "$WORK/resume_$src.txt"
done
[[ $(wc -l < "$WORK/resume_mlm_direct.txt") == 2 ]] \
  || { cat "$WORK/resume_mlm_direct.log"; fail "iterations 11 and 12 logged"; }
diff "$WORK/resume_mlm_direct.txt" "$WORK/resume_mlm.txt" || fail "resumed losses differ"
grep "iteration  *11/" "$WORK/resume_mlm_direct.log" | grep -q "learning rate: 5.500000E-04" \
  || { cat "$WORK/resume_mlm_direct.log"; fail "the learning rate of Megatron's schedule"; }

echo "== the same run's state as the distributed optimizer saves it (distrib_optim.pt)"
# distrib_tp2_pp2 holds legacy_tp2_pp2's weights and Adam state in Megatron-Core's names, its
# per-parameter state in distrib_optim.pt's gradient buckets: resumed, the same losses.
cp -r "$MLM/distrib_tp2_pp2" "$WORK/distrib_direct"
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" "${RESUME[@]}" --load "$WORK/distrib_direct" > "$WORK/resume_distrib.log" \
  2>&1 || { cat "$WORK/resume_distrib.log"; fail "resume from distrib_tp2_pp2"; }
grep -q "loaded checkpoint from .* at iteration 10$" "$WORK/resume_distrib.log" \
  || { cat "$WORK/resume_distrib.log"; fail "distrib_tp2_pp2: not resumed at iteration 10"; }
grep -o "lm loss: [0-9.E+-]*" "$WORK/resume_distrib.log" | diff - "$WORK/resume_mlm_direct.txt" \
  || fail "the distributed optimizer's resumed losses differ from the per-parameter state's"
# Written back as Megatron-LM's distributed optimizer saves it: PyTorch loads the files and the
# reference script's own reader finds every parameter's state where the fixture has it.
convert --from megatron-lm --load "$MLM/distrib_tp2_pp2" --save "$WORK/distrib"
convert --to megatron-lm-core --load "$WORK/distrib" --save "$WORK/distrib_out" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
[[ -s $WORK/distrib_out/iter_0000010/mp_rank_01_001/distrib_optim.pt ]] || fail "distrib_optim.pt"
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 "$MEGATRON_SOURCE_DIR/tools/reference/megatron_lm_distrib_optim.py" check \
    "$WORK/distrib_out" "$MLM/distrib_tp2_pp2" 96 || fail "PyTorch's check of distrib_optim.pt"
fi

echo "== export to Megatron-LM at other layouts and namings; re-import unchanged"
convert --to megatron-lm --load "$WORK/mlm" --save "$WORK/out_legacy" \
  --target-tensor-parallel-size 1 --target-pipeline-parallel-size 2
[[ -s $WORK/out_legacy/iter_0000010/mp_rank_00_001/model_optim_rng.pt ]] || fail "layout"
convert --to megatron-lm-core --load "$WORK/mlm" --save "$WORK/out_core" \
  --target-tensor-parallel-size 2
[[ -s $WORK/out_core/iter_0000010/mp_rank_01/model_optim_rng.pt ]] || fail "layout"
for out in out_legacy out_core; do
  convert --from megatron-lm --load "$WORK/$out" --save "$WORK/${out}_back" \
    --target-tensor-parallel-size 2 --vocab-size 96
  same_model "$WORK/${out}_back" "$WORK/hf"
done

echo "== HF <-> Megatron-LM directly"
convert --from megatron-lm --to hf --load "$MLM/legacy_tp2_pp2" --save "$WORK/hf_from_mlm"
convert --to hf --load "$WORK/hf" --save "$WORK/hf_from_hf"
cmp "$WORK/hf_from_mlm/model.safetensors" "$WORK/hf_from_hf/model.safetensors" \
  || fail "HF exports differ"
convert --from hf --to megatron-lm --load "$HF" --save "$WORK/mlm_from_hf" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
  --make-vocab-size-divisible-by 16
convert --from megatron-lm --load "$WORK/mlm_from_hf" --save "$WORK/mlm_from_hf_back" \
  --target-tensor-parallel-size 2 --vocab-size 96
# Megatron's padding for TP 2 with --make-vocab-size-divisible-by 16: 96 rows, none added.
grep -Eq '"padded_vocab_size": ?96[,}]' "$WORK/mlm_from_hf_back/iter_0000000/mp_rank_00/state.json" \
  || fail "--make-vocab-size-divisible-by not used for the Megatron-LM export"
same_model "$WORK/mlm_from_hf_back" "$WORK/hf"
[[ ! -e $WORK/mlm_from_hf.megatron-cpp.tmp ]] || fail "temporary checkpoint left behind"

echo "== errors"
cp -r "$MLM/mcore_tp1" "$WORK/mcore_direct"  # saved with --no-save-optim
expect_error "is a Megatron-LM torch-format checkpoint without optimizer state megatron-cpp reads" \
  "${TRAIN_NO_FINETUNE[@]}" --load "$WORK/mcore_direct"
# generate cannot load it directly yet: the message says how to convert it.
expect_error "is Megatron-LM's torch format" generate --load "$MLM/legacy_tp2_pp2" \
  --tokenizer-type NullTokenizer --vocab-size 96 --prompt "1 2 3" --tokens-to-generate 1
grep -qF -- "--from megatron-lm" "$WORK/err.log" || fail "the message names the conversion"
expect_error "holds a GPT-family model: convert it with --model-type gpt" convert \
  --model-type bert --from megatron-lm --load "$MLM/legacy_tp2_pp2" --save "$WORK/x"
expect_error "it is megatron-cpp's own" convert --model-type gpt --from megatron-lm \
  --load "$WORK/mlm" --save "$WORK/x"
expect_error "no checkpoint to load in '$WORK/missing'" convert --model-type gpt \
  --from megatron-lm --load "$WORK/missing" --save "$WORK/x"
echo "PASS"
