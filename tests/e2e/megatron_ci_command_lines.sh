#!/usr/bin/env bash
# Command lines in the style of Megatron-LM's own CI configurations
# (tests/functional_tests/test_cases/{gpt,bert}/*/model_config.yaml: the flags its CI trains
# with, including those that select GPU implementations, checkpoint formats and logging), shrunk
# to a CPU-sized model, train 2 iterations on real text with megatron-cpp unchanged otherwise.
# One per family of features (bench/megatron_ci_configs.sh runs all 171 against a checkout):
#   nemotron   the 15B release recipe: --apply-layernorm-1p --squared-relu, GQA, partial RoPE,
#              --decoupled-lr, a step batch-size schedule with --train-samples, sequence
#              parallelism, the distributed optimizer with overlap, --save-retain-interval,
#              Weights & Biases flags (accepted, no effect), at TP 2 x PP 2
#   per_token  TP 1 x PP 4 interleaved (1 layer per virtual stage), --calculate-per-token-loss,
#              --decoupled-lr, uneven first/last stages
#   qk_norm    TP 4 with --qk-layernorm --test-mode, RoPE interleaved pairs
#   context    TP 2 x CP 2 with --calculate-per-token-loss and --expert-tensor-parallel-size
#              (no experts: no effect), resumed with --use-checkpoint-opt_param-scheduler
#   bert       BERT at TP 2 x PP 2 with --spec local, resumed with --use-checkpoint-args
#   moe        the moe/ configs' mixture of experts at expert-parallel size 1: 4 experts, top-2,
#              the aux loss, --moe-grouped-gemm, the all-to-all dispatcher, the first layer dense,
#              TP 2 x PP 2 with sequence parallelism and the distributed optimizer, bf16
# Each must log its iterations and exit 0; the resumes must continue from the checkpoint.
set -euo pipefail
# The BERT data (and DATA, WORK): the first 40 State of the Union documents, WordPiece sentences.
source "$(dirname "$0")/sotu_bert_data.bash"
BIN="$MEGATRON_BINARY"
for f in gpt2-vocab.json gpt2-merges.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
GPT_TOK=(--vocab-file "$DATA/gpt2-vocab.json" --merge-file "$DATA/gpt2-merges.txt")
BERT_TOK=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB")
"$BIN" preprocess --input "$WORK/in.jsonl" --tokenizer-type GPT2BPETokenizer "${GPT_TOK[@]}" \
  --append-eod --output-prefix "$WORK/gpt" > /dev/null 2>&1

# run NAME NP SUBCOMMAND FLAGS...: trains, and checks the log has iteration lines.
run() {
  local name=$1 np=$2 sub=$3
  shift 3
  if ! timeout 300 mpirun --oversubscribe --bind-to none -np "$np" "$BIN" "$sub" "$@" \
    > "$WORK/$name.log" 2>&1; then
    cat "$WORK/$name.log"
    echo "FAIL: $name"
    exit 1
  fi
  grep -q " iteration " "$WORK/$name.log" || { cat "$WORK/$name.log"; echo "FAIL: $name: no iteration"; exit 1; }
  echo "$name: trains"
}
# Flags of GPU implementations and formats Megatron's CI passes everywhere; accepted here.
MCORE=(--use-mcore-models --transformer-impl transformer_engine --deterministic-mode
       --no-gradient-accumulation-fusion --attention-softmax-in-fp32 --ckpt-format torch_dist
       --dist-ckpt-strictness log_all --log-params-norm --log-num-zeros-in-grad
       --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard --timing-log-level 0
       --distributed-backend mpi)
SHAPE=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64
       --max-position-embeddings 64)

run nemotron 4 pretrain-gpt "${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" \
  --split 99,1,0 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --sequence-parallel \
  --disable-bias-linear --micro-batch-size 1 --step-batch-size-schedule "0:4 1K:8" \
  --train-samples 12 --manual-gc --no-mmap-bin-files --num-workers 1 --apply-layernorm-1p \
  --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion \
  --rotary-percent 0.5 --squared-relu "${SHAPE[@]}" --group-query-attention --num-query-groups 2 \
  --attention-dropout 0.0 --hidden-dropout 0.0 --clip-grad 1.0 --weight-decay 0.1 \
  --lr-decay-samples 12 --lr-warmup-samples 4 --lr 4.5e-4 --min-lr 4.5e-5 --decoupled-lr 5e-4 \
  --decoupled-min-lr 4.5e-5 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95 \
  --eval-iters 1 --eval-interval 1000 --save "$WORK/nemotron" --load "$WORK/nemotron" \
  --save-interval 1 --save-retain-interval 2 --init-method-std 0.0134 --log-throughput \
  --log-interval 1 --tensorboard-dir "$WORK/tb" --wandb-project ci --wandb-entity ci \
  --wandb-exp-name nemotron --wandb-save-dir "$WORK/wandb" --bf16 --async-save \
  --use-persistent-ckpt-worker
