#!/usr/bin/env bash
# The bundle: what a machine without Debian's -dev packages (the GPU machine's image: nvcc,
# CMake, ninja, PyTorch, NCCL from pip, no network) needs to build megatron and its tests,
# taken from Debian packages:
#   headers      nlohmann-json3-dev, libcli11-dev
#   sources      googletest                       (GoogleTest + GoogleMock, built by CMake)
#   static libs  libpcre2-dev, libutf8proc-dev, libyaml-cpp-dev
#                                                 (linked statically: nothing needed at run time)
#   OpenMPI      libopenmpi-dev + runtime (mpirun, libmpi, PMIx, hwloc, libevent, munge, udev),
#                relocated by OPAL_PREFIX (`scripts/gpu_bundle.sh env` prints the variables)
# OpenBLAS, oneDNN and SentencePiece stay out (too large, and optional: the build falls back to
# its own blocked GEMM and reports SentencePiece as missing; cmake/MegatronDependencies.cmake).
#
#   scripts/gpu_bundle.sh [all]   fetch + unpack + size (here, where apt reaches Debian)
#   scripts/gpu_bundle.sh fetch   apt-get download the packages into .gpu-bundle/debs/
#   scripts/gpu_bundle.sh unpack  unpack .gpu-bundle/debs/*.deb into .gpu-bundle/root/ (needs
#                                 dpkg-deb, or ar + tar, or python3), prune, check libraries
#   scripts/gpu_bundle.sh env     print the exports that run the bundled mpirun
#   scripts/gpu_bundle.sh size    what travels (.gpu-bundle/debs) and what is unpacked
#
# CMake uses .gpu-bundle/root/usr on its own when it exists (after the system's prefixes, so an
# installed package always wins). Only .gpu-bundle/debs needs to travel (about 6 MiB):
# scripts/gpu_check.sh unpacks it on the GPU machine. The folder is in .gitignore.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${MEGATRON_BUNDLE_DIR:-$ROOT/.gpu-bundle}"
DEBS="$BUNDLE/debs"
DEST="$BUNDLE/root"
ARCH_TRIPLET=x86_64-linux-gnu
LIBDIR="$DEST/usr/lib/$ARCH_TRIPLET"

PACKAGES=(
  nlohmann-json3-dev libcli11-dev googletest libpcre2-dev libutf8proc-dev libyaml-cpp-dev
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libmunge2 libudev1
)
# Libraries any glibc-based image has; a bundled ELF may depend on these without bundling them.
BASE_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libz\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'

say() { echo "gpu_bundle: $*"; }

