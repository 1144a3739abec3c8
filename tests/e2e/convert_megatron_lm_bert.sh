#!/usr/bin/env bash
# BERT in Megatron-LM's torch format (tests/data/megatron_lm_bert_tiny, written by PyTorch 1.13:
# tools/reference/megatron_lm_bert_checkpoint.py): the legacy TP 2 x PP 2 checkpoint (FP32 Adam
# state) and the Megatron-Core TP 1 one import into the same weights; exports at other layouts
# and in both namings re-import unchanged; an export at the fixture's layout and naming holds, as
# torch.load reads it, the fixture's model entries, Adam state and scheduler (python3-torch's
# check, else the golden CRC-32s of the files PyTorch's check accepted); Megatron-LM <-> HF
# (MegatronBertForPreTraining) both ways; `pretrain-bert --load` of the Megatron-LM directory
# resumes at iteration 10 with the losses of the resume from its import; the errors.
source "$(dirname "$0")/convert_megatron_lm_setup.bash"
BERT="$MEGATRON_SOURCE_DIR/tests/data/megatron_lm_bert_tiny"
bert() { "$MEGATRON_BINARY" convert --model-type bert "$@" > "$WORK/last.log" 2>&1 \
           || { cat "$WORK/last.log"; fail "convert --model-type bert $*"; }; }
# same_bert CKPT_A CKPT_B: the same weights (their HF exports are byte-identical).
same_bert() {
  for c in "$1" "$2"; do
    [[ -e $c.hf ]] || bert --to hf --load "$c" --save "$c.hf"
  done
  cmp "$1.hf/model.safetensors" "$2.hf/model.safetensors" || fail "$1 and $2 differ"
}

echo "== legacy TP 2 x PP 2 and Megatron-Core TP 1 -> megatron-cpp: the same weights"
bert --from megatron-lm --load "$BERT/legacy_tp2_pp2" --save "$WORK/legacy" \
  --target-tensor-parallel-size 2 --vocab-size 100
grep -qF "imported at iteration 10 with its optimizer state (2 buffers, step 10)" "$WORK/last.log" \
  || { cat "$WORK/last.log"; fail "the import names the optimizer state"; }
bert --from megatron-lm --load "$BERT/mcore_tp1" --save "$WORK/mcore" --vocab-size 100
same_bert "$WORK/legacy" "$WORK/mcore"

echo "== exports at other layouts and namings re-import unchanged"
for out in "legacy 1 2" "core 2 2" "core 4 1" "legacy 2 1"; do
  read -r naming tp pp <<< "$out"
  target=megatron-lm
  [[ $naming == core ]] && target=megatron-lm-core
  bert --to "$target" --load "$WORK/legacy" --save "$WORK/out_${naming}_$tp$pp" \
    --target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp"
  bert --from megatron-lm --load "$WORK/out_${naming}_$tp$pp" --save "$WORK/back_${naming}_$tp$pp" \
    --vocab-size 100
  same_bert "$WORK/back_${naming}_$tp$pp" "$WORK/legacy"
done

echo "== the export at the fixture's layout is the fixture, as torch.load reads it"
bert --to megatron-lm --load "$WORK/legacy" --save "$WORK/as_fixture" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 "$MEGATRON_SOURCE_DIR/tools/reference/megatron_lm_bert_export_check.py" \
    "$WORK/as_fixture" "$BERT/legacy_tp2_pp2" 100 || fail "PyTorch's check of the export"
else
  echo "(no python3-torch: comparing the files with the golden CRC-32s PyTorch's check accepted)"
fi
(cd "$WORK/as_fixture" && find . -name model_optim_rng.pt | sort | while read -r f; do
   echo "$(gzip -c < "$f" | tail -c 8 | od -An -tu4 -N4 | tr -d ' ') $f"
 done) > "$WORK/export_crc32.txt"
diff "$BERT/export_crc32.txt" "$WORK/export_crc32.txt" || fail "the export's bytes changed"

echo "== Megatron-LM <-> HF MegatronBertForPreTraining"
bert --from megatron-lm --to hf --load "$BERT/legacy_tp2_pp2" --save "$WORK/hf" --vocab-size 100
grep -q '"MegatronBertForPreTraining"' "$WORK/hf/config.json" || fail "HF architecture"
bert --from hf --load "$WORK/hf" --save "$WORK/from_hf"
same_bert "$WORK/from_hf" "$WORK/legacy"
bert --from hf --to megatron-lm --load "$WORK/hf" --save "$WORK/mlm_from_hf" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
  --make-vocab-size-divisible-by 64
bert --from megatron-lm --load "$WORK/mlm_from_hf" --save "$WORK/mlm_from_hf_back" \
  --vocab-size 100
same_bert "$WORK/mlm_from_hf_back" "$WORK/legacy"

echo "== pretrain-bert --load of the Megatron-LM directory resumes at iteration 10"
# Real text with the fixture's 100-token vocabulary (characters and ## continuations).
head -n 40 "${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/sotu.jsonl" > "$WORK/in.jsonl"
"$MEGATRON_BINARY" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$BERT/vocab.txt" --split-sentences --output-prefix "$WORK/sotu" 2> /dev/null
RESUME=(pretrain-bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 128
        --seq-length 32 --max-position-embeddings 32 --data-path "$WORK/sotu_text_sentence"
        --vocab-file "$BERT/vocab.txt" --make-vocab-size-divisible-by 64 --split 949,50,1
        --micro-batch-size 2 --global-batch-size 4 --train-iters 12 --lr 1e-3
        --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 1000
        --eval-iters 1 --use-checkpoint-opt_param-scheduler --tensor-model-parallel-size 2)
cp -r "$BERT/legacy_tp2_pp2" "$WORK/direct"
for src in direct legacy; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" "${RESUME[@]}" --load "$WORK/$src" > "$WORK/resume_$src.log" 2>&1 \
    || { cat "$WORK/resume_$src.log"; fail "pretrain-bert --load $src"; }
  grep -q "loaded checkpoint from .* at iteration 10$" "$WORK/resume_$src.log" \
    || { cat "$WORK/resume_$src.log"; fail "$src: not resumed at iteration 10"; }
  grep -o "lm loss: [0-9.E+-]*" "$WORK/resume_$src.log" > "$WORK/resume_$src.txt"
done
[[ $(wc -l < "$WORK/resume_direct.txt") == 2 ]] \
  || { cat "$WORK/resume_direct.log"; fail "iterations 11 and 12 logged"; }
diff "$WORK/resume_direct.txt" "$WORK/resume_legacy.txt" || fail "resumed losses differ"
grep -q "converted Megatron-LM checkpoint" "$WORK/resume_direct.log" || fail "not converted"

echo "== errors"
expect_error "holds a BERT model: convert it with --model-type bert" convert --model-type gpt \
  --from megatron-lm --load "$BERT/legacy_tp2_pp2" --save "$WORK/x" --vocab-size 100
expect_error "holds a GPT-family model: convert it with --model-type gpt" convert \
  --model-type bert --from megatron-lm --load "$MLM/legacy_tp2_pp2" --save "$WORK/x"
expect_error "does not record its real vocabulary size" convert --model-type bert \
  --from megatron-lm --load "$BERT/legacy_tp2_pp2" --save "$WORK/x"
expect_error "is a BERT checkpoint: export it with --model-type bert" convert --model-type gpt \
  --to megatron-lm --load "$WORK/legacy" --save "$WORK/x"
echo "PASS"
