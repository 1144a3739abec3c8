#!/usr/bin/env bash
# Megatron-LM's torch_dist checkpoints (PyTorch Distributed Checkpoint) as PyTorch wrote them
# (tests/data/megatron_lm_gpt_tiny/torch_dist_*, tools/reference/megatron_torch_dist_checkpoint.py):
# `megatron convert --from megatron-lm` of the TP-2 GPT-2 holds the weights of the HF import of
# the same model and trains on with the same losses, also when pretrain-gpt --load names the
# torch_dist directory itself (with --use-checkpoint-args too); a bf16 run's checkpoint with its
# Adam state resumes at its iteration, from the import and from the directory itself alike; the TP-2 Qwen2 (bf16, PyTorch 2.x's .metadata) generates the
# tokens its torch-format twin generates; the errors.
source "$(dirname "$0")/convert_megatron_lm_setup.bash"

echo "== torch_dist GPT-2 (TP 2) -> megatron-cpp TP 2: the HF import's weights"
convert --from megatron-lm --load "$MLM/torch_dist_gpt2_tp2" --save "$WORK/dist" \
  --target-tensor-parallel-size 2
convert --from hf --load "$HF" --save "$WORK/hf" --target-tensor-parallel-size 2 \
  --make-vocab-size-divisible-by 64
for c in dist hf; do convert --to hf --load "$WORK/$c" --save "$WORK/$c.hf" --vocab-size 96; done
cmp "$WORK/dist.hf/model.safetensors" "$WORK/hf.hf/model.safetensors" || fail "weights differ"

echo "== training from the import, and from the torch_dist directory itself: the same losses"
TRAIN=(pretrain-gpt --openai-gelu --num-layers 2 --hidden-size 32 --num-attention-heads 4
       --seq-length 16 --max-position-embeddings 32 --mock-data --vocab-size 96
       --make-vocab-size-divisible-by 64 --micro-batch-size 2 --global-batch-size 2
       --train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 1000 --eval-iters 1
       --tensor-model-parallel-size 2)
cp -r "$MLM/torch_dist_gpt2_tp2" "$WORK/direct"
for src in hf direct; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${TRAIN[@]}" --finetune --load "$WORK/$src" > "$WORK/train_$src.log" 2>&1 \
    || { cat "$WORK/train_$src.log"; fail "pretrain-gpt --finetune --load $src"; }
  grep -o "lm loss: [0-9.E+-]*" "$WORK/train_$src.log" > "$WORK/loss_$src.txt"
done
[[ $(wc -l < "$WORK/loss_direct.txt") == 3 ]] || { cat "$WORK/train_direct.log"; fail "3 losses"; }
diff "$WORK/loss_direct.txt" "$WORK/loss_hf.txt" || fail "losses differ"
grep -q "converted Megatron-LM checkpoint" "$WORK/train_direct.log" || fail "not converted"
[[ -s $WORK/direct.megatron-cpp/latest_checkpointed_iteration.txt ]] || fail "no copy"
# --use-checkpoint-args: the model's shape comes from the args in common.pt.
timeout 300 "$MEGATRON_BINARY" pretrain-gpt --use-checkpoint-args --load "$WORK/direct" \
  --finetune --mock-data --vocab-size 96 --seq-length 16 --micro-batch-size 2 \
  --global-batch-size 2 --train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 1000 \
  --eval-iters 1 > "$WORK/train_args.log" 2>&1 \
  || { cat "$WORK/train_args.log"; fail "pretrain-gpt --use-checkpoint-args"; }
grep -o "lm loss: [0-9.E+-]*" "$WORK/train_args.log" | diff - "$WORK/loss_hf.txt" \
  || fail "--use-checkpoint-args: losses differ"

