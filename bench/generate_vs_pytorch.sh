#!/usr/bin/env bash
# KV-cache generation speed of megatron-cpp against eager PyTorch and llama.cpp in the same run:
# GPT-2 124M (random weights), prompt 128, 32 greedy decode steps, batch 1 and 8, f32 and bf16,
# one process with OMP_NUM_THREADS threads each (default: all cores). llama.cpp is npm's
# node-llama-cpp 3.21.1 (prebuilt CPU binaries, scripts/fetch_llama_cpp.sh) on a GGUF export
# (`megatron convert --to gguf`, f32 and bf16) of a GPT-2 124M checkpoint made here with the
# tanh GeLU llama.cpp's gpt2 computes (its weights are random too: speed does not depend on
# them); LLAMA_CPP=0, or no npm, leaves it out. Prints one table; the raw numbers go to
# $OUT/{megatron,pytorch,llama_cpp}.jsonl. bench/RESULTS.md keeps the measured table.
#   [TOKENS=32] [REPEATS=3] [LLAMA_CPP=1] bench/generate_vs_pytorch.sh [more `megatron bench --mode generate` flags]
# TOKENS (decode steps) and REPEATS (measurements, best kept) apply to every side.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEGATRON="${MEGATRON_BINARY:-${MEGATRON_BUILD_DIR:-$ROOT/build}/megatron}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
TOKENS="${TOKENS:-32}"
REPEATS="${REPEATS:-3}"
LLAMA_CPP="${LLAMA_CPP:-1}"
"$MEGATRON" bench --mode generate --tokens-to-generate "$TOKENS" --repeats "$REPEATS" \
  --json-file "$OUT/megatron.jsonl" "$@"
/usr/bin/python3 "$ROOT/tools/reference/gpt2_generate_bench.py" --threads "$OMP_NUM_THREADS" \
  --tokens-to-generate "$TOKENS" --repeats "$REPEATS" --json-file "$OUT/pytorch.jsonl" > /dev/null
: > "$OUT/llama_cpp.jsonl"
LLAMA_CPP_DIR="${MEGATRON_LLAMA_CPP_DIR:-${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/node-llama-cpp-3.21.1}"
if ((LLAMA_CPP)) && MEGATRON_LLAMA_CPP_DIR="$LLAMA_CPP_DIR" \
  bash "$ROOT/scripts/fetch_llama_cpp.sh" > "$OUT/fetch_llama_cpp.log" 2>&1; then
  "$MEGATRON" pretrain-gpt --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
    --seq-length 128 --max-position-embeddings 1024 --mock-data --vocab-size 50257 \
    --openai-gelu --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 0 --min-lr 0 \
    --save "$OUT/gpt2" --save-interval 1 --no-save-optim --eval-iters 0 > "$OUT/gpt2.log" 2>&1
  for dtype in f32 bf16; do
    "$MEGATRON" convert --model-type gpt --to gguf --gguf-dtype "$dtype" --load "$OUT/gpt2" \
      --save "$OUT/gpt2.$dtype.gguf" > "$OUT/convert.log" 2>&1
    node "$ROOT/tools/reference/llama_cpp_generate_bench.mjs" "$LLAMA_CPP_DIR" \
      "$OUT/gpt2.$dtype.gguf" "$dtype" --threads "$OMP_NUM_THREADS" --tokens "$TOKENS" \
      --repeats "$REPEATS" --json-file "$OUT/llama_cpp.jsonl" > /dev/null
  done
fi
node -e '
  const fs = require("fs");
  const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").filter((l) => l).map(JSON.parse);
  const ours = read(process.argv[1]), torch = read(process.argv[2]), lcpp = read(process.argv[3]);
  const cell = (r, f, digits) => (r ? r[f].toFixed(digits) : "-");
  console.log("dtype | batch | prefill tok/s: ours / PyTorch / llama.cpp | decode ms/token: ours / " +
    "PyTorch / llama.cpp | decode speed-up vs PyTorch, vs llama.cpp");
  for (const o of ours) {
    const find = (rs) => rs.find((r) => r.dtype === o.dtype && r.batch === o.batch);
    const t = find(torch), l = find(lcpp);
    const ratio = (r) => (r ? (r.decode_ms_per_token / o.decode_ms_per_token).toFixed(2) + "x" : "-");
    console.log(`${o.dtype.padEnd(5)} | ${String(o.batch).padStart(5)} | ` +
      `${o.prefill_tokens_per_s.toFixed(0)} / ${cell(t, "prefill_tokens_per_s", 0)} / ${cell(l, "prefill_tokens_per_s", 0)} | ` +
      `${o.decode_ms_per_token.toFixed(1)} / ${cell(t, "decode_ms_per_token", 1)} / ${cell(l, "decode_ms_per_token", 1)} | ` +
      `${ratio(t)}, ${ratio(l)}`);
  }' "$OUT/megatron.jsonl" "$OUT/pytorch.jsonl" "$OUT/llama_cpp.jsonl"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw results: $OUT"
