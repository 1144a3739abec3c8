#!/usr/bin/env bash
# e2e: Megatron-LM's current example launch scripts run with only the launcher replaced.
#
# The argument arrays of examples/gpt3/train_gpt3_175b_distributed.sh and
# examples/bert/train_bert_340m_distributed.sh (NVIDIA/Megatron-LM d98e8a6) are re-typed below
# exactly as the scripts give them, `torchrun ... pretrain_gpt.py` becomes
# `mpirun -np 4 megatron pretrain-gpt`, and the sizes are shrunk by appending overrides
# (argparse's rule: the last occurrence of a flag wins): 4 layers, hidden 64, TP 2 x PP 2 for
# GPT and TP 2 x DP 2 for BERT (which does not pipeline yet), 2 iterations, which end with a save. The GPT-3 script does not run in Megatron either: its
# unquoted ${TRAINING_ARGS[@]} splits the --step-batch-size-schedule value into six words (argparse:
# "unrecognized arguments"), and quoted, that flag conflicts with --global-batch-size (Megatron:
# "Cannot specify both"). This program stops on both the same way; the script then runs with the
# schedule line removed, and with the --global-batch-size line removed (on the schedule).
# Needs the files of scripts/fetch_data.sh (scripts/test.sh runs it first).
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
for f in sotu.jsonl gpt2-vocab.json gpt2-merges.txt bert-base-uncased-vocab.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
launch() { mpirun --oversubscribe --bind-to none -np 4 "$BIN" "$@"; }

head -n 40 "$DATA/sotu.jsonl" > "$WORK/in.jsonl"
"$BIN" preprocess --input "$WORK/in.jsonl" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$DATA/gpt2-vocab.json" --merge-file "$DATA/gpt2-merges.txt" --append-eod \
  --output-prefix "$WORK/gpt" 2> /dev/null
"$BIN" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$DATA/bert-base-uncased-vocab.txt" --split-sentences \
  --output-prefix "$WORK/bert" 2> /dev/null

SHRINK=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --max-position-embeddings 64 --tensor-model-parallel-size 2
        --pipeline-model-parallel-size 1 --train-iters 2 --eval-iters 1 --log-interval 1)

# ---- examples/gpt3/train_gpt3_175b_distributed.sh, its arrays as written ----
CHECKPOINT_PATH=$WORK/gpt_ckpt
TENSORBOARD_LOGS_PATH=$WORK/gpt_tb
VOCAB_FILE=$DATA/gpt2-vocab.json
MERGE_FILE=$DATA/gpt2-merges.txt
DATA_PATH=$WORK/gpt_text_document
GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 430000
)
MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
)
GPT_SHRINK=("${SHRINK[@]}" --pipeline-model-parallel-size 2 --global-batch-size 8)

# As written: the schedule's words after the first are not arguments of any flag.
if launch pretrain-gpt ${GPT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} \
     ${DATA_ARGS[@]} ${EVAL_AND_LOGGING_ARGS[@]} "${GPT_SHRINK[@]}" > "$WORK/gpt0.log" 2>&1; then
  echo "FAIL: the GPT-3 script as written should stop, as Megatron does" >&2
  exit 1
fi
grep -q "error: unrecognized arguments: 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536" "$WORK/gpt0.log"
# With the schedule quoted: Megatron's refusal of both batch-size flags, in its words.
if launch pretrain-gpt "${GPT_MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" \
     "${DATA_ARGS[@]}" "${EVAL_AND_LOGGING_ARGS[@]}" "${GPT_SHRINK[@]}" > "$WORK/gpt1.log" 2>&1; then
  echo "FAIL: the GPT-3 script with both batch-size flags should stop, as Megatron does" >&2
  exit 1
fi
grep -q "Cannot specify both --step-batch-size-schedule and --global-batch-size" "$WORK/gpt1.log"
[[ ! -e "$CHECKPOINT_PATH/latest_checkpointed_iteration.txt" ]]

# Without the schedule line (Megatron runs it so too).
TRAINING_ARGS=("${TRAINING_ARGS[@]:0:4}" "${TRAINING_ARGS[@]:6}")
launch pretrain-gpt ${GPT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} \
  ${DATA_ARGS[@]} ${EVAL_AND_LOGGING_ARGS[@]} "${GPT_SHRINK[@]}" --log-args > "$WORK/gpt.log" 2>&1 ||
  { cat "$WORK/gpt.log" >&2; exit 1; }
