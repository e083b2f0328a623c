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
# and one passed to `configure`:
#   --full                run the base role and each lib's engine even when nothing changed since
#                         the container's last configure (by default a re-run that changes nothing
#                         skips them: docs/configure.md, "Re-runs"); the same as
#                         PROXMOX_GITOPS_CONFIGURE=full
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
# PGO_NO_SNAPSHOT=1 (same as --no-snapshot), PGO_BINARY (a built proxmox-gitops to use instead of
# building one), PROXMOX_GITOPS_CONFIGURE=full (same as --full). For `config`: PGO_GITEA_BINARY,
# PGO_GITEA_STATIC, PGO_RUNNER_BINARY (the control plane's programs; unset, they are downloaded
# from Gitea's release site and verified).
#
# `config` is the control plane: once it runs Gitea, this monorepo is published into it
# (`publish --release-from-root`) and the run ends with the release pull request to accept and
# the login. Without Proxmox VE settings a runner on this host (label shell, under
# /var/lib/proxmox-gitops/runner/) deploys the libs into local containers when it is accepted.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# How the user runs this script, for the advice it prints. PGO_ENTRY tells the binary the same:
# its hints then name this script's options (`sudo ./local/run.sh --allow-recreate broker`), not
# its own (README.md, "Hints").
self="./local/run.sh"
export PGO_ENTRY=local-run
args=("$@")
say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'error: %s (see %s --help)\n' "$*" "$self" >&2; exit 2; }

mode=deploy
full=
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
    --full) full=1 ;;
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
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
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
[ -z "$full" ] || [ "$mode" = deploy ] || usage "--full only goes with a deploy (it is configure's option)"
# configure reads it (the same as its --force); set in the environment, it is passed through.
[ -z "$full" ] || export PROXMOX_GITOPS_CONFIGURE=full
stage="${PGO_STAGE:-main}"
profile="${PGO_PROFILE:-release}"
[ "$(id -u)" -eq 0 ] || die "LXC containers need root: run \`sudo $self${args[*]:+ ${args[*]}}\`"
for lib in "${libs[@]}"; do
  if [ ! -d "libs/$lib" ] && [ "$lib" != config ]; then
    available=$(cd libs 2>/dev/null && for d in */; do [ ! -d "$d" ] || printf '%s, ' "${d%/}"; done || true)
    usage "no lib \`$lib\` in $repo/libs (available: ${available}config)"
  fi
done

# config publishes this monorepo's commits (HEAD) while this run reads its working tree: with
# changes not committed, the release pull request would deploy something else than what this
# run configures and plans (another vmid, another address). Refused before anything is done.
if [ "$mode" = deploy ] && printf '%s\n' "${libs[@]}" | grep -qx config && command -v git >/dev/null \
  && git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  dirty=$(git -C "$repo" status --porcelain --ignore-submodules=none 2>/dev/null | head -n 5 | cut -c4- | paste -sd ' ' -)
  if [ -n "$dirty" ]; then
    printf 'error: %s has changes that are not committed (%s): config publishes the commits, so the release would deploy something else than this run plans; commit them (git -C %q add -A && git -C %q commit -m '\''...'\'') or stash them, then run again\n' \
      "$repo" "$dirty" "$repo" "$repo" >&2
    exit 2
  fi
fi

# 1. Packages.
# One dpkg-query for all of them (a re-run's every step counts: docs/benchmarks/rerun.md).
missing=()
installed=$(dpkg-query -W -f '${Package} ${Status}\n' lxc debootstrap dnsmasq-base ansible openssh-client \
  python3 iproute2 procps 2>/dev/null || true)
for pkg in lxc debootstrap dnsmasq-base ansible openssh-client python3 iproute2 procps; do
  grep -qx "$pkg install ok installed" <<<"$installed" || missing+=("$pkg")
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
  # -S: the standard library only, without site's start-up (tens of ms on every run).
  share=$(python3 -S "$repo/local/settings.py" "$repo") || exit $?
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
[ -n "${PGO_BINARY:-}" ] || command -v cargo >/dev/null \
  || die "cargo not found: install a Rust toolchain (https://rustup.rs), or run \`sudo env PATH=\"\$PATH\" $self\` if cargo is in your user's PATH"

# 3. LXC's bridge with DHCP.
# shellcheck source=local/lxc-net.sh
. "$repo/local/lxc-net.sh"
ensure_lxc_net || exit 1

# 4. The binary.
# A rebuild is quick and quiet; the first build shows cargo's own progress (the crate it
# compiles, and its progress bar on a terminal), so that a build is never mistaken for a hang.
if [ -n "${PGO_BINARY:-}" ]; then
  [ -x "$PGO_BINARY" ] || die "PGO_BINARY=$PGO_BINARY is not an executable file"
  bin=$PGO_BINARY