fetch() {
  command -v apt-get >/dev/null || { say "apt-get is needed to fetch (run this on a Debian/Ubuntu machine with network)"; exit 1; }
  mkdir -p "$DEBS"
  local apt=(apt-get)
  if [[ "$(dpkg --print-architecture)" != amd64 ]]; then  # the GPU machine is x86-64
    apt=(apt-get -oAPT::Architecture=amd64 -oAPT::Architectures=amd64
         -oDir::State::Lists=/tmp/gpu-bundle-amd64-lists)
    mkdir -p /tmp/gpu-bundle-amd64-lists/partial
    "${apt[@]}" update -qq
  fi
  rm -f "$DEBS"/*.deb
  # apt-get download writes into the current directory; as root it warns that _apt cannot
  # write there, which is harmless.
  (cd "$DEBS" && "${apt[@]}" download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  local n; n=$(ls "$DEBS"/*.deb 2>/dev/null | wc -l)
  [[ "$n" -eq "${#PACKAGES[@]}" ]] || { say "expected ${#PACKAGES[@]} packages, got $n in $DEBS"; exit 1; }
  (cd "$DEBS" && ls *.deb) > "$DEBS/MANIFEST"
  say "fetched $n packages into $DEBS"
}

# Extracts one .deb's data archive into $DEST with whatever this machine has.
extract() {
  local deb="$1"
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$DEST"
  elif command -v ar >/dev/null && command -v tar >/dev/null; then
    local tmp; tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$DEST")
    rm -rf "$tmp"
  else
    python3 - "$deb" "$DEST" <<'PY'
import io, lzma, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(dest)
    pos += 60 + size + (size & 1)
PY
  fi
}

unpack() {
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { say "no packages in $DEBS: run scripts/gpu_bundle.sh fetch where apt reaches Debian"; exit 1; }
  rm -rf "$DEST" "$BUNDLE/bin"
  mkdir -p "$DEST"
  for deb in "$DEBS"/*.deb; do extract "$deb"; done
  # What neither the build nor mpirun reads.
  rm -rf "$DEST/usr/share/doc" "$DEST/usr/share/man" "$DEST/usr/share/lintian" \
         "$LIBDIR/fortran" "$DEST/usr/share/java" "$DEST/etc/openmpi/openmpi-totalview.tcl"
  find "$DEST" -name '*.la' -delete
  find "$LIBDIR" -maxdepth 1 \( -name 'libpcre2-16*' -o -name 'libpcre2-32*' -o -name 'libpcre2-posix*' \
       -o -name '*mpi_mpifh*' -o -name '*mpi_usempi*' -o -name 'libmpi_java*' -o -name 'liboshmem*' \
       -o -name 'libmca_common_ucx*' -o -name 'libmca_common_verbs*' -o -name 'libmca_common_ofi*' \) -delete
  rm -f "$DEST"/usr/bin/*shmem* "$DEST"/usr/bin/mpijava*
  # PCRE2, utf8proc and yaml-cpp link statically: without the .so link names the linker takes
  # the .a.
  rm -f "$LIBDIR/libpcre2-8.so" "$LIBDIR/libutf8proc.so" "$LIBDIR/libyaml-cpp.so"
  # The launcher under its usual names, outside usr/ so that CMake's FindMPI does not half-find
  # a relocated OpenMPI (cmake/MegatronDependencies.cmake imports it explicitly).
  mkdir -p "$BUNDLE/bin"
  ln -sf ../root/usr/bin/orterun "$BUNDLE/bin/mpirun"
  ln -sf ../root/usr/bin/orterun "$BUNDLE/bin/mpiexec"
  check_libraries
  date -u +%FT%TZ > "$DEST/.unpacked"
  say "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $DEST ($(du -sh "$DEST" | cut -f1))"
}

# Every bundled ELF must load with the bundle's libraries plus BASE_LIBS. An OpenMPI or PMIx
# plugin that needs something else (InfiniBand, UCX, libfabric, CUDA-aware transports, X11) is
# removed, so OpenMPI never tries to open it; anything else missing is an error.
check_libraries() {
  command -v ldd >/dev/null || { say "no ldd here: library check skipped"; return 0; }
  local path="$LIBDIR:$LIBDIR/openmpi/lib:$LIBDIR/pmix2/lib" removed=0 missing=0 f deps dep
  while IFS= read -r -d '' f; do
    head -c 4 "$f" 2>/dev/null | grep -q ELF || continue
    deps="$(LD_LIBRARY_PATH="$path" ldd "$f" 2>/dev/null || true)"
    local problem=""
    while read -r dep _ where _; do
      [[ -z "$dep" || "$dep" =~ $BASE_LIBS || "$dep" == /* || "$dep" == statically ]] && continue
      if [[ "$where" == "not" ]]; then problem+=" $dep"; fi
      if [[ "$where" == /* && "$where" != "$DEST"/* ]]; then problem+=" $dep(system)"; fi
    done <<< "$deps"
    [[ -z "$problem" ]] && continue
    case "$f" in
      */openmpi3/*.so | */pmix2/lib/pmix/*.so) rm -f "$f"; removed=$((removed + 1)) ;;
      *) say "warning: $f needs$problem"; missing=$((missing + 1)) ;;
    esac
  done < <(find "$DEST" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0)
  say "library check: removed $removed plugins whose libraries are not bundled; $missing others need libraries outside the bundle"
  [[ "$missing" -eq 0 ]] || exit 1
}

env_exports() {
  [[ -d "$DEST/usr" ]] || { say "not unpacked: run scripts/gpu_bundle.sh unpack" >&2; exit 1; }
  cat <<EOF
export OPAL_PREFIX="$DEST/usr"
export PMIX_MCA_mca_base_component_path="$LIBDIR/pmix2/lib/pmix"
export LD_LIBRARY_PATH="$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="$BUNDLE/bin:\$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
}

size() {
  [[ -d "$DEBS" ]] && say "travels (.gpu-bundle/debs): $(du -sh "$DEBS" | cut -f1) in $(ls "$DEBS"/*.deb | wc -l) packages"
  [[ -d "$DEST" ]] && say "unpacked (.gpu-bundle/root, rebuilt there by scripts/gpu_check.sh): $(du -sh "$DEST" | cut -f1)"
  local tree
  tree=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  say "working tree that travels besides carried paths: $(awk -v b="$tree" 'BEGIN { printf "%.1f", b / 1048576 }') MiB (limit 64 MiB with carried paths)"
}

case "${1:-all}" in
  all) fetch; unpack; size ;;
  fetch) fetch ;;
  unpack) unpack ;;
  env) env_exports ;;
  size) size ;;
  *) sed -n '2,24p' "$0"; exit 2 ;;
esac
