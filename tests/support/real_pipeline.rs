//! The broker monorepo published to a real Gitea with real runners (`real_gitea`), for the
//! real-host pipeline tests (`tests/suite/real_host_pipeline.rs`, `tests/suite/real_host_concurrency.rs`):
//! [`publish`] starts Gitea and the runners and publishes with the settings of a local deploy
//! (backend `lxc`, the share, the artifacts directory, the stage `pgotest-act-<pid>`), then checks
//! that `publish` set every one of them on Gitea; the rest reads what the runs did (job spans
//! from their logs, the container's memory limit).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::gitea::{ok, run};
use super::real_gitea::{RealGitea, RealRunner, Run, RunnerOptions};
use super::workflows::{self, broker_repo};

/// The libs' login (the broker's MQTT user).
pub const LOGIN: &str = "pgo-mqtt";
/// Its password: must appear in no log.
pub const PASSWORD: &str = "real-host-mqtt-pw-4f19c2";
/// A first deploy with a cold base container takes minutes; later runs take seconds.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// A published broker monorepo with its settings, on a Gitea with runners.
pub struct Published {
    /// Holds the share, the artifacts and publish's own artifacts.
    pub state: tempfile::TempDir,
    /// The monorepo's repository name (organization `main`).
    pub name: String,
    /// The stage: containers are named `<stage>-<lib>`.
    pub stage: String,
    /// The runners, named `pgo-runner-<i>`.
    pub runners: Vec<RealRunner>,
    /// The Gitea.
    pub g: RealGitea,
    _repo: tempfile::TempDir,
}

impl Published {
    /// The artifacts directory every run writes (`PROXMOX_GITOPS_ARTIFACTS`).
    pub fn artifacts(&self) -> PathBuf {
        self.state.path().join("artifacts")
    }

    /// The broker's container.
    pub fn ct(&self) -> String {
        format!("{}-broker", self.stage)
    }
}

/// The options of the `i`-th runner of [`publish`]: named `pgo-runner-<i>`, label `shell:host`,
/// the base container in its jobs' environment (`PGO_LXC_BASE`): this process's own, removed
/// with its containers, or `$PGO_TEST_LXC_BASE` when set (`benches/real_host.sh` keeps one
/// between rounds, to measure with a warm base as a host that deployed before has it).
pub fn runner_options(i: usize) -> RunnerOptions {
    let base = std::env::var("PGO_TEST_LXC_BASE").unwrap_or_else(|_| format!("{}base", workflows::lxc_prefix()));
    RunnerOptions {
        name: format!("pgo-runner-{i}"),
        envs: vec![("PGO_LXC_BASE".into(), base)],
        ..RunnerOptions::default()
    }
}

/// Starts Gitea and `runners` runners (label `shell:host`, the base container
/// `pgotest-act-<pid>-base` in their environment), publishes the broker monorepo with the
/// settings of a local deploy, and asserts that publish printed no password and set every setting
/// on Gitea ([`assert_published_settings`]).
pub fn publish(runners: usize) -> Published {
    let stage = workflows::lxc_stage();
    let state = tempfile::tempdir().unwrap();
    let artifacts = state.path().join("artifacts");
    let share = state.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    let g = RealGitea::start();
    let runners: Vec<RealRunner> = (0..runners).map(|i| RealRunner::start(&g, &runner_options(i))).collect();
    let repo = broker_repo("", None);
    let name = repo.path().file_name().unwrap().to_str().unwrap().to_string();
    let binary = env!("CARGO_BIN_EXE_proxmox-gitops");
    let publish_artifacts = state.path().join("publish");
    let url = g.url();
    let args = ["--repo", repo.path().to_str().unwrap(), "--artifacts", publish_artifacts.to_str().unwrap()];
    let settings = [
        ("GITEA_TOKEN", g.token()),
        ("LOGIN", LOGIN),
        ("PASSWORD", PASSWORD),
        ("PROXMOX_GITOPS_BACKEND", "lxc"),
        ("PROXMOX_GITOPS_BINARY", binary),
        ("PROXMOX_SHARE", share.to_str().unwrap()),
        ("PROXMOX_GITOPS_ARTIFACTS", artifacts.to_str().unwrap()),
        ("PROXMOX_GITOPS_STAGE", stage.as_str()),
        // The publish record of secrets goes beside the test's state, not into ~/.cache.
        ("XDG_CACHE_HOME", state.path().to_str().unwrap()),
    ];
    let out = run(&[&args[..], &["publish", "--gitea", &url]].concat(), &settings);
    ok(&out);
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!printed.contains(PASSWORD), "{printed}");
    assert_published_settings(&g, &settings);
    Published { state, name, stage, runners, g, _repo: repo }
}