else
quiet=1
skip_build=
built="$repo/target/$([ "$profile" = dev ] && echo debug || echo "$profile")/proxmox-gitops"
if [ -x "$built" ] && [ -z "$(find "$repo/src" "$repo/Cargo.toml" "$repo/Cargo.lock" -newer "$built" -print -quit 2>/dev/null)" ]; then
  # Nothing cargo builds it from is newer than the binary: cargo's own no-op check (about 0.4 s)
  # is skipped. A source that changed with an older mtime (`cp -p`, `tar -x`) is not seen: touch
  # it, or remove the binary.
  skip_build=1
elif [ -x "$built" ]; then
  say "building proxmox-gitops ($profile)"
else
  say "building proxmox-gitops ($profile; the first build can take 15 minutes on 2 cores)"
  quiet=
fi
if [ -n "$skip_build" ]; then
  bin=$built
elif [ "$profile" = release ]; then
  cargo build --release --locked ${quiet:+--quiet}
  bin="$repo/target/release/proxmox-gitops"
else
  cargo build --profile "$profile" --locked ${quiet:+--quiet}
  dir=$profile; [ "$profile" = dev ] && dir=debug   # cargo's output directory for the dev profile
  bin="$repo/target/$dir/proxmox-gitops"
fi
fi
pgo() { "$bin" --repo "$repo" --stage "$stage" "$@"; }

# The settings the control plane needs (local/control_plane.py settings): LOGIN, PVE (yes/no) and
# the programs for `config` (PGO_GITEA_BINARY, PGO_GITEA_STATIC, PGO_RUNNER_BINARY, empty = not
# given), read into cp_* variables.
control_plane_settings() {
  local key value
  while IFS='=' read -r key value; do
    case "$key" in
      LOGIN) cp_login=$value ;;
      PVE) cp_pve=$value ;;
      PGO_GITEA_BINARY) cp_gitea=$value ;;
      PGO_GITEA_STATIC) cp_static=$value ;;
      PGO_RUNNER_BINARY) cp_runner=$value ;;
    esac
  done < <(python3 "$repo/local/control_plane.py" settings "$repo")
}

