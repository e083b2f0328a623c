#!/usr/bin/env bash
# Benchmark of `rewrite` and `publish` against the Gitea double on loopback.
# Usage: tests/gitea_double/bench.sh [LIBS] > docs/benchmarks/gitea.md
# LIBS submodule libs (default 20) plus 5 plain-directory libs; each run is timed with bash's
# `time` (wall clock). Needs python3, git and a built binary (cargo build).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIBS=${1:-20}
BIN=${BIN:-target/debug/proxmox-gitops}
[ -x "$BIN" ] || cargo build -q
work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
g() { git -c protocol.file.allow=always -c init.defaultBranch=main "$@"; }

mkdir -p "$work/mono/libs"
g -C "$work/mono" init -q
for i in $(seq 1 5); do mkdir -p "$work/mono/libs/plain$i"; echo "ID=$((200 + i))" > "$work/mono/libs/plain$i/container.env"; done
g -C "$work/mono" add . && g -C "$work/mono" commit -qm mono
for i in $(seq 1 "$LIBS"); do
  u="$work/up/lib$i"; mkdir -p "$u"; g -C "$u" init -q
  for f in $(seq 1 20); do echo "$i $f" > "$u/file$f"; done
  g -C "$u" add . && g -C "$u" commit -qm "lib$i"
  g -C "$work/mono" submodule add -q "$u" "libs/lib$i"
  g -C "$work/mono" config -f .gitmodules "submodule.libs/lib$i.url" "https://git.example.invalid/org/lib$i.git"
done
g -C "$work/mono" add . && g -C "$work/mono" commit -qm subs

export GITEA_DOUBLE_PASSWORD=bench-pw
python3 tests/gitea_double/server.py --root "$work/repos" > "$work/port" &
server_pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; python3 -c 'import time; time.sleep(0.05)'; done
url="http://127.0.0.1:$(awk '{print $2}' "$work/port")"

t() { # label, command…
  local label=$1; shift
  local s e
  s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N)
  printf '| %s | %.2f |\n' "$label" "$(echo "$e - $s" | bc)"
}
run() { LOGIN=admin PASSWORD=bench-pw "$BIN" -q --repo "$work/mono" --artifacts "$work/art" "$@"; }

echo "# Benchmark: rewrite and publish against the Gitea double"
echo
echo "$(date -u +%Y-%m-%d), $(nproc) CPUs (shared with other builds), load $(cut -d' ' -f1 /proc/loadavg);"
echo "monorepo with $LIBS submodule libs (20 files each) and 5 plain-directory libs; debug build;"
echo "Gitea double (Python, git http-backend) on 127.0.0.1. Command: \`tests/gitea_double/bench.sh $LIBS\`."
echo
echo "| step | seconds |"
echo "|---|---|"
t "rewrite (working copy, $((LIBS + 5)) modules)" run rewrite --gitea "$url"
t "rewrite again (replaces the working copy)" run rewrite --gitea "$url"
t "publish from scratch ($((LIBS + 6)) repos, forks)" run publish --gitea "$url"
t "publish again (no change: reads only)" run publish --gitea "$url"
echo change > "$work/mono/libs/lib1/CHANGE"; g -C "$work/mono/libs/lib1" add CHANGE; g -C "$work/mono/libs/lib1" commit -qm change
g -C "$work/mono" add libs/lib1; g -C "$work/mono" commit -qm "update lib1"
t "publish after one lib changed (rollback, PRs)" run publish --gitea "$url"
