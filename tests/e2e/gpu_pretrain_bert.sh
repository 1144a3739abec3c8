#!/usr/bin/env bash
# `megatron pretrain-bert` on a GPU against the CPU: 4 iterations of a tiny BERT (masked LM and
# sentence order, padding, dropout on, fp32) on 40 real documents, evaluated every 2: on cuda:0
# the lm loss, sop loss and grad norm of every iteration must be the CPU run's (relative
# <= 1e-4), and so must the validation losses — the masked rows, the binary head and the padding
# masks all on the device. Exits 77 (CTest's skip) when the binary has no CUDA or no GPU is
# visible.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_bert_data.bash"
export OMP_NUM_THREADS=1
BERT=(pretrain-bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --max-position-embeddings 32 --micro-batch-size 4 --global-batch-size 8 --lr 1e-3
      --data-path "$BERT_DATA" --vocab-file "$VOCAB" --split 949,50,1
      --log-interval 1 --eval-interval 2 --eval-iters 1 --train-iters 4
      --distributed-backend mpi)

run_on_gpu_and_cpu "BERT" "${BERT[@]}"

echo "== BERT: CPU vs cuda:0, training"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/cpu.jsonl" "$WORK/cuda:0.jsonl" \
  --from 1 --to 4 --rtol 1e-4
echo "== BERT: CPU vs cuda:0, validation"
node -e '
  const fs = require("fs");
  const valid = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse)
                         .filter((j) => j.type === "validation");
  const [cpu, gpu] = [valid(process.argv[1]), valid(process.argv[2])];
  if (cpu.length < 2 || cpu.length !== gpu.length)
    throw new Error(`validation lines: CPU ${cpu.length}, GPU ${gpu.length}`);
  cpu.forEach((c, i) => {
    for (const k of Object.keys(c)) {
      if (!k.endsWith("loss")) continue;
      if (!(Math.abs(c[k] - gpu[i][k]) <= 1e-4 * Math.abs(c[k])))
        throw new Error(`validation ${i} ${k}: CPU ${c[k]} vs GPU ${gpu[i][k]}`);
    }
  });
  console.log("validation losses agree:", cpu.length, "evaluations");
' "$WORK/cpu.jsonl" "$WORK/cuda:0.jsonl"
echo "BERT on a GPU: OK"
