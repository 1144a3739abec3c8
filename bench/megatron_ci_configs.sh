#!/usr/bin/env bash
# How many of Megatron-LM's own CI pretraining configurations train with megatron-cpp.
#
# Megatron-LM's functional tests keep one model_config.yaml per test case under
# tests/functional_tests/test_cases/{gpt,bert}/NAME/. This script turns each pretraining config's
# MODEL_ARGS into a `megatron pretrain-gpt` / `megatron pretrain-bert` command line the way
# Megatron's tests/functional_tests/shell_test_utils/_run_training.sh does (envsubst, then
# `KEY: true` -> bare flag, `KEY: [a b]` -> KEY a b, a value with spaces or ( ) | -> one
# argument, else KEY VALUE), shrinks it to a CPU-sized run and runs it, then says per config:
#
#   trains   exit 0 and at least one "iteration N/M" line
#   refused  non-zero exit with an error message: the first "error:" line, and the flag it is about
#   crashed  a signal, an abort, the timeout, exit 0 without an iteration line, or no message
#
# (with KIND=inference: Megatron's inference configs instead, each run as `megatron generate`;
# see below) and prints a summary: the counts, and what blocks the refused configs, sorted by how many
# configs it blocks: the flag a refusal is about ("error: --flag VALUE: why"; each flag of an
# "unrecognized arguments" error), or the message itself when it names a constraint instead.
#
# Which configs are pretraining: a config is skipped when its MODE is inference or rl, its
# directory name mentions inference or grpo, or its MODEL_ARGS have neither --train-iters nor
# --train-samples (at Megatron-LM d98e8a6: 216 configs, 171 pretraining; the 45 others are the
# gpt_*inference* and gpt_grpo_* configs). A checkpoint-resume or frozen-resume test is run
# once, with its MODEL_ARGS (its first run); a frozen-start test's checkpoint is not available,
# so --load points at an empty directory and the run starts from random weights — except with
# --finetune, which needs weights: that checkpoint is first made by the same command without
# --finetune and --load, saving into the --load directory (its log: prepareN.txt).
#
# What is changed for the CPU run (everything else is passed as the config has it):
#   model     --hidden-size 128, --num-attention-heads 4 (with --num-query-groups: groups = TP and
#             heads = groups x the config's heads/groups ratio; hidden 8 x heads when 128 is not
#             a multiple), --ffn-hidden-size 4 x hidden, --moe-ffn-hidden-size and
#             --moe-shared-expert-intermediate-size 2 x hidden and --kv-channels hidden/heads when the
#             config sets them, --seq-length 64, --max-position-embeddings 64, 2 layers per
#             pipeline stage (interleaved: the config's number of virtual stages, 1 layer each;
#             --decoder-first/last-pipeline-num-layers kept, 2 layers on each stage between;
#             --account-for-embedding/loss-in-pipeline-split: PP x VP minus the accounted ones;
#             --pipeline-model-parallel-layout: kept, with the config's --num-layers);
#             --moe-layer-freq ([0]*a+[1]*b): the a dense layers first (at most layers - 1),
#             MoE after them, over the shrunk layers
#   run       --global-batch-size at most $MAX_MICRO_BATCHES micro-batches per DP rank (default
#             16; a CI global batch of 512 sequences is 512 steps of the pipeline on 2 cores;
#             not with --rampup-batch-size or --step-batch-size-schedule),
#             --train-iters $ITERS (--train-samples: $ITERS x the first global batch size),
#             --eval-iters 0, --log-interval 1, --distributed-backend mpi (also for 1 process:
#             megatron-cpp refuses nccl on the CPU)
#   layout    world = TP x PP x CP x DP. While TP x PP x CP > 4 the largest of PP, TP, CP is
#             halved (ties: PP first, as Megatron's own *_1node variants do); DP is then the
#             largest of 4, 2, 1 that keeps the world <= 4, is <= the CI's DP (8 GPUs per node,
#             or the config's GPUS_PER_NODE) and divides global batch / micro-batch;
#             --hierarchical-context-parallel-sizes follows CP (its levels halved, the last first);
#             --expert-model-parallel-size is halved until it divides CP x DP (EP is carved out
#             of the context- and data-parallel ranks, Megatron's tp-cp-ep-dp-pp order)
#   paths     --data-path: a GPT-2 BPE (GPT) or lower-case WordPiece sentence (BERT) indexed
#             dataset made here with `megatron preprocess` from this repository's docs/*.md;
#             --vocab-file/--merge-file: the files of scripts/fetch_data.sh; a tokenizer that
#             needs a model file (--tokenizer-type GPTSentencePieceTokenizer, ...) becomes
#             GPT2BPETokenizer (--tokenizer-model dropped); with --fim-data the vocabulary is
#             GPT-2's with the FIM sentinels <fim_prefix>, <fim_middle>, <fim_suffix>, <fim_pad>
#             appended (a FIM vocabulary has them; GPT-2's does not); --save/--load/--tensorboard-dir/
#             --data-cache-path: directories of the run (${CHECKPOINT_LOAD_PATH} does not exist)
# Knowledge distillation configs (ModelOpt's --export-kd-teacher-load, e.g. the
# *_modelopt_distill_* ones): the teacher checkpoint the config points to (under
# ${DATA_PATH}, which CI provides) is made first, once per work dir, by a run of the same
# shrunk command line without --export-kd-* / --load / --save for $ITERS iterations, saved
# there; and the config's ENV_VARS DISTILL_CONFIG is written to its --export-kd-cfg path as its
# BEFORE_SCRIPT does (`yq -P`: block-style YAML, here written with python3-yaml).
# Every run is `mpirun --oversubscribe -np N` with OMP_NUM_THREADS=1 under a timeout.
#
# KIND=inference: the 38 configs of Megatron's inference scripts (MODE inference or a name with
# "inference", not the RL/GRPO ones, with MODEL_ARGS), each run as `megatron generate` with its MODEL_ARGS. Its
# checkpoint (a 583M model in torch_dist format in Megatron's CI) is made here: the config's
# model flags, shrunk as above but with 256 positions, trained for 1 iteration by one
# `megatron pretrain-gpt` process; --load points at it. --prompt-file becomes a JSONL of this
# repository's docs' paragraphs, --num-tokens-to-generate is capped at 32 and --output-path
# (${INFERENCE_OUTPUT_PATH}) is the run's. A config "generates" when it exits 0 and its
# --output-path JSON holds generated tokens (or, without --output-path, it exits 0); a refusal
# of the training step is the config's refusal (e.g. mixture of experts).
#
# Usage: bench/megatron_ci_configs.sh MEGATRON_LM [NAME_REGEX]
#   MEGATRON_LM  a Megatron-LM checkout: a work tree, or a git directory (bare or .git; its
#                $MEGATRON_REF, default HEAD, is read with git archive)
#   NAME_REGEX   only the configs whose group/name matches (grep -E), e.g. 'bert/|tp4'
# Environment: MEGATRON_BIN (default build/megatron of this repository), TIMEOUT (seconds per
#   run, default 120), ITERS (default 2), WORK_DIR (default a new mktemp -d; logs, commands and
#   results.tsv stay there), CI_GROUPS (the test-case groups read, default "gpt bert"; add
#   "moe mixtral" for Megatron's mixture-of-experts configs, run as pretrain-gpt), PEEL=N (after a refusal about a flag of the config, drop that flag
#   and run again, up to N times: the flags that block a config behind the first one, and
#   whether it trains without them; default 0).
# Needs: bash, mpirun (Open MPI), coreutils timeout, awk, git (for a git directory), Debian's
#   python3-yaml for /usr/bin/python3 (apt-get install -y python3-yaml; used only to read the
#   YAML), and the files of scripts/fetch_data.sh in ${MEGATRON_DATA_DIR:-~/.cache/megatron-cpp}.
#   All 171 configs: about 10 minutes on 2 cores (PEEL=10: about 25); KIND=inference: about 6.
set -uo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
MLM=$1
FILTER=${2:-}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEGATRON_BIN:-$REPO/build/megatron}
TIMEOUT=${TIMEOUT:-120}
ITERS=${ITERS:-2}
PEEL=${PEEL:-0}
MAX_MICRO_BATCHES=${MAX_MICRO_BATCHES:-16}
KIND=${KIND:-pretraining}
read -r -a CI_GROUPS <<<"${CI_GROUPS:-gpt bert}"
MAX_WORLD=4
DATA_DIR=${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}
WORK=${WORK_DIR:-$(mktemp -d /tmp/megatron_ci_configs.XXXXXX)}
PY=/usr/bin/python3

