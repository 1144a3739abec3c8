#!/usr/bin/env bash
# Messages for people (docs/reliability.md): each input error below exits non-zero with one
# "error: ..." line that reads as a sentence — no internal "(check `...` failed)" text — and
# under mpirun only one rank prints it. Also: an empty preprocess input is refused (nothing
# written) and the stale temporary files of a killed preprocess are removed by the next one;
# --fp16 with a loss scale that overflows on every step warns instead of skipping silently.
set -uo pipefail
: "${MEGATRON_BINARY:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --mock-data --vocab-size 128
      --log-interval 1 --eval-interval 100 --eval-iters 0)
failures=0

# expect NP "EXACT STDERR LINE" -- FLAGS...: pretrain-gpt on NP processes.
expect() {
  local np=$1 line=$2
  shift 3
  local out rc=0
  if [[ $np == 1 ]]; then
    out=$(timeout 60 "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" "$@" 2>&1 >/dev/null) || rc=$?
  else
    out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
          "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" "$@" 2>&1 >/dev/null) || rc=$?
  fi
  local count
  count=$(grep -cxF -- "$line" <<< "$out")
  if [[ $rc == 0 || $rc == 124 ]]; then
    echo "FAIL (exit $rc) for: $*"; failures=$((failures + 1))
  elif [[ $count != 1 ]]; then
    echo "FAIL: expected the line '$line' once (found $count) for: $*"
    echo "$out" | head -8
    failures=$((failures + 1))
  elif grep -q 'check `' <<< "$out"; then
    echo "FAIL: internal check text for: $*"; failures=$((failures + 1))
  else
    echo "ok: $line"
  fi
}

expect 1 "error: --lr must be >= 0, got -0.001" -- --train-iters 2 --lr -1e-3
expect 1 "--lr: 'nan' is not a finite number" -- --train-iters 2 --lr nan
expect 1 "--lr: 'inf' is not a finite number" -- --train-iters 2 --lr inf
expect 1 "--seed: '-1' is negative, expected a non-negative integer" -- --train-iters 2 --lr 1e-3 --seed -1
expect 1 "--train-iters: '99999999999999999999' is not an integer in [-9223372036854775808, 9223372036854775807]" \
  -- --train-iters 99999999999999999999 --lr 1e-3
expect 1 "error: --train-iters 9223372036854775807 is too large: its samples (x --global-batch-size 4) and tokens do not fit in 64 bits" \
  -- --train-iters 9223372036854775807 --lr 1e-3
expect 1 "error: --adam-eps must be > 0, got 0 (Adam divides by sqrt(v) + eps)" -- --train-iters 2 --lr 1e-3 --adam-eps 0
expect 1 "error: --layernorm-epsilon must be > 0, got -1 (LayerNorm divides by sqrt(variance + eps))" \
  -- --train-iters 2 --lr 1e-3 --layernorm-epsilon -1
expect 1 "error: --num-attention-heads 4 must be divisible by --tensor-model-parallel-size 3" \
  -- --train-iters 2 --lr 1e-3 --tensor-model-parallel-size 3
# 0 is not Megatron's default (its None has no spelling): refused, saying what omitting gives.
expect 1 "--global-batch-size: '0' is not positive; leave the flag out for --micro-batch-size x the data-parallel size" \
  -- --train-iters 2 --lr 1e-3 --global-batch-size 0
expect 1 "--ffn-hidden-size: '0' is not positive; leave the flag out for 4 x --hidden-size" \
  -- --train-iters 2 --lr 1e-3 --ffn-hidden-size 0
expect 1 "--kv-channels: '0' is not positive; leave the flag out for --hidden-size / --num-attention-heads" \
  -- --train-iters 2 --lr 1e-3 --kv-channels 0
expect 1 "error: --mock-data --vocab-size 1 leaves nothing to learn: with one token every prediction is right and the loss is 0; give --vocab-size 2 or more" \
  -- --train-iters 2 --lr 1e-3 --vocab-size 1
# Under mpirun every rank hits the error; one prints it.
expect 2 "error: --lr must be >= 0, got -0.001" -- --train-iters 2 --lr -1e-3
expect 2 "--lr: 'nan' is not a finite number" -- --train-iters 2 --lr nan
expect 2 "error: --load '$WORK/none' does not exist; --finetune starts from the weights of a checkpoint and needs one" \
  -- --train-iters 2 --lr 1e-3 --load "$WORK/none" --finetune

# --fp16 with a loss scale that overflows every step: a warning, not silence.
out=$(timeout 120 "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" --train-iters 12 --lr 1e-3 --fp16 \
      --loss-scale 1e30 2>&1)
if grep -q "WARNING: the last 10 iterations were all skipped: the gradients overflow at loss scale 1e+30 (--loss-scale)" <<< "$out"; then
  echo "ok: --loss-scale 1e30 warns"
else
  echo "FAIL: no warning for a loss scale that skips every step"; echo "$out" | tail -3
  failures=$((failures + 1))
fi

# preprocess: an empty input is refused and writes nothing.
: > "$WORK/empty.jsonl"
PRE=(preprocess --tokenizer-type NullTokenizer --vocab-size 100)
out=$(timeout 60 "$MEGATRON_BINARY" "${PRE[@]}" --input "$WORK/empty.jsonl" --output-prefix "$WORK/e" 2>&1)
rc=$?
if [[ $rc != 0 ]] && grep -qxF "error: --input '$WORK/empty.jsonl' holds no documents (0 lines); expected one JSON object per line. Nothing was written" <<< "$out" &&
   [[ -z $(ls "$WORK" | grep '^e_') ]]; then
  echo "ok: empty preprocess input refused"
