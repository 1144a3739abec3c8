#!/usr/bin/env bash
# Installs llama.cpp's prebuilt CPU binaries for Linux x64 — npm's node-llama-cpp 3.21.1 and its
# @node-llama-cpp/linux-x64 package — into a cache directory (idempotent), for the GGUF export
# test (tests/e2e/gguf_llama_cpp.sh), which runs the exported files in llama.cpp itself.
#
# Why npm: node-llama-cpp ships llama.cpp compiled for Linux x64 with a JavaScript API that
# evaluates token ids and returns full next-token distributions; npm is the registry this
# project already fetches data from (scripts/fetch_data.sh). The version is pinned: llama.cpp's
# loader and its architectures' arithmetic are what the test checks against.
#
# --ignore-scripts: node-llama-cpp's postinstall would download or build another llama.cpp;
# the prebuilt binaries are all that is used. --omit=optional leaves out the CUDA, Vulkan and
# other platforms' binaries (the linux-x64 package is named, so it is installed).
#
# Output: ${MEGATRON_LLAMA_CPP_DIR:-${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/node-llama-cpp-3.21.1}
# with node_modules/node-llama-cpp. Exit status 1 (with npm's output) when the install fails,
# e.g. without network.
set -euo pipefail
VERSION=3.21.1
DIR="${MEGATRON_LLAMA_CPP_DIR:-${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/node-llama-cpp-$VERSION}"
installed() {
  [[ -f "$DIR/node_modules/node-llama-cpp/package.json" ]] &&
    grep -q "\"version\": \"$VERSION\"" "$DIR/node_modules/node-llama-cpp/package.json" &&
    [[ -d "$DIR/node_modules/@node-llama-cpp/linux-x64/bins" ]]
}
installed && exit 0
mkdir -p "$DIR"
[[ -f "$DIR/package.json" ]] || echo '{"name": "megatron-cpp-llama-cpp-check", "private": true}' > "$DIR/package.json"
(cd "$DIR" && npm install --ignore-scripts --no-audit --no-fund --omit=optional \
  "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION")
installed || { echo "fetch_llama_cpp: node-llama-cpp $VERSION did not install into $DIR" >&2; exit 1; }