die() { echo "megatron_ci_configs: $*" >&2; exit 1; }
[[ $KIND == pretraining || $KIND == inference ]] ||
  die "KIND=$KIND: expected pretraining (the default) or inference"
[[ -x $BIN ]] || die "no megatron binary at $BIN (set MEGATRON_BIN)"
command -v mpirun >/dev/null || die "needs mpirun (Debian: openmpi-bin)"
[[ -x $PY ]] && $PY -c 'import yaml' 2>/dev/null ||
  die "needs Debian's python3-yaml for $PY (apt-get install -y python3-yaml)"
for f in gpt2-vocab.json gpt2-merges.txt bert-base-uncased-vocab.txt; do
  [[ -f $DATA_DIR/$f ]] || die "no $DATA_DIR/$f: run scripts/fetch_data.sh"
done
mkdir -p "$WORK/runs" "$WORK/data" || die "cannot write $WORK"

# ---- the configs: a work tree, or a git directory read with git archive --------------------
CASES=tests/functional_tests/test_cases
if [[ -d $MLM/$CASES ]]; then
  ROOT=$(cd "$MLM" && pwd)
elif git --git-dir="$MLM" rev-parse --verify -q "${MEGATRON_REF:-HEAD}^{commit}" >/dev/null; then
  ROOT=$WORK/megatron-lm
  mkdir -p "$ROOT"
  git --git-dir="$MLM" archive "${MEGATRON_REF:-HEAD}" "${CI_GROUPS[@]/#/$CASES/}" |
    tar -x -C "$ROOT" ||
    die "git archive of $MLM failed"
else
  die "$MLM is neither a Megatron-LM work tree nor a git directory"
fi
MLM_REV=$(git -C "$MLM" rev-parse --short HEAD 2>/dev/null ||
  git --git-dir="$MLM" rev-parse --short "${MEGATRON_REF:-HEAD}" 2>/dev/null || echo unknown)

