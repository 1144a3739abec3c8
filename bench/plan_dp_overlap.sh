#!/usr/bin/env bash
# The planner's data-parallel gradient reduction, with and without --overlap-grad-reduce,
# against the published data-parallel runs it is validated on (docs/plan.md, "Validation"):
#   Shoeybi et al. 2019 (DGX-2H V100, examples/machines/dgx2h_v100.json, megatron-lm-2019):
#     the four model+data-parallel weak-scaling rows (64 to 512 GPUs, DP 64) and the README's
#     8.3B on 512 GPUs with the all-reduce after the backward (60%) and overlapped (74%);
#   Narayanan et al. 2021 (DGX A100, examples/machines/dgx_a100_80gb.json, megatron-lm): the
#     Table 1 rows without a pipeline, TP 1..8 x DP 32 (32 to 256 GPUs), micro-batch 1.
# Prints each prediction (efficiency against the 39 TFLOP/s 1-GPU baseline for Shoeybi,
# TFLOP/s per GPU with recomputed FLOPs for Narayanan) beside the published figure.
#
#   bash bench/plan_dp_overlap.sh        (MEGATRON_BINARY=... to compare another build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"

# tflops MACHINE IMPL flags...: "TFLOP/s with recomputed FLOPs" and the DP line of the plan.
tflops() {
  local machine="$1" impl="$2"
  shift 2
  "$BIN" plan --machine "$ROOT/examples/machines/$machine" --implementation "$impl" "$@" --json |
    python3 -c 'import json, sys
p = json.load(sys.stdin)["time"]
print("%.2f %.1f %.1f" % (p["hardware_tflops_per_device"], 1e3 * p["dp_comm_exposed_seconds"],
                          1e3 * p["dp_comm_seconds"]))'
}

echo "Shoeybi et al. 2019, DGX-2H (efficiency vs 39 TFLOP/s; DP exposed / issued ms)"
printf "%-6s %-5s %-9s %-10s %-9s %s\n" params GPUs overlap published plan "DP exp/issued"
# L h heads MP GPUs published overlap
while read -r L h a mp gpus published overlap; do
  flags=(--num-layers "$L" --hidden-size "$h" --num-attention-heads "$a" --seq-length 1024
         --vocab-size 51200 --make-vocab-size-divisible-by 128 --tensor-model-parallel-size "$mp"
         --world-size "$gpus" --micro-batch-size 8 --global-batch-size $((8 * gpus / mp)) --fp16
         --recompute-granularity full)
  [[ "$overlap" == yes ]] && flags+=(--overlap-grad-reduce)
  read -r tf exposed issued < <(tflops dgx2h_v100.json megatron-lm-2019 "${flags[@]}")
  printf "%-6s %-5s %-9s %-10s %-9s %s\n" "$L/$h" "$gpus" "$overlap" "$published%" \
    "$(python3 -c "print('%.1f%%' % (100 * $tf / 39))")" "$exposed / $issued"
done <<'EOF'
40 1536 16 1 64 96 no
54 1920 20 2 128 83 no
64 2304 24 4 256 79 yes
72 3072 32 8 512 74 yes
72 3072 32 8 512 60 no
EOF

echo
echo "Narayanan et al. 2021, DGX A100, micro-batch 1 (TFLOP/s per GPU; DP exposed / issued ms)"
printf "%-6s %-5s %-9s %-10s %-9s %s\n" params GPUs overlap published plan "DP exp/issued"
while read -r L h a tp gpus batch published; do
  for overlap in no yes; do
    flags=(--num-layers "$L" --hidden-size "$h" --num-attention-heads "$a" --seq-length 2048
           --vocab-size 51200 --tensor-model-parallel-size "$tp" --world-size "$gpus"
           --micro-batch-size 1 --global-batch-size "$batch" --fp16 --recompute-granularity full)
    [[ "$overlap" == yes ]] && flags+=(--overlap-grad-reduce)
    read -r tf exposed issued < <(tflops dgx_a100_80gb.json megatron-lm "${flags[@]}")
    printf "%-6s %-5s %-9s %-10s %-9s %s\n" "$L/$h" "$gpus" "$overlap" "$published" "$tf" \
      "$exposed / $issued"
  done
done <<'EOF'
24 2304 24 1 32 512 137
30 3072 32 2 64 512 138
36 4096 32 4 128 512 142
40 6144 48 8 256 1024 135
EOF
