#!/usr/bin/env bash
# `megatron convert --to gguf` checked by llama.cpp itself (npm's node-llama-cpp 3.21.1, its
# prebuilt CPU binaries; scripts/fetch_llama_cpp.sh installs them into a cache directory):
#
# 1. The tiny HF fixtures without a tokenizer (placeholder tokens) — GPT-2 (llama.cpp's gpt2),
#    Llama with 2 KV groups (llama: q/k rows permuted for llama.cpp's RoPE) and Qwen2 with q/k/v
#    biases (qwen2). f32: llama.cpp's greedy continuations of token-id prompts are those of
#    `megatron generate`, each token's log-probability of a 30-token text matches `megatron
#    generate --logprobs` to 1e-4 (GPT-2: each side against a float64 reference to 1e-5, since
#    llama.cpp rounds its GeLU through an f16 table) and the perplexity `megatron eval`'s to
#    1e-4 relative. Each fixture finetuned at TP 2 to count: greedy continuations identical in
#    f32, f16 and bf16. A Llama-style counting model with linear RoPE scaling and a head size
#    other than hidden / heads: the same checks. Mixtures of experts: the HF Mixtral fixture
#    (llama.cpp's llama with experts) and a Qwen2-MoE-style model trained at EP 2 (qwen2moe).
# 2. A GPT-2 and a Llama-style model (untied, Llama 3.1 RoPE scaling: rope_freqs) trained at TP 2
#    on State of the Union text with GPT-2's BPE, so the files carry the tokenizer: llama.cpp
#    tokenizes the prompts and the text into the same ids as megatron-cpp, and the same
#    comparisons hold (f32 and bf16). The export of the TP-2 checkpoint and of its resharding to
#    TP 1 are the same bytes. An HF directory (its vocab.json and merges.txt giving the
#    tokenizer) and a Megatron-LM torch checkpoint export directly (the same bytes as through a
#    megatron-cpp checkpoint).
#    A Llama-style model trained with a SentencePiece BPE model (Llama2Tokenizer,
#    tests/data/tokenizers/llama_style.model): llama.cpp's own SPM tokenizer gives megatron's ids,
#    and the same comparisons hold; its HF export carries tokenizer.model.
# 3. What cannot be exported is refused with a sentence.
#
# Skips (exit 77) when node-llama-cpp cannot be installed (no npm, no network).
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
fail() { echo "FAIL: $*"; exit 1; }
if ! command -v npm > /dev/null || ! command -v node > /dev/null; then
  echo "SKIP: npm/node are not installed (scripts/setup.sh installs them): llama.cpp cannot run"
  exit 77
fi
LLAMA_CPP_DIR="${MEGATRON_LLAMA_CPP_DIR:-${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/node-llama-cpp-3.21.1}"
if ! MEGATRON_LLAMA_CPP_DIR="$LLAMA_CPP_DIR" bash "$MEGATRON_SOURCE_DIR/scripts/fetch_llama_cpp.sh" \
  > /tmp/fetch_llama_cpp.$$.log 2>&1; then
  tail -5 /tmp/fetch_llama_cpp.$$.log
  rm -f /tmp/fetch_llama_cpp.$$.log
  echo "SKIP: node-llama-cpp 3.21.1 could not be installed (no network?): llama.cpp cannot run"
  exit 77
fi
rm -f /tmp/fetch_llama_cpp.$$.log
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_gpt_data.bash"  # WORK, DATA_DIR, GPT_DATA
export OMP_NUM_THREADS=1
CHECK=(node "$MEGATRON_SOURCE_DIR/tests/e2e/llama_cpp_check.mjs" "$LLAMA_CPP_DIR")
convert() { "$MEGATRON_BINARY" convert --model-type gpt "$@" > "$WORK/convert.log" 2>&1 \
              || { cat "$WORK/convert.log"; fail "convert $*"; }; }
