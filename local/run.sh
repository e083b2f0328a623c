#!/usr/bin/env bash
# Deploys libs of this monorepo into real LXC containers on this machine — no Proxmox VE
# needed. The main-job command of the README:
#
#   sudo ./local/run.sh [OPTION...] [LIB...]   # resolve → provision (lxc) → configure; default: broker
#   sudo ./local/run.sh --destroy [--no-snapshot] LIB...   # snapshot the data, remove the container
#   sudo ./local/run.sh --purge                # remove the cached base container
#
# LIB is a directory under libs/, or `config` (the control plane's own container, from the root
# container.env). Options passed to `provision`, as its messages advise them:
#   --allow-recreate      destroy and recreate a container whose change cannot be applied in place
#                         (its SNAPSHOT data is snapshotted first and restored by configure)
#   --recreate POLICY     the recreate policy: never (default), when-needed, always
#   --no-snapshot         recreate or destroy without taking a data snapshot first (data is lost)
#
# Before the (long, first) build it decides the local settings (local/settings.py): LOGIN and
# PASSWORD, when set nowhere, are generated once into local/config.local.json (mode 0600,
# git-ignored) and reused by later runs; the share (container key pairs, data snapshots) is
# PROXMOX_SHARE or proxmox.share, else /var/lib/proxmox-gitops/share (/share when it holds key
# pairs of earlier runs). --destroy keeps the lib's snapshots and key pair in the share, so a
# later deploy restores the data.
#
# On a fresh Debian/Ubuntu machine it installs what is missing (lxc, debootstrap, dnsmasq-base,
# ansible, openssh-client, python3, iproute2, procps; a Rust toolchain is assumed), starts lxc-net
# (bridge lxcbr0 with DHCP), builds the binary (target/<profile>/proxmox-gitops) and runs the
# pipeline steps; at the end it shows how to reach each container and what its lib published.
# Idempotent: a second run changes nothing. Exit codes: 0 done, 1 a step failed, 2 bad usage or
# input.
#
# Environment: LOGIN, PASSWORD, PROXMOX_SHARE (override local/config.local.json), PGO_LXC_PATH
# (LXC path, default from `lxc-config lxc.lxcpath`), PGO_STAGE (default main), PGO_PROFILE (cargo
# profile, default release), PGO_LXC_BASE (base for --purge, default pgo-base-bookworm),
# PGO_NO_SNAPSHOT=1 (same as --no-snapshot).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# How the user runs this script, for the advice it prints.
self="./local/run.sh"
args=("$@")
say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'error: %s (see %s --help)\n' "$*" "$self" >&2; exit 2; }

