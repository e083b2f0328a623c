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
breakdown_file=$(mktemp)
trap 'rm -f "$breakdown_file"' EXIT
table=$(target/debug/examples/lxc_bench 2>"$breakdown_file") || { cat "$breakdown_file" >&2; exit 1; }
breakdown=$(grep -E '^pgobench-[0-9]+-par[0-9]+:' "$breakdown_file" | sed -E 's/^pgobench-[0-9]+-//')

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
  echo "Both wait on the debian template's global lock (/var/lock/subsys/lxc-debian) while other"
  echo "lxc-create runs on the host hold it."
  echo
  echo "Where the time goes, per container of the parallel run (seconds, from the artifacts' actions;"
  echo "\"address\" is the wait from start until lxc-info shows the DHCP lease, i.e. the container's boot):"
  echo
  echo '```'
  echo "$breakdown"
  echo '```'
  echo
  echo "Nearly all of it is DHCP: lxc-net's dnsmasq pings each address before offering it (up to 3 s),"
  echo "and the leases of containers booting together queue behind those checks (a container's log"
  echo "showed the offer after 3 s and the acknowledgement 12 s later). docs/lxc.md shows how to switch"
  echo "the ping off on a machine that only runs LXC's containers on lxcbr0."
} > docs/benchmarks/lxc.md
cat docs/benchmarks/lxc.md
