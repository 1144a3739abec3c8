#!/usr/bin/env bash
# The command line's help for people (issue 40):
# - `megatron --version`: version, the git commit of this checkout, the build (type, -march,
#   compiler, CUDA backend, optional libraries), this CPU's kernel-relevant features and the GEMM
#   kernel chosen at run time for f32 and bf16; exit 0;
# - a misspelled flag is refused with argparse's "unrecognized arguments" and "did you mean
#   --hidden-size?", in every subcommand's parser (the pretrain commands, whose candidates
#   include Megatron-LM's flags; plot; bench, whose flags are in option groups; comm-check);
# - a short start-up: Megatron's argument block ("------------------------ arguments ---...",
#   one line per argument) is printed only with --log-args.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

echo "== --version"
"$MEGATRON_BINARY" --version > "$WORK/version"
cat "$WORK/version"
grep -Eq '^megatron [0-9]+\.[0-9]+\.[0-9]+ \(megatron-cpp\)$' "$WORK/version" || fail "version line"
# The commit the binary was built from: one of this checkout's (HEAD, or before it when the
# binary was built before the last commit).
if git -C "$MEGATRON_SOURCE_DIR" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(sed -n 's/^git commit: \([0-9a-f]\{12\}\)\( with local changes\)\?$/\1/p' "$WORK/version")
  [[ -n $commit ]] && git -C "$MEGATRON_SOURCE_DIR" merge-base --is-ancestor "$commit" HEAD \
    || fail "the git commit line does not name a commit of this checkout"
fi
grep -Eq '^build: [A-Za-z]+, -march=[^,]+, (GCC|clang) [0-9]' "$WORK/version" || fail "build line"
grep -Eq '^CUDA backend: (built|not built)' "$WORK/version" || fail "CUDA line"
grep -q '^optional libraries built in: ' "$WORK/version" || fail "libraries line"
grep -q '^CPU: .*(' "$WORK/version" || fail "CPU line"
if grep -qw avx2 /proc/cpuinfo; then grep -q '^CPU: .*avx2' "$WORK/version" || fail "avx2 flag"; fi
grep -Eq '^GEMM kernel \(1024\^3\): f32 .+; bf16 .+' "$WORK/version" || fail "GEMM line"

echo "== did you mean"
# expect_suggestion WORD FLAG -- COMMAND...: COMMAND fails, naming WORD and suggesting FLAG.
expect_suggestion() {
  local word=$1 flag=$2
  shift 3
  local rc=0
  "$MEGATRON_BINARY" "$@" > "$WORK/out" 2>&1 || rc=$?
  [[ $rc != 0 ]] || fail "exit 0 for: $*"
  grep -qF -- "error: unrecognized arguments: $word" "$WORK/out" || { cat "$WORK/out"; fail "$*"; }
  grep -qxF -- "$word: did you mean $flag?" "$WORK/out" || { cat "$WORK/out"; fail "no suggestion: $*"; }
  echo "ok: $word -> $flag"
}
GPT=(--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1
     --mock-data --vocab-size 64 --train-iters 1 --lr 1e-3)
expect_suggestion --hiden-size --hidden-size -- pretrain-gpt "${GPT[@]}" --hiden-size 32
expect_suggestion --num_attention_heads --num-attention-heads -- \
  pretrain-gpt "${GPT[@]}" --num_attention_heads 2
# A Megatron-LM flag that pretrain-gpt does not implement is still a candidate.
expect_suggestion --no-persist-layer-norms --no-persist-layer-norm -- \
  pretrain-gpt "${GPT[@]}" --no-persist-layer-norms
expect_suggestion --output-fle --output-file -- generate --load "$WORK/none" --output-fle x
expect_suggestion --tittle --title -- plot "$WORK/metrics.jsonl" --tittle x
expect_suggestion --hidden_size --hidden-size -- bench --hidden_size 64
expect_suggestion --bandwith-mb --bandwidth-mb -- comm-check --bandwith-mb 1
# Far from every flag: refused without a suggestion.
rc=0
"$MEGATRON_BINARY" pretrain-gpt "${GPT[@]}" --frobnicate > "$WORK/out" 2>&1 || rc=$?
[[ $rc != 0 ]] && grep -q "unrecognized arguments: --frobnicate" "$WORK/out" \
  && ! grep -q "did you mean" "$WORK/out" || { cat "$WORK/out"; fail "--frobnicate"; }

echo "== the argument block only with --log-args"
"$MEGATRON_BINARY" pretrain-gpt "${GPT[@]}" --eval-iters 0 > "$WORK/quiet.log" 2>&1 \
  || { cat "$WORK/quiet.log"; fail "run without --log-args"; }
! grep -q -- "-- arguments --" "$WORK/quiet.log" || fail "argument block without --log-args"
grep -q " iteration        1/       1 |" "$WORK/quiet.log" || fail "no iteration line"
"$MEGATRON_BINARY" pretrain-gpt "${GPT[@]}" --eval-iters 0 --log-args > "$WORK/args.log" 2>&1 \
  || { cat "$WORK/args.log"; fail "run with --log-args"; }
grep -qx -- "------------------------ arguments ------------------------" "$WORK/args.log" \
  || fail "no argument block with --log-args"
grep -Eq -- "^  hidden_size \.+ 32$" "$WORK/args.log" || fail "hidden_size line"
grep -Eq -- "^  log_args \.+ True$" "$WORK/args.log" || fail "log_args line"
echo "quiet start-up: $(wc -l < "$WORK/quiet.log") lines; with --log-args: $(wc -l < "$WORK/args.log")"
echo "PASS"