mode=deploy
no_snapshot=()
[ "${PGO_NO_SNAPSHOT:-}" = 1 ] && no_snapshot=(--no-snapshot)
policy=()
libs=()
while [ $# -gt 0 ]; do
  arg=$1; shift
  case "$arg" in
    --destroy|--purge)
      [ "$mode" = deploy ] || usage "--destroy and --purge exclude each other"
      mode=${arg#--} ;;
    --no-snapshot) no_snapshot=(--no-snapshot) ;;
    --allow-recreate)
      [ "${#policy[@]}" -eq 0 ] || usage "--allow-recreate and --recreate exclude each other"
      policy=(--allow-recreate) ;;
    --recreate|--recreate=*)
      [ "${#policy[@]}" -eq 0 ] || usage "--allow-recreate and --recreate exclude each other"
      if [ "$arg" = --recreate ]; then
        [ $# -gt 0 ] || usage "--recreate needs a policy: never, when-needed or always"
        value=$1; shift
      else
        value=${arg#--recreate=}
      fi
      case "$value" in
        never|when-needed|always) policy=(--recreate "$value") ;;
        *) usage "--recreate \`$value\`: expected never, when-needed or always" ;;
      esac ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option \`$arg\`" ;;
    *) libs+=("$arg") ;;
  esac
done
case "$mode" in
  deploy) [ "${#libs[@]}" -gt 0 ] || libs=(broker) ;;
  destroy) [ "${#libs[@]}" -gt 0 ] || usage "--destroy needs the lib(s) to remove" ;;
  purge) [ "${#libs[@]}" -eq 0 ] || usage "--purge takes no lib: remove the libs first with --destroy" ;;
esac
[ "${#policy[@]}" -eq 0 ] || [ "$mode" = deploy ] || usage "${policy[0]} only goes with a deploy (it is provision's recreate policy)"
[ "${#no_snapshot[@]}" -eq 0 ] || [ "$mode" != purge ] || usage "--no-snapshot does not go with --purge"
stage="${PGO_STAGE:-main}"
profile="${PGO_PROFILE:-release}"
[ "$(id -u)" -eq 0 ] || die "LXC containers need root: run \`sudo $self${args[*]:+ ${args[*]}}\`"
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
# 2. The local settings, decided before the build so that nothing is asked for after it: LOGIN and
# PASSWORD (generated once when set nowhere), the share (see local/settings.py).
if [ "$mode" != purge ]; then
  share=$(python3 "$repo/local/settings.py" "$repo") || exit $?
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
  || die "cargo not found: install a Rust toolchain (https://rustup.rs), or run \`sudo env PATH=\"\$PATH\" $self\` if cargo is in your user's PATH"

# 3. LXC's bridge with DHCP.
# shellcheck source=local/lxc-net.sh
. "$repo/local/lxc-net.sh"
ensure_lxc_net || exit 1

# 4. The binary.
# A rebuild is quick and quiet; the first build shows cargo's own progress (the crate it
# compiles, and its progress bar on a terminal), so that a build is never mistaken for a hang.
quiet=1
if [ -x "$repo/target/$([ "$profile" = dev ] && echo debug || echo "$profile")/proxmox-gitops" ]; then
  say "building proxmox-gitops ($profile)"
else
  say "building proxmox-gitops ($profile; the first build can take 15 minutes on 2 cores)"
  quiet=
fi
if [ "$profile" = release ]; then
  cargo build --release --locked ${quiet:+--quiet}
  bin="$repo/target/release/proxmox-gitops"
else
  cargo build --profile "$profile" --locked ${quiet:+--quiet}
  dir=$profile; [ "$profile" = dev ] && dir=debug   # cargo's output directory for the dev profile
  bin="$repo/target/$dir/proxmox-gitops"
fi
pgo() { "$bin" --repo "$repo" --stage "$stage" "$@"; }

# 5. The pipeline.
pgo resolve >/dev/null
artifacts="${PGO_ARTIFACTS:-$repo/.proxmox-gitops}"
# Marks the start of each step: an artifact newer than it was written by this run.
mark=$(mktemp)
trap 'rm -f "$mark"' EXIT
# A failed step's advice, read from the artifact it wrote, as options of this script, so that it
# can be followed here: `sudo ./local/run.sh --allow-recreate broker`. $1: the artifact; $2: the
# mode option (`--destroy`) or empty.
advise() {
  local file=$1 flags=("${policy[@]}" "${no_snapshot[@]}")
  [ -f "$file" ] && [ "$file" -nt "$mark" ] || return 0
  if [ "${#policy[@]}" -eq 0 ] && grep -q -e '--allow-recreate' -e '--recreate when-needed' "$file"; then
    flags+=(--allow-recreate)
  fi
  if [ "${#no_snapshot[@]}" -eq 0 ] && grep -q -e '--no-snapshot' "$file"; then
    flags+=(--no-snapshot)
  fi
  [ "${#flags[@]}" -gt "$(( ${#policy[@]} + ${#no_snapshot[@]} ))" ] || return 0
  say "to follow that advice through this script: sudo $self ${2:+$2 }${flags[*]} ${libs[*]}"
}
case "$mode" in
  destroy)
    # The destroy step checks the container is ours (its proxmox-gitops.json names the lib's
    # vmid), takes a verified snapshot of the lib's SNAPSHOT paths into the share first (refusing
    # when it cannot), then stops and removes it.
    for lib in "${libs[@]}"; do
      touch "$mark"
      pgo destroy --backend lxc --container "$lib" "${no_snapshot[@]}" || {
        rc=$?
        advise "$artifacts/destroy/$lib.json" --destroy
        exit "$rc"
      }
      say "removed $lib (its snapshots and key pair stay in the share, $share)"
    done
    exit 0
    ;;
  purge)
    lxcpath="${PGO_LXC_PATH:-$(lxc-config lxc.lxcpath)}"
    base="${PGO_LXC_BASE:-pgo-base-bookworm}"
    if [ -e "$lxcpath/$base/config" ]; then
      lxc-destroy -P "$lxcpath" -n "$base" || die "cannot remove $base: remove the containers cloned from it first (sudo $self --destroy LIB)"
      say "removed the cached base $base"
    fi
    exit 0
    ;;
esac

# What the libs' REQUIRES name must be set before any container is created (exit 2 with what is
# missing and where to set it). LOGIN and PASSWORD are set by now (step 2); this catches the
# names a lib adds.
for lib in "${libs[@]}"; do
  if ! out=$(pgo configure --check --container "$lib" 2>&1); then
    printf '%s\n' "$out" >&2
    exit 2
  fi
done

# Each lib: provision, configure; then, for every lib reached (also when one failed), how to
# reach it and what its configuration reported (local/summary.py). The provision step's warnings
# (the IP and DISK notes …) are printed by `provision` itself, once per run.
touch "$mark"
run_mark=$(mktemp)
trap 'rm -f "$mark" "$run_mark"' EXIT
done_libs=()
rc=0
for lib in "${libs[@]}"; do
  say "provisioning $lib (lxc)"
  touch "$mark"
  done_libs+=("$lib")
  pgo provision --backend lxc --container "$lib" "${policy[@]}" "${no_snapshot[@]}" || {
    rc=$?
    advise "$artifacts/provision/$lib.json"
    break
  }
  say "configuring $lib"
  pgo configure --container "$lib" || { rc=$?; break; }
done
python3 "$repo/local/summary.py" "$repo" "$artifacts" "$run_mark" "${done_libs[@]}" || true
exit "$rc"
