#!/usr/bin/env bash
# KV-cache generation speed of megatron-cpp against eager PyTorch in the same run: GPT-2 124M
# (random weights), prompt 128, 32 greedy decode steps, batch 1 and 8, f32 and bf16, one
# process with OMP_NUM_THREADS threads each (default: all cores). Prints one table; the raw
# numbers go to $OUT/{megatron,pytorch}.jsonl. bench/RESULTS.md keeps the measured table.
#   [TOKENS=32] [REPEATS=3] bench/generate_vs_pytorch.sh [more `megatron bench --mode generate` flags]
# TOKENS (decode steps) and REPEATS (measurements, best kept) apply to both sides.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEGATRON="${MEGATRON_BINARY:-${MEGATRON_BUILD_DIR:-$ROOT/build}/megatron}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
TOKENS="${TOKENS:-32}"
REPEATS="${REPEATS:-3}"
"$MEGATRON" bench --mode generate --tokens-to-generate "$TOKENS" --repeats "$REPEATS" \
  --json-file "$OUT/megatron.jsonl" "$@"
/usr/bin/python3 "$ROOT/tools/reference/gpt2_generate_bench.py" --threads "$OMP_NUM_THREADS" \
  --tokens-to-generate "$TOKENS" --repeats "$REPEATS" --json-file "$OUT/pytorch.jsonl" > /dev/null
node -e '
  const fs = require("fs");
  const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
  const ours = read(process.argv[1]), torch = read(process.argv[2]);
  console.log("dtype | batch | prefill tok/s: ours / PyTorch | decode ms/token: ours / PyTorch | decode speed-up");
  for (const o of ours) {
    const t = torch.find((r) => r.dtype === o.dtype && r.batch === o.batch);
    if (!t) continue;
    console.log(`${o.dtype.padEnd(5)} | ${String(o.batch).padStart(5)} | ` +
      `${o.prefill_tokens_per_s.toFixed(0)} / ${t.prefill_tokens_per_s.toFixed(0)} | ` +
      `${o.decode_ms_per_token.toFixed(1)} / ${t.decode_ms_per_token.toFixed(1)} | ` +
      `${(t.decode_ms_per_token / o.decode_ms_per_token).toFixed(2)}x`);
  }' "$OUT/megatron.jsonl" "$OUT/pytorch.jsonl"
echo "raw results: $OUT"
