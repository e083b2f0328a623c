#!/usr/bin/env bash
# Benchmark: `./local/run.sh broker` again with nothing changed (issue 27), the old behaviour
# (commit 5ad0d1b: the base role and the lib's engine run every time) next to the new one (the
# stamp in the container proves nothing changed: both are skipped), with where the time goes.
#
# Usage (as root, from anywhere):
#   OLD_BIN=/path/to/proxmox-gitops-5ad0d1b [NEW_BIN=target/debug/proxmox-gitops] [RUNS=10] \
#     [OLD_RUNS=5] [KEEP=1] benches/rerun.sh [OUT.md]     (default: docs/benchmarks/rerun.md)
#
# OLD_BIN: a binary built from 5ad0d1b (`git archive 5ad0d1b | tar -x -C DIR && cargo build` in
# DIR), required. NEW_BIN: this tree's binary (default target/debug/proxmox-gitops, built with
# `cargo build` first); both should be of the same cargo profile. The old `local/` scripts are
# taken from 5ad0d1b with `git show`, into a private copy of this tree's files (its artifacts and
# local/config.local.json are symlinks to this tree's, so both behaviours deploy the same broker
# with the same login).
#
# What it does: one `./local/run.sh broker` to set up (creates the container when missing; a
# first run takes a minute), then OLD_RUNS re-runs with the old scripts and binary, RUNS with the
# new ones (each through PGO_BINARY, so that no cargo runs: the binary step is timed apart), then
# every step of a re-run on its own, RUNS times each. At the end the broker is removed
# (`./local/run.sh --destroy --no-snapshot broker`) unless KEEP=1. Traffic: this host, lxcbr0 and
# the broker container (and Debian's mirror from inside it on its first configure).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
out="${1:-docs/benchmarks/rerun.md}"
runs="${RUNS:-10}"
old_runs="${OLD_RUNS:-5}"
old_rev=5ad0d1b
new_bin="${NEW_BIN:-$repo/target/debug/proxmox-gitops}"
[ "$(id -u)" -eq 0 ] || { echo "error: run as root (LXC containers)" >&2; exit 2; }
[ -x "${OLD_BIN:-}" ] || { echo "error: set OLD_BIN to a proxmox-gitops built from $old_rev" >&2; exit 2; }
[ -x "$new_bin" ] || { echo "error: no $new_bin: cargo build first, or set NEW_BIN" >&2; exit 2; }

work=$(mktemp -d)
chmod 0700 "$work"
cleanup() {
  rm -rf "$work"
  if [ -z "${KEEP:-}" ]; then
    PGO_BINARY="$new_bin" ./local/run.sh --destroy --no-snapshot broker >/dev/null 2>&1 \
      || echo "warning: could not remove the broker: sudo ./local/run.sh --destroy --no-snapshot broker" >&2
  fi
}
trap cleanup EXIT

# The old tree: this tree's files with local/ from the old commit; same artifacts, same settings.
old_tree="$work/old"
mkdir -p "$old_tree"
git ls-files -z | grep -zv '^local/' | xargs -0 cp --parents -t "$old_tree"
mkdir -p "$old_tree/local"
for f in $(git ls-tree --name-only "$old_rev" local/); do git show "$old_rev:$f" > "$old_tree/$f"; done
chmod +x "$old_tree/local/run.sh"
ln -s "$repo/local/config.local.json" "$old_tree/local/config.local.json"
ln -s "$repo/.proxmox-gitops" "$old_tree/.proxmox-gitops"

touch "$work/mark"
ms() { echo $(( (${EPOCHREALTIME/./} - ${1/./}) / 1000 )); }
# stats FILE: "median min max" of the numbers in FILE (one a line).
stats() { sort -n "$1" | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "%d %d %d", m, a[1], a[NR]}'; }
# timed NAME COUNT CMD...: runs CMD COUNT times (output dropped), appends each wall time to $work/NAME.
timed() {
  local name=$1 count=$2 s
  shift 2
  : > "$work/$name"
  for _ in $(seq "$count"); do
    s=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || { echo "error: $name failed: $*" >&2; "$@" >&2 || true; exit 1; }
    ms "$s" >> "$work/$name"
  done
}

echo "setting up the broker (./local/run.sh broker) ..." >&2
PGO_BINARY="$new_bin" ./local/run.sh broker >/dev/null 2>&1 || { echo "error: the set-up run failed" >&2; exit 1; }
# The new behaviour's stamp is written by a full run of the new binary.
PGO_BINARY="$new_bin" PROXMOX_GITOPS_CONFIGURE=full ./local/run.sh broker >/dev/null 2>&1

echo "old: $old_runs re-runs; new: $runs re-runs ..." >&2
timed old-total "$old_runs" env PGO_BINARY="$OLD_BIN" "$old_tree/local/run.sh" broker
timed new-total "$runs" env PGO_BINARY="$new_bin" ./local/run.sh broker
grep -q '"skipped": "unchanged"' .proxmox-gitops/configure/broker.json \
  || { echo "error: the new re-run did not skip (see .proxmox-gitops/configure/broker.json)" >&2; exit 1; }
