#!/usr/bin/env bash
# Benchmark: one container's create + start against its physical limit (the tasks' durations) on
# fakepve with realistic task durations at time scales 0, 1 and 0.1; not a test. Builds the release
# binary, then runs benches/provision_latency.py. Results: docs/benchmarks/latency.md.
# Usage: [PROFILE=release|dev] [PGO_BIN=path] [OLD_BIN=path] benches/provision_latency.sh [ROUNDS=10] [SCALES=0,1,0.1]
# PGO_BIN times that binary instead of building one; OLD_BIN times another binary first (e.g. a
# build of an older commit), for a side-by-side comparison on the same machine and load.
# (above time scale 0 the wall time is mostly waiting for tasks; the client's own cost, at time
# scale 0, is lower in the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
if [ -n "${PGO_BIN:-}" ]; then BIN=$PGO_BIN
elif [ "$PROFILE" = dev ]; then cargo build --locked --quiet; BIN=target/debug/proxmox-gitops
else cargo build --release --locked --quiet; BIN=target/release/proxmox-gitops; fi
echo "machine: $(nproc) CPU(s), $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ)"
if [ -n "${OLD_BIN:-}" ]; then
  echo
  echo "old binary: $OLD_BIN"
  echo
  python3 benches/provision_latency.py "$OLD_BIN" "${1:-10}" "${2:-0,1,0.1}"
  echo
  echo "load after the old binary's rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
echo
echo "binary: $BIN"
echo
python3 benches/provision_latency.py "$BIN" "${1:-10}" "${2:-0,1,0.1}"
echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
