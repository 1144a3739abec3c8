#!/usr/bin/env bash
# `megatron generate` and `megatron serve` end to end on the tiny HF GPT-2 fixture (vocabulary
# 96, NullTokenizer: prompts are token ids): generation identical at TP 1 and TP 2 (greedy and
# sampled), the documented errors, and Megatron's REST API answering real HTTP requests on
# 127.0.0.1 — good, malformed, mistyped, too long, too large, concurrent — and the web page.
# Bounded: every server runs under `timeout` and stops itself (--max-requests) or on SIGTERM.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
MPIRUN=(timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none)
fail() { echo "FAIL: $*"; exit 1; }
command -v curl > /dev/null || { echo "curl is not installed: skipping"; exit 77; }

"$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" \
  --save "$WORK/ckpt" --make-vocab-size-divisible-by 32 > "$WORK/convert.log" 2>&1 \
  || { cat "$WORK/convert.log"; fail "convert"; }
MODEL=(--load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96)

echo "== generate: TP 1 and TP 2 give the same tokens (greedy, top-k, top-p, temperature)"
printf '1 2 3 4 5\n{"prompt": "7 8"}\n{"text": "40 41 42 43 44 45 46 47 48"}\n' > "$WORK/prompts.jsonl"
for mode in "--greedy" "--top-k 5 --temperature 0.7" "--top-p 0.8" "--temperature 1.3"; do
  for np in 1 2; do
    # shellcheck disable=SC2086
    "${MPIRUN[@]}" -np $np "$MEGATRON_BINARY" generate "${MODEL[@]}" --prompt-file "$WORK/prompts.jsonl" \
      --tokens-to-generate 8 $mode --seed 7 --logprobs --micro-batch-size 2 \
      --output-file "$WORK/out$np.jsonl" > "$WORK/gen$np.log" 2>&1 || { cat "$WORK/gen$np.log"; fail "generate np $np $mode"; }
  done
  node -e '
    const fs = require("fs");
    const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
    const [a, b] = [read(process.argv[1]), read(process.argv[2])];
    if (a.length !== 3) throw new Error("expected 3 results, got " + a.length);
    a.forEach((r, i) => {
      if (JSON.stringify(r.generated_tokens) !== JSON.stringify(b[i].generated_tokens))
        throw new Error("TP 1 and TP 2 differ for prompt " + i);
      if (r.generated_tokens.length !== 8) throw new Error("not 8 tokens: " + r.generated_tokens);
      if (r.logprobs.length !== r.prompt_tokens.length + 8 - 1) throw new Error("logprobs length");
      b[i].logprobs.forEach((l, j) => {
        if (Math.abs(l - r.logprobs[j]) > 1e-4 * Math.abs(r.logprobs[j]) + 1e-6) throw new Error("logprob " + j);
      });
    });' "$WORK/out1.jsonl" "$WORK/out2.jsonl" || fail "TP 1 vs TP 2 for $mode"
done
grep -q "^1 2 3 4 5 " "$WORK/gen1.log" || { cat "$WORK/gen1.log"; fail "text not printed"; }

