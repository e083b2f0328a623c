#!/usr/bin/env bash
# Benchmark: `proxmox-gitops resolve` on a generated monorepo with COUNT submodules (nine tenths
# of them libs with a container.env, one tenth nested submodules inside the first libs), next to
# `git submodule status --recursive` on the same repo: wall time (hyperfine), CPU time and peak
# RSS (GNU time). Not a test.
#
# Usage: [PGO_BIN=path] [PGO_BIN_OLD=path] [RUNS=20] benches/resolve.sh [COUNT=200] [OUT.md]
#   COUNT        submodules in all (200 and 2000 in docs/benchmarks/resolve.md)
#   OUT.md       where the Markdown report goes (default: stdout)
#   PGO_BIN      the binary to time (default: the release build, built first)
#   PGO_BIN_OLD  a second binary timed on the same repo, side by side (e.g. an older build)
#   RUNS         hyperfine runs of proxmox-gitops (the git reference: fewer when COUNT > 500)
#   GIT_RUNS     runs of the git reference (default: RUNS, 3 when COUNT > 500; 0: not timed)
#   WORK         a directory for the generated monorepo, kept and reused by the next run with
#                the same COUNT (default: a temp dir, removed at the end)
# Needs: git, hyperfine (apt-get install hyperfine), GNU time, python3.
# Everything happens in a temp dir on local paths: no network.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-200}"
out="${2:-/dev/stdout}"
runs="${RUNS:-20}"
nested=$((count / 10))
libs=$((count - nested))
if [ "$count" -gt 500 ]; then git_runs="${GIT_RUNS:-3}"; else git_runs="${GIT_RUNS:-$runs}"; fi

if [ -n "${PGO_BIN:-}" ]; then
  bin="$(realpath "$PGO_BIN")"
else
  cargo build --release --locked --quiet
  bin="${CARGO_TARGET_DIR:-$PWD/target}/release/proxmox-gitops"
fi
old="${PGO_BIN_OLD:+$(realpath "$PGO_BIN_OLD")}"
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "needs hyperfine (apt-get install hyperfine)" >&2; exit 1; }

if [ -n "${WORK:-}" ]; then
  mkdir -p "$WORK" && work="$(realpath "$WORK")"   # kept (and reused) for another run
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
export HOME="$work/home" GIT_CONFIG_NOSYSTEM=1
mkdir -p "$HOME"
git config --global user.name bench
git config --global user.email bench@example.invalid
git config --global init.defaultBranch main
git config --global protocol.file.allow always
git config --global advice.detachedHead false

root="$work/mono"
if [ -f "$work/generated-$count" ]; then
  echo "reusing the monorepo in $work" >&2
else
  echo "generating $libs libs ($nested with a nested submodule) in $work ..." >&2
  # Each lib is made in place (git init, commit) and registered in the monorepo's index and
  # .gitmodules directly; `git submodule absorbgitdirs` then moves every .git directory to
  # .git/modules/, as a clone with `git submodule update --init --recursive` leaves them (a
  # `.git` file per submodule). The same layout as `git submodule add` of each, in far fewer
  # git processes. The URLs are local paths; nothing is fetched.
  mkdir -p "$work/src"
  git init -q "$work/src/helper"
  echo "helper" > "$work/src/helper/README"
  git -C "$work/src/helper" add -A && git -C "$work/src/helper" commit -qm helper
  helper_commit=$(git -C "$work/src/helper" rev-parse HEAD)
  git init -q "$root"
  printf 'IP="10.20.255.1/16"\nID="100"\n' > "$root/container.env"
  echo '{"DOMAIN": "home.arpa"}' > "$root/globals.json"
  mkdir -p "$root/base" && echo '- hosts: all' > "$root/base/default.yml"
  git -C "$root" add -A && git -C "$root" commit -qm root
  : > "$root/.gitmodules"
  : > "$work/index-info"
  for i in $(seq 1 "$libs"); do
    d="$root/libs/lib$i"
    git init -q "$d"
    printf 'IP="10.20.%d.%d/16"\nID="%d"\nCORES="1"\nMEMORY="512"\nSWAP="512"\nDISK="local-lvm:8"\nMOUNT=""\nBOOT="yes"\n' \
      $((i / 250)) $((i % 250 + 1)) $((1000 + i)) > "$d/container.env"
    printf -- '- hosts: all\n  tasks: []\n' > "$d/playbook.yml"
    if [ "$i" -le "$nested" ]; then
      cp -a "$work/src/helper" "$d/vendor-helper.tmp" && mkdir -p "$d/vendor" && mv "$d/vendor-helper.tmp" "$d/vendor/helper"
      printf '[submodule "vendor/helper"]\n\tpath = vendor/helper\n\turl = %s\n' "$work/src/helper" > "$d/.gitmodules"
      git -C "$d" add .gitmodules container.env playbook.yml
      git -C "$d" update-index --add --cacheinfo "160000,$helper_commit,vendor/helper"
    else
      git -C "$d" add -A
    fi
    git -C "$d" commit -qm "lib$i"
    # Detached at its commit, as `git submodule update` leaves a submodule (the nested one too).
    commit=$(git -C "$d" rev-parse HEAD)
    echo "$commit" > "$d/.git/HEAD"
    if [ "$i" -le "$nested" ]; then echo "$helper_commit" > "$d/vendor/helper/.git/HEAD"; fi
    printf '[submodule "libs/lib%d"]\n\tpath = libs/lib%d\n\turl = %s\n' "$i" "$i" "$work/src/lib$i" >> "$root/.gitmodules"
    printf '160000 %s\tlibs/lib%d\n' "$commit" "$i" >> "$work/index-info"
  done
  git -C "$root" update-index --index-info < "$work/index-info"
  git -C "$root" add .gitmodules
  git -C "$root" commit -qm libs
  git -C "$root" submodule -q init
  for i in $(seq 1 "$nested"); do git -C "$root/libs/lib$i" submodule -q init; done
  git -C "$root" submodule absorbgitdirs -q 2>/dev/null || git -C "$root" submodule absorbgitdirs >/dev/null 2>&1
  touch "$work/generated-$count"
