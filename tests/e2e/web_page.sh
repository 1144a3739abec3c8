#!/usr/bin/env bash
# `megatron serve`'s web page in headless Chromium (Debian's `chromium`; skipped when it is not
# installed): it names the model (the tiny fixture: context 32) and limits its length slider to
# it; typing a prompt and pressing "Generate" shows the prompt followed by the streamed text and
# the count of generated tokens only. The browser is driven over the DevTools protocol on a pipe (web_page_browser.js, plain
# node). Bounded: the server stops after one generation, the browser script after 120 s.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
[[ -n $CHROMIUM ]] || { echo "chromium is not installed (apt-get install chromium): skipping"; exit 77; }
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

"$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" \
  --save "$WORK/ckpt" > "$WORK/convert.log" 2>&1 || { cat "$WORK/convert.log"; fail "convert"; }
"$MEGATRON_BINARY" serve --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 \
  --port 0 --port-file "$WORK/port" --max-requests 1 > "$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do
  [[ -s $WORK/port ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.log"; fail "server exited early"; }
  sleep 0.5
done
[[ -s $WORK/port ]] || { cat "$WORK/serve.log"; fail "server did not start"; }
timeout 150 node "$MEGATRON_SOURCE_DIR/tests/e2e/web_page_browser.js" "$CHROMIUM" \
  "http://127.0.0.1:$(cat "$WORK/port")/" "1 2 3" ckpt 32 || { cat "$WORK/serve.log"; fail "browser"; }
wait "$SERVER_PID" || { cat "$WORK/serve.log"; fail "server exit status"; }
SERVER_PID=""
echo "PASS"
