#!/usr/bin/env bash
# `megatron generate` on a GPU against the CPU: the tiny HF GPT-2 fixture (vocabulary 96,
# NullTokenizer), three prompts of different lengths in micro-batches of 2, greedy, top-k with
# temperature and top-p sampling under one seed: on cuda:0 at TP 1, and at TP 2 as two processes
# sharing cuda:0 (--distributed-backend mpi), the generated tokens must be the CPU's and their
# log-probabilities within 1e-4. The KV cache, the sampling kernels and their Philox draws all
# run on the device. Exits 77 (CTest's skip) when the binary has no CUDA or no GPU is visible.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

"$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" \
  --save "$WORK/ckpt" --make-vocab-size-divisible-by 32 > "$WORK/convert.log" 2>&1 \
  || { cat "$WORK/convert.log"; fail "convert"; }
printf '1 2 3 4 5\n{"prompt": "7 8"}\n{"text": "40 41 42 43 44 45 46 47 48"}\n' > "$WORK/prompts.jsonl"
GENERATE=(generate --load "$WORK/ckpt" --tokenizer-type NullTokenizer --vocab-size 96
          --prompt-file "$WORK/prompts.jsonl" --tokens-to-generate 8 --seed 7 --logprobs
          --micro-batch-size 2 --distributed-backend mpi)

# Skip unless this binary can run on a GPU here.
"$MEGATRON_BINARY" "${GENERATE[@]}" --greedy --device cuda:0 --output-file "$WORK/probe.jsonl" \
  > "$WORK/probe.log" 2>&1 || gpu_or_skip "$WORK/probe.log" "the GPU probe run failed"

for mode in "--greedy" "--top-k 5 --temperature 0.7" "--top-p 0.8"; do
  # shellcheck disable=SC2086
  "$MEGATRON_BINARY" "${GENERATE[@]}" $mode --device cpu --output-file "$WORK/cpu.jsonl" \
    > "$WORK/cpu.log" 2>&1 || { cat "$WORK/cpu.log"; fail "generate on the CPU, $mode"; }
  for np in 1 2; do
    # shellcheck disable=SC2086
    timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np \
      "$MEGATRON_BINARY" "${GENERATE[@]}" $mode --device cuda:0 \
      --output-file "$WORK/gpu$np.jsonl" > "$WORK/gpu$np.log" 2>&1 \
      || { cat "$WORK/gpu$np.log"; fail "generate on the GPU, np $np, $mode"; }
    grep -q "on cuda:0" "$WORK/gpu$np.log" || { cat "$WORK/gpu$np.log"; fail "not on the GPU"; }
    echo "== $mode: CPU vs GPU at TP $np"
    node -e '
      const fs = require("fs");
      const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
      const [cpu, gpu] = [read(process.argv[1]), read(process.argv[2])];
      if (cpu.length !== 3 || gpu.length !== 3) throw new Error("expected 3 results each");
      cpu.forEach((c, i) => {
        const g = gpu[i];
        if (JSON.stringify(c.generated_tokens) !== JSON.stringify(g.generated_tokens))
          throw new Error(`prompt ${i}: CPU ${c.generated_tokens} vs GPU ${g.generated_tokens}`);
        c.logprobs.forEach((p, j) => {
          if (!(Math.abs(p - g.logprobs[j]) <= 1e-4))
            throw new Error(`prompt ${i} logprob ${j}: CPU ${p} vs GPU ${g.logprobs[j]}`);
        });
      });
      console.log("same tokens:", cpu.map((c) => c.generated_tokens.join(" ")).join(" | "));
    ' "$WORK/cpu.jsonl" "$WORK/gpu$np.jsonl"
  done
done
echo "generate on a GPU: OK"