# YAML -> one line per item: "C<TAB>group/name", "T<TAB>TEST_TYPE<TAB>MODE<TAB>GPUS_PER_NODE",
# then "A<TAB>flag<TAB>value" for MODEL_ARGS in order (anchors and << merges resolved, as yq's
# explode does). Scalars keep their text as written (yq prints 1.0e-5 as 1.0e-5; YAML 1.2
# booleans only, so `true` is a bare flag).
read_configs() {
  $PY - "$ROOT/$CASES" "${CI_GROUPS[@]}" <<'EOF'
import glob, os, sys, yaml
class Loader(yaml.SafeLoader):
    pass
def text(loader, node):
    return loader.construct_scalar(node)
def boolean(loader, node):
    v = loader.construct_scalar(node)
    return {"true": "true", "True": "true", "TRUE": "true",
            "false": "false", "False": "false", "FALSE": "false"}.get(v, v)
for tag in ("int", "float", "timestamp", "null"):
    Loader.add_constructor("tag:yaml.org,2002:" + tag, text)
Loader.add_constructor("tag:yaml.org,2002:bool", boolean)
flat = lambda s: " ".join(str(s).split("\n")).replace("\t", " ")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*", "*", "model_config.yaml"))):
    group, name = path.split(os.sep)[-3:-1]
    if group not in sys.argv[2:]:
        continue
    with open(path) as f:
        d = yaml.load(f, Loader=Loader) or {}
    gpn = ((d.get("MODEL_ENV_VARS") or {}).get("MODEL_ARGS") or {}).get("GPUS_PER_NODE", "")
    print(f"C\t{group}/{name}")
    print(f"T\t{flat(d.get('TEST_TYPE', ''))}\t{flat(d.get('MODE') or '')}\t{gpn}")
    distill = (d.get("ENV_VARS") or {}).get("DISTILL_CONFIG")
    if distill:
        print(f"D\t{flat(distill)}")
    for k, v in (d.get("MODEL_ARGS") or {}).items():
        if isinstance(v, list):
            v = "[" + " ".join(map(str, v)) + "]"
        print(f"A\t{k}\t{flat(v if v is not None else 'null')}")
EOF
}