megatron() {  # megatron LOG SUBCOMMAND ARGS...
  local log=$1
  shift
  "$MEGATRON_BINARY" "$@" > "$WORK/$log.log" 2>&1 || { cat "$WORK/$log.log"; fail "$*"; }
}
# check_model NAME CKPT DTYPES PROMPT_FILE [TEXT_FILE] -- TOKENIZER_FLAGS...: writes megatron-cpp's
# greedy continuations of the prompts (and, with TEXT_FILE, the text's log-probabilities and its
# eval perplexity), exports CKPT as each of DTYPES ("f32 bf16") and compares llama.cpp's: greedy
# for every type, the scores for f32.
check_model() {
  local name=$1 ckpt=$2 dtypes=$3 prompts=$4 text=""
  shift 4
  [[ $1 == -- ]] || { text=$1; shift; }
  shift
  megatron "$name.generate" generate --load "$ckpt" "$@" --top-k 1 --tokens-to-generate 8 \
    --stop-token -1 --prompt-file "$prompts" --output-file "$WORK/$name.generated.jsonl"
  local scores=()
  if [[ -n $text ]]; then
    node -e 'const fs = require("fs"); fs.writeFileSync(process.argv[2], JSON.stringify({prompt: fs.readFileSync(process.argv[1], "utf-8")}) + "\n")' \
      "$text" "$WORK/$name.text.jsonl"
    megatron "$name.score" generate --load "$ckpt" "$@" --logprobs --tokens-to-generate 0 \
      --prompt-file "$WORK/$name.text.jsonl" --output-file "$WORK/$name.scored.jsonl"
    megatron "$name.eval" eval --task WIKITEXT103 --valid-data "$text" --load "$ckpt" "$@" \
      --micro-batch-size 1 --metrics-file "$WORK/$name.eval.jsonl"
    scores=("$WORK/$name.scored.jsonl" "$WORK/$name.eval.jsonl")
  fi
  for dtype in $dtypes; do
    echo "== $name: $dtype"
    convert --to gguf --gguf-dtype "$dtype" --load "$ckpt" --save "$WORK/$name.$dtype.gguf"
    if [[ $dtype == f32 ]]; then
      "${CHECK[@]}" "$WORK/$name.$dtype.gguf" "$WORK/$name.generated.jsonl" "${scores[@]}" \
        || fail "$name $dtype in llama.cpp"
    else
      "${CHECK[@]}" "$WORK/$name.$dtype.gguf" "$WORK/$name.generated.jsonl" \
        || fail "$name $dtype in llama.cpp"
    fi
  done
}

echo "== 1. the tiny HF fixtures, token ids (no tokenizer)"
printf '%s\n' "5 17 3" "90 1 2 3 4" "42" > "$WORK/id_prompts.txt"
# Named like WikiText's test file so that eval's detokenizer (which leaves ids alone) is chosen.
printf '%s' "7 11 13 17 19 23 29 31 37 41 43 47 53 59 61 67 71 73 79 83 89 2 4 6 8 10 12 14 16 18" \
  > "$WORK/ids.wiki.test.tokens"
# The fixtures are random (std 0.2 weights): the numerics are checked on their f32 files, where
# every token's score is compared. Their next-token logits are often nearly tied (a bf16 or f16
# rounding flips such ties: measured at the 4th to 6th generated token), so for greedy decoding
# in every type each fixture is first finetuned at TP 2 to count (ids n, n+1, ... mod 90), which
# it predicts with a clear margin. llama.cpp's gpt2 GeLU is an f16 table: the GPT-2 fixture's
# per-token scores are compared with tools/reference/gguf_gpt2_gelu_reference.py's float64 model.
node -e 'let s = ""; for (let d = 0; d < 200; ++d) { const t = []; for (let i = 0; i < 40; ++i) t.push((d * 7 + i) % 90); s += JSON.stringify({text: t.join(" ")}) + "\n"; } require("fs").writeFileSync(process.argv[1], s)' \
  "$WORK/count.jsonl"
megatron preprocess preprocess --input "$WORK/count.jsonl" --output-prefix "$WORK/count" \
  --tokenizer-type NullTokenizer --vocab-size 96 --workers 1
