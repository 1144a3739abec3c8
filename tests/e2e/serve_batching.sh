#!/usr/bin/env bash
# `megatron serve` batches concurrent requests: 32 clients at once (greedy, and sampled with a
# seed; different prompt lengths, lengths, stop strings, n) each get exactly the answer the same
# request gets alone (serve_batching_client.js), at TP 1 and TP 2, and the log shows that they
# ran in shared batches. Loopback only; bounded: servers run under `timeout`.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
# shellcheck source=serve_test_setup.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/serve_test_setup.bash"
require_tools node

tiny_gpt2_checkpoint "$WORK/ckpt"
for np in 1 2; do
  echo "== 32 concurrent clients at TP $np"
  rm -f "$WORK/port"
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np "$MEGATRON_BINARY" serve \
    --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 --port 0 --port-file "$WORK/port" \
    --max-requests 64 > "$WORK/serve$np.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve$np.log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$WORK/serve$np.log"; fail "server did not start"; }
  timeout 300 node "$MEGATRON_SOURCE_DIR/tests/e2e/serve_batching_client.js" "http://127.0.0.1:$(cat "$WORK/port")/v1" \
    ckpt 32 || { tail -n 20 "$WORK/serve$np.log"; fail "concurrent answers at TP $np"; }
  wait "$PID" || { tail -n 20 "$WORK/serve$np.log"; fail "server exit status at TP $np"; }
  grep -q "stopping after 64 request(s)" "$WORK/serve$np.log" || fail "not 64 requests at TP $np"
  grep -q "requests run as one batch" "$WORK/serve$np.log" || fail "no batch at TP $np"
  grep "requests run as one batch" "$WORK/serve$np.log" | head -n 3
done
echo "PASS"
