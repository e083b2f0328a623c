#!/usr/bin/env bash
# Benchmark of `provision` against fakepve (time scale 0, template present); not a test.
# Builds the release binary, then runs benches/provision_pve.py. Results: docs/benchmarks/provision.md.
# Usage: benches/provision_pve.sh [N=50] [JOBS=8]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
echo "machine: $(nproc) CPU(s), $(uname -sr); $(date -u +%Y-%m-%dT%H:%MZ)"
python3 benches/provision_pve.py target/release/proxmox-gitops "${1:-50}" "${2:-8}"
