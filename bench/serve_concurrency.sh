#!/usr/bin/env bash
# Throughput of `megatron serve` with 32 concurrent clients against the same 32 requests one at a
# time (tests/e2e/serve_batching_client.js, which also checks that every concurrent answer
# equals the answer alone). The model: 6 layers, hidden 512, 8 heads, 256 positions, vocabulary
# 8192 (NullTokenizer: prompts are token ids), random weights (one training iteration on mock
# data). Requests: half greedy, half sampled with one seed, prompts of 1 to 5 tokens,
# max_tokens 2..12 × SCALE, a few with n = 2 or a stop string.
#   bench/serve_concurrency.sh [path/to/megatron]     (SCALE=4, OMP_NUM_THREADS=2 by default)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$ROOT/build/megatron}"
SCALE="${SCALE:-4}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
WORK="$(mktemp -d)"
PID=""
cleanup() {
  [[ -n $PID ]] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$BIN" pretrain-gpt --num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 256 \
  --max-position-embeddings 256 --mock-data --vocab-size 8192 --micro-batch-size 1 \
  --global-batch-size 1 --lr 1e-4 --train-iters 1 --eval-iters 0 --save "$WORK/ckpt" \
  --save-interval 1 > "$WORK/train.log" 2>&1 || { tail -n 20 "$WORK/train.log"; exit 1; }
timeout 1800 "$BIN" serve --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 8192 \
  --port 0 --port-file "$WORK/port" --max-requests 64 > "$WORK/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 120); do [[ -s $WORK/port ]] && break; sleep 0.5; done
[[ -s $WORK/port ]] || { cat "$WORK/serve.log"; exit 1; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), OMP_NUM_THREADS=$OMP_NUM_THREADS, SCALE=$SCALE"
node "$ROOT/tests/e2e/serve_batching_client.js" "http://127.0.0.1:$(cat "$WORK/port")/v1" ckpt 32 "$SCALE"
wait "$PID"
PID=""
grep "requests run as one batch" "$WORK/serve.log"
