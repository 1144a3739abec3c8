#!/usr/bin/env bash
# The README's test command: set up, build, run every test (unit, dist under mpirun, e2e).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Headless Chromium drives the web page test (tests/e2e/web_page.sh); NumPy, the independent
# reader of the indexed dataset (tests/e2e/preprocess_gpt2.sh); Slurm (slurmctld, slurmd, srun),
# the one-node cluster tests/e2e/slurm.sh starts with its own slurm.conf to train under srun and
# requeue a job (where systemd runs, Debian's packages also start munged; the test needs none).
MEGATRON_EXTRA_PACKAGES="chromium python3-numpy slurm-wlm" "$ROOT/scripts/setup.sh"
"$ROOT/scripts/fetch_data.sh"
cd "${MEGATRON_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j 2 --timeout 900
