#!/usr/bin/env bash
# Benchmark: one container's create + start against its physical limit (the tasks' durations) on
# fakepve with realistic task durations at time scales 1 and 0.1; not a test. Builds the release
# binary, then runs benches/provision_latency.py. Results: docs/benchmarks/latency.md.
# Usage: benches/provision_latency.sh [ROUNDS=6] [SCALES=1,0.1]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
echo "machine: $(nproc) CPU(s), $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ)"
python3 benches/provision_latency.py target/release/proxmox-gitops "${1:-6}" "${2:-1,0.1}"
