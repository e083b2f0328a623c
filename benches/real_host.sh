#!/usr/bin/env bash
# Benchmark of the pipeline on the real host (not a test): a real Gitea and its real runner
# (versions.env) deploy the broker monorepo into LXC containers, through the scenario of
# tests/suite/real_host_pipeline.rs: publish + dispatch on release (the first deploy: container created
# and configured), a push to main (configure only), and a merged release pull request raising
# MEMORY (an update in place). Reports the wall time of each, from the trigger to the run's end,
# each run's job (its start and the runner's pick-up gap, from the log timestamps) and its steps
# (Gitea's step times, whole seconds); then the same workflows under act beside it
# (tests/suite/workflows_act.rs end_to_end: no runner, no pick-up). Writes docs/benchmarks/real-host.md.
#
#   sudo benches/real_host.sh          # two rounds: the first warms the base container
#   sudo ROUNDS=3 benches/real_host.sh
#
# The base container is kept between rounds (PGO_TEST_LXC_BASE, default pgobench-base-bookworm),
# as a host that deployed before has it; remove it with `lxc-destroy -n pgobench-base-bookworm`.
# Needs root, LXC, Debian's mirror, mosquitto-clients, and the real Gitea and runner (built here
# by tests/real_host/build.sh, cached by version). Traffic: loopback and lxcbr0 only.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "error: LXC and the Gitea user need root: run sudo $0" >&2; exit 1; }
rounds="${ROUNDS:-2}"
export PGO_TEST_LXC_BASE="${PGO_TEST_LXC_BASE:-pgobench-base-bookworm}"
real_host="$(tests/real_host/build.sh)"
while IFS= read -r line; do export "${line?}"; done <<<"$real_host"
# shellcheck source=../versions.env
. versions.env

load=$(cut -d' ' -f1 /proc/loadavg)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$rounds"); do
  echo "==> round $i of $rounds" >&2
  cargo test --locked --quiet --test suite real_host_pipeline:: -- --nocapture >"$out.$i" 2>&1 \
    || { cat "$out.$i" >&2; exit 1; }
  cat "$out.$i" >>"$out"
  rm -f "$out.$i"
done

# The act run beside it, with the same warm base.
echo "==> the same workflows under act" >&2
cargo test --locked --quiet --test suite workflows_act::end_to_end -- --nocapture >"$out.act" 2>&1 \
  || { cat "$out.act" >&2; exit 1; }
act_times=$(grep -E '^act workflows/' "$out.act" | sed -E 's/^/    /')
rm -f "$out.act"

# The totals of each round, and the timeline of each of the four runs of the last one.
totals=$(grep -E '^(first deploy|push to main|merged release)' "$out" | sed -E 's/^/    /')
last_round=$(awk '/run 1 done after|1 run\(s\) done after/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$out")
timelines=$(printf '%s' "$last_round" | grep -E '^(main/.*: [0-9] run\(s\) done|timeline )' \
  | sed -E 's#^main/[^:]*: #\n#; s/^timeline step /        step /; s/^timeline /    job /')

{
  echo "# The pipeline on the real host"
  echo
  echo "Produced by \`benches/real_host.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'): $(nproc) CPUs,"
  echo "$(free -g | awk '/Mem:/{print $2}') GiB RAM, Gitea $GITEA_VERSION and its runner v$GITEA_RUNNER_VERSION (host mode, label"
  echo "\`shell\`, one job at a time, fetch interval 1 s), backend \`lxc\` with a warm base container"
  echo "(\`$PGO_TEST_LXC_BASE\`, kept between rounds), the test's debug build of proxmox-gitops."
  echo "Load average $load when it started. $rounds round(s); the first may bootstrap the base."
  echo
  echo "From the trigger (dispatch, \`git push\`, the merge through the API) until the run completed,"
  echo "every round:"
  echo
  echo "$totals"
  echo
  echo "Each run of the last round: its one job (\`start\` from the run's first log line, \`took\` the"
  echo "job's own time) and its steps that ran (Gitea's step times, in whole seconds):"
  echo "$timelines"
  echo
  echo "The same workflows under act beside it (tests/suite/workflows_act.rs, end_to_end, same base; no"
  echo "runner, no pick-up gap). In order: release creates and configures the broker, main"
  echo "reconfigures it (nothing changed), snapshot, main with a broken configure.sh (fails on"
  echo "purpose), release against fakepve configuring the same container:"
  echo
  echo "$act_times"
  echo
  echo "Against issue 24's goals (first deploy ≤ 20 s, update in place ≤ 5 s, warm caches) and the"
  echo "physical limit:"
  echo
  echo "* The pipeline is one job (docs/workflows.md, \"One job per run\"): one pick-up by the runner"
  echo "  (its fetch interval, 1 s here, 2 s by default) and one checkout per run, where the release"
  echo "  run had four of each. What remains between the trigger and the job's first line is Gitea"
  echo "  creating the run and the runner's next fetch."
  echo "* The first deploy is nearly all configure: the base role and mosquitto, installed from"
  echo "  Debian's mirror. The base container carries the base role's packages (docs/lxc.md, \"The"
  echo "  cached base\"), so a new container no longer downloads them; provision (a clone of the base,"
  echo "  its start, SSH) takes about a second."
  echo "* An update in place is the job's own second or so plus the pick-up: the rest is Gitea and"
  echo "  the runner."
  echo "* A push to main that moves a lib (run 3) waits for that lib's own pipeline, which shares the"
  echo "  concurrency group: the group serialises them by design."
  echo
  echo "Before (2026-12-05, the pipeline in four jobs, a base per test process, base packages"
  echo "installed per container): first deploy 46-51 s, push to main 5.3-5.8 s, merged release pull"
  echo "request → deployed 9.9-13.5 s."
} >docs/benchmarks/real-host.md
cat docs/benchmarks/real-host.md
