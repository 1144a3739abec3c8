#!/usr/bin/env bash
# Does --overlap-grad-reduce pay on this CPU? (issue 12) The same GPT step (6 layers, h 512,
# s 256 (SEQ), V 8192: 23M parameters, 93 MB of f32 gradients in 6 buckets of 4 Mi elements) at DP 2,
# 2 processes x 1 thread (one per core), 2 micro-batches of 2 per rank, with and without the
# flag, alternated ROUNDS times in one run. Per run: the median "elapsed time per iteration" of
# iterations 3-8 and the median exposed DP reduction (the all-grads-sync timer's max over ranks,
# which with the flag is only what the backward did not hide). Prints one line per run, each
# round's ratio overlapped / plain (the two runs of a round are back to back), and the medians.
# SEQ=64 makes the step 4x cheaper for the same gradients: the reduction's share grows.
# Usage: [ROUNDS=3] [SEQ=256] bench/overlap_grad_reduce.sh [MEGATRON_BINARY]
set -euo pipefail
BIN=${1:-build/megatron}
ROUNDS=${ROUNDS:-3}
SEQ=${SEQ:-256}
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(pretrain-gpt --mock-data --num-layers 6 --hidden-size 512 --num-attention-heads 8
        --seq-length "$SEQ" --max-position-embeddings "$SEQ" --vocab-size 8192
        --micro-batch-size 2 --global-batch-size 8 --train-iters 8 --lr 1e-4
        --log-interval 1 --eval-iters 0 --eval-interval 1000 --timing-log-level 1)
for round in $(seq "$ROUNDS"); do
  for mode in plain overlap; do
    flags=()
    [[ $mode == overlap ]] && flags=(--overlap-grad-reduce)
    mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$BIN" "${common[@]}" \
      "${flags[@]}" > "$WORK/$mode.$round.log" 2>&1 ||
      { cat "$WORK/$mode.$round.log"; exit 1; }
  done
done
node -e '
  const fs = require("fs");
  const [dir, rounds] = [process.argv[1], Number(process.argv[2])];
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1;
                           return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const summary = {plain: [], overlap: []};
  for (let round = 1; round <= rounds; ++round)
    for (const mode of ["plain", "overlap"]) {
      const lines = fs.readFileSync(`${dir}/${mode}.${round}.log`, "utf8").split("\n");
      const step = [], sync = [];
      let iteration = 0;
      for (const line of lines) {
        let m = line.match(/iteration\s+(\d+)\/.*elapsed time per iteration \(ms\): ([\d.]+)/);
        if (m) { iteration = Number(m[1]); if (iteration >= 3) step.push(Number(m[2])); }
        m = line.match(/all-grads-sync \.*: \(([\d.]+), ([\d.]+)\)/);
        if (m && iteration >= 3) sync.push(Number(m[2]));
      }
      const r = {step: median(step), sync: median(sync)};
      summary[mode].push(r);
      console.log(`round ${round} ${mode.padEnd(7)} step ${r.step.toFixed(1)} ms, ` +
                  `exposed DP reduction ${r.sync.toFixed(1)} ms`);
    }
  const p = median(summary.plain.map((r) => r.step)), o = median(summary.overlap.map((r) => r.step));
  const ps = median(summary.plain.map((r) => r.sync)), os = median(summary.overlap.map((r) => r.sync));
  // Each round runs the two back to back: its ratio is the comparison least hurt by the
  // machine load drifting between rounds.
  const ratios = summary.plain.map((r, i) => summary.overlap[i].step / r.step);
  console.log(`per-round overlap / plain: ${ratios.map((x) => x.toFixed(3)).join(" ")}`);
  console.log(`median: plain ${p.toFixed(1)} ms (reduction ${ps.toFixed(1)} ms), overlap ` +
              `${o.toFixed(1)} ms (exposed ${os.toFixed(1)} ms), median per-round ratio ` +
              `${median(ratios).toFixed(3)}`);
' "$WORK" "$ROUNDS"
