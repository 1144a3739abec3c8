#!/usr/bin/env bash
# A client that leaves cancels its generation in `megatron serve`: a 2000-token request whose
# client times out after 0.4 s (curl -m), and a streamed one whose client leaves after the first
# chunk, both end early (the log names the position the row ended at), and the server answers
# the next request; at TP 1 and TP 2 (every rank ends the same rows). The model: 2 layers,
# hidden 128, 2048 positions, random weights (one training iteration on mock data), so that
# 2000 tokens take seconds. Loopback only; bounded: servers run under `timeout`.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
# shellcheck source=serve_test_setup.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/serve_test_setup.bash"
require_tools curl node

timeout 300 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 128 --num-attention-heads 4 \
  --seq-length 32 --max-position-embeddings 2048 --mock-data --vocab-size 128 --micro-batch-size 1 \
  --global-batch-size 1 --lr 1e-4 --train-iters 1 --eval-iters 0 --save "$WORK/ckpt" \
  --save-interval 1 > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fail "train"; }

for np in 1 2; do
  echo "== TP $np"
  rm -f "$WORK/port"
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np "$MEGATRON_BINARY" serve \
    --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 128 --port 0 \
    --port-file "$WORK/port" --max-requests 3 > "$WORK/serve$np.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve$np.log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$WORK/serve$np.log"; fail "server did not start"; }
  URL="http://127.0.0.1:$(cat "$WORK/port")/v1/completions"
  long='{"prompt": "1", "max_tokens": 2000, "temperature": 0}'
  curl -s -m 0.4 "$URL" -H 'Content-Type: application/json' -d "$long" > /dev/null && fail "no timeout"
  timeout 60 node -e '
    const http = require("http");
    const url = new URL(process.argv[1]);
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST",
      headers: { "Content-Type": "application/json" } }, (res) => {
      res.once("data", (d) => {
        if (!String(d).startsWith("data: {")) { console.log("FAIL: not an event: " + d); process.exit(1); }
        req.destroy();  // the client leaves after the first chunk
      });
    });
    req.on("error", () => {});
    req.end(JSON.stringify({ prompt: "2", max_tokens: 2000, temperature: 0, stream: true }));' "$URL" \
    || fail "streaming client"
  got=$(curl -s -m 60 "$URL" -H 'Content-Type: application/json' -d '{"prompt": "3", "max_tokens": 4}' -w '\n%{http_code}')
  [[ $(tail -n1 <<< "$got") == 200 ]] || fail "the next request: $got"
  wait "$PID" || { tail -n 20 "$WORK/serve$np.log"; fail "server exit status at TP $np"; }
  grep "cancelled" "$WORK/serve$np.log" || true
  n=$(grep -c "a request was cancelled (its client left); its row ended at" "$WORK/serve$np.log" || true)
  ((n == 2)) || { cat "$WORK/serve$np.log"; fail "$n cancellations at TP $np, not 2"; }
  # Both ended before their 2001 positions.
  if grep "its row ended at" "$WORK/serve$np.log" | grep -q "ended at 2001 of"; then
    fail "a cancelled generation ran to its end at TP $np"
  fi
done
echo "PASS"