# ---- data ------------------------------------------------------------------------------------
GPT_PREFIX=$WORK/data/gpt_text_document
BERT_PREFIX=$WORK/data/bert_text_sentence
if [[ ! -f $GPT_PREFIX.idx || ! -f $BERT_PREFIX.idx ]]; then
  for f in "$REPO"/docs/*.md; do # loose JSON, one document per file
    tr -d '\000-\010\013-\037' <"$f" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' |
      awk 'BEGIN { printf "{\"text\": \"" } { printf "%s\\n", $0 } END { printf "\"}\n" }'
  done >"$WORK/data/docs.jsonl"
  "$BIN" preprocess --input "$WORK/data/docs.jsonl" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$DATA_DIR/gpt2-vocab.json" --merge-file "$DATA_DIR/gpt2-merges.txt" \
    --append-eod --output-prefix "$WORK/data/gpt" >"$WORK/data/preprocess.log" 2>&1 &&
    "$BIN" preprocess --input "$WORK/data/docs.jsonl" --tokenizer-type BertWordPieceLowerCase \
      --vocab-file "$DATA_DIR/bert-base-uncased-vocab.txt" --split-sentences \
      --output-prefix "$WORK/data/bert" >>"$WORK/data/preprocess.log" 2>&1 ||
    die "preprocess failed: $WORK/data/preprocess.log"
fi

# --prompt-file of the inference configs: JSONL with a "text" field, as Megatron's scripts read
PROMPT_FILE=$WORK/data/prompts.jsonl
if [[ $KIND == inference && ! -f $PROMPT_FILE ]]; then
  $PY - "$REPO"/docs/*.md >"$PROMPT_FILE" <<'EOF' || die "cannot write $PROMPT_FILE"
import json, sys
for path in sys.argv[1:]:
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if 40 <= len(line) <= 200 and line[0].isalpha():
            print(json.dumps({"text": line}))
EOF
fi

# GPT-2's vocabulary with the FIM sentinels (--fim-data), ids 50257-50260.
FIM_VOCAB=$WORK/data/gpt2-fim-vocab.json
[[ -f $FIM_VOCAB ]] || /usr/bin/python3 -c '
import json, sys
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
for token in ("<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"):
    vocab[token] = len(vocab)
json.dump(vocab, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
' "$DATA_DIR/gpt2-vocab.json" "$FIM_VOCAB" || die "cannot write $FIM_VOCAB"

# ---- one config -> one command line ------------------------------------------------------------
# Flags whose value is this script's alone (not the config's choice, as a layout or a feature
# is): a refusal naming them is the CPU run's doing, and PEEL never drops them.
OURS=" --hidden-size --num-attention-heads --ffn-hidden-size --kv-channels --seq-length
  --moe-ffn-hidden-size --moe-shared-expert-intermediate-size
  --max-position-embeddings --num-layers --train-iters --train-samples --eval-iters
  --log-interval --distributed-backend --data-path --vocab-file --merge-file --tokenizer-type
  --tokenizer-model --save --load --tensorboard-dir --data-cache-path "
OURS=${OURS//$'\n'/ } # one line: flags are matched as " --flag "
NEEDS_MODEL_FILE=" GPTSentencePieceTokenizer SentencePieceTokenizer Llama2Tokenizer
  HuggingFaceTokenizer TikTokenizer MultimodalTokenizer "
NEEDS_MODEL_FILE=${NEEDS_MODEL_FILE//$'\n'/ } # one line, as OURS: Llama2Tokenizer ended a line

# envsubst as _run_training.sh runs it on the whole file: only variables that are set change.
subst() {
  local s=$1 var
  for var in DATA_PATH DATA_BLEND CHECKPOINT_SAVE_PATH CHECKPOINT_LOAD_PATH TENSORBOARD_PATH \
    DATA_CACHE_PATH OUTPUT_PATH REPEAT RUN_NUMBER WANDB_EXPERIMENT WANDB_SAVE_PATH \
    INFERENCE_OUTPUT_PATH; do
    s=${s//"\${$var}"/${!var}}
    s=${s//"\$$var"/${!var}}
  done
  printf '%s' "$s"
}

has() { local k; for k in "${KEYS[@]}"; do [[ $k == "$1" ]] && return 0; done; return 1; }
get() { # get FLAG DEFAULT
  local i
  for i in "${!KEYS[@]}"; do [[ ${KEYS[i]} == "$1" ]] && { printf '%s' "${VALS[i]}"; return; }; done
  printf '%s' "$2"
}

# levels_for_cp "A P" CP: --hierarchical-context-parallel-sizes for the shrunk CP size, the levels
# halved (the last, the ring across the groups, first) until their product is CP ("[A P]" stays
# bracketed)
levels_for_cp() {
  local -a levels
  local value=$1 cp=$2 open= close= i x product
  if [[ $value == \[*\] ]]; then open='[' close=']' value=${value#[} value=${value%]}; fi
  read -ra levels <<<"$value"
  for ((i = ${#levels[@]} - 1; i >= 0; i--)); do
    while :; do
      product=1
      for x in "${levels[@]}"; do product=$((product * x)); done
      ((product > cp && levels[i] > 1)) || break
      levels[i]=$((levels[i] / 2))
    done
  done
  printf '%s%s%s' "$open" "${levels[*]}" "$close"
}

# build: KEYS/VALS (a config's MODEL_ARGS, without the dropped flags) -> MODEL, NP, LAYOUT, CMD
build() {
  local run=$1 i k v words
  local tp pp cp ep vp=1 L mbs gbs dp_ci d heads groups hidden=128 sched extra=0 inst positions=64
  [[ $KIND == inference ]] && positions=256
  tp=$(get --tensor-model-parallel-size 1); pp=$(get --pipeline-model-parallel-size 1)
  cp=$(get --context-parallel-size 1)
  while ((tp * pp * cp > MAX_WORLD)); do # halve the largest; ties: PP, then TP, then CP
    if ((pp > 1 && pp >= tp && pp >= cp)); then pp=$((pp / 2))
    elif ((tp > 1 && tp >= cp)); then tp=$((tp / 2))
    else cp=$((cp / 2)); fi
  done
  mbs=$(get --micro-batch-size 1)
  sched=$(get --step-batch-size-schedule "")
  if [[ -n $sched ]]; then # the first batch size of "0:384 200B:768 ..."
    gbs=${sched%% *}; gbs=${gbs#*:}
  else
    gbs=$(get --global-batch-size 0)
  fi
  # the CI's DP: GPUS_PER_NODE (8 unless the config says) over the config's own layout
  dp_ci=$((${GPN:-8} / ($(get --tensor-model-parallel-size 1) *
    $(get --pipeline-model-parallel-size 1) * $(get --context-parallel-size 1))))
  ((dp_ci < 1)) && dp_ci=1
  inst=$(get --num-distributed-optimizer-instances 1)
  DP=1
  for d in 4 2 1; do
    ((tp * pp * cp * d <= MAX_WORLD && d <= dp_ci)) || continue
    ((gbs == 0 || gbs % (mbs * d) == 0)) || continue
    ((d % inst == 0 || d == 1)) || continue
    DP=$d; break
  done
  NP=$((tp * pp * cp * DP))
  if [[ -z $sched ]] && ! has --rampup-batch-size && ((gbs > mbs * DP * MAX_MICRO_BATCHES)); then
    gbs=$((mbs * DP * MAX_MICRO_BATCHES))
  fi
  ep=$(get --expert-model-parallel-size 1)
  while ((ep > 1 && (cp * DP) % ep != 0)); do ep=$((ep / 2)); done
  # layers
  local cfg_layers cfg_pp
  cfg_layers=$(get --num-layers 2); cfg_pp=$(get --pipeline-model-parallel-size 1)
  if has --num-layers-per-virtual-pipeline-stage; then
    vp=$((cfg_layers / (cfg_pp * $(get --num-layers-per-virtual-pipeline-stage 1))))
    ((vp < 1)) && vp=1
  elif has --num-virtual-stages-per-pipeline-rank; then
    vp=$(get --num-virtual-stages-per-pipeline-rank 1)
  elif has --virtual-pipeline-model-parallel-size; then
    vp=$(get --virtual-pipeline-model-parallel-size 1)
  fi
  has --account-for-embedding-in-pipeline-split && extra=$((extra + 1))
  has --account-for-loss-in-pipeline-split && extra=$((extra + 1))
  if has --pipeline-model-parallel-layout; then
    L=$cfg_layers # the layout names every layer (Megatron checks its t's against --num-layers)
  elif ((vp > 1 || extra > 0)); then
    L=$((pp * vp - extra))
    ((L < 1 || (vp == 1 && L < 2 * pp - extra))) && L=$((2 * pp * vp - extra))
  elif has --decoder-first-pipeline-num-layers || has --decoder-last-pipeline-num-layers; then
    local inner=$pp
    L=0
    has --decoder-first-pipeline-num-layers &&
      L=$((L + $(get --decoder-first-pipeline-num-layers 0))) inner=$((inner - 1))
    has --decoder-last-pipeline-num-layers &&
      L=$((L + $(get --decoder-last-pipeline-num-layers 0))) inner=$((inner - 1))
    ((inner > 0)) && L=$((L + 2 * inner))
  else
    L=$((2 * pp))
  fi
  # heads
  if has --num-query-groups; then
    local n g
    n=$(get --num-attention-heads 1); g=$(get --num-query-groups 1)
    groups=$tp; heads=$((n / g * tp))
    ((heads < 1)) && heads=$tp
  else
    heads=4; ((heads % tp)) && heads=$tp
  fi
  ((hidden % heads)) && hidden=$((8 * heads))

  # values that the environment supplies, as in CI
  DATA_PATH=$WORK/data/ci-data-path  # does not exist: data flags are replaced below
  DATA_BLEND=$GPT_PREFIX
  CHECKPOINT_SAVE_PATH=$run/save CHECKPOINT_LOAD_PATH=$run/load TENSORBOARD_PATH=$run/tensorboard
  DATA_CACHE_PATH=$run/data-cache OUTPUT_PATH=$run REPEAT=1 RUN_NUMBER=1
  WANDB_EXPERIMENT=megatron-cpp WANDB_SAVE_PATH=$run/wandb INFERENCE_OUTPUT_PATH=$run/output.json

  local tok vocab=$DATA_DIR/gpt2-vocab.json merges=$DATA_DIR/gpt2-merges.txt prefix=$GPT_PREFIX
  tok=$(get --tokenizer-type "")
  if [[ $MODEL == bert ]]; then
    vocab=$DATA_DIR/bert-base-uncased-vocab.txt merges= prefix=$BERT_PREFIX
  elif has --fim-data; then
    vocab=$FIM_VOCAB
  fi
  local swap_tok=0
  [[ -n $tok && $NEEDS_MODEL_FILE == *" $tok "* ]] && swap_tok=1

  CMD=()
  local -A seen=()
  for i in "${!KEYS[@]}"; do
    k=${KEYS[i]}; v=$(subst "${VALS[i]}")
    case $k in
      --hidden-size) v=$hidden ;;
      --num-attention-heads) v=$heads ;;
      --num-query-groups) v=$groups ;;
      --ffn-hidden-size) v=$((4 * hidden)) ;;
      --moe-ffn-hidden-size | --moe-shared-expert-intermediate-size) v=$((2 * hidden)) ;;
      --kv-channels) v=$((hidden / heads)) ;;
      --seq-length | --max-position-embeddings) v=$positions ;;
      --num-layers) v=$L ;;
      --global-batch-size) ((gbs > 0)) && v=$gbs ;;
      --moe-layer-freq)
        if [[ $v =~ ^\(\[0\]\*([0-9]+)\+\[1\]\*([0-9]+)\)$ ]]; then
          local dense=${BASH_REMATCH[1]}
          ((dense > L - 1)) && dense=$((L - 1))
          v="([0]*$dense+[1]*$((L - dense)))"
        fi ;;
      --num-layers-per-virtual-pipeline-stage) v=1 ;;
      --tensor-model-parallel-size) v=$tp ;;
      --pipeline-model-parallel-size) v=$pp ;;
      --context-parallel-size) v=$cp ;;
      --expert-model-parallel-size) v=$ep ;;
      --hierarchical-context-parallel-sizes) v=$(levels_for_cp "$v" $cp) ;;
      --train-iters) v=$ITERS ;;
      --train-samples) v=$((ITERS * (gbs > 0 ? gbs : mbs * DP))) ;;
      --eval-iters) v=0 ;;
      --log-interval) v=1 ;;
      --distributed-backend) v=mpi ;;
      --data-path) v=$prefix ;;
      --vocab-file) v=$vocab ;;
      --merge-file) [[ -z $merges ]] && continue; v=$merges ;;
      --tokenizer-type) ((swap_tok)) && v=GPT2BPETokenizer ;;
      --tokenizer-model) ((swap_tok)) && continue ;;
      --load) [[ $KIND == inference ]] && v=$run/load ;;
      --prompt-file) v=$PROMPT_FILE ;;
      --num-tokens-to-generate) ((v > 32)) && v=32 ;;
    esac
    seen[$k]=1
    # a relative path of the Megatron-LM checkout (e.g. --tp-comm-overlap-cfg tests/...)
    [[ $v == tests/* && -e $ROOT/$v ]] && v=$ROOT/$v
    # _run_training.sh's expansion of one MODEL_ARGS item (its xargs trims and unquotes)
    v=$(xargs <<<"$v" 2>/dev/null) || { read -ra words <<<"$v"; v="${words[*]}"; }
    if [[ $v == true ]]; then CMD+=("$k")
    elif [[ $v =~ ^\([^\)]+\)$ ]]; then CMD+=("$k" "$v")
    elif [[ $v =~ ^\[[^]]+\]$ ]]; then
      v=${v#[}; v=${v%]}; read -ra words <<<"$v"; CMD+=("$k" "${words[@]}")
    elif [[ $v == *" "* || $v == *"|"* || $v == *"("* || $v == *")"* ]]; then CMD+=("$k" "$v")
    else CMD+=("$k" "$v"); fi
  done
  # flags the CPU run needs that the config does not set
  [[ -z ${seen[--eval-iters]:-} ]] && CMD+=(--eval-iters 0)
  [[ -z ${seen[--log-interval]:-} ]] && CMD+=(--log-interval 1)
  [[ -z ${seen[--distributed-backend]:-} ]] && CMD+=(--distributed-backend mpi)
  [[ -z ${seen[--seq-length]:-} ]] && CMD+=(--seq-length $positions)
  [[ -z ${seen[--max-position-embeddings]:-} ]] && CMD+=(--max-position-embeddings $positions)
  [[ -z ${seen[--tensor-model-parallel-size]:-} ]] && ((tp > 1)) &&
    CMD+=(--tensor-model-parallel-size $tp)
  [[ -z ${seen[--pipeline-model-parallel-size]:-} ]] && ((pp > 1)) &&
    CMD+=(--pipeline-model-parallel-size $pp)
  [[ -z ${seen[--context-parallel-size]:-} ]] && ((cp > 1)) && CMD+=(--context-parallel-size $cp)
  if [[ $KIND == inference ]]; then # generate: the checkpoint's tokenizer, no data
    LAYOUT="TP$tp PP$pp"; NP=$((tp * pp))
    [[ -z ${seen[--load]:-} ]] && CMD+=(--load "$run/load")
    return
  fi
  if ! has --mock-data; then
    [[ -z ${seen[--data-path]:-} ]] && CMD+=(--data-path "$prefix")
    local vocab_tok=0 # a tokenizer that reads --vocab-file
    [[ -z $tok || $swap_tok == 1 || $tok == GPT2BPETokenizer || $tok == Bert* ]] && vocab_tok=1
    [[ -z ${seen[--vocab-file]:-} ]] && ((vocab_tok)) && CMD+=(--vocab-file "$vocab")
    [[ -z ${seen[--merge-file]:-} && -n $merges ]] && ((vocab_tok)) && CMD+=(--merge-file "$merges")
  fi
  LAYOUT="TP$tp PP$pp CP$cp DP$DP"
  if ((ep > 1)); then LAYOUT+=" EP$ep"; fi
}

# KIND=inference: the flags of CMD that describe the model, for the training run that makes the
# config's checkpoint.
MODEL_FLAGS=" --num-layers --hidden-size --num-attention-heads --ffn-hidden-size --kv-channels
  --group-query-attention --num-query-groups --max-position-embeddings --seq-length
  --position-embedding-type --rotary-base --rotary-percent --rotary-interleaved --normalization
  --norm-epsilon --swiglu --squared-relu --disable-bias-linear --add-qkv-bias
  --untie-embeddings-and-output-weights --qk-layernorm --apply-layernorm-1p --num-experts
  --moe-router-topk --moe-ffn-hidden-size --tokenizer-type --multi-latent-attention "
MODEL_FLAGS=${MODEL_FLAGS//$'\n'/ }
model_flags_of_cmd() { # CMD -> TRAIN_FLAGS
  local i keep=0
  TRAIN_FLAGS=()
  for ((i = 0; i < ${#CMD[@]}; i++)); do
    [[ ${CMD[i]} == --* ]] && { keep=0; [[ $MODEL_FLAGS == *" ${CMD[i]} "* ]] && keep=1; }
    ((keep)) && TRAIN_FLAGS+=("${CMD[i]}")
  done
}

# classify LOG RC -> STATUS, MSG, FLAGS
classify() {
  local log=$1 rc=$2 line
  FLAGS=
  if [[ $KIND == pretraining ]] && ((rc == 0)) && grep -qE 'iteration +[0-9]+/ *[0-9]+' "$log"; then
    STATUS=trains MSG=; return
  fi
  if [[ $KIND == inference ]] && ((rc == 0)); then
    if ! has --output-path || grep -q '"generated_tokens": \[$' "$OUTPUT_JSON" 2>/dev/null; then
      STATUS=generates MSG=; return
    fi
    STATUS=crashed MSG="exit 0 without generated tokens in --output-path"; return
  fi
  if ((rc == 124 || rc == 137)); then STATUS=crashed; MSG="timeout after ${TIMEOUT}s"; return; fi
  if ((rc == 0)); then STATUS=crashed; MSG="exit 0 without an iteration line"; return; fi
  line=$(grep -m1 -E 'signal [0-9]+|Segmentation fault|Aborted|core dumped|terminate called|'\
'Assertion .* failed|AddressSanitizer|exited on signal' "$log")
  if [[ -n $line ]]; then STATUS=crashed; MSG=$line; return; fi
  line=$(grep -m1 -E '^(error|Error|ERROR)\b' "$log")
  [[ -z $line ]] &&
    line=$(grep -iE '\berror\b' "$log" | grep -v -m1 -E 'mpirun|Primary job|non-zero')
  if [[ -n $line ]]; then
    STATUS=refused; MSG=$line
    # the flag a refusal is about: "error: --flag VALUE: why", or the flags of "unrecognized
    # arguments: ..."; a message about a constraint between values names no flag
    local rest=${line#*rror: }
    if [[ $rest == unrecognized\ arguments:* ]]; then
      FLAGS=$(grep -oE -- '--[A-Za-z0-9][A-Za-z0-9_-]*' <<<"$rest" | paste -sd' ')
    elif [[ $rest =~ ^(--[A-Za-z0-9][A-Za-z0-9_-]*) ]]; then
      FLAGS=${BASH_REMATCH[1]}
    fi
    return
  fi
  STATUS=crashed; MSG="exit $rc without a message"
}

# A distillation config (CMD has --export-kd-teacher-load): its teacher checkpoint, trained
# here from CMD without the distillation, load and save flags unless the path holds one, and
# its DISTILL_CONFIG as block YAML at the --export-kd-cfg path (the config's BEFORE_SCRIPT).
prepare_distillation() {
  local run=$1 i teacher= cfg= args=()
  for ((i = 0; i < ${#CMD[@]}; i++)); do
    case ${CMD[i]} in
      --export-kd-teacher-load) teacher=${CMD[i + 1]}; i=$((i + 1)) ;;
      --export-kd-cfg) cfg=${CMD[i + 1]}; i=$((i + 1)) ;;
      --load | --save | --save-interval) i=$((i + 1)) ;;
      --export-te-mcore-model) ;;
      *) args+=("${CMD[i]}") ;;
    esac
  done
  [[ -z $teacher ]] && return
  if [[ -n $cfg ]]; then
    mkdir -p "$(dirname "$cfg")"
    DISTILL=$DISTILL $PY -c 'import os, sys, yaml
yaml.safe_dump(yaml.safe_load(os.environ["DISTILL"]), sys.stdout, default_flow_style=False)' \
      >"$cfg" 2>"$run/distill_config.err"
  fi
  [[ -f $teacher/latest_checkpointed_iteration.txt ]] && return
  timeout -k 10 "$TIMEOUT" mpirun --oversubscribe -np "$NP" "$BIN" "pretrain-$MODEL" "${args[@]}" \
    --save "$teacher" --save-interval "$ITERS" </dev/null >"$run/teacher.log" 2>&1
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# A config that finetunes (--finetune) from a checkpoint of Megatron's CI that is not here (its
# --load does not exist): makes one with CMD minus --finetune and --load, saving into --load.
# Its output goes to $1; a failure shows in the config's own run (nothing to load).
prepare_finetune_checkpoint() {
  local i load= skip=0 prep=()
  for i in "${!CMD[@]}"; do [[ ${CMD[i]} == --load ]] && load=${CMD[i + 1]}; done
  [[ " ${CMD[*]} " == *" --finetune "* && -n $load && ! -e $load ]] || return 0
  for i in "${!CMD[@]}"; do
    if ((skip)); then skip=0; continue; fi
    case ${CMD[i]} in
      --finetune) continue ;;
      --load | --save) skip=1; continue ;;
    esac
    prep+=("${CMD[i]}")
  done
  timeout -k 10 "$TIMEOUT" mpirun --oversubscribe -np "$NP" "$BIN" "pretrain-$MODEL" "${prep[@]}" \
    --save "$load" </dev/null >"$1" 2>&1 || true
}

# runs one config (KEYS/VALS/MODEL/GPN set) as attempt $1 -> STATUS, MSG, FLAGS, and the log
run_one() {
  local attempt=$1 run=$WORK/runs/${NAME//\//_}
  rm -rf "$run/save" "$run/load" "$run/tensorboard" "$run/data-cache" "$run/wandb"
  mkdir -p "$run"
  build "$run"
  prepare_distillation "$run"
  LOG=$run/log$attempt.txt
  OUTPUT_JSON=$INFERENCE_OUTPUT_PATH
  rm -f "$OUTPUT_JSON"
  local command=("pretrain-$MODEL") t0=$SECONDS rc
  if [[ $KIND == inference ]]; then
    command=(generate)
    # the config's checkpoint: its model flags, one iteration, one process
    model_flags_of_cmd
    timeout -k 10 "$TIMEOUT" mpirun --oversubscribe -np 1 "$BIN" pretrain-gpt "${TRAIN_FLAGS[@]}" \
      --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
      --merge-file "$DATA_DIR/gpt2-merges.txt" --data-path "$GPT_PREFIX" --micro-batch-size 1 \
      --global-batch-size 1 --train-iters 1 --lr 1e-4 --eval-iters 0 --save "$run/load" \
      --save-interval 1 --distributed-backend mpi </dev/null >"$run/checkpoint$attempt.txt" 2>&1
    rc=$?
    if ((rc != 0)); then
      cp "$run/checkpoint$attempt.txt" "$LOG"
      ELAPSED=$((SECONDS - t0))
      classify "$LOG" $rc
      [[ $STATUS == refused ]] && MSG="making the checkpoint: $MSG"
      return
    fi
  fi
  local a line=
  for a in mpirun --oversubscribe -np "$NP" "$BIN" "${command[@]}" "${CMD[@]}"; do
    [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]] || a=$(printf '%q' "$a")
    line+="$a "
  done
  echo "${line% }" >"$run/cmd$attempt.txt"
  prepare_finetune_checkpoint "$run/prepare$attempt.txt"
  timeout -k 10 "$TIMEOUT" mpirun --oversubscribe -np "$NP" "$BIN" "${command[@]}" "${CMD[@]}" \
    </dev/null >"$LOG" 2>&1
  rc=$?
  ELAPSED=$((SECONDS - t0))
  classify "$LOG" $rc
  rm -rf "$run/save" "$run/tensorboard" "$run/data-cache" "$run/wandb"
}

RESULTS=$WORK/results.tsv
printf 'config\tstatus\tnp\tlayout\tseconds\tflags\tmessage\tpeeled\tafter_peeling\n' >"$RESULTS"
echo "# $BIN (repository at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)) on Megatron-LM" \
  "$MLM_REV's configs; work dir $WORK"
total=0 skipped=0 n_trains=0 n_refused=0 n_crashed=0
declare -A BLOCKS=() PEEL_BLOCKS=() PEEL_NAMES=()
peel_trains=0
finish_config() {
  [[ -z ${NAME:-} ]] && return
  local pretrain=1 inference=0
  [[ ${MODE,,} == *inference* || ${MODE,,} == rl ]] && pretrain=0
  [[ ${NAME,,} == *inference* || ${NAME,,} == *grpo* ]] && pretrain=0
  has --train-iters || has --train-samples || pretrain=0
  # (a config without MODEL_ARGS runs a script of its own, e.g. cuda_graphs_validation)
  [[ ${MODE,,} == *inference* || ${NAME,,} == *inference* ]] &&
    [[ ${MODE,,} != rl && ${NAME,,} != *grpo* ]] && ((${#KEYS[@]})) && inference=1
  if [[ -n $FILTER ]] && ! grep -qE -- "$FILTER" <<<"$NAME"; then NAME=; return; fi
  if [[ $KIND == pretraining ]] && ((!pretrain)); then skipped=$((skipped + 1)); NAME=; return; fi
  if [[ $KIND == inference ]] && ((!inference)); then skipped=$((skipped + 1)); NAME=; return; fi
  total=$((total + 1))
  run_one 0
  local status=$STATUS msg=$MSG flags=$FLAGS np=$NP layout=$LAYOUT secs=$ELAPSED
  case $status in
    trains | generates) n_trains=$((n_trains + 1)) ;;
    refused)
      n_refused=$((n_refused + 1))
      if [[ -n $flags ]]; then
        for f in $flags; do BLOCKS[$f]=$((${BLOCKS[$f]:-0} + 1)); done
      else
        f="(no flag) ${msg:0:110}"; BLOCKS[$f]=$((${BLOCKS[$f]:-0} + 1))
      fi ;;
    crashed) n_crashed=$((n_crashed + 1)) ;;
  esac
  printf '%-8s %-78s np=%d %-17s %3ds %s\n' "$status" "$NAME" "$np" "($layout)" "$secs" "$msg"
  # PEEL: drop the config flag the refusal names, run again
  local peeled=() after=
  if [[ $status == refused ]] && ((PEEL > 0)); then
    local round f drop
    for ((round = 1; round <= PEEL; round++)); do
      drop=
      for f in $FLAGS; do
        [[ $OURS == *" $f "* ]] && continue
        has "$f" && { drop=$f; break; }
      done
      [[ -z $drop ]] && { after="stopped: $MSG"; break; }
      peeled+=("$drop")
      local i nk=() nv=()
      for i in "${!KEYS[@]}"; do
        [[ ${KEYS[i]} == "$drop" ]] || { nk+=("${KEYS[i]}"); nv+=("${VALS[i]}"); }
      done
      KEYS=("${nk[@]}"); VALS=("${nv[@]}")
      run_one "$round"
      after="$STATUS${MSG:+: $MSG}"
      [[ $STATUS != refused ]] && break
    done
    for f in "${peeled[@]}"; do
      PEEL_BLOCKS[$f]=$((${PEEL_BLOCKS[$f]:-0} + 1))
      PEEL_NAMES[$f]+=" ${NAME#*/}"
    done
    [[ $after == trains* ]] && peel_trains=$((peel_trains + 1))
    printf '         %-78s without %s: %s\n' "" "${peeled[*]:-nothing}" "$after"
  fi
  printf '%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n' "$NAME" "$status" "$np" "$layout" "$secs" \
    "$flags" "$msg" "${peeled[*]:-}" "$after" >>"$RESULTS"
  NAME=
}

