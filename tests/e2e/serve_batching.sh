#!/usr/bin/env bash
# `megatron serve` batches concurrent requests continuously: 32 clients of the official `openai`
# npm client (serve_batching_client.js; greedy, and sampled with a seed; different prompt
# lengths, lengths, stop strings, n) sent one at a time, then all at once, then all of them
# while 4 long requests are mid-decode: each gets exactly the answer the same request gets alone,
# at TP 1 and TP 2, and the log shows rows joining the running batch at token boundaries. The
# client is installed as serve_openai.sh installs it (skipped without npm or its registry).
# Loopback only; bounded: servers run under `timeout`.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
# shellcheck source=serve_test_setup.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/serve_test_setup.bash"
require_tools node
CLIENT_DIR="$(openai_npm_client)"

# 2 layers, hidden 128, 1024 positions, random weights (one training iteration on mock data):
# slow enough that the long requests are still decoding when the others arrive.
timeout 300 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 128 --num-attention-heads 4 \
  --seq-length 32 --max-position-embeddings 1024 --mock-data --vocab-size 128 --micro-batch-size 1 \
  --global-batch-size 1 --lr 1e-4 --train-iters 1 --eval-iters 0 --save "$WORK/ckpt" \
  --save-interval 1 > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fail "train"; }
for np in 1 2; do
  echo "== 32 concurrent clients at TP $np"
  rm -f "$WORK/port"
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np "$MEGATRON_BINARY" serve \
    --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 128 --port 0 --port-file "$WORK/port" \
    --max-requests 104 > "$WORK/serve$np.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve$np.log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$WORK/serve$np.log"; fail "server did not start"; }
  timeout 300 node "$MEGATRON_SOURCE_DIR/tests/e2e/serve_batching_client.js" "$CLIENT_DIR/node_modules" \
    "http://127.0.0.1:$(cat "$WORK/port")/v1" ckpt 32 1 600 | tee "$WORK/client$np.log" || { tail -n 20 "$WORK/serve$np.log"; fail "concurrent answers at TP $np"; }
  wait "$PID" || { tail -n 20 "$WORK/serve$np.log"; fail "server exit status at TP $np"; }
  grep -Eq "staggered: [1-9] of the 4 long streams were mid-decode" "$WORK/client$np.log" ||
    fail "no request was mid-decode when the others arrived at TP $np"
  grep -q "stopping after 104 request(s)" "$WORK/serve$np.log" || fail "not 104 requests at TP $np"
  grep -q "join the running batch of" "$WORK/serve$np.log" || fail "no row joined a running batch at TP $np"
  grep "join the running batch of" "$WORK/serve$np.log" | head -n 3
done
echo "PASS"
