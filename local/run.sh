#!/usr/bin/env bash
# Deploys one lib of this monorepo into a real LXC container on this machine — no Proxmox VE
# needed. The main-job command of the README:
#
#   sudo local/run.sh [LIB]            # resolve → provision (lxc) → configure; default LIB: broker
#   sudo local/run.sh --destroy [LIB]  # snapshots the lib's data, removes the container (base stays)
#   sudo local/run.sh --purge          # also removes the cached base container
#
# On a fresh Debian/Ubuntu machine it installs what is missing (lxc, debootstrap, dnsmasq-base,
# ansible, openssh-client; a Rust toolchain is assumed), starts lxc-net (bridge lxcbr0 with
# DHCP), builds the binary and runs the pipeline steps. Idempotent: a second run changes nothing.
#
# Environment: PGO_LXC_PATH (LXC path, default from `lxc-config lxc.lxcpath`), PROXMOX_SHARE
# (where the per-container SSH keys live, default /share), PGO_STAGE (default main),
# PGO_PROFILE (cargo profile, default release), PGO_LXC_BASE (base for --purge, default
# pgo-base-bookworm), PGO_NO_SNAPSHOT=1 (--destroy without a data snapshot first).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

mode=deploy
case "${1:-}" in
  --destroy) mode=destroy; shift ;;
  --purge) mode=purge; shift ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
esac
lib="${1:-broker}"
stage="${PGO_STAGE:-main}"
profile="${PGO_PROFILE:-release}"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "LXC containers need root: run \`sudo $0 $*\`"
if [ "$mode" != purge ] && [ ! -d "libs/$lib" ] && [ "$lib" != config ]; then
  die "no lib \`$lib\` in $repo/libs (available: $(ls libs 2>/dev/null | tr '\n' ' '))"
fi

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
command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain (https://rustup.rs), then run again"

# 2. LXC's bridge with DHCP.
# shellcheck source=local/lxc-net.sh
. "$repo/local/lxc-net.sh"
ensure_lxc_net || exit 1

# 3. The binary.
say "building proxmox-gitops ($profile)"
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
field() { # field CONTAINER KEY — a value from inventory.json
  python3 - "$inventory" "$1" "$2" <<'PY'
import json, sys
inv = json.load(open(sys.argv[1]))
for c in inv["containers"]:
    if sys.argv[2] in (c["name"], c["hostname"]):
        print(c[sys.argv[3]])
        break
else:
    sys.exit(f"no container {sys.argv[2]} in {sys.argv[1]}")
PY
}

case "$mode" in
  destroy)
    # The destroy step checks the container is ours (its proxmox-gitops.json names the lib's
    # vmid), takes a verified snapshot of the lib's SNAPSHOT paths into the share first (refusing
    # when it cannot), then stops and removes it. PGO_NO_SNAPSHOT=1 skips the snapshot.
    no_snapshot=()
    [ "${PGO_NO_SNAPSHOT:-}" = 1 ] && no_snapshot=(--no-snapshot)
    pgo destroy --backend lxc --container "$lib" "${no_snapshot[@]}"
    say "removed $lib"
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
for w in p.get("warnings", []):
    print(f"  note:   {w}")
PY