NAME=
while IFS=$'\t' read -r kind a b c; do
  case $kind in
    C)
      finish_config
      NAME=$a KEYS=() VALS=() MODEL=${a%%/*} DISTILL=
      [[ $MODEL == bert ]] || MODEL=gpt  # gpt, moe, mixtral: decoders
      ;;
    D) DISTILL=$a ;;
    T) MODE=$b; GPN=$c ;;
    A) KEYS+=("$a"); VALS+=("$b") ;;
  esac
done < <(read_configs)
finish_config

echo
if [[ $KIND == inference ]]; then
  echo "inference configs: $total (skipped $skipped pretraining/RL configs)"
  echo "generates: $n_trains"
else
  echo "pretraining configs: $total (skipped $skipped inference/RL configs)"
  echo "trains:  $n_trains"
fi
echo "refused: $n_refused"
echo "crashed: $n_crashed"
if ((${#BLOCKS[@]})); then
  echo
  echo "what the refusals are about (configs blocked; * = a flag whose value is this script's):"
  for f in "${!BLOCKS[@]}"; do
    mark=; [[ $OURS == *" $f "* ]] && mark='*'
    printf '%5d  %s%s\n' "${BLOCKS[$f]}" "$f" "$mark"
  done | sort -k1,1nr -k2
fi
if ((PEEL > 0 && ${#PEEL_BLOCKS[@]})); then
  echo
  echo "PEEL=$PEEL: flags dropped from refused configs (configs they block, first or later);"
  echo "refused configs that train once those are dropped: $peel_trains"
  for f in "${!PEEL_BLOCKS[@]}"; do printf '%5d  %s\n' "${PEEL_BLOCKS[$f]}" "$f"; done |
    sort -k1,1nr -k2
fi
echo
echo "per-config results: $RESULTS (commands and logs: $WORK/runs/)"