printf '%s\n' "5 6 7" "40 41 42 43" "80 81" > "$WORK/count_prompts.txt"
# The reference models ggml's AVX-512 CPU builds (libggml-cpu-zen4, -skylakex, ...: within 1e-5 on
# Zen 4/5). On a CPU without AVX-512 ggml loads its AVX2 build (libggml-cpu-haswell), whose GPT-2
# scores differ from the reference by up to 9.9e-5 (Zen 3, 2026-12-07; the cause inside ggml is not
# identified yet), so llama.cpp's side is held to 2e-4 there; megatron's side, the greedy tokens
# and the perplexity (1e-4) keep their bounds on every CPU.
LLAMA_CPP_GELU_ATOL=1e-5
grep -qw avx512f /proc/cpuinfo || LLAMA_CPP_GELU_ATOL=2e-4
for fixture in gpt2_tiny llama_tiny qwen2_tiny; do
  convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/$fixture/hf" --save "$WORK/$fixture" \
    --make-vocab-size-divisible-by 32
  reference=""
  [[ $fixture != gpt2_tiny ]] ||
    reference="$MEGATRON_SOURCE_DIR/tests/data/gguf/gpt2_tiny_llama_cpp_logprobs.json"
  REFERENCE_LOGPROBS="$reference" LLAMA_CPP_REFERENCE_ATOL=$LLAMA_CPP_GELU_ATOL \
    check_model "$fixture" "$WORK/$fixture" f32 \
    "$WORK/id_prompts.txt" "$WORK/ids.wiki.test.tokens" -- --tokenizer-type NullTokenizer \
    --vocab-size 96
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" pretrain-gpt --use-checkpoint-args --load "$WORK/$fixture" --finetune \
    --seq-length 32 --data-path "$WORK/count_text_document" --tokenizer-type NullTokenizer \
    --vocab-size 96 --split 100,0,0 --micro-batch-size 4 --global-batch-size 8 --train-iters 100 \
    --lr 3e-3 --lr-warmup-iters 5 --lr-decay-style cosine --min-lr 3e-4 --log-interval 50 \
    --eval-iters 0 --eval-interval 1000 --tensor-model-parallel-size 2 \
    --save "$WORK/$fixture.count" --save-interval 100 > "$WORK/$fixture.count.log" 2>&1 \
    || { cat "$WORK/$fixture.count.log"; fail "finetune $fixture to count"; }
  check_model "$fixture.count" "$WORK/$fixture.count" "f32 f16 bf16" "$WORK/count_prompts.txt" \
    -- --tokenizer-type NullTokenizer --vocab-size 96
done

echo "== a Llama-style model with linear RoPE scaling and heads of 32 channels in hidden 64"
# rope.scaling.{type,factor} and attention.key_length/value_length: trained at TP 2 to count.
timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --kv-channels 32 --position-embedding-type rope --rotary-seq-len-interpolation-factor 2 \
  --normalization RMSNorm --swiglu --ffn-hidden-size 96 --group-query-attention \
  --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights \
  --seq-length 32 --max-position-embeddings 64 --data-path "$WORK/count_text_document" \
  --tokenizer-type NullTokenizer --vocab-size 96 --split 100,0,0 --micro-batch-size 4 \
  --global-batch-size 8 --train-iters 100 --lr 3e-3 --lr-warmup-iters 5 --lr-decay-style cosine \
  --min-lr 3e-4 --log-interval 50 --eval-iters 0 --eval-interval 1000 \
  --tensor-model-parallel-size 2 --save "$WORK/llama_linear" --save-interval 100 \
  > "$WORK/llama_linear.log" 2>&1 || { cat "$WORK/llama_linear.log"; fail "train llama_linear"; }
check_model llama_linear "$WORK/llama_linear" "f32 bf16" "$WORK/count_prompts.txt" \
  "$WORK/ids.wiki.test.tokens" -- --tokenizer-type NullTokenizer --vocab-size 96

echo "== mixtures of experts: HF Mixtral (llama.cpp's llama with experts), a Qwen2-MoE-style model"
# Mixtral: softmax over the experts, the top 2 renormalised. The Qwen2-MoE-style model (qwen2moe:
# the top-k softmax weights kept as they are, a sigmoid-gated shared expert, q/k/v biases) is
# trained at EP 2 to count, from weights of std 0.2 so that routing differs between tokens.
printf '%s\n' "5 17 3" "50 1 2 3 4" "42" > "$WORK/moe_prompts.txt"
printf '%s' "7 11 13 17 19 23 29 31 37 41 43 47 53 59 61 2 4 6 8 10 12 14 16 18" \
  > "$WORK/moe_ids.wiki.test.tokens"
convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/mixtral_tiny/hf" \
  --save "$WORK/mixtral_tiny" --make-vocab-size-divisible-by 32
check_model mixtral_tiny "$WORK/mixtral_tiny" f32 "$WORK/moe_prompts.txt" \
  "$WORK/moe_ids.wiki.test.tokens" -- --tokenizer-type NullTokenizer --vocab-size 64
timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96 \
  --group-query-attention --num-query-groups 2 --disable-bias-linear --add-qkv-bias \
  --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 \
  --moe-router-pre-softmax --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 48 \
  --moe-shared-expert-gate --expert-model-parallel-size 2 --init-method-std 0.2 \
  --seq-length 32 --max-position-embeddings 64 --data-path "$WORK/count_text_document" \
  --tokenizer-type NullTokenizer --vocab-size 96 --split 100,0,0 --micro-batch-size 4 \
  --global-batch-size 8 --train-iters 100 --lr 3e-3 --lr-warmup-iters 5 --lr-decay-style cosine \
  --min-lr 3e-4 --log-interval 50 --eval-iters 0 --eval-interval 1000 --save "$WORK/qwen2moe" \
  --save-interval 100 > "$WORK/qwen2moe.log" 2>&1 || { cat "$WORK/qwen2moe.log"; fail "train qwen2moe"; }
