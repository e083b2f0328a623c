#!/usr/bin/env bash
# A longer run of the property tests (tests/suite/properties.rs; not a test itself): the parsers of
# container.env, .gitmodules, globals.json / local/config.json and PVE property strings, with many
# more random cases than `cargo test` runs. Bounded: CASES per property (default 20000) and at
# most SECONDS_MAX of wall time (default 600); each case is killed after 5 s (a hang fails).
#
#   benches/fuzz.sh                # 20000 cases per property
#   CASES=100000 SECONDS_MAX=1800 benches/fuzz.sh
#
# A failure prints the minimal input proptest found; add it to the tests as an example.
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${CASES:-20000}"
limit="${SECONDS_MAX:-600}"
cargo build --locked --quiet --tests
PROPTEST_CASES="$cases" timeout --signal=TERM --kill-after=10 "$limit" \
  cargo test --locked --quiet --test suite properties:: -- --test-threads=1
