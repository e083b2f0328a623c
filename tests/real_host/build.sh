#!/usr/bin/env bash
# Builds the real Gitea and its Actions runner at the versions pinned in versions.env, from the Go
# module proxy only, into a cache kept by version: a second run reuses the binaries and prints the
# same lines. Needs Go (any version that can fetch GO_TOOLCHAIN through GOTOOLCHAIN).
#
#   tests/real_host/build.sh            # prints PGO_GITEA_BINARY=…, PGO_GITEA_STATIC=…, PGO_RUNNER_BINARY=…
#
# The cache is $PGO_REAL_HOST_CACHE (default /var/cache/proxmox-gitops/real-host when run as root,
# else ~/.cache/proxmox-gitops/real-host):
#   gitea-<version>/gitea          the server (pure-Go SQLite, no cgo)
#   gitea-<version>/static/        its templates/ and options/ (STATIC_ROOT_PATH: built without
#                                  the bindata tag, Gitea reads them from there)
#   runner-<version>/gitea-runner  the runner
# A directory appears only once complete (built in a temporary sibling and renamed), so an
# interrupted build is redone, never half-used. No code of theirs is committed anywhere.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=../../versions.env
. "$here/versions.env"

if [ "$(id -u)" = 0 ]; then
  cache="${PGO_REAL_HOST_CACHE:-/var/cache/proxmox-gitops/real-host}"
else
  cache="${PGO_REAL_HOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxmox-gitops/real-host}"
fi
mkdir -p "$cache"
export GOTOOLCHAIN="$GO_TOOLCHAIN" CGO_ENABLED=0 GOFLAGS=-buildvcs=false

if ! command -v go >/dev/null 2>&1; then
  echo "error: go not found: the real-host tests build Gitea $GITEA_VERSION and its runner" \
       "$GITEA_RUNNER_VERSION from the Go module proxy; install Go (e.g. apt-get install golang-go)" >&2
  exit 1
fi

gitea_dir="$cache/gitea-$GITEA_VERSION"
if [ ! -x "$gitea_dir/gitea" ]; then
  echo "==> building Gitea $GITEA_VERSION from the Go module proxy (a few minutes, once)" >&2
  tmp="$(mktemp -d "$cache/.gitea-$GITEA_VERSION.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mod="$(go mod download -json "code.gitea.io/gitea@v$GITEA_VERSION")"
  src="$(printf '%s' "$mod" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d.get("Error") or print(d["Dir"]))')"
  # The module cache is read-only: build in a writable copy.
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  (cd "$tmp/src" && go build -trimpath -ldflags "-s -w -X main.Version=$GITEA_VERSION" -o "$tmp/out/gitea" .)
  mkdir -p "$tmp/out/static"
  cp -r "$tmp/src/templates" "$tmp/src/options" "$tmp/out/static/"
  rm -rf "$gitea_dir"
  mv "$tmp/out" "$gitea_dir"
  rm -rf "$tmp"
  trap - EXIT
fi

runner_dir="$cache/runner-$GITEA_RUNNER_VERSION"
if [ ! -x "$runner_dir/gitea-runner" ]; then
  echo "==> building Gitea's runner v$GITEA_RUNNER_VERSION from the Go module proxy (once)" >&2
  tmp="$(mktemp -d "$cache/.runner-$GITEA_RUNNER_VERSION.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # `go install …@v` needs the module's version list, which the proxy refuses for this module: a
  # wrapper module that requires the exact version builds it.
  (cd "$tmp" && go mod init pgo.invalid/runner-build >/dev/null 2>&1 \
     && go get "gitea.com/gitea/runner@v$GITEA_RUNNER_VERSION" \
     && go build -trimpath -ldflags "-s -w -X gitea.com/gitea/runner/internal/pkg/ver.version=v$GITEA_RUNNER_VERSION" \
          -o "$tmp/out/gitea-runner" gitea.com/gitea/runner)
  rm -rf "$runner_dir"
  mv "$tmp/out" "$runner_dir"
  rm -rf "$tmp"
  trap - EXIT
fi

echo "PGO_GITEA_BINARY=$gitea_dir/gitea"
echo "PGO_GITEA_STATIC=$gitea_dir/static"
echo "PGO_RUNNER_BINARY=$runner_dir/gitea-runner"