fi
found=$(git -C "$root" submodule status --recursive | wc -l)
echo "submodules: $found" >&2

"$bin" resolve --repo "$root" --artifacts "$work/artifacts" >/dev/null
containers=$(grep -c '"hostname"' "$work/artifacts/inventory.json")

args=(-n "proxmox-gitops resolve" "$bin resolve --repo $root --artifacts $work/artifacts -q")
[ -n "$old" ] && args+=(-n "proxmox-gitops resolve (old binary)" "$old resolve --repo $root --artifacts $work/artifacts -q")
hyperfine --warmup 3 --runs "$runs" -N --style basic --export-json "$work/ours.json" \
  "${args[@]}" >&2
if [ "$git_runs" -gt 0 ]; then
  hyperfine --warmup 1 --runs "$git_runs" -N --style basic --export-json "$work/git.json" \
    -n "git submodule status --recursive" "git -C $root submodule status --recursive" >&2
else
  echo '{"results": []}' > "$work/git.json"
fi

# Peak RSS and CPU time: GNU time, the median of 5 runs each (of git_runs for git).
peak() {
  local n="$1"; shift
  for _ in $(seq 1 "$n"); do
    /usr/bin/time -f '%M %U %S' "$@" 2>&1 >/dev/null | tail -1
  done | python3 -c 'import sys,statistics as s; r=[l.split() for l in sys.stdin]; print(f"{s.median(int(x[0]) for x in r)/1024:.1f} MiB | {s.median(float(x[1])+float(x[2]) for x in r)*1000:.0f} ms")'
}
rss_ours=$(peak 5 "$bin" resolve --repo "$root" --artifacts "$work/artifacts" -q)
[ -n "$old" ] && rss_old=$(peak 5 "$old" resolve --repo "$root" --artifacts "$work/artifacts" -q)
if [ "$git_runs" -gt 0 ]; then rss_git=$(peak "$git_runs" git -C "$root" submodule status --recursive); fi
load="$(cut -d' ' -f1-3 /proc/loadavg)"

{
  echo "### $found submodules ($libs libs, $nested nested; $containers containers in the inventory)"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPU(s), load average $load after the run, $(git --version)."
  echo "Binary: \`$bin\`${old:+; old binary: \`$old\`}."
  echo
  python3 - "$work/ours.json" "$work/git.json" "$found" <<'PY'
import json, sys
n = int(sys.argv[3])
print('| Command | runs | mean ± σ [ms] | min [ms] | max [ms] | mean per submodule [ms] |')
print('|:---|---:|---:|---:|---:|---:|')
for f in sys.argv[1:3]:
    for r in json.load(open(f))['results']:
        print('| `{0}` | {1} | {2:.1f} ± {3:.1f} | {4:.1f} | {5:.1f} | {6:.3f} |'.format(
            r['command'], len(r['times']), r['mean'] * 1e3, (r['stddev'] or 0) * 1e3, r['min'] * 1e3,
            r['max'] * 1e3, r['mean'] * 1e3 / n))
PY
  echo
  echo "| Command | peak RSS | CPU time (user + system) |"
  echo "|:---|---:|---:|"
  echo "| \`proxmox-gitops resolve\` | $rss_ours |"
  [ -n "$old" ] && echo "| \`proxmox-gitops resolve\` (old binary) | $rss_old |"
  if [ "$git_runs" -gt 0 ]; then echo "| \`git submodule status --recursive\` | $rss_git |"; fi
} > "$out"
