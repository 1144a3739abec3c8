#!/usr/bin/env bash
# Throughput of `megatron serve` under 32 concurrent clients (tests/e2e/serve_batching_client.js
# with the official `openai` npm client, which also checks that every concurrent answer equals
# the answer alone), side by side in one run: the same model and requests served with continuous
# batching (--max-num-seqs 32) and one sequence at a time (--max-num-seqs 1), and the ratio of
# their "all at once" tokens/s. The model: 6 layers, hidden 512, 8 heads, 256 positions,
# vocabulary 8192 (NullTokenizer: prompts are token ids), random weights (one training iteration
# on mock data). Requests: half greedy, half sampled with one seed, prompts of 1 to 5 tokens,
# max_tokens 2..12 × SCALE, a few with n = 2 or a stop string.
#   bench/serve_concurrency.sh [path/to/megatron]     (SCALE=4, OMP_NUM_THREADS=2 by default)
# Needs node and the npm client in $MEGATRON_DATA_DIR/npm-openai-4.104.0 (tests/e2e/serve_openai.sh
# installs it).
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
CLIENT_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/npm-openai-4.104.0"
[[ -f $CLIENT_DIR/node_modules/openai/package.json ]] || { echo "no npm openai client in $CLIENT_DIR"; exit 1; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), OMP_NUM_THREADS=$OMP_NUM_THREADS, SCALE=$SCALE"
declare -A RATE
for seqs in 32 1; do
  rm -f "$WORK/port"
  timeout 1800 "$BIN" serve --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 8192 \
    --port 0 --port-file "$WORK/port" --max-requests 104 --max-num-seqs $seqs > "$WORK/serve$seqs.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 120); do [[ -s $WORK/port ]] && break; sleep 0.5; done
  [[ -s $WORK/port ]] || { cat "$WORK/serve$seqs.log"; exit 1; }
  echo "== --max-num-seqs $seqs"
  node "$ROOT/tests/e2e/serve_batching_client.js" "$CLIENT_DIR/node_modules" \
    "http://127.0.0.1:$(cat "$WORK/port")/v1" ckpt 32 "$SCALE" | tee "$WORK/client$seqs.log"
  wait "$PID"
  PID=""
  RATE[$seqs]=$(grep "^all at once" "$WORK/client$seqs.log" | sed -E 's/.*\(([0-9.]+) tokens\/s\)/\1/')
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v c="${RATE[32]}" -v o="${RATE[1]}" 'BEGIN { printf "32 concurrent clients: continuous batching %.1f tokens/s, one at a time %.1f tokens/s: %.2fx\n", c, o, c / o }'
