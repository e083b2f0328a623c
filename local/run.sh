#!/usr/bin/env bash
# Deploys libs of this monorepo into real LXC containers on this machine — no Proxmox VE
# needed. The main-job command of the README:
#
#   sudo local/run.sh [LIB...]                      # resolve → provision (lxc) → configure; default: broker
#   sudo local/run.sh --destroy [--no-snapshot] LIB...   # snapshot the data, remove the container
#   sudo local/run.sh --purge                       # remove the cached base container
#
# LIB is a directory under libs/, or `config` (the control plane's own container, from the root
# container.env). The broker needs LOGIN and PASSWORD (environment, or "login"/"password" in
# local/config.local.json). --destroy keeps the lib's snapshots and key pair in the share, so a
# later deploy restores the data; --no-snapshot destroys without taking a snapshot first.
#
# On a fresh Debian/Ubuntu machine it installs what is missing (lxc, debootstrap, dnsmasq-base,
# ansible, openssh-client, python3, iproute2, procps; a Rust toolchain is assumed), starts lxc-net
# (bridge lxcbr0 with DHCP), builds the binary and runs the pipeline steps. Idempotent: a second
# run changes nothing. Exit codes: 0 done, 1 a step failed, 2 bad usage.
#
# Environment: PGO_LXC_PATH (LXC path, default from `lxc-config lxc.lxcpath`), PROXMOX_SHARE
# (keys, snapshots; default /share), PGO_STAGE (default main), PGO_PROFILE (cargo profile,
# default release), PGO_LXC_BASE (base for --purge, default pgo-base-bookworm),
# PGO_NO_SNAPSHOT=1 (same as --no-snapshot).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'error: %s (see %s --help)\n' "$*" "$0" >&2; exit 2; }

mode=deploy
no_snapshot=()
[ "${PGO_NO_SNAPSHOT:-}" = 1 ] && no_snapshot=(--no-snapshot)
libs=()
for arg in "$@"; do
  case "$arg" in
    --destroy|--purge)
      [ "$mode" = deploy ] || usage "--destroy and --purge exclude each other"
      mode=${arg#--} ;;
    --no-snapshot) no_snapshot=(--no-snapshot) ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option \`$arg\`" ;;
    *) libs+=("$arg") ;;
  esac
done
case "$mode" in
  deploy) [ "${#libs[@]}" -gt 0 ] || libs=(broker) ;;
  destroy) [ "${#libs[@]}" -gt 0 ] || usage "--destroy needs the lib(s) to remove" ;;
  purge) [ "${#libs[@]}" -eq 0 ] || usage "--purge takes no lib: remove the libs first with --destroy" ;;
esac
[ "${#no_snapshot[@]}" -eq 0 ] || [ "$mode" = destroy ] || usage "--no-snapshot only goes with --destroy"
stage="${PGO_STAGE:-main}"
profile="${PGO_PROFILE:-release}"

[ "$(id -u)" -eq 0 ] || die "LXC containers need root: run \`sudo $0 $*\`"
for lib in "${libs[@]}"; do
  if [ ! -d "libs/$lib" ] && [ "$lib" != config ]; then
    available=$(cd libs 2>/dev/null && for d in */; do printf '%s, ' "${d%/}"; done)
    usage "no lib \`$lib\` in $repo/libs (available: ${available}config)"
  fi
done

# 1. Packages.
missing=()
for pkg in lxc debootstrap dnsmasq-base ansible openssh-client python3 iproute2 procps; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get: install them by hand"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# sudo resets PATH (secure_path): look where rustup puts cargo, for root and for the sudo user.
if ! command -v cargo >/dev/null; then
  for home in "$HOME" ${SUDO_USER:+"$(getent passwd "$SUDO_USER" | cut -d: -f6)"}; do
    if [ -x "$home/.cargo/bin/cargo" ]; then
      export PATH="$home/.cargo/bin:$PATH"
      [ -n "${RUSTUP_HOME:-}" ] || [ ! -d "$home/.rustup" ] || export RUSTUP_HOME="$home/.rustup"
      break
    fi
  done
fi
command -v cargo >/dev/null \
  || die "cargo not found: install a Rust toolchain (https://rustup.rs), or run \`sudo env PATH=\"\$PATH\" $0\` if cargo is in your user's PATH"

# 2. LXC's bridge with DHCP.
# shellcheck source=local/lxc-net.sh
. "$repo/local/lxc-net.sh"
ensure_lxc_net || exit 1

# 3. The binary.
if [ -x "$repo/target/$([ "$profile" = dev ] && echo debug || echo "$profile")/proxmox-gitops" ]; then
  say "building proxmox-gitops ($profile)"
else
  say "building proxmox-gitops ($profile; the first build can take 15 minutes on 2 cores, and prints nothing meanwhile)"
fi
if [ "$profile" = release ]; then
  cargo build --release --locked --quiet
  bin="$repo/target/release/proxmox-gitops"
else
  cargo build --profile "$profile" --locked --quiet
  dir=$profile; [ "$profile" = dev ] && dir=debug   # cargo's output directory for the dev profile
  bin="$repo/target/$dir/proxmox-gitops"
fi
pgo() { "$bin" --repo "$repo" --stage "$stage" "$@"; }

# 4. The pipeline.
pgo resolve >/dev/null
artifacts="${PGO_ARTIFACTS:-$repo/.proxmox-gitops}"
inventory="$artifacts/inventory.json"
case "$mode" in
  destroy)
    # The destroy step checks the container is ours (its proxmox-gitops.json names the lib's
    # vmid), takes a verified snapshot of the lib's SNAPSHOT paths into the share first (refusing
    # when it cannot), then stops and removes it.
    for lib in "${libs[@]}"; do
      pgo destroy --backend lxc --container "$lib" "${no_snapshot[@]}"
      say "removed $lib (its snapshots and key pair stay in the share)"
    done
    exit 0
    ;;
  purge)
    lxcpath="${PGO_LXC_PATH:-$(lxc-config lxc.lxcpath)}"
    base="${PGO_LXC_BASE:-pgo-base-bookworm}"
    if [ -e "$lxcpath/$base/config" ]; then
      lxc-destroy -P "$lxcpath" -n "$base" || die "cannot remove $base: remove the containers cloned from it first (local/run.sh --destroy LIB)"
      say "removed the cached base $base"
    fi
    exit 0
    ;;
esac

# What the libs' REQUIRES name (e.g. the broker's LOGIN and PASSWORD) must be set before any
# container is created (exit 2 with what is missing and where to set it).
for lib in "${libs[@]}"; do
  if ! out=$(pgo configure --check --container "$lib" 2>&1); then
    printf '%s\n' "$out" >&2
    exit 2
  fi
done

for lib in "${libs[@]}"; do
  say "provisioning $lib (lxc)"
  pgo provision --backend lxc --container "$lib"
  say "configuring $lib"
  pgo configure --container "$lib"

  python3 - "$artifacts/provision/$lib.json" "$inventory" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
share = json.load(open(sys.argv[2]))["settings"]["share"]
print()
print(f"  {p['name']}: container {p['hostname']} ({p['status']}) at {p['address']}")
# The base role disables root logins and authorizes the container key for `config`.
print(f"  ssh:    ssh -i {share}/.keys/{p['vmid']} config@{p['address']}")
print(f"  shell:  lxc-attach -n {p['hostname']}")
# The provision step's warnings (the IP and DISK notes …) were printed by `provision` itself:
# not repeated here, so that each appears once per run.
PY
done