else
  echo "FAIL: empty preprocess input (exit $rc): $out"; ls "$WORK"; failures=$((failures + 1))
fi

# preprocess: a killed run's temporary files are removed by the next run of that prefix.
printf '{"text": "1 2 3"}\n{"text": "4 5"}\n' > "$WORK/in.jsonl"
( exit 0 ) &
dead=$!
wait "$dead"
touch "$WORK/p_text_document.bin.tmp.$dead.0" "$WORK/p_text_document.idx.tmp.$dead.1"
out=$(timeout 60 "$MEGATRON_BINARY" "${PRE[@]}" --input "$WORK/in.jsonl" --output-prefix "$WORK/p" 2>&1)
rc=$?
if [[ $rc == 0 ]] && [[ -z $(ls "$WORK" | grep 'p_text_document.*\.tmp\.') ]] &&
   grep -q "Removed 2 stale temporary file(s) of an interrupted preprocess." <<< "$out"; then
  echo "ok: stale preprocess temporaries removed"
else
  echo "FAIL: stale preprocess temporaries (exit $rc): $out"; ls "$WORK"; failures=$((failures + 1))
fi

# Data tokenized with a larger vocabulary than the model's: a sentence naming the token and the
# fix, no internal check text.
printf '{"text": "1 2 999 3 4 5 6 7 8 9 10 11"}\n%.0s' $(seq 1 30) > "$WORK/big.jsonl"
timeout 60 "$MEGATRON_BINARY" preprocess --tokenizer-type NullTokenizer --vocab-size 1000 \
  --input "$WORK/big.jsonl" --output-prefix "$WORK/big" > /dev/null 2>&1
out=$(timeout 60 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
      --seq-length 8 --max-position-embeddings 8 --micro-batch-size 2 --global-batch-size 4 \
      --tokenizer-type NullTokenizer --vocab-size 128 --data-path "$WORK/big_text_document" \
      --train-iters 2 --lr 1e-3 --eval-iters 0 2>&1 >/dev/null)
rc=$?
if [[ $rc != 0 ]] && grep -q "^error: embedding.word_embeddings: token id 999 at position [0-9]* is outside the vocabulary \[0, 128): the data was tokenized with a larger vocabulary" <<< "$out" &&
   ! grep -q 'check `' <<< "$out"; then
  echo "ok: a token id outside the vocabulary"
else
  echo "FAIL: token id outside the vocabulary (exit $rc): $out" | tail -3; failures=$((failures + 1))
fi

# generate on a checkpoint whose weights hold a NaN (its checksum removed, as a file written by
# another tool would have none): refused by name, not blank text with exit 0.
timeout 120 "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" --max-position-embeddings 32 \
  --train-iters 1 --lr 1e-3 --save "$WORK/nan" > /dev/null 2>&1
node -e '
  const fs = require("fs"), path = process.argv[1];
  const buf = fs.readFileSync(path), n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const entry = header["final_layernorm.weight"];
  const placement = JSON.parse(header.__metadata__["final_layernorm.weight"]);
  delete placement.crc32c;
  header.__metadata__["final_layernorm.weight"] = JSON.stringify(placement);
  buf.writeUInt32LE(0x7fc00000, 8 + n + entry.data_offsets[0]);  // a NaN
  buf.write(JSON.stringify(header).padEnd(n, " "), 8);
  fs.writeFileSync(path, buf);' "$WORK/nan/iter_0000001/mp_rank_00/model.safetensors"
out=$(timeout 60 "$MEGATRON_BINARY" generate --load "$WORK/nan" --tokenizer-type NullTokenizer \
      --vocab-size 128 --prompt "1 2 3" \
      --tokens-to-generate 4 2>&1 >/dev/null)
rc=$?
if [[ $rc != 0 ]] && grep -qF "error: the checkpoint of iteration 1 in $WORK/nan holds inf or nan weights (final_layernorm.weight): it cannot generate text; load an earlier checkpoint" <<< "$out"; then
  echo "ok: generate refuses NaN weights"
else
  echo "FAIL: generate on NaN weights (exit $rc): $out" | tail -3; failures=$((failures + 1))
fi

# A full disk under --tensorboard-dir (a one-page tmpfs): the error names the reason.
if mkdir -p "$WORK/tb_disk" && mount -t tmpfs -o size=4k tmpfs "$WORK/tb_disk" 2>/dev/null; then
  out=$(timeout 120 "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" --train-iters 200 --lr 1e-3 \
        --tensorboard-dir "$WORK/tb_disk/tb" 2>&1 >/dev/null)
  rc=$?
  umount "$WORK/tb_disk"
  if [[ $rc != 0 ]] && grep -q "^error: writing TensorBoard event file '.*' failed: No space left on device$" <<< "$out"; then
    echo "ok: a full disk under --tensorboard-dir names the reason"
  else
    echo "FAIL: TensorBoard on a full disk (exit $rc): $out" | tail -3; failures=$((failures + 1))
  fi
else
  echo "skipped: cannot mount a tmpfs here (not root?): TensorBoard on a full disk not tested"
fi

if [[ $failures -ne 0 ]]; then echo "error_messages: $failures failure(s)"; exit 1; fi
echo "error_messages: OK"
