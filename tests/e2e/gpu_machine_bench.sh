#!/usr/bin/env bash
# `megatron bench --mode machine` on a GPU writes a machine file `megatron plan` reads: tiny
# shapes, one process on cuda:0 with a datasheet peak given (--peak-tflops), then two processes
# sharing cuda:0 (--distributed-backend mpi: NCCL refuses two ranks on one device), which also
# measure the all-reduce between them. The file must describe the device (its memory, not the
# host's), hold the given peak and a GEMM fit against it (which --refit reproduces), and plan a
# bf16 GPT. Exits 77 (CTest's skip) when the binary has no CUDA or no GPU is visible.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

TINY=(bench --mode machine --device cuda:0 --tokens 128 --hidden-size 128 --seq-length 64
      --ceiling-size 256 --copy-mb 8 --min-time 0.01 --dtype bf16 f32)
"$MEGATRON_BINARY" "${TINY[@]}" --peak-tflops bf16=989 --output "$WORK/one.json" \
  > "$WORK/one.log" 2>&1 || gpu_or_skip "$WORK/one.log" "bench --mode machine on cuda:0"
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" "${TINY[@]}" --distributed-backend mpi --output "$WORK/two.json" \
  > "$WORK/two.log" 2>&1 || { cat "$WORK/two.log"; fail "bench --mode machine, 2 processes"; }

# --refit keeps the given peak (and refits the same samples to the same numbers).
"$MEGATRON_BINARY" bench --mode machine --refit "$WORK/one.json" --output "$WORK/refit.json" \
  > "$WORK/refit.log" 2>&1 || { cat "$WORK/refit.log"; fail "--refit of the GPU machine file"; }

node -e '
  const fs = require("fs");
  const one = JSON.parse(fs.readFileSync(process.argv[1]));
  const two = JSON.parse(fs.readFileSync(process.argv[2]));
  const check = (ok, what) => { if (!ok) throw new Error(what); };
  for (const [name, m] of [["one", one], ["two", two]]) {
    const d = m.device;
    check(d.memory_gib > 0 && d.reserved_gib >= 0 && d.reserved_gib < d.memory_gib,
          name + ": device memory " + d.memory_gib + " GiB, reserved " + d.reserved_gib);
    check(d.memory_bandwidth_gbps > 0 && d.memory_efficiency > 0, name + ": memory bandwidth");
    for (const dt of ["bf16", "fp32"]) {
      const c = d.compute[dt];
      check(c && c.peak_tflops > 0 && c.gemm_efficiency > 0 && c.gemm_half_dim >= 0,
            name + ": no GEMM fit for " + dt);
      check(m._gemm_samples[dt === "fp32" ? "f32" : dt].length === 1 + 2 * 14,
            name + ": " + dt + " samples: the ceiling and 14 layer shapes at TP 1 and 2");
    }
    check(/on cuda:0/.test(m.source), name + ": source " + m.source);
  }
  // The given peak is the file peak; the efficiency is measured against it.
  check(one.device.compute.bf16.peak_tflops === 989, "peak " + one.device.compute.bf16.peak_tflops);
  check(one.node.devices === 1 && !("bandwidth_gbps" in one.node), "one process: no link");
  // Two processes on one GPU: each sees the whole device, and the link between them is measured.
  check(two.node.devices === 2 && two.node.bandwidth_gbps > 0, "two processes: node " +
        JSON.stringify(two.node));
  check(Math.abs(two.device.memory_gib - one.device.memory_gib) < 1e-9, "memory per device");
  const refit = JSON.parse(fs.readFileSync(process.argv[3]));
  for (const dt of ["bf16", "fp32"])
    for (const k of ["peak_tflops", "gemm_efficiency", "gemm_half_dim"])
      check(Math.abs(refit.device.compute[dt][k] - one.device.compute[dt][k]) <=
            1e-9 * Math.abs(one.device.compute[dt][k]), "refit " + dt + " " + k);
' "$WORK/one.json" "$WORK/two.json" "$WORK/refit.json" || { cat "$WORK/one.json"; fail "the machine files"; }

"$MEGATRON_BINARY" plan --machine "$WORK/one.json" --num-layers 2 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 --bf16 \
  > "$WORK/plan.txt" 2>&1 || { cat "$WORK/plan.txt"; fail "plan with the measured GPU file"; }
grep -q ": fits" "$WORK/plan.txt" || { cat "$WORK/plan.txt"; fail "the plan does not fit"; }
grep -q "MFU" "$WORK/plan.txt" || { cat "$WORK/plan.txt"; fail "no MFU in the plan"; }
echo "PASS: bench --mode machine on the GPU, 1 and 2 processes; plan reads the file"
