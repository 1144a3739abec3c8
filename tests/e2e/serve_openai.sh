#!/usr/bin/env bash
# OpenAI's API of `megatron serve` with the official `openai` npm client (serve_openai_client.js:
# completions, chat, streaming that reassembles to the whole text under greedy decoding, n > 1,
# seeds, stop sequences, logprobs whole and streamed, echo, usage, errors), at TP 1 and TP 2 (same texts), and
# curl for the server-sent-event framing. The client is installed once into
# $MEGATRON_DATA_DIR/npm-openai (outside the checkout); without npm or its registry the test is
# skipped with a message. Loopback only; bounded: servers run under `timeout`.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
# shellcheck source=serve_test_setup.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/serve_test_setup.bash"
require_tools curl node
CLIENT_DIR="$(openai_npm_client)"

tiny_gpt2_checkpoint "$WORK/ckpt"
# The NullTokenizer's text is token ids: a chat template that joins the contents and ends with
# the token 9 stands for the model's turn.
printf '{%% for m in messages %%}{{ m.content }} {%% endfor %%}{%% if add_generation_prompt %%}9{%% endif %%}\n' \
  > "$WORK/chat.jinja"
MODEL=(--load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96 --chat-template "$WORK/chat.jinja"
  --api-key s3cret)

start_server() {  # start_server LOG LAUNCHER...: sets PID, URL
  local log=$1
  shift
  rm -f "$WORK/port"
  timeout 600 "$@" --port 0 --port-file "$WORK/port" > "$log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$PID" 2>/dev/null || { cat "$log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$log"; fail "server did not start"; }
  URL="http://127.0.0.1:$(cat "$WORK/port")"
}

for np in 1 2; do
  echo "== the openai client at TP $np"
  if ((np == 1)); then  # the process itself, so that its exit status after SIGTERM is its own
    start_server "$WORK/serve$np.log" "$MEGATRON_BINARY" serve "${MODEL[@]}"
  else
    # Stops itself after the client's 15 generations (its errors never reach the model).
    start_server "$WORK/serve$np.log" mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np \
      "$MEGATRON_BINARY" serve "${MODEL[@]}" --max-requests 15
  fi
  timeout 300 node "$MEGATRON_SOURCE_DIR/tests/e2e/serve_openai_client.js" "$CLIENT_DIR/node_modules" \
    "$URL/v1" s3cret ckpt | tee "$WORK/client$np.log" || { tail -n 30 "$WORK/serve$np.log"; fail "openai client at TP $np"; }
  grep -q "all checks passed" "$WORK/client$np.log" || fail "openai client at TP $np"
  if ((np == 1)); then
    echo "== curl: server-sent-event framing"
    curl -s -N -m 60 -D "$WORK/sse.headers" -H 'Authorization: Bearer s3cret' -H 'Content-Type: application/json' \
      "$URL/v1/completions" -d '{"prompt": "1 2 3", "max_tokens": 5, "temperature": 0, "stream": true}' > "$WORK/sse.txt"
    grep -qi '^content-type: text/event-stream' "$WORK/sse.headers" || fail "SSE content type: $(cat "$WORK/sse.headers")"
    node -e '
      const text = require("fs").readFileSync(process.argv[1], "utf8");
      if (!text.endsWith("data: [DONE]\n\n")) throw new Error("not ended by data: [DONE]");
      const events = text.split("\n\n").slice(0, -1);
      let joined = "";
      for (const e of events.slice(0, -1)) {
        if (!e.startsWith("data: {")) throw new Error("not a data: line: " + e);
        const chunk = JSON.parse(e.slice(6));
        if (chunk.object !== "text_completion" || chunk.choices.length !== 1) throw new Error("chunk " + e);
        joined += chunk.choices[0].text;
      }
      const last = JSON.parse(events[events.length - 2].slice(6));
      if (last.choices[0].finish_reason !== "length") throw new Error("finish_reason " + JSON.stringify(last));
      console.log(events.length + " events: " + JSON.stringify(joined));' "$WORK/sse.txt" \
      || { cat "$WORK/sse.txt"; fail "SSE framing"; }
    cp "$WORK/client1.log" "$WORK/tp1.log"
  fi
  ((np == 1)) && kill -TERM "$PID"
  wait "$PID" || { tail -n 30 "$WORK/serve$np.log"; fail "server exit status at TP $np"; }
  grep -q "stopping after" "$WORK/serve$np.log" || { tail -n 30 "$WORK/serve$np.log"; fail "no clean stop at TP $np"; }
done
# Greedy texts are the same at TP 1 and TP 2 (the client prints them).
diff <(grep -E '^ok   (completion|chat|stop)' "$WORK/tp1.log") <(grep -E '^ok   (completion|chat|stop)' "$WORK/client2.log") \
  || fail "TP 1 and TP 2 answer differently"
echo "PASS"