check_model qwen2moe "$WORK/qwen2moe" "f32 bf16" "$WORK/count_prompts.txt" \
  "$WORK/ids.wiki.test.tokens" -- --tokenizer-type NullTokenizer --vocab-size 96

echo "== 2. GPT-2 and Llama-style models trained with GPT-2's BPE at TP 2 (the tokenizer)"
TOKENIZER=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json"
           --merge-file "$DATA_DIR/gpt2-merges.txt")
train() {  # train NAME ARCH_FLAGS...
  local name=$1
  shift
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" pretrain-gpt "$@" --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 64 --max-position-embeddings 64 --data-path "$GPT_DATA" "${TOKENIZER[@]}" \
    --split 100,0,0 --micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 3e-3 \
    --lr-warmup-iters 3 --lr-decay-style cosine --min-lr 3e-4 --seed 7 \
    --tensor-model-parallel-size 2 --log-interval 10 --eval-iters 0 --eval-interval 1000 \
    --save "$WORK/$name/model" --save-interval 30 > "$WORK/$name.train.log" 2>&1 \
    || { cat "$WORK/$name.train.log"; fail "train $name"; }
}
printf '%s\n' "The President of the United States" "Congress shall" "Our nation" \
  > "$WORK/text_prompts.txt"
printf '%s' "The people of this country have a right to know what their government does, and the Congress has a duty to tell them the truth about the state of the Union." \
  > "$WORK/sotu.wiki.test.tokens"
LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
       --disable-bias-linear)
train gpt2_bpe --openai-gelu
train llama_bpe "${LLAMA[@]}" --use-rope-scaling
for name in gpt2_bpe llama_bpe; do
  check_model "$name" "$WORK/$name/model" "f32 bf16" "$WORK/text_prompts.txt" \
    "$WORK/sotu.wiki.test.tokens" -- "${TOKENIZER[@]}"
  echo "== $name: the TP-2 checkpoint and its TP-1 resharding export the same bytes"
  convert --load "$WORK/$name/model" --save "$WORK/$name/tp1/model" --target-tensor-parallel-size 1
  convert --to gguf --load "$WORK/$name/tp1/model" --save "$WORK/$name.tp1.f32.gguf"
  cmp "$WORK/$name.f32.gguf" "$WORK/$name.tp1.f32.gguf" || fail "$name: TP 1 export differs"
done
echo "== gpt2_bpe exported to HF (vocab.json, merges.txt) and from there to GGUF: the same bytes"
convert --to hf --load "$WORK/gpt2_bpe/model" --save "$WORK/gpt2_bpe/hf/model"
convert --from hf --to gguf --load "$WORK/gpt2_bpe/hf/model" --save "$WORK/gpt2_bpe.hf.gguf"
cmp "$WORK/gpt2_bpe.f32.gguf" "$WORK/gpt2_bpe.hf.gguf" || fail "HF GPT-2 with its tokenizer"

echo "== a Llama-style model trained with a SentencePiece BPE model (Llama2Tokenizer) at TP 2"
# tokenizer.ggml.model "llama": llama.cpp's SPM tokenizer must give the ids libsentencepiece
# gave megatron (prompts and the scored text), with the model's scores and byte pieces.
SPM_MODEL="$MEGATRON_SOURCE_DIR/tests/data/tokenizers/llama_style.model"
TOKENIZER=(--tokenizer-type Llama2Tokenizer --tokenizer-model "$SPM_MODEL")
megatron spm.preprocess preprocess --input "$WORK/sotu10.jsonl" --output-prefix "$WORK/sotu_spm" \
  "${TOKENIZER[@]}" --append-eod --workers 1
GPT_DATA="$WORK/sotu_spm_text_document"
train llama_spm "${LLAMA[@]}"
check_model llama_spm "$WORK/llama_spm/model" "f32 bf16" "$WORK/text_prompts.txt" \
  "$WORK/sotu.wiki.test.tokens" -- "${TOKENIZER[@]}"