grep -q "  attention_backend .* auto$" "$WORK/gpt.log"  # Megatron's default path here
grep -q "  tokenizer_type .* GPT2BPETokenizer" "$WORK/gpt.log"  # pretrain_gpt.py's default
grep -q "  weight_decay .* 0.1$" "$WORK/gpt.log"
grep -q "  num_layers .* 4$" "$WORK/gpt.log"                     # the appended override won
grep -q "iteration        2/       2 |" "$WORK/gpt.log"
[[ "$(cat "$CHECKPOINT_PATH/latest_checkpointed_iteration.txt")" == "2" ]]
[[ -f "$CHECKPOINT_PATH/iter_0000002/mp_rank_01_001/model.safetensors" ]]  # TP rank 1, PP rank 1
ls "$TENSORBOARD_LOGS_PATH"/events.out.tfevents.* > /dev/null

# With the --global-batch-size line removed instead, and the schedule quoted, the script runs
# on the schedule: its first batch size, 16 (the 2.4B-token step is far away), in 16
# micro-batches at DP 1. Its own checkpoint directory (the flags appended last win).
TRAINING_ARGS=(--micro-batch-size 1
  --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
  "${TRAINING_ARGS[@]:4}")  # the rest after --micro-batch-size 1 --global-batch-size 1536
launch pretrain-gpt "${GPT_MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" \
  "${DATA_ARGS[@]}" "${EVAL_AND_LOGGING_ARGS[@]}" "${SHRINK[@]}" --pipeline-model-parallel-size 2 \
  --save "$WORK/gpt_schedule_ckpt" --load "$WORK/gpt_schedule_ckpt" --log-args \
  > "$WORK/gpt_schedule.log" 2>&1 || { cat "$WORK/gpt_schedule.log" >&2; exit 1; }
grep -q "  step_batch_size_schedule .* 0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536$" \
  "$WORK/gpt_schedule.log"
grep -q "iteration        2/       2 |.* global batch size:    16 |" "$WORK/gpt_schedule.log"

# ---- examples/bert/train_bert_340m_distributed.sh, its arrays as written ----
CHECKPOINT_PATH=$WORK/bert_ckpt
TENSORBOARD_LOGS_PATH=$WORK/bert_tb
VOCAB_FILE=$DATA/bert-base-uncased-vocab.txt
DATA_PATH=$WORK/bert_text_sentence
BERT_MODEL_ARGS=(
    --num-layers 24
    --hidden-size 1024
    --num-attention-heads 16
    --seq-length 512
    --max-position-embeddings 512
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 4
    --global-batch-size 32
    --train-iters 1000000
    --weight-decay 1e-2
    --clip-grad 1.0
    --fp16
    --lr 0.0001
    --lr-decay-iters 990000
    --lr-decay-style linear
    --min-lr 1.0e-5
    --weight-decay 1e-2
    --lr-warmup-fraction .01
    --clip-grad 1.0
)
MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --split 949,50,1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
)
launch pretrain-bert ${BERT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} \
  ${DATA_ARGS[@]} ${EVAL_AND_LOGGING_ARGS[@]} "${SHRINK[@]}" --micro-batch-size 2 \
  --global-batch-size 8 --log-args > "$WORK/bert.log" 2>&1 || { cat "$WORK/bert.log" >&2; exit 1; }
grep -q "  tokenizer_type .* BertWordPieceLowerCase" "$WORK/bert.log"  # pretrain_bert.py's
grep -q "  weight_decay .* 0.01$" "$WORK/bert.log"  # given twice
grep -q "iteration        2/       2 |" "$WORK/bert.log"
# --fp16 starts at Megatron's loss scale 2^32, so the first steps overflow and are skipped (no
# loss on their lines, as in Megatron); the validation block has both losses.
grep -q "validation loss at iteration 2 on validation set | lm loss value: .* sop loss value: " \
  "$WORK/bert.log"
[[ "$(cat "$CHECKPOINT_PATH/latest_checkpointed_iteration.txt")" == "2" ]]
[[ -f "$CHECKPOINT_PATH/iter_0000002/mp_rank_01/model.safetensors" ]]
ls "$TENSORBOARD_LOGS_PATH"/events.out.tfevents.* > /dev/null
echo "ok: Megatron-LM's GPT-3 and BERT example scripts"
