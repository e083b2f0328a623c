#!/usr/bin/env bash
# Benchmark of the test suite's build (not a test): the time `cargo build --tests` takes after a
# change to the crate (src/lib.rs touched: the crate and every test target are compiled again and
# linked), ROUNDS times (default 3), after one warm-up build. Prints one line per round: wall,
# user and system seconds (cargo and all its children), and the load average before it.
# docs/benchmarks/test-build.md has the figures and what they were compared with.
#
#   benches/test_build.sh
#   ROUNDS=5 benches/test_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-3}"
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
echo "==> warm-up build" >&2
cargo build --locked --tests --quiet
echo "test targets: $(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin)["packages"] for t in p["targets"] if "test" in t["kind"]))')"
printf '%-6s %8s %8s %8s %s\n' round wall_s user_s sys_s load
for i in $(seq 1 "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  touch src/lib.rs
  out=$( { /usr/bin/time -f '%e %U %S' cargo build --locked --tests --quiet >/dev/null; } 2>&1 | tail -n 1)
  read -r wall user sys <<<"$out"
  printf '%-6s %8s %8s %8s %s\n' "$i" "$wall" "$user" "$sys" "$load"
done