echo "== resuming a Megatron-LM run (bf16, Adam state after 3 iterations): from the import and"
echo "   from the torch_dist directory itself, at iteration 3, with the same losses"
cp -r "$MLM/torch_dist_gpt2_adam_tp2" "$WORK/adam_direct"
# The same run's state as the distributed optimizer's dp_reshardable buckets (DP 2).
cp -r "$MLM/torch_dist_gpt2_adam_dp_tp2" "$WORK/adam_dp_direct"
convert --from megatron-lm --load "$MLM/torch_dist_gpt2_adam_tp2" --save "$WORK/adam_import" \
  --target-tensor-parallel-size 2
grep -qF "imported at iteration 3 with its optimizer state (3 buffers, step 3)" "$WORK/last.log" \
  || { cat "$WORK/last.log"; fail "the import names the optimizer state"; }
# TRAIN with --train-iters 5: the run the checkpoint's schedule decays over (10 samples).
RESUME=()
previous=
for a in "${TRAIN[@]}"; do
  [[ $previous == --train-iters ]] && a=5
  RESUME+=("$a")
  previous=$a
done
for src in adam_import adam_direct adam_dp_direct; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${RESUME[@]}" --bf16 --load "$WORK/$src" \
    > "$WORK/resume_$src.log" 2>&1 || { cat "$WORK/resume_$src.log"; fail "resume from $src"; }
  grep -q "loaded checkpoint from .* at iteration 3$" "$WORK/resume_$src.log" \
    || { cat "$WORK/resume_$src.log"; fail "$src: not resumed at iteration 3"; }
  grep -o "iteration \+[0-9]*/ *5 .*lm loss: [0-9.E+-]*" "$WORK/resume_$src.log" \
    | sed 's/|.*lm loss/ lm loss/' > "$WORK/resume_$src.txt"
done
[[ $(wc -l < "$WORK/resume_adam_direct.txt") == 2 ]] \
  || { cat "$WORK/resume_adam_direct.log"; fail "iterations 4 and 5 logged"; }
diff "$WORK/resume_adam_direct.txt" "$WORK/resume_adam_import.txt" || fail "resumed losses differ"
diff "$WORK/resume_adam_dp_direct.txt" "$WORK/resume_adam_import.txt" \
  || fail "the dp_reshardable state's resumed losses differ"

echo "== torch_dist Qwen2 (bf16, PyTorch 2.x .metadata) generates what its torch twin generates"
convert --from megatron-lm --load "$MLM/torch_dist_qwen2_tp2" --save "$WORK/qwen_dist"
convert --from megatron-lm --load "$MLM/qwen2_core_tp2" --save "$WORK/qwen_torch"
for c in qwen_dist qwen_torch; do
  "$MEGATRON_BINARY" generate --load "$WORK/$c" --tokenizer-type NullTokenizer --vocab-size 96 \
    --prompt "1 2 3 4" --tokens-to-generate 6 --top-k 1 > "$WORK/gen_$c.log" 2>&1 \
    || { cat "$WORK/gen_$c.log"; fail "generate from $c"; }
  grep -E "^1 2 3 4( [0-9]+){6}$" "$WORK/gen_$c.log" > "$WORK/gen_$c.txt" \
    || { cat "$WORK/gen_$c.log"; fail "no 6 tokens generated from $c"; }
done
diff "$WORK/gen_qwen_dist.txt" "$WORK/gen_qwen_torch.txt" || fail "generations differ"

echo "== errors"
expect_error "is a Megatron-LM torch_dist-format checkpoint without optimizer state megatron-cpp reads" \
  "${TRAIN[@]}" --load "$WORK/direct"
expect_error "is Megatron-LM's torch_dist format (PyTorch Distributed Checkpoint" generate \
  --load "$MLM/torch_dist_gpt2_tp2" --tokenizer-type NullTokenizer --vocab-size 96 \
  --prompt "1 2 3" --tokens-to-generate 1
grep -qF -- "megatron convert --model-type gpt --from megatron-lm" "$WORK/err.log" \
  || fail "the message names the conversion"
echo "PASS"