# As a user runs it: the binary step too (PGO_PROFILE=dev: the new script's mtime check).
new_profile=
if [ "$new_bin" = "$repo/target/debug/proxmox-gitops" ]; then
  new_profile=dev
  timed new-total-build "$runs" env PGO_PROFILE=dev ./local/run.sh broker
fi

echo "each step of a re-run ..." >&2
export PGO_ENTRY=local-run
pkgs=(lxc debootstrap dnsmasq-base ansible openssh-client python3 iproute2 procps)
timed old-pkgs "$runs" bash -c 'for p in "$@"; do dpkg -s "$p"; done' sh "${pkgs[@]}"
timed new-pkgs "$runs" dpkg-query -W -f '${Package} ${Status}\n' "${pkgs[@]}"
timed old-settings "$runs" python3 "$old_tree/local/settings.py" "$old_tree"
timed new-settings "$runs" python3 -S local/settings.py "$repo"
timed lxcnet "$runs" bash -c ". '$repo/local/lxc-net.sh' && ensure_lxc_net"
if command -v cargo >/dev/null; then
  timed old-build "$runs" cargo build --locked --quiet
else
  echo 0 > "$work/old-build"
fi
timed new-build "$runs" find src Cargo.toml Cargo.lock -newer "$new_bin" -print -quit
for v in old new; do
  # Both binaries on this tree (the binary reads no file of local/ but the settings, which are
  # the same in both): the same inputs, git metadata included.
  bin=$OLD_BIN; tree=$repo
  [ "$v" = new ] && bin=$new_bin
  n=$runs; [ "$v" = old ] && n=$old_runs
  timed "$v-resolve" "$runs" "$bin" --repo "$tree" --stage main resolve
  timed "$v-check" "$runs" "$bin" --repo "$tree" --stage main configure --check --container broker
  timed "$v-provision" "$runs" "$bin" --repo "$tree" --stage main provision --backend lxc --container broker
  timed "$v-configure" "$n" "$bin" --repo "$tree" --stage main configure --container broker
done
grep -q '"skipped": "unchanged"' .proxmox-gitops/configure/broker.json \
  || { echo "error: the new configure did not skip" >&2; exit 1; }
timed old-summary "$runs" python3 "$old_tree/local/summary.py" "$old_tree" .proxmox-gitops "$work/mark" broker
timed new-summary "$runs" python3 -S local/summary.py "$repo" .proxmox-gitops "$work/mark" broker
# The full run the stamp saves, for scale: the new binary, forced.
timed new-forced 3 env PGO_BINARY="$new_bin" PROXMOX_GITOPS_CONFIGURE=full ./local/run.sh broker

row() { # row LABEL OLDFILE NEWFILE
  read -r om omin omax <<<"$(stats "$work/$2")"
  read -r nm nmin nmax <<<"$(stats "$work/$3")"
  printf '| %s | %s (%s–%s) | %s (%s–%s) |\n' "$1" "$om" "$omin" "$omax" "$nm" "$nmin" "$nmax"
}
load=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Benchmark: a re-run of the main job with nothing changed"
  echo
  echo "Generated by \`benches/rerun.sh\` on $(date -u +%Y-%m-%d) ($(nproc) CPU cores, shared with other"
  echo "agents' builds; load average at the end: $load). Both binaries: the \`$(basename "$(dirname "$new_bin")")\` build"
  echo "(old: commit $old_rev, new: this tree). Times in milliseconds, wall clock: median (min–max)."
  echo
  echo "\`./local/run.sh broker\` again, the broker container (shell lib, shipped base role) deployed"
  echo "and unchanged; through \`PGO_BINARY\` (no cargo; the binary step is the row below):"
  echo
  echo "| | old ($old_runs runs) | new ($runs runs) |"
  echo "|:---|---:|---:|"
  row "\`./local/run.sh broker\`" old-total new-total
  if [ -n "$new_profile" ]; then
    read -r nm nmin nmax <<<"$(stats "$work/new-total-build")"
    read -r om _ _ <<<"$(stats "$work/old-build")"
    echo "| the same with the binary step (\`PGO_PROFILE=dev\`; old: + its cargo no-op, median $om) | | $nm ($nmin–$nmax) |"
  fi
  echo
  echo "Each step of a re-run on its own ($runs runs each; the old configure $old_runs runs):"
  echo
  echo "| step | old | new |"
  echo "|:---|---:|---:|"
  row "packages present (old: 8× \`dpkg -s\`; new: one \`dpkg-query\`)" old-pkgs new-pkgs
  row "\`local/settings.py\` (new: \`python3 -S\`)" old-settings new-settings
  row "lxc-net check" lxcnet lxcnet
  row "the binary (old: \`cargo build\` no-op; new: mtime check, cargo skipped)" old-build new-build
  row "\`resolve\`" old-resolve new-resolve
  row "\`configure --check\`" old-check new-check
  row "\`provision\` (nothing to do)" old-provision new-provision
  row "\`configure\`" old-configure new-configure
  row "\`local/summary.py\` (new: \`python3 -S\`)" old-summary new-summary
  echo
  read -r fm fmin fmax <<<"$(stats "$work/new-forced")"
  echo "For scale, the full run the skip saves (new, \`./local/run.sh --full broker\`, 3 runs): $fm ($fmin–$fmax)."
} > "$out"
cat "$out"
