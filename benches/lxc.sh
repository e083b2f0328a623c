#!/usr/bin/env bash
# Benchmark of the lxc backend (not a test): wall time of the base bootstrap (cold and warm
# debootstrap cache), of one container cloned from the cached base until SSH answers, and of
# five and ten containers in parallel, next to the figures from before containers had static
# addresses. Needs root, lxc, debootstrap and Debian's mirror; everything it creates is named
# pgobench-<pid>-… and removed at the end.
#
#   sudo benches/lxc.sh                                  # everything; writes docs/benchmarks/lxc.md
#   sudo PGO_BENCH_BASE=pgo-base-bookworm benches/lxc.sh # reuse a ready base: no bootstrap rows
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "error: LXC needs root: run sudo $0" >&2; exit 1; }
ip -4 addr show dev lxcbr0 2>/dev/null | grep -q inet || /usr/libexec/lxc/lxc-net start

cargo bench --locked --quiet --bench lxc_bench --no-run
breakdown_file=$(mktemp)
trap 'rm -f "$breakdown_file"' EXIT
load=$(cut -d' ' -f1 /proc/loadavg)
table=$(cargo bench --locked --quiet --bench lxc_bench 2>"$breakdown_file") || { cat "$breakdown_file" >&2; exit 1; }
breakdown=$(grep -E '^pgobench-[0-9]+-p10x[0-9]+:' "$breakdown_file" | sed -E 's/^pgobench-[0-9]+-//')

cgroup=v1; [ -f /sys/fs/cgroup/cgroup.controllers ] && cgroup=v2
{
  echo "# lxc backend benchmark"
  echo
  echo "Produced by \`benches/lxc.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'): $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB RAM,"
  echo "kernel $(uname -r), LXC $(lxc-ls --version), cgroup $cgroup, LXC path on $(df --output=fstype "$(lxc-config lxc.lxcpath)" | tail -1)."
  echo "Load average $load when it started (anything else running on the host only makes these times"
  echo "longer: they are upper bounds)."
  echo
  echo "$table"
  echo
  echo "\"SSH-ready\" means: plan, clone (overlay snapshot), config (address chosen, guest files written),"
  echo "start, address read back, and sshd answering with its banner. The cold bootstrap downloads Debian"
  echo "bookworm (minbase + openssh-server + python3) from Debian's mirror; the warm one reuses the"
  echo "debootstrap cache. Both wait on the debian template's global lock (/var/lock/subsys/lxc-debian)"
  echo "while other lxc-create runs on the host hold it."
  echo
  echo "Before, nearly all of the time was DHCP: lxc-net's dnsmasq pings each address before offering it"
  echo "(up to 3 s), and the leases of containers booting together queued behind those checks (a"
  echo "container's log showed the offer after 3 s and the acknowledgement 12 s later); then the clone's"
  echo "first boot generated its SSH host keys (\`ssh-keygen -A\`, over a second for the RSA key) before"
  echo "sshd started. Now each container has a static address set by LXC before its init runs (outside"
  echo "dnsmasq's range, see docs/lxc.md \"Addresses\"), \`eth0\` is \`manual\` in the guest, its ed25519"
  echo "host key and root's authorized_keys are written before the start, and SSH is polled every 50-250 ms."
  echo
  echo "Where the time goes, per container of the run with ten (seconds, from the artifacts' actions;"
  echo "\"start\" is lxc-start -d, \"wait-ssh\" the boot until sshd answers):"
  echo
  echo '```'
  echo "$breakdown"
  echo '```'
} > docs/benchmarks/lxc.md
cat docs/benchmarks/lxc.md