# A runner on this host for local deploys (the lxc backend): a container cannot create its
# sibling containers. Its programs and state are under $runner_dir; it is registered once with
# the control plane's Gitea (a token Gitea generates, read from stdin), and (re)started when it
# is not running or its configuration changed. $1: Gitea's URL; $2: config's container.
host_runner() {
  local url=$1 ct=$2 lxcpath token cfg new pid
  lxcpath="${PGO_LXC_PATH:-$(lxc-config lxc.lxcpath)}"
  runner_dir="/var/lib/proxmox-gitops/runner/$ct"
  mkdir -p "$runner_dir/work"
  chmod 0700 "$runner_dir"
  # The same runner program config runs, taken from the container.
  lxc-attach -P "$lxcpath" -n "$ct" -- cat /usr/local/bin/gitea-runner > "$runner_dir/gitea-runner.new"
  chmod 0755 "$runner_dir/gitea-runner.new"
  if cmp -s "$runner_dir/gitea-runner.new" "$runner_dir/gitea-runner"; then
    rm -f "$runner_dir/gitea-runner.new"
  else
    mv "$runner_dir/gitea-runner.new" "$runner_dir/gitea-runner"
  fi
  # JSON strings are YAML strings: every value quoted safely.
  q() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
  cfg="$runner_dir/config.yaml"
  new=$(
    printf 'log:\n  level: info\nrunner:\n  file: %s\n  capacity: 1\n  envs:\n' "$(q "$runner_dir/.runner")"
    printf '    PGO_LXC_PATH: %s\n' "$(q "$lxcpath")"
    [ -z "${PGO_LXC_BASE:-}" ] || printf '    PGO_LXC_BASE: %s\n' "$(q "$PGO_LXC_BASE")"
    [ -z "$cp_gitea" ] || printf '    PGO_GITEA_BINARY: %s\n' "$(q "$cp_gitea")"
    [ -z "$cp_static" ] || printf '    PGO_GITEA_STATIC: %s\n' "$(q "$cp_static")"
    [ -z "$cp_runner" ] || printf '    PGO_RUNNER_BINARY: %s\n' "$(q "$cp_runner")"
    printf '  timeout: 3h\n  fetch_interval: 1s\n  labels:\n    - "shell:host"\n'
    printf 'cache:\n  enabled: false\nhost:\n  workdir_parent: %s\n' "$(q "$runner_dir/work")"
  )
  local changed=
  if [ "$(cat "$cfg" 2>/dev/null)" != "$new" ]; then
    printf '%s\n' "$new" > "$cfg"
    changed=1
  fi
  if [ ! -f "$runner_dir/.runner" ] || ! grep -qF "\"address\": \"$url\"" "$runner_dir/.runner"; then
    say "registering a runner on this host with the control plane (label shell)"
    rm -f "$runner_dir/.runner"
    token=$(lxc-attach -P "$lxcpath" -n "$ct" -- runuser -u gitea -- /usr/local/bin/gitea --config /etc/gitea/app.ini \
      --work-path /srv/config/gitea actions generate-runner-token 2>/dev/null | tail -n 1)
    (cd "$runner_dir" && printf '%s\n' "$token" | "$runner_dir/gitea-runner" --config "$cfg" register \
      --instance "$url" --name "$(hostname)-$ct" >> "$runner_dir/runner.log" 2>&1) \
      || die "cannot register the host's runner with $url; see $runner_dir/runner.log"
    changed=1
  fi
  pid=$(cat "$runner_dir/runner.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$runner_dir/gitea-runner"; then
    [ -z "$changed" ] && return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  say "starting the host's runner (log: $runner_dir/runner.log)"
  local from
  touch "$runner_dir/runner.log"
  from=$(wc -l < "$runner_dir/runner.log")
  # A session of its own (it outlives this run and the terminal); the pid is written by the
  # process that becomes the runner (setsid may fork).
  # Every descriptor of this run is replaced, so that nothing waiting on this run's output
  # waits on the runner.
  # Not PGO_ENTRY: the runner's jobs are Actions runs, whose hints name the workflow's inputs.
  (cd "$runner_dir" && exec env -u PGO_ENTRY setsid sh -c 'echo "$$" > "$1" && exec "$2" --config "$3" daemon' sh \
    "$runner_dir/runner.pid" "$runner_dir/gitea-runner" "$cfg") >> "$runner_dir/runner.log" 2>&1 < /dev/null &
  for _ in $(seq 300); do
    tail -n "+$((from + 1))" "$runner_dir/runner.log" | grep -q "declare successfully" && return 0
    sleep 0.2
  done
  die "the host's runner did not start within 60 s; see $runner_dir/runner.log"
}

# Stops the runner host_runner started for config's Gitea (its registration stays, for the next
# deploy of config with the same data).
stop_host_runner() {
  local ct pid dir
  ct=config
  [ "$stage" = main ] || ct="$stage-config"
  dir="/var/lib/proxmox-gitops/runner/$ct"
  pid=$(cat "$dir/runner.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/gitea-runner"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    say "stopped the host's runner of $ct"
  fi
}

# Publishes this monorepo into config's Gitea and shows the release pull request and the login.
control_plane() {
  local url ct pull merge
  cp_login= cp_pve= cp_gitea= cp_static= cp_runner=
  control_plane_settings
  url=$(python3 "$repo/local/control_plane.py" url "$artifacts") || return 1
  ct=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hostname"])' "$artifacts/provision/config.json")
  local vars=(HOST="$url") cshare
  if [ "$cp_pve" = yes ]; then
    # config's own runner deploys to Proxmox VE, with the binary the playbook installed.
    # Its share is config's /share, which the lxc backend binds from the share's `share`
    # directory (MOUNT=share), owned by the user the runner runs as (the base role's .keys).
    cshare="$share/share"
    if [ ! -d "$cshare/.keys" ]; then
      say "config has no share at /share, which its runner deploys with: add MOUNT=share to the root container.env and run again: sudo $self config"
      return 2
    fi
    vars+=(PROXMOX_GITOPS_BINARY=/usr/local/bin/proxmox-gitops PROXMOX_SHARE=/share)
  else
    # No Proxmox VE: the libs are deployed into local containers by a runner on this host.
    vars+=(PROXMOX_GITOPS_BACKEND=lxc PROXMOX_GITOPS_BINARY="$bin" PROXMOX_SHARE="$share"
      PROXMOX_GITOPS_ARTIFACTS="/var/lib/proxmox-gitops/artifacts/$ct")
  fi
  [ "$stage" = main ] || vars+=(PROXMOX_GITOPS_STAGE="$stage")
  say "publishing this monorepo into the control plane at $url"
  env "${vars[@]}" "$bin" --quiet --repo "$repo" --stage "$stage" publish --gitea "$url" --release-from-root >/dev/null \
    || { say "publish failed; run it again with: sudo $self config"; return 1; }
  [ "$cp_pve" = yes ] || host_runner "$url" "$ct"
  local mono=
  { read -r pull; read -r merge; read -r mono; } < <(python3 "$repo/local/control_plane.py" pull "$url" "$artifacts") || true
  if [ -n "$mono" ]; then
    # The pull request's description is the plan of the release, as the pipeline on main
    # writes it (publish's own pushes start no workflow).
    env "${vars[@]}" "$bin" --quiet --repo "$repo" --stage "$stage" release-pr --monorepo "$mono" --gitea "$url" >/dev/null \
      || say "could not write the plan into the release pull request (it is still there to accept)"
  fi
  if [ "$cp_pve" = yes ]; then
    # Accepting the release pull request also creates `config` on Proxmox VE, which restores the
    # newest snapshot of /srv/config from the share: this one, with the monorepo published and
    # the pull request's plan written. It goes where config's runner looks (its /share),
    # readable by its user.
    say "snapshotting the control plane's data (/srv/config) into config's share for its move to Proxmox VE"
    PROXMOX_SHARE="$cshare" pgo --quiet snapshot --container config --data-only --keep 5 >/dev/null \
      || { say "the snapshot failed; run again: sudo $self config"; return 1; }
    chown -R --reference="$cshare/.keys" "$cshare/snapshots"
  fi
  printf '\n  control plane: Gitea at %s (login %s, password in local/config.local.json unless set elsewhere)\n' \
    "$url" "$cp_login"
  if [ -n "${pull:-}" ]; then
    printf '    release pull request  %s\n' "$pull"
    printf '    accept it in the browser, or:  curl -u %q -X POST -H '\''Content-Type: application/json'\'' -d '\''{"Do":"merge"}'\'' %s\n' \
      "$cp_login" "$merge"
    if [ "$cp_pve" = yes ]; then
      printf '    merging deploys the libs and config itself onto Proxmox VE through config'\''s own runner (none on this host)\n'
    else
      printf '    merging deploys the libs into local containers through the runner on this host\n'
    fi
  else
    printf '    nothing to accept: release is up to date with main\n'
  fi
}

# 5. The pipeline.
pgo resolve >/dev/null
artifacts="${PGO_ARTIFACTS:-$repo/.proxmox-gitops}"
case "$mode" in
  destroy)
    # The destroy step checks the container is ours (its proxmox-gitops.json names the lib's
    # vmid), takes a verified snapshot of the lib's SNAPSHOT paths into the share first (refusing
    # when it cannot), then stops and removes it.
    for lib in "${libs[@]}"; do
      [ "$lib" != config ] || stop_host_runner
      pgo destroy --backend lxc --container "$lib" "${no_snapshot[@]}"
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
  # config's runner deploying to Proxmox VE gets the settings as Actions variables: a CA file of
  # this host would name a path it does not have.
  if [ "$lib" = config ] && [ -n "${PROXMOX_CA:-}" ] \
    && python3 "$repo/local/control_plane.py" settings "$repo" | grep -qx 'PVE=yes'; then
    printf 'error: PROXMOX_CA=%s is a file on this host, which the control plane'\''s runner does not have: unset PROXMOX_CA and trust the PVE node by its certificate'\''s SHA-256 instead (`pvenode cert info` on the node): sudo env PROXMOX_FINGERPRINT=AA:BB:... %s config\n' "$PROXMOX_CA" "$self" >&2
    exit 2
  fi
  if ! out=$(pgo configure --check --container "$lib" 2>&1); then
    printf '%s\n' "$out" >&2
    exit 2
  fi
done

# Each lib: provision, configure; then, for every lib reached (also when one failed), how to
# reach it and what its configuration reported (local/summary.py). The provision step's warnings
# (the IP and DISK notes …) are printed by `provision` itself, once per run.
run_mark=$(mktemp)
trap 'rm -f "$run_mark"' EXIT
done_libs=()
rc=0
for lib in "${libs[@]}"; do
  say "provisioning $lib (lxc)"
  done_libs+=("$lib")
  pgo provision --backend lxc --container "$lib" "${policy[@]}" "${no_snapshot[@]}" || { rc=$?; break; }
  say "configuring $lib"
  pgo configure --container "$lib" || { rc=$?; break; }
done
python3 -S "$repo/local/summary.py" "$repo" "$artifacts" "$run_mark" "${done_libs[@]}" || true
[ "$rc" -eq 0 ] || exit "$rc"

# 6. The control plane: once `config` runs Gitea, this monorepo is published into it and its
# release pull request shown; accepting it deploys the libs through a runner (docs/control-plane.md).
for lib in "${libs[@]}"; do
  [ "$lib" = config ] || continue
  control_plane || exit $?
done
exit 0