/// Asserts that `publish` set every setting of the run (but the Gitea token, whose secret is
/// `PROXMOX_GITOPS_TOKEN`, and the cache location) as an organization variable or secret of
/// `main`, variables with their values, and `HOST` at Gitea's URL.
pub fn assert_published_settings(g: &RealGitea, settings: &[(&str, &str)]) {
    let secrets = g.api_json(reqwest::Method::GET, "/orgs/main/actions/secrets", None, 200);
    let secret_names: Vec<&str> = secrets.as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    for name in ["PASSWORD", "PROXMOX_GITOPS_TOKEN"] {
        assert!(secret_names.contains(&name), "publish set no secret {name}: {secret_names:?}");
    }
    let mut wanted: Vec<(&str, &str)> =
        settings.iter().copied().filter(|(n, _)| !["GITEA_TOKEN", "PASSWORD", "XDG_CACHE_HOME"].contains(n)).collect();
    let url = g.url();
    wanted.push(("HOST", &url));
    for (name, value) in wanted {
        let (status, body) = g.api(reqwest::Method::GET, &format!("/orgs/main/actions/variables/{name}"), None);
        assert_eq!(status, 200, "publish set no variable {name}: {}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["data"].as_str(), Some(value), "{name}");
    }
}

/// Waits until `owner/repo` has `n` runs, all completed; returns them, newest first.
pub fn runs_done(g: &RealGitea, owner: &str, repo: &str, n: usize) -> Vec<Run> {
    let t = Instant::now();
    let runs = g.wait_for_runs(owner, repo, n, RUN_TIMEOUT);
    eprintln!("{owner}/{repo}: {n} run(s) done after {:.1}s", t.elapsed().as_secs_f64());
    assert_eq!(runs.len(), n, "{}", shown(&runs));
    runs
}

/// Every run, its jobs and logs, for a failure message.
pub fn shown(runs: &[Run]) -> String {
    runs.iter().map(|r| r.to_string()).collect()
}

/// The JSON document at `path`; panics naming it.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The memory limit LXC's config of `ct` holds, in MiB (cgroup v2's key, or v1's on a v1 host).
pub fn lxc_memory(ct: &str) -> u64 {
    let config = std::fs::read_to_string(format!("/var/lib/lxc/{ct}/config")).unwrap();
    let line = config
        .lines()
        .find(|l| l.starts_with("lxc.cgroup2.memory.max ") || l.starts_with("lxc.cgroup.memory.limit_in_bytes "))
        .unwrap_or_else(|| panic!("no memory limit in {ct}'s config:\n{config}"));
    let bytes: u64 = line.split('=').nth(1).unwrap().trim().parse().unwrap();
    bytes / (1024 * 1024)
}

/// `container.env` with `MEMORY=<mib>` in place of its MEMORY line.
pub fn with_memory(env: &str, mib: u64) -> String {
    env.lines()
        .filter(|l| !l.starts_with("MEMORY="))
        .map(|l| format!("{l}\n"))
        .chain([format!("MEMORY={mib}\n")])
        .collect()
}

/// The pipeline's steps (workflows/pipeline.yml: one job, `deploy`): a short key and the start of
/// the step's name.
pub const PIPELINE_STEPS: [(&str, &str); 5] = [
    ("resolve", "Resolve the inventory"),
    ("plan", "Plan"),
    ("provision", "Provision"),
    ("configure", "Configure"),
    ("release-pr", "Open or update the release pull request"),
];

/// The pipeline steps (keys of [`PIPELINE_STEPS`]) that ran in `run`'s `deploy` job, with their
/// conclusions; panics when the run has no such job.
pub fn pipeline_steps(run: &Run) -> Vec<(&'static str, String)> {
    let job = run.jobs.iter().find(|j| j.name == "deploy").unwrap_or_else(|| panic!("no job deploy:\n{run}"));
    PIPELINE_STEPS
        .iter()
        .map(|(key, prefix)| {
            let step = job.step(prefix).unwrap_or_else(|| panic!("no step {prefix:?} in job deploy:\n{run}"));
            (*key, step.conclusion.clone())
        })
        .collect()
}

/// Asserts that `run` succeeded, with one job `deploy` whose pipeline steps `ran` succeeded and
/// every other one was skipped, and that no job log holds `secret`.
pub fn assert_run(run: &Run, ran: &[&str], secret: &str) {
    assert_eq!(run.conclusion, "success", "{run}");
    assert_eq!(run.jobs.len(), 1, "one job: {run}");
    for job in &run.jobs {
        assert!(!job.log.contains(secret), "the secret leaked into the log of {}:\n{run}", job.name);
    }
    for (key, conclusion) in pipeline_steps(run) {
        let want = if ran.contains(&key) { "success" } else { "skipped" };
        assert_eq!(conclusion, want, "step {key}:\n{run}");
    }
}

/// A job that ran: `(run id, job name, first, last)` timestamp of its log lines (the runner
/// stamps every line, RFC 3339).
pub type Span = (i64, String, OffsetDateTime, OffsetDateTime);

/// The spans of `runs`' jobs that ran, sorted by start.
pub fn job_spans(runs: &[Run]) -> Vec<Span> {
    let mut spans = Vec::new();
    for r in runs {
        for j in &r.jobs {
            let stamps: Vec<OffsetDateTime> = j
                .log
                .lines()
                .filter_map(|l| OffsetDateTime::parse(l.split_whitespace().next()?, &Rfc3339).ok())
                .collect();
            if let (Some(a), Some(b)) = (stamps.iter().min(), stamps.iter().max()) {
                spans.push((r.id, j.name.clone(), *a, *b));
            }
        }
    }
    spans.sort_by_key(|s| s.2);
    spans
}

/// One line per job of `run` that ran, in the order they ran: `timeline <job> start=<s>
/// took=<s> gap=<s>`, seconds from the first job's first log line, the gap being the time since
/// the job before it ended (the runner's pick-up); then one line per step of each job that ran
/// and took time, `timeline step <name> took=<s>` (Gitea's step times, in whole seconds).
/// `benches/real_host.sh` reads these lines.
pub fn timeline(run: &Run) -> String {
    let spans = job_spans(std::slice::from_ref(run));
    let Some(origin) = spans.first().map(|s| s.2) else { return String::new() };
    let mut out = String::new();
    let mut prev_end = origin;
    for (_, name, start, end) in &spans {
        out.push_str(&format!(
            "timeline {name} start={:.1} took={:.1} gap={:.1}\n",
            (*start - origin).as_seconds_f64(),
            (*end - *start).as_seconds_f64(),
            (*start - prev_end).as_seconds_f64().max(0.0),
        ));
        prev_end = *end;
    }
    for job in &run.jobs {
        for st in &job.steps {
            let at = |t: &str| OffsetDateTime::parse(t, &Rfc3339).ok();
            if let (Some(a), Some(b)) = (at(&st.started_at), at(&st.completed_at))
                && st.conclusion != "skipped"
            {
                out.push_str(&format!("timeline step {} took={:.0}\n", st.name, (b - a).as_seconds_f64()));
            }
        }
    }
    out
}
