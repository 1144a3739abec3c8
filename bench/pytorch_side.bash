# Sourced (never run) by the benchmarks that put megatron-cpp beside PyTorch in one run
# (compare_pytorch.sh, moe_layer.sh): checks that PYTHON (default Debian's /usr/bin/python3)
# imports torch, and defaults DTYPES to fp32, with bf16 too where the CPU has bf16 dot products
# (avx512_bf16 or amx_bf16). BENCH_NAME names the benchmark in the error. Defines
# print_median_ratios, the summary of the rounds.
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch' 2>/dev/null || {
  echo "$BENCH_NAME: $PYTHON cannot import torch; install Debian's PyTorch" \
    "(apt-get install python3-torch) or set PYTHON to an interpreter that has it" >&2
  exit 2
}
if [[ -z "${DTYPES:-}" ]]; then
  DTYPES=fp32
  grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && DTYPES="fp32 bf16"
fi
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# One line per dtype of DTYPES: the median ms/step of each side over the rounds (the associative
# arrays OURS and THEIRS: dtype -> space-separated ms/step) and PyTorch / megatron.
print_median_ratios() {
  local d o t
  for d in $DTYPES; do
    o=$(tr ' ' '\n' <<<"${OURS[$d]}" | grep . | median)
    t=$(tr ' ' '\n' <<<"${THEIRS[$d]}" | grep . | median)
    awk -v d="$d" -v o="$o" -v t="$t" 'BEGIN {printf "%s: megatron %.1f ms/step | pytorch %.1f ms/step | pytorch/megatron %.2fx\n", d, o, t, t / o}'
  done
}
