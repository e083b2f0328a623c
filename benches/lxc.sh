#!/usr/bin/env bash
# Benchmark of the lxc backend (not a test): wall time of the base bootstrap (cold and warm
# debootstrap cache), of one container cloned from the cached base until SSH answers, and of
# five containers in parallel. Needs root, lxc, debootstrap and Debian's mirror; everything it
# creates is named pgobench-<pid>-… and removed at the end.
#
#   sudo benches/lxc.sh            # prints the results and writes docs/benchmarks/lxc.md
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "error: LXC needs root: run sudo $0" >&2; exit 1; }
ip -4 addr show dev lxcbr0 2>/dev/null | grep -q inet || /usr/libexec/lxc/lxc-net start

cargo build --locked --quiet --example lxc_bench
table=$(target/debug/examples/lxc_bench)

cgroup=v1; [ -f /sys/fs/cgroup/cgroup.controllers ] && cgroup=v2
{
  echo "# lxc backend benchmark"
  echo
  echo "Produced by \`benches/lxc.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'): $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB RAM,"
  echo "kernel $(uname -r), LXC $(lxc-ls --version), cgroup $cgroup, LXC path on $(df --output=fstype "$(lxc-config lxc.lxcpath)" | tail -1)."
  echo "The host was shared with other builds and tests while this ran, so times are upper bounds."
  echo
  echo "$table"
  echo
  echo "\"SSH-ready\" means: plan, clone (overlay snapshot), config, start, DHCP address read back,"
  echo "key installed, and sshd answering with its banner. The cold bootstrap downloads Debian bookworm"
  echo "(minbase + openssh-server + python3) from Debian's mirror; the warm one reuses the debootstrap cache."
} > docs/benchmarks/lxc.md
cat docs/benchmarks/lxc.md
