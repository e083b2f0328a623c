# Sourced by local/run.sh and tests/run.sh (bash): makes sure LXC's bridge lxcbr0 is up WITH its
# DHCP server, the way the lxc backend's ensure_bridge does (src/lxc/mod.rs).
#
# The bridge and its address outlive lxc-net's dnsmasq when the process that started it is killed
# (a session ending, a CI machine reused): then lxc-net's stale run state (/run/lxc/network_up,
# dnsmasq.pid) must go before it starts again, or lxc-net says "already running" and containers
# never get an address.

lxcbr0_up() { ip -4 addr show dev lxcbr0 2>/dev/null | grep -q inet; }

lxcbr0_dhcp_up() {
  local pid
  for pid in $(pgrep -x dnsmasq || true); do
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx -- '--interface=lxcbr0' && return 0
  done
  return 1
}

# ensure_lxc_net: returns 0 when lxcbr0 has an address and a dnsmasq serving it; says what it does
# on stderr; returns 1 (with the reason) when lxc-net could not bring it up.
ensure_lxc_net() {
  lxcbr0_up && lxcbr0_dhcp_up && return 0
  if lxcbr0_up; then
    echo "==> lxcbr0 is up without its dnsmasq: restarting lxc-net" >&2
    rm -f /run/lxc/network_up /run/lxc/dnsmasq.pid
  else
    echo "==> starting lxc-net (bridge lxcbr0)" >&2
  fi
  if [ -d /run/systemd/system ]; then
    systemctl restart lxc-net
  else
    /usr/libexec/lxc/lxc-net start
  fi
  lxcbr0_up && lxcbr0_dhcp_up && return 0
  echo "error: lxcbr0 has no DHCP after starting lxc-net: check USE_LXC_BRIDGE=\"true\" in" \
       "/etc/default/lxc-net and that dnsmasq-base is installed" >&2
  return 1
}
