#!/usr/bin/env bash
# `megatron serve` against the requests and clients of issue 38 that used to stop or stall it
# (serve_attacks.js: the largest int64 as a length, 100,000-deep JSON, slow clients trickling
# headers, ambiguous framing, foreign Host/Origin, the connection limit, 300 fuzzed bodies and
# 300 fuzzed raw HTTP requests), then:
# a second server on a taken port is refused by name; --api-key (OpenAI's 401); the warning for
# a non-loopback bind without a key; SIGTERM with slow clients connected returns at once; and
# under `mpirun -np 2` the job survives the same overflow request. Loopback only; bounded: every
# server runs under `timeout` and is stopped by the script.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
# shellcheck source=serve_test_setup.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/serve_test_setup.bash"
require_tools curl node

tiny_gpt2_checkpoint "$WORK/ckpt"
MODEL=(--load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96)

# start_server LOG LAUNCHER... -- ARGS...: starts `serve` in the background, waits for its port
# (PORT, URL); PID is the launcher's.
start_server() {
  local log=$1
  shift
  rm -f "$WORK/port"
  timeout 600 "$@" --port-file "$WORK/port" > "$log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$log"; fail "server did not start"; }
  PORT=$(cat "$WORK/port")
  URL="http://127.0.0.1:$PORT"
}
# stop_server: SIGTERM, and the server must be gone within 5 s.
stop_server() {
  kill -TERM "$PID"
  for _ in $(seq 1 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$PID" 2>/dev/null && fail "server still running 5 s after SIGTERM"
  wait "$PID" || fail "server exit status after SIGTERM"
}

echo "== attacks (TP 1)"
start_server "$WORK/serve.log" "$MEGATRON_BINARY" serve "${MODEL[@]}" --port 0 --request-timeout 3 \
  --max-connections 16 --max-request-bytes 262144
timeout 300 node "$MEGATRON_SOURCE_DIR/tests/e2e/serve_attacks.js" "$PORT" 3 16 \
  || { tail -n 40 "$WORK/serve.log"; fail "attacks"; }
# The log shows a bounded summary of each request, never a whole 200 KB body.
awk 'length > 3000 { exit 1 }' "$WORK/serve.log" || fail "a log line longer than 3000 characters"

echo "== a second server on the same port is refused by name"
if timeout 120 "$MEGATRON_BINARY" serve "${MODEL[@]}" --port "$PORT" > "$WORK/second.log" 2>&1; then
  fail "a second server started on port $PORT"
fi
grep -q "port $PORT on 127.0.0.1 is already in use" "$WORK/second.log" || { cat "$WORK/second.log"; fail "address in use message"; }
grep -q "choose another --port" "$WORK/second.log" || fail "the fix is not named"

echo "== SIGTERM with slow clients connected"
for i in 1 2 3 4 5 6 7 8; do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT"; printf "PUT /api HTTP/1.1\r\n" >&3; sleep 8) > /dev/null 2>&1 &
done
sleep 1
stop_server
grep -q "stopping after" "$WORK/serve.log" || fail "no stop line"

echo "== --api-key"
start_server "$WORK/key.log" "$MEGATRON_BINARY" serve "${MODEL[@]}" --port 0 --api-key 's3cret'
got=$(curl -s -m 30 "$URL/v1/models" -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 401 ]] || fail "no key: $got"
grep -q '"code":"invalid_api_key"' <<< "$got" || fail "401 body: $got"
got=$(curl -s -m 30 -H 'Authorization: Bearer wrong' -X PUT "$URL/api" -d '{"prompts": ["1"]}' -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 401 ]] || fail "wrong key: $got"
got=$(curl -s -m 30 -H 'Authorization: Bearer s3cret' "$URL/v1/models" -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 200 ]] || fail "right key: $got"
grep -q '"id":"ckpt"' <<< "$got" || fail "model list: $got"
# The page itself needs no key (it asks for one); everything it calls does.
page=$(curl -s -m 30 "$URL/")  # whole, then searched: grep -q in a pipe could cut curl short
grep -q '"api_key_required":true' <<< "$page" || fail "page without key"
stop_server

echo "== beyond loopback without a key: a loud warning"
start_server "$WORK/open.log" "$MEGATRON_BINARY" serve "${MODEL[@]}" --host 0.0.0.0 --port 0
grep -q "WARNING: serve: listening on 0.0.0.0, beyond this machine, WITHOUT AUTHENTICATION" "$WORK/open.log" \
  || { cat "$WORK/open.log"; fail "no warning"; }
stop_server

echo "== TP 2: the job survives the overflow request"
start_server "$WORK/tp2.log" mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" serve "${MODEL[@]}" --port 0 --max-requests 1
got=$(curl -s -m 30 -X PUT "$URL/api" -d '{"prompts": ["1"], "tokens_to_generate": 9223372036854775807}' -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 400 ]] || fail "overflow at TP 2: $got"
got=$(curl -s -m 60 -X PUT "$URL/api" -d '{"prompts": ["1 2"], "tokens_to_generate": 3}' -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 200 ]] || fail "good request at TP 2: $got"
wait "$PID" || { cat "$WORK/tp2.log"; fail "TP 2 exit status"; }
echo "PASS"
