#!/usr/bin/env bash
# Runs a command as if this machine were the GPU machine's image: every file of the Debian
# packages megatron's build would otherwise use (MPI, OpenBLAS, oneDNN, SentencePiece, PCRE2,
# utf8proc and yaml-cpp headers, nlohmann-json, CLI11, GoogleTest, Google Benchmark, pkg-config) is hidden by
# an overlay mount with whiteouts, in a private mount namespace, for this command only. The
# runtime libpcre2-8-0 stays (every Debian/Ubuntu image has it: grep needs it).
#
#   sudo tools/without_debian_dev.sh bash -c 'cmake -S . -B build-nodeps ... && ...'
#
# Needs root and overlayfs (unshare -m). Used to check scripts/gpu_bundle.sh and the
# AUTO/OFF fallbacks of cmake/MegatronDependencies.cmake; the system itself is untouched.
set -euo pipefail
HIDDEN_PACKAGES=(
  googletest libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  libcli11-dev nlohmann-json3-dev libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libutf8proc-dev libutf8proc2 libyaml-cpp-dev libyaml-cpp0.7 libsentencepiece-dev libsentencepiece0 libprotobuf32
  libdnnl-dev libdnnl2 libdnnl3 libopenblas-dev libopenblas-pthread-dev libopenblas0
  libopenblas0-pthread libblas-dev libblas3 liblapack-dev liblapack3
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libcaf-openmpi-3 libcoarrays-openmpi-dev
  libpmix-dev libpmix2 libhwloc-dev libhwloc-plugins libhwloc15 libmunge2 libevent-dev
  libevent-2.1-7 libevent-core-2.1-7 libevent-extra-2.1-7 libevent-openssl-2.1-7
  libevent-pthreads-2.1-7 pkg-config pkgconf pkgconf-bin libpkgconf3
)
[[ $# -gt 0 ]] || { sed -n '2,12p' "$0"; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "without_debian_dev: needs root (mount namespace)"; exit 1; }
if [[ "${WITHOUT_DEBIAN_DEV_INNER:-}" != 1 ]]; then
  export WITHOUT_DEBIAN_DEV_INNER=1
  exec unshare -m --propagation private "$0" "$@"
fi

work="$(mktemp -d)"
mkdir -p "$work/up" "$work/work"
installed=()
for p in "${HIDDEN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && installed+=("$p")
done
hidden=0
while IFS= read -r f; do
  [[ "$f" == /usr/* && ! -d "$f" ]] || continue
  rel="${f#/usr}"
  mkdir -p "$work/up$(dirname "$rel")"
  mknod "$work/up$rel" c 0 0 2>/dev/null && hidden=$((hidden + 1))
done < <(dpkg -L "${installed[@]}" 2>/dev/null)
# Launcher and wrapper names that update-alternatives made (no package lists them).
for f in /usr/bin/mpi* /usr/bin/orte* /usr/bin/opal*; do
  [[ -L "$f" && "$(readlink "$f")" == /etc/alternatives/* ]] || continue
  mkdir -p "$work/up/bin" && mknod "$work/up${f#/usr}" c 0 0 2>/dev/null && hidden=$((hidden + 1))
done
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$work/up,workdir=$work/work" /usr
[[ -d /etc/openmpi ]] && mount -t tmpfs none /etc/openmpi
echo "without_debian_dev: hid $hidden files of ${#installed[@]} packages" >&2
set +e
"$@"
rc=$?
umount -l /usr
rm -rf "$work"
exit $rc