echo "== llama_spm exported to HF (tokenizer.model, a LlamaTokenizer config), then to GGUF: the same bytes"
convert --to hf --load "$WORK/llama_spm/model" --save "$WORK/llama_spm/hf/model"
cmp "$SPM_MODEL" "$WORK/llama_spm/hf/model/tokenizer.model" || fail "HF export's tokenizer.model"
grep -q '"tokenizer_class": "LlamaTokenizer"' "$WORK/llama_spm/hf/model/tokenizer_config.json" ||
  fail "HF export's tokenizer_config.json"
convert --from hf --to gguf --load "$WORK/llama_spm/hf/model" --save "$WORK/llama_spm.hf.gguf"
cmp "$WORK/llama_spm.f32.gguf" "$WORK/llama_spm.hf.gguf" || fail "HF Llama with tokenizer.model"

echo "== an HF directory exports directly: the bytes of the export through a checkpoint"
# general.name is the --load directory's name: "hf" both times.
convert --from hf --to gguf --load "$MEGATRON_SOURCE_DIR/tests/data/qwen2_tiny/hf" \
  --save "$WORK/direct/qwen2_tiny.gguf"
convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/qwen2_tiny/hf" --save "$WORK/via/hf" \
  --make-vocab-size-divisible-by 32
convert --to gguf --load "$WORK/via/hf" --save "$WORK/via/qwen2_tiny.gguf"
cmp "$WORK/direct/qwen2_tiny.gguf" "$WORK/via/qwen2_tiny.gguf" || fail "direct HF export differs"
[[ ! -e $WORK/direct/qwen2_tiny.gguf.megatron-cpp.tmp ]] || fail "intermediate checkpoint left"

echo "== a Megatron-LM torch checkpoint (the GPT-2 fixture at TP 2 x PP 2) exports the same bytes"
convert --from megatron-lm --to gguf \
  --load "$MEGATRON_SOURCE_DIR/tests/data/megatron_lm_gpt_tiny/legacy_tp2_pp2" \
  --save "$WORK/mlm/gpt2_tiny.gguf"
convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" \
  --save "$WORK/mlm/legacy_tp2_pp2" --make-vocab-size-divisible-by 32
convert --to gguf --load "$WORK/mlm/legacy_tp2_pp2" --save "$WORK/mlm/via_hf.gguf"
cmp "$WORK/mlm/gpt2_tiny.gguf" "$WORK/mlm/via_hf.gguf" || fail "Megatron-LM export differs"

echo "== 3. refusals"
expect_error() {  # expect_error MESSAGE CONVERT_FLAGS...
  local message=$1
  shift
  if "$MEGATRON_BINARY" convert "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
expect_error "only GPT-family models (GPT-2 and Llama-style) convert to GGUF" \
  --model-type bert --to gguf --load "$WORK/gpt2_tiny" --save "$WORK/x.gguf"
expect_error "--gguf-dtype q8_0 is not a GGUF tensor type written here: use f32, f16 or bf16" \
  --model-type gpt --to gguf --gguf-dtype q8_0 --load "$WORK/gpt2_tiny" --save "$WORK/x.gguf"
expect_error "--from gguf: GGUF files are written (--to gguf), not read" \
  --model-type gpt --from gguf --load "$WORK/gpt2_tiny.f32.gguf" --save "$WORK/x"
timeout 300 "$MEGATRON_BINARY" pretrain-gpt --num-layers 1 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --mock-data \
  --vocab-size 64 --micro-batch-size 2 --train-iters 1 --lr 1e-4 --save "$WORK/erf" \
  --save-interval 1 --eval-iters 0 > "$WORK/erf.log" 2>&1 || { cat "$WORK/erf.log"; fail "erf run"; }
expect_error "llama.cpp's gpt2 architecture computes the tanh GeLU, this model the exact erf GeLU" \
  --model-type gpt --to gguf --load "$WORK/erf" --save "$WORK/x.gguf"
convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/qwen3_tiny/hf" --save "$WORK/qwen3" \
  --make-vocab-size-divisible-by 32
expect_error "a model with QK norms (--qk-layernorm, Qwen3) does not export to GGUF yet" \
  --model-type gpt --to gguf --load "$WORK/qwen3" --save "$WORK/x.gguf"
convert --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/qwen2_moe_tiny/hf" \
  --save "$WORK/qwen2_moe_tiny" --make-vocab-size-divisible-by 32
expect_error "llama.cpp's MoE architectures make every layer a mixture of experts" \
  --model-type gpt --to gguf --load "$WORK/qwen2_moe_tiny" --save "$WORK/x.gguf"
[[ ! -e $WORK/x.gguf ]] || fail "a refused export left a file"
echo "gguf llama.cpp: OK"