echo "== generate: errors"
expect_error() {  # expect_error MESSAGE ARGS...: generate fails with MESSAGE
  local message=$1
  shift
  if "$MEGATRON_BINARY" generate "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
expect_error "does not record its tokenizer" --load "$WORK/ckpt" --prompt "1 2"
expect_error "must equal the number of processes" "${MODEL[@]}" --prompt "1" --tensor-model-parallel-size 2
expect_error "Length of prompt + tokens_to_generate longer than allowed" "${MODEL[@]}" --prompt "1 2" \
  --tokens-to-generate 40
# The largest int64: prompt + tokens must not overflow past the check.
expect_error "Length of prompt + tokens_to_generate longer than allowed" "${MODEL[@]}" --prompt "1 2" \
  --tokens-to-generate 9223372036854775807
expect_error "cannot set both top-k and top-p samplings." "${MODEL[@]}" --prompt "1" --top-k 3 \
  --top-p 0.5 --tokens-to-generate 4
expect_error "not a token id" "${MODEL[@]}" --prompt "hello" --tokens-to-generate 4

# start_server NP LOGFILE ARGS...: starts `serve` in the background and waits for its port.
start_server() {
  local np=$1 log=$2
  shift 2
  rm -f "$WORK/port"
  if ((np == 1)); then  # the process itself, so that the test can signal it
    "$MEGATRON_BINARY" serve "${MODEL[@]}" --port 0 --port-file "$WORK/port" "$@" > "$log" 2>&1 &
  else
    "${MPIRUN[@]}" -np "$np" "$MEGATRON_BINARY" serve "${MODEL[@]}" --port 0 \
      --port-file "$WORK/port" "$@" > "$log" 2>&1 &
  fi
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    [[ -s $WORK/port ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; fail "server exited early"; }
    sleep 0.5
  done
  [[ -s $WORK/port ]] || { cat "$log"; fail "server did not start"; }
  URL="http://127.0.0.1:$(cat "$WORK/port")"
}
# put BODY: PUT /api; prints the body, then the status on the last line.
put() { curl -s -m 60 -X PUT "$URL/api" -H 'Content-Type: application/json' --data-binary "$1" -w '\n%{http_code}'; }
# expect_status STATUS MESSAGE BODY
expect_status() {
  local got
  got=$(put "$3")
  [[ $(tail -n1 <<< "$got") == "$1" ]] || fail "status for $3: $got"
  grep -qF -- "$2" <<< "$got" || fail "message for $3: $got (expected '$2')"
}

echo "== serve at TP 2: Megatron's API on 127.0.0.1"
start_server 2 "$WORK/serve.log" --max-requests 6 --max-request-bytes 4096
got=$(put '{"prompts": ["1 2 3", "4"], "tokens_to_generate": 5, "top_k": 1, "logprobs": true}')
[[ $(tail -n1 <<< "$got") == 200 ]] || fail "good request: $got"
head -n1 <<< "$got" | node -e '
  const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
  if (r.text.length !== 2 || r.segments.length !== 2 || r.logprobs.length !== 2) throw new Error("shape");
  if (!r.text[0].startsWith("1 2 3 ")) throw new Error("text " + r.text[0]);
  r.segments.forEach((s, i) => {
    if (s.length !== [3, 1][i] + 5) throw new Error("segments " + s);
    if (r.logprobs[i].length !== s.length - 1) throw new Error("logprobs " + r.logprobs[i]);
    if (s.join(" ") !== r.text[i]) throw new Error("segments do not spell the text");
  });' || fail "response shape: $got"
# The same request at TP 1 (generate) gives the same text.
"$MEGATRON_BINARY" generate "${MODEL[@]}" --prompt "1 2 3" --tokens-to-generate 5 --greedy \
  --output-file "$WORK/one.jsonl" > /dev/null 2>&1 || fail "generate for comparison"
node -e 'const fs = require("fs");
  const g = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  if (g.text !== process.argv[2]) throw new Error(g.text + " != " + process.argv[2]);' \
  "$WORK/one.jsonl" "$(head -n1 <<< "$got" | node -e 'console.log(JSON.parse(require("fs").readFileSync(0,"utf8")).text[0])')" \
  || fail "serve at TP 2 and generate at TP 1 differ"

expect_status 400 "the request body is not valid JSON" '{"prompts": ["1"'
expect_status 400 "the request body must be a JSON object" '[1, 2]'
expect_status 400 "prompts argument required" '{"tokens_to_generate": 3}'
expect_status 400 "prompts is not a list of strings" '{"prompts": "1 2"}'
expect_status 400 "prompts is not a list of strings" '{"prompts": [1, 2]}'
expect_status 400 "prompts is empty" '{"prompts": []}'
expect_status 400 "tokens_to_generate must be an integer greater than 0" '{"prompts": ["1"], "tokens_to_generate": "5"}'
expect_status 400 "tokens_to_generate=0 implies logprobs should be True" '{"prompts": ["1"], "tokens_to_generate": 0}'
expect_status 400 "temperature must be a positive number" '{"prompts": ["1"], "temperature": 0}'
expect_status 400 "top_k must be an integer" '{"prompts": ["1"], "top_k": 2.5}'
expect_status 400 "cannot set both top-k and top-p samplings." '{"prompts": ["1"], "top_k": 2, "top_p": 0.5}'
expect_status 400 "logprobs must be a boolean value" '{"prompts": ["1"], "logprobs": 1}'
expect_status 400 "Empty prompts require add_BOS=true" '{"prompts": [""]}'
expect_status 400 "random_seed must be a positive integer" '{"prompts": ["1"], "random_seed": -3}'
expect_status 400 "Length of prompt + tokens_to_generate longer than allowed" '{"prompts": ["1 2"], "tokens_to_generate": 1000}'
expect_status 400 "Length of prompt + tokens_to_generate longer than allowed" '{"prompts": ["1 2"], "tokens_to_generate": 9223372036854775807}'
expect_status 400 "Maximum number of prompts is 128" "{\"prompts\": [$(printf '"1",%.0s' $(seq 1 128))\"1\"]}"
expect_status 400 "not a token id" '{"prompts": ["hello"]}'
expect_status 413 "" "{\"prompts\": [\"$(printf '1 %.0s' $(seq 1 3000))\"]}"
got=$(curl -s -m 30 -X POST "$URL/api" -d '{}' -w '\n%{http_code}')
[[ $(tail -n1 <<< "$got") == 405 ]] || fail "POST /api: $got"
page=$(curl -s -m 30 "$URL/")  # whole, then searched: grep -q in a pipe could cut curl short
grep -q '<textarea id="prompt"' <<< "$page" || fail "web page"

echo "== serve: concurrent requests are queued and all answered"
for i in 1 2 3 4; do
  put "{\"prompts\": [\"$i 2 3\"], \"tokens_to_generate\": 4, \"random_seed\": 5}" > "$WORK/c$i.out" &
done
wait $(jobs -p | grep -v "^$SERVER_PID$") 2>/dev/null || true
for i in 1 2 3 4; do
  [[ $(tail -n1 "$WORK/c$i.out") == 200 ]] || fail "concurrent request $i: $(cat "$WORK/c$i.out")"
  grep -q "\"text\":\[\"$i 2 3 " "$WORK/c$i.out" || fail "concurrent answer $i: $(cat "$WORK/c$i.out")"
done
# random_seed makes a sampled request reproducible; the sixth generation stops the server.
again=$(put '{"prompts": ["1 2 3"], "tokens_to_generate": 4, "random_seed": 5}')
[[ "$(head -n1 <<< "$again")" == "$(head -n1 "$WORK/c1.out")" ]] || fail "random_seed not reproducible: $again vs $(cat "$WORK/c1.out")"
wait "$SERVER_PID" || { cat "$WORK/serve.log"; fail "server exit status"; }
SERVER_PID=""
grep -q "stopping after 6 request(s)" "$WORK/serve.log" || { cat "$WORK/serve.log"; fail "max-requests"; }

echo "== serve at TP 1 stops cleanly on SIGTERM"
start_server 1 "$WORK/serve1.log"
[[ $(put '{"prompts": ["5"], "tokens_to_generate": 2}' | tail -n1) == 200 ]] || fail "TP 1 request"
kill -TERM "$SERVER_PID"
for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$SERVER_PID" 2>/dev/null && fail "server still running 30 s after SIGTERM"
wait "$SERVER_PID" || { cat "$WORK/serve1.log"; fail "SIGTERM exit status"; }
SERVER_PID=""
grep -q "stopping after 1 request(s)" "$WORK/serve1.log" || { cat "$WORK/serve1.log"; fail "SIGTERM"; }
echo "PASS"
