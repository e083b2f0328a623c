#!/usr/bin/env bash
# Benchmark: `provision --all --jobs 8` of 1, 10, 50 and 200 containers on one fakepve node, with
# PVE task durations (create 10 s, start 3 s) at time scale 0 (the client's own cost) and 0.1;
# wall time against the limit, API requests per container, peak RSS, load. Not a test.
# Runs benches/scale_pve.py. Results: docs/benchmarks/scale.md.
#
# Usage: [PGO_BIN=path/to/proxmox-gitops] benches/scale_pve.sh [SIZES=1,10,50,200] [JOBS=8]
#        [SCALES=0,0.1] [REPEAT=3]
# Without PGO_BIN the release binary is built first (cargo build --release --locked).
# Needs python3 with fakepve (pip install fakepve==0.5.0) and GNU time (/usr/bin/time).
# Loopback only: fakepve on 127.0.0.1, the containers' SSH banners on 127.1.x.y.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PGO_BIN:-}" ]; then
  bin="$(realpath "$PGO_BIN")"
else
  cargo build --release --locked --quiet
  bin="${CARGO_TARGET_DIR:-$PWD/target}/release/proxmox-gitops"
fi
[ -x "$bin" ] || { echo "no binary at $bin" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 1; }
echo "machine: $(nproc) CPU(s), $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg) before; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "binary: $bin ($("$bin" --version 2>/dev/null || echo '?'))"
echo
# Every run of the binary is bounded (RUN_TIMEOUT in the script); the whole benchmark too.
timeout 7200 python3 benches/scale_pve.py "$bin" "${1:-1,10,50,200}" "${2:-8}" "${3:-0,0.1}" "${4:-3}"
echo
echo "load $(cut -d' ' -f1-3 /proc/loadavg) after; $(date -u +%Y-%m-%dT%H:%MZ)"