# Three iterations (4 + 4 + 4 samples) saved at each: the retained ones are iteration 2 and the
# newest.
got="$(cd "$WORK/nemotron" && ls -d iter_* | tr '\n' ' ')"
[ "$got" = "iter_0000002 iter_0000003 " ] || { echo "FAIL: nemotron kept $got"; exit 1; }

run moe 4 pretrain-gpt "${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" \
  --split 99,1,0 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --sequence-parallel --use-distributed-optimizer "${SHAPE[@]}" --micro-batch-size 2 \
  --global-batch-size 8 --train-iters 2 --lr 1e-4 --min-lr 1e-5 --lr-decay-style cosine \
  --num-experts 4 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss \
  --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \
  --moe-permute-fusion --moe-router-dtype fp32 --moe-layer-freq "([0]+[1]*3)" \
  --expert-model-parallel-size 1 --expert-tensor-parallel-size 2 --disable-bias-linear \
  --swiglu --bf16 --eval-iters 1 --eval-interval 1000 --log-interval 1
grep -q "load_balancing_loss: " "$WORK/moe.log" || { cat "$WORK/moe.log"; echo "FAIL: moe"; exit 1; }

run per_token 4 pretrain-gpt "${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" \
  --split 99,1,0 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
  --num-layers-per-virtual-pipeline-stage 1 --num-layers 8 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 1 \
  --global-batch-size 8 --train-iters 2 --lr 1e-4 --decoupled-lr 2e-4 \
  --calculate-per-token-loss --lr-decay-style cosine --lr-warmup-fraction 0.01 --min-lr 1e-5 \
  --eval-iters 1 --eval-interval 1000 --log-interval 1

run uneven 4 pretrain-gpt "${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" \
  --split 99,1,0 --pipeline-model-parallel-size 4 --num-layers 8 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 \
  --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 3 \
  --micro-batch-size 1 --global-batch-size 8 --train-iters 2 --lr 1e-4 --eval-iters 0 \
  --log-interval 1

run qk_norm 4 pretrain-gpt "${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" \
  --split 99,1,0 --tensor-model-parallel-size 4 "${SHAPE[@]}" --qk-layernorm --test-mode \
  --position-embedding-type rope --rotary-interleaved --micro-batch-size 2 \
  --global-batch-size 4 --train-iters 2 --lr 1e-4 --eval-iters 1 --eval-interval 1000 \
  --log-interval 1

CONTEXT=("${MCORE[@]}" "${GPT_TOK[@]}" --data-path "$WORK/gpt_text_document" --split 99,1,0
         --tensor-model-parallel-size 2 --context-parallel-size 2 --expert-tensor-parallel-size 4
         --calculate-per-token-loss "${SHAPE[@]}" --micro-batch-size 2 --global-batch-size 4
         --lr 1e-4 --lr-decay-iters 10 --eval-iters 1 --eval-interval 1000 --log-interval 1
         --save "$WORK/context" --load "$WORK/context" --save-interval 2)
run context 4 pretrain-gpt "${CONTEXT[@]}" --train-iters 2
run context_resume 4 pretrain-gpt "${CONTEXT[@]}" --train-iters 4 \
  --use-checkpoint-opt_param-scheduler
grep -q "iteration        3/" "$WORK/context_resume.log" || {
  cat "$WORK/context_resume.log"; echo "FAIL: the resume did not continue at iteration 3"; exit 1; }

BERT=("${MCORE[@]}" "${BERT_TOK[@]}" --data-path "$BERT_DATA" --split 99,1,0
      --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --spec local
      --micro-batch-size 2 --global-batch-size 4 --lr 1e-4 --lr-decay-iters 10 --eval-iters 1
      --eval-interval 1000 --log-interval 1 --save "$WORK/bert" --load "$WORK/bert"
      --save-interval 2)
run bert 4 pretrain-bert "${BERT[@]}" "${SHAPE[@]}" --train-iters 2
# The resume reads the model shape from the checkpoint: none given here.
run bert_resume 4 pretrain-bert "${BERT[@]}" --use-checkpoint-args --seq-length 64 \
  --train-iters 4 --use-checkpoint-opt_param-scheduler
grep -q "iteration        3/" "$WORK/bert_resume.log" || {
  cat "$WORK/bert_resume.log"; echo "FAIL: the BERT resume did not continue at iteration 3"; exit 1; }
echo "Megatron-LM CI command lines: OK"
