#!/usr/bin/env bash
# `megatron eval` end to end against the PyTorch port of Megatron's zero-shot evaluation
# (tools/reference/zeroshot_reference.py, whose outputs are committed in tests/data/zero_shot):
# a tiny GPT-2 imported from HF, a WikiText-format file with the corpus's quirks and a LAMBADA
# JSONL file. WikiText loss/ppl/adjusted ppl/token ratio within 1e-5 relative and the result
# line character for character; LAMBADA's number correct exactly (non-zero, not all); the same
# at TP 1, 2, 4 and at DP 2 (the LAMBADA runs write --metrics-file into a directory eval
# creates); the documented errors.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none)
DATA="$MEGATRON_SOURCE_DIR/tests/data/zero_shot"
fail() { echo "FAIL: $*"; exit 1; }

"$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$DATA/hf" --save "$WORK/ckpt" \
  > "$WORK/convert.log" 2>&1 || { cat "$WORK/convert.log"; fail "convert"; }
MODEL=(--load "$WORK/ckpt" --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-vocab.json"
       --merge-file "$DATA/gpt2-merges.txt")

# check KIND KEY LOG METRICS: the result lines in LOG and the last record of METRICS against
# expected.json[KIND][KEY].
check() {
  /usr/bin/python3 - "$DATA/expected.json" "$@" <<'PY'
import json, sys
expected_file, kind, key, log, metrics = sys.argv[1:]
want = json.load(open(expected_file))[kind][key]
got = json.loads(open(metrics).read().splitlines()[-1])
text = open(log).read()
assert want["lines"] in text, f"result lines differ:\nwant\n{want['lines']}\ngot\n{text}"
if kind == "wikitext":
    for k in ("num_original_tokens", "num_tokenized_tokens", "num_windows"):
        assert got[k] == want[k], (k, got[k], want[k])
    for k in ("loss_sum", "avg_loss", "ppl", "adjusted_ppl", "token_ratio"):
        assert abs(got[k] - want[k]) <= 1e-5 * abs(want[k]), (k, got[k], want[k])
else:
    for k in ("num_correct", "total_examples"):
        assert got[k] == want[k], (k, got[k], want[k])
PY
}

# layouts: processes x tensor-parallel size (processes / TP replicas split the samples)
for layout in "1 1" "2 2" "4 4" "2 1" "4 2"; do
  read -r np tp <<< "$layout"
  for ov in 16 48 5; do
    echo "== WIKITEXT103, $np processes, TP $tp, overlapping-eval $ov"
    "${MPIRUN[@]}" -np "$np" "$MEGATRON_BINARY" eval --task WIKITEXT103 "${MODEL[@]}" --seq-length 48 \
      --tensor-model-parallel-size "$tp" --valid-data "$DATA/wiki.test.tokens" \
      --overlapping-eval "$ov" --micro-batch-size 3 --metrics-file "$WORK/m.jsonl" \
      > "$WORK/log" 2>&1 || { cat "$WORK/log"; fail "eval WIKITEXT103"; }
    check wikitext "$ov" "$WORK/log" "$WORK/m.jsonl" || { cat "$WORK/log"; fail "WIKITEXT103"; }
  done
  for mode in plain strict; do
    echo "== LAMBADA ($mode), $np processes, TP $tp"
    flag=()
    [[ $mode == strict ]] && flag=(--strict-lambada)
    "${MPIRUN[@]}" -np "$np" "$MEGATRON_BINARY" eval --task LAMBADA "${MODEL[@]}" --seq-length 48 "${flag[@]}" \
      --tensor-model-parallel-size "$tp" --valid-data "$DATA/lambada_test.jsonl" \
      --micro-batch-size 2 --metrics-file "$WORK/metrics/m.jsonl" \
      > "$WORK/log" 2>&1 || { cat "$WORK/log"; fail "eval LAMBADA"; }
    check lambada "$mode" "$WORK/log" "$WORK/metrics/m.jsonl" || { cat "$WORK/log"; fail "LAMBADA"; }
  done
done

# expect_error MESSAGE FLAGS...: eval must fail with MESSAGE.
expect_error() {
  local message=$1
  shift
  if "$MEGATRON_BINARY" eval "${MODEL[@]}" "$@" > "$WORK/err.log" 2>&1; then
    fail "no error for: $*"
  fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
echo "== errors"
cp "$DATA/wiki.test.tokens" "$WORK/test.tokens"
expect_error "contains none of 'wiki'" --task WIKITEXT103 --valid-data "$WORK/test.tokens"
expect_error "cannot be read" --task WIKITEXT103 --valid-data "$WORK/missing-wiki.tokens"
printf '{"text": "a b"}\n{"text": 3}\n' > "$WORK/lambada.jsonl"
expect_error "line 2: expected an object with a string \"text\" field" --task LAMBADA \
  --valid-data "$WORK/lambada.jsonl"
expect_error "--seq-length 65 must be in [1, 64]" --task LAMBADA \
  --valid-data "$DATA/lambada_test.jsonl" --seq-length 65
expect_error "must divide the number of processes" --task LAMBADA \
  --valid-data "$DATA/lambada_test.jsonl" --tensor-model-parallel-size 2
# Megatron's zero-shot scripts pass the model shape and --no-load-optim --no-load-rng: checked
# against the checkpoint (2 layers, hidden 32, 4 heads, 64 positions), otherwise no effect.
SHAPE=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 64
       --no-load-optim --no-load-rng)
"$MEGATRON_BINARY" eval --task LAMBADA "${MODEL[@]}" "${SHAPE[@]}" \
  --valid-data "$DATA/lambada_test.jsonl" > "$WORK/shape.log" 2>&1 ||
  { cat "$WORK/shape.log"; fail "eval with Megatron's shape flags"; }
expect_error "--hidden-size 64 differs from the checkpoint's 32" --task LAMBADA \
  --valid-data "$DATA/lambada_test.jsonl" --hidden-size 64
echo "PASS"
