//! The real workflows/pipeline.yml and action.yml, run by act (the engine of Gitea's act_runner)
//! in host mode, offline, on a fixture monorepo, with the binary under test.
//!
//! Most tests here need no container: they run with backend `pve` (`PVE_UNSET`) and either no
//! `PROXMOX_HOST` (provision refuses the input before any container) or a PVE API on a loopback
//! port where nothing listens (`PVE_CLOSED`: every container's provision fails on its own), so
//! configure has no provision result to work from. They check everything around the steps: job
//! order, artifacts passed from step to step, one step call per container, blocking, masking, the
//! binary input.
//!
//! [`end_to_end_lxc_then_a_failing_lib_then_pve`] runs the whole pipeline for real: the shipped
//! broker lib in a real LXC container (backend `lxc`), then against fakepve (backend `pve`) with
//! the same container as the spec's address. It needs root, LXC with lxcbr0, Debian's mirror (the
//! container installs mosquitto) and `mosquitto-clients` on the host.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use support::{fakepve, workflows};

use std::path::Path;

use support::fs::write_files;
use workflows::{act, act_with, broker_repo, commit_all, monorepo, monorepo_with};

/// Backend `pve` without `PROXMOX_HOST`: nothing is ever contacted (the default backend without a
/// PVE host would be `lxc`, i.e. real containers on this host).
const PVE_UNSET: [&str; 2] = ["--var", "PROXMOX_GITOPS_BACKEND=pve"];
/// A PVE API on loopback where nothing listens (port 9, discard): the settings are complete, so
/// `deploy` starts, and every container's provision fails on its own (connection refused).
const PVE_CLOSED: [&str; 10] = [
    "--var",
    "PROXMOX_HOST=127.0.0.1",
    "--var",
    "PROXMOX_PORT=9",
    "--var",
    "PROXMOX_USER=root@pam",
    "--var",
    "PROXMOX_TEMPLATE=debian-12-standard_12.7-1",
    "-s",
    "PROXMOX_PASSWORD=pve-secret-9f2c",
];
/// Under Actions the hint names the pipeline workflow's `step` input (crate::error::Hint::render).
const NO_PROVISION: &str = "no provision artifact; run the pipeline workflow with its `step` input `provision` first";

/// The pipeline's steps (workflows/pipeline.yml: one job, `deploy`), by the start of their names.
const RESOLVE: &str = "Resolve the inventory";
const PLAN: &str = "Plan";
const PROVISION: &str = "Provision";
const CONFIGURE: &str = "Configure";
const RELEASE_PR: &str = "Open or update the release pull request";

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    PVE_UNSET.iter().copied().chain(extra.iter().copied()).collect()
}

/// act's `workflow_dispatch` of `pipeline.yml` on `refs/heads/<branch>` with the inputs
/// `step=provision`, `container=beta`, and `extra` act arguments.
fn dispatch_provision_beta(repo: &Path, branch: &str, extra: &[&str]) -> workflows::ActRun {
    let event = serde_json::json!({"ref": format!("refs/heads/{branch}"), "inputs": {"step": "provision", "container": "beta"}});
    act(repo, "workflow_dispatch", "workflows/pipeline.yml", &event, extra)
}

#[test]
fn push_to_main_resolves_then_configures_every_container() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/main"}),
        &args(&["-s", "PROXMOX_PASSWORD=pve-secret-9f2c", "--var", "PROXMOX_USER=root@pam"]),
    );
    let log = &run.log;
    // resolve ran and handed its outputs on.
    assert!(run.step_ok("pipeline", "deploy", RESOLVE), "{log}");
    assert!(run.step_has("pipeline", "deploy", RESOLVE, "containers=config,alpha,beta"), "{log}");
    // main does not provision.
    assert!(run.step("pipeline", "deploy", PROVISION).is_empty(), "{log}");
    // No Gitea address (HOST): no release pull request to open.
    assert!(run.step("pipeline", "deploy", RELEASE_PR).is_empty(), "{log}");
    // configure used the resolve step's inventory (the `inventory` input): it did not resolve
    // again, and nothing was handed over in a bundle.
    assert!(run.step_has("pipeline", "deploy", RESOLVE, "3 container(s), 0 task(s), stage main; wrote"), "{log}");
    assert!(!run.step_has("pipeline", "deploy", CONFIGURE, "task(s), stage main; wrote"), "{log}");
    assert!(!run.step_has("pipeline", "deploy", CONFIGURE, "restored"), "no bundle within one job: {log}");
    // configure is invoked once per container; nothing was provisioned, so each one fails saying
    // so, and so do the job and act.
    for name in ["config", "alpha", "beta"] {
        let call = format!("INFO {name}: configure");
        assert_eq!(
            run.step("pipeline", "deploy", CONFIGURE).iter().filter(|l| l.ends_with(&call)).count(),
            1,
            "{name}\n{log}"
        );
        let line = format!("{name}: configure failed: {name}: {NO_PROVISION}");
        assert!(run.step_has("pipeline", "deploy", CONFIGURE, &line), "{name}\n{log}");
    }
    assert!(run.step_has("pipeline", "deploy", CONFIGURE, "3 of 3 container(s) failed: config, alpha, beta"), "{log}");
    assert!(run.step_failed("pipeline", "deploy", CONFIGURE), "{log}");
    assert_ne!(run.code, 0, "{log}");
    // The secret never shows.
    assert!(!log.contains("pve-secret-9f2c"), "{log}");
}

/// With the Gitea address set, a push to main runs the `release-pr` job: the action hands the
/// step to the binary, which asks Gitea (the double, on loopback) for the monorepo's branches;
/// the double holds none, so it fails saying to publish first, and the password stays masked.
#[test]
fn push_to_main_runs_release_pr_when_gitea_is_configured() {
    let double = support::gitea::Double::start(support::gitea::Creds::basic("admin", "gitea-pw-71c3"));
    let repo = monorepo(&[]);
    let host = format!("HOST={}", double.url());
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/main"}),
        &args(
            &[
                &PVE_CLOSED[..],
                &[
                    "--var",
                    &host,
                    "--var",
                    "LOGIN=admin",
                    "-s",
                    "PASSWORD=gitea-pw-71c3",
                    "--env",
                    "PROXMOX_GITOPS_MONOREPO=main/mono",
                ],
            ]
            .concat(),
        ),
    );
    let log = &run.log;
    assert!(
        run.step_has("pipeline", "deploy", RELEASE_PR, "main/mono on Gitea has no branch `main` or `release` (or does not exist): run `proxmox-gitops publish` first"
        ),
        "{log}"
    );
    assert!(run.step_failed("pipeline", "deploy", RELEASE_PR), "{log}");
    assert!(!log.contains("gitea-pw-71c3"), "the password is masked: {log}");
    assert!(
        double.api_calls().iter().any(|c| c == "GET /repos/main/mono/compare/release...main 404"),
        "{:?}",
        double.api_calls()
    );
    assert_ne!(run.code, 0, "{log}");
}

#[test]
fn push_to_release_provisions_then_configures_with_the_provision_results() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/release"}),
        &args(&PVE_CLOSED),
    );
    let log = &run.log;
    assert!(run.step_ok("pipeline", "deploy", RESOLVE), "{log}");
    for name in ["config", "alpha", "beta"] {
        let line = format!("{name}: provision failed: ");
        assert!(run.step_has("pipeline", "deploy", PROVISION, &line), "{name}\n{log}");
    }
    assert!(run.step_failed("pipeline", "deploy", PROVISION), "{log}");
    // provision applied the plan step's plan.
    assert!(
        run.step_has("pipeline", "deploy", PROVISION, "plan.json: inputs and live state as planned; applying it"),
        "{log}"
    );
    // configure still runs after a failed provision and reads its results from the provision
    // step's artifacts: every container's provision failed for these inputs, so each is blocked
    // rather than configured.
    for name in ["config", "alpha", "beta"] {
        let line = format!("{name}: configure blocked: provision failed for the same inputs");
        assert!(run.step_has("pipeline", "deploy", CONFIGURE, &line), "{name}\n{log}");
    }
    assert!(!run.step_has("pipeline", "deploy", CONFIGURE, NO_PROVISION), "{log}");
    assert_ne!(run.code, 0, "{log}");
}

/// On release the plan job runs after resolve and before provision, prints the plan (every
/// container, the count line) and appends it to the job summary; a dispatch of `step: plan` runs
/// only the plan.
#[test]
fn release_plans_before_provisioning_and_writes_a_job_summary() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/release"}),
        &args(&PVE_CLOSED),
    );
    let log = &run.log;
    assert!(run.step_ok("pipeline", "deploy", PLAN), "{log}");
    for name in ["config", "alpha", "beta"] {
        assert!(
            run.step("pipeline", "deploy", PLAN).iter().any(|l| l.contains(name) && l.contains("cannot plan: ")),
            "{name}\n{log}"
        );
    }
    assert!(
        run.step_has(
            "pipeline",
            "deploy",
            PLAN,
            "0 to create, 0 to update in place, 0 to recreate, 0 unchanged, 3 cannot be planned"
        ),
        "{log}"
    );
    assert!(run.step_has("pipeline", "deploy", PLAN, "job summary: plan ("), "{log}");
    // The plan step ended before provision started.
    let line_of = |text: &str| log.lines().position(|l| l.contains(text)).unwrap_or_else(|| panic!("{text}:\n{log}"));
    assert!(line_of(&format!("Success - Main {PLAN}")) < line_of(&format!("⭐ Run Main {PROVISION}")), "{log}");
    assert!(run.step_has("pipeline", "deploy", PROVISION, "beta: provision failed: "), "{log}");

    // A dispatch of the plan alone: no provision, no configure.
    let event = serde_json::json!({"ref": "refs/heads/main", "inputs": {"step": "plan", "container": "beta"}});
    let run = act(repo.path(), "workflow_dispatch", "workflows/pipeline.yml", &event, &args(&[]));
    let log = &run.log;
    assert!(run.step_ok("pipeline", "deploy", PLAN), "{log}");
    assert!(run.step_has("pipeline", "deploy", PLAN, "1 container(s) for refs/heads/main"), "{log}");
    assert!(run.step("pipeline", "deploy", PROVISION).is_empty(), "{log}");
    assert!(run.step("pipeline", "deploy", CONFIGURE).is_empty(), "{log}");
}

#[test]
fn dispatch_runs_the_chosen_step_for_the_chosen_container() {
    let repo = monorepo(&[]);
    let run = dispatch_provision_beta(repo.path(), "main", &args(&PVE_CLOSED));
    let log = &run.log;
    assert!(run.step_has("pipeline", "deploy", PROVISION, "beta: provision failed: "), "{log}");
    assert!(!run.step_has("pipeline", "deploy", PROVISION, "alpha:"), "{log}");
    assert!(run.step("pipeline", "deploy", CONFIGURE).is_empty(), "{log}");
    assert_ne!(run.code, 0, "{log}");
}

/// A PVE backend without `PROXMOX_HOST` is bad input: the provision step refuses it before any
/// container is planned (exit 2, no per-container failure, no artifact).
#[test]
fn a_pve_backend_without_a_host_is_refused_before_any_container() {
    let repo = monorepo(&[]);
    let run = dispatch_provision_beta(repo.path(), "main", &args(&[]));
    let log = &run.log;
    assert!(
        run.step_has(
            "pipeline",
            "deploy",
            PROVISION,
            "settings (PROXMOX_HOST or proxmox.host in local/config.json): not set: the PVE API host"
        ),
        "{log}"
    );
    assert!(!run.step_has("pipeline", "deploy", PROVISION, "provision failed"), "{log}");
    assert!(run.step_has("pipeline", "deploy", PROVISION, "rc=2"), "{log}");
    assert_ne!(run.code, 0, "{log}");
}

/// The workflows hand the recreate policy, snapshot retention and TLS settings to the binary:
/// values that it refuses show they arrived (nothing is contacted).
#[test]
fn recreate_keep_and_tls_variables_reach_the_binary() {
    let repo = monorepo(&[]);
    let run = dispatch_provision_beta(repo.path(), "release", &args(&["--var", "PROXMOX_GITOPS_RECREATE=sometimes"]));
    let log = &run.log;
    assert!(run.step_has("pipeline", "deploy", PROVISION, "invalid value 'sometimes' for '--recreate"), "{log}");
    assert_ne!(run.code, 0, "{log}");

    let run = act(
        repo.path(),
        "push",
        "workflows/snapshot.yml",
        &serde_json::json!({"ref": "refs/heads/snapshot"}),
        &args(&["--var", "PROXMOX_GITOPS_KEEP=all"]),
    );
    let log = &run.log;
    assert!(run.job_has("snapshot", "snapshot", "invalid value 'all' for '--keep"), "{log}");
    assert_ne!(run.code, 0, "{log}");

    // PROXMOX_FINGERPRINT from a variable: a malformed one is named; unset ones (PROXMOX_CA here)
    // are not passed on as empty values.
    let run = dispatch_provision_beta(
        repo.path(),
        "release",
        &args(&["--var", "PROXMOX_HOST=127.0.0.1", "--var", "PROXMOX_PORT=9", "--var", "PROXMOX_FINGERPRINT=00:11"]),
    );
    let log = &run.log;
    assert!(
        run.step_has("pipeline", "deploy", PROVISION, "--pve-fingerprint: expected a SHA-256 fingerprint"),
        "{log}"
    );
    assert!(!log.contains("a value is required for '--pve-ca"), "{log}");
    assert_ne!(run.code, 0, "{log}");
}

/// drift.yml's world: the fixture monorepo (with drift.yml installed) as `main/mono` on a Gitea
/// double, `main` and `release` at its first commit, and fakepve with the containers `names`
/// provisioned from it (as the release pipeline would). The runner checks out with the product's
/// checkout script from the double (as act_runner does), so drift.yml's checkouts of `release`
/// and of the run's commit both run.
struct DriftWorld {
    double: support::gitea::Double,
    pve: fakepve::FakePve,
    _share: tempfile::TempDir,
    repo: tempfile::TempDir,
    settings: Vec<(&'static str, String)>,
}

const DRIFT_LOGIN: &str = "drift-admin";
const DRIFT_TOKEN: &str = "drift-token-4e1a9c";

impl DriftWorld {
    fn new(names: &str) -> DriftWorld {
        use proxmox_gitops::gitea::{CreateOrgOption, CreateRepoOption};
        let drift_yml = std::fs::read_to_string(support::fs::source_root().join("workflows/drift.yml")).unwrap();
        let repo = monorepo(&[(".gitea/workflows/drift.yml", drift_yml.as_str())]);
        let root = repo.path();
        let double = support::gitea::Double::start(support::gitea::Creds {
            login: DRIFT_LOGIN.into(),
            password: None,
            token: Some(DRIFT_TOKEN.into()),
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let c = double.client();
        rt.block_on(c.create_org(&CreateOrgOption { username: "main".into(), ..Default::default() })).unwrap();
        rt.block_on(c.create_org_repo("main", &CreateRepoOption { name: "mono".into(), ..Default::default() }))
            .unwrap();
        let remote = format!("{}/main/mono.git", double.url());
        support::git::git(root, &["branch", "-M", "main"]);
        double.git_authed(root, &["push", "-q", &remote, "main:main", "main:release"]);
        let pve = fakepve::FakePve::start();
        pve.add_template();
        let share = tempfile::tempdir().unwrap();
        let settings = vec![
            ("PROXMOX_HOST", "127.0.0.1".to_string()),
            ("PROXMOX_PORT", pve.port.to_string()),
            ("PROXMOX_USER", "root@pam".to_string()),
            ("PROXMOX_TEMPLATE", fakepve::TEMPLATE.to_string()),
            ("PROXMOX_STORAGE", "local".to_string()),
            ("PROXMOX_GATEWAY", "127.0.30.254".to_string()),
            ("PROXMOX_CA", pve.ca.display().to_string()),
            ("PROXMOX_SHARE", share.path().display().to_string()),
        ];
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
            .args(["--repo", root.to_str().unwrap(), "provision", "-c", names, "--no-wait-ssh"])
            .env_remove("GITHUB_ACTIONS")
            .env_remove("GITHUB_STEP_SUMMARY")
            .envs(settings.iter().map(|(k, v)| (*k, v.as_str())))
            .env("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        DriftWorld { double, pve, _share: share, repo, settings }
    }

    /// The runner, with the settings as instance variables and the PVE password as a secret.
    fn runner(&self) -> support::runner::Runner<'_> {
        let mut config = support::runner::RunnerConfig::for_double(&self.double)
            .secret("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
            .var("PROXMOX_GITOPS_BACKEND", "pve");
        for (k, v) in &self.settings {
            config = config.var(k, v);
        }
        support::runner::Runner::new(&self.double, config)
    }

    /// Commits `files` on `main` and pushes `main` only (the release pull request not merged).
    fn push_main(&self, files: &[(&str, &str)]) {
        write_files(self.repo.path(), files);
        commit_all(self.repo.path(), "lower alpha's memory");
        let remote = format!("{}/main/mono.git", self.double.url());
        self.double.git_authed(self.repo.path(), &["push", "-q", &remote, "main:main"]);
    }
}

/// drift.yml against fakepve: `alpha` provisioned as released, then its memory changed through
/// fakepve's own model (as by hand in the PVE UI). The dispatched drift job fails visibly (an
/// error annotation names the container, the table in the log names MEMORY) and its job summary
/// (which act prints after the step as `Summary - …`) has the row `alpha | MEMORY | 512 | 1024`.
#[test]
fn drift_workflow_fails_visibly_and_its_summary_names_memory() {
    let world = DriftWorld::new("alpha");
    let pve = &world.pve;
    pve.exec("pve.ct(101).config['memory'] = 1024");
    let mut runner = world.runner();
    let run = runner.dispatch("main/mono", "main", ".gitea/workflows/drift.yml", &[("container", "alpha")]);
    let run = &run.act;
    let log = &run.log;
    assert_ne!(run.code, 0, "drift fails the run:\n{log}");
    assert!(run.job_has("drift", "drift", "Job failed"), "{log}");
    assert!(run.job_has("drift", "drift", "::error::drift: 1 difference(s) between the live containers"), "{log}");
    // The table in the log: exactly that key.
    let table: Vec<&str> = run
        .job("drift", "drift")
        .into_iter()
        .filter(|l| l.contains("CONTAINER  KEY") || l.contains("alpha      "))
        .map(|l| l.rsplit("| ").next().unwrap_or(l))
        .collect();
    assert_eq!(table, ["CONTAINER  KEY     DESIRED  LIVE", "alpha      MEMORY  512      1024"], "{log}");
    // The job summary names it (act prints the summary's lines after the step).
    let summary = log.split_once("Summary - ### Drift of stage `main`: 1 difference(s)").map(|(_, s)| s);
    let summary = summary.unwrap_or_else(|| panic!("no drift job summary:\n{log}"));
    assert!(summary.contains("\n| alpha | MEMORY | 512 | **1024** |\n"), "{log}");
    // drift only reads.
    assert_eq!(pve.ct_config(101).unwrap()["memory"], 1024);
    assert!(!log.contains(fakepve::PASSWORD), "{log}");
}

/// Issue 28, item 10: a push to `main` lowers alpha's MEMORY and the release pull request is not
/// merged yet; every container is exactly as `release` describes it. The scheduled drift run
/// (on main, the default branch) is green, and names the change as pending release in its log
/// and job summary, not as drift.
#[test]
fn drift_workflow_is_green_when_only_main_differs_and_names_the_change_as_pending() {
    let world = DriftWorld::new("config,alpha,beta");
    world.push_main(&[("libs/alpha/container.env", "ID=101\nIP=127.0.30.2/24\nCORES=2\nMEMORY=256\n")]);
    let mut runner = world.runner();
    let runs = runner.schedule("main/mono", "main");
    let workflows: Vec<&str> = runs.iter().map(|r| r.workflow.as_str()).collect();
    assert_eq!(workflows, [".gitea/workflows/drift.yml"]);
    let run = &runs[0].act;
    let log = &run.log;
    assert_eq!(run.code, 0, "no drift: the run is green:\n{log}");
    assert!(!run.job_has("drift", "drift", "::error::drift"), "{log}");
    let lines: Vec<&str> = run.job("drift", "drift").into_iter().map(|l| l.rsplit("| ").next().unwrap_or(l)).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("no drift: 3 container(s) as desired"))
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(
        lines[at + 2..at + 5],
        [
            "pending: 1 change(s) not released yet (not drift; the release pull request shows them):",
            "CONTAINER  KEY     PENDING  LIVE",
            "alpha      MEMORY  256      512",
        ],
        "{log}"
    );
    let summary =
        log.split_once("Summary - ### Drift of stage `main`: none (3 container(s) as desired)").map(|(_, s)| s);
    let summary = summary.unwrap_or_else(|| panic!("no drift job summary:\n{log}"));
    assert!(summary.contains("### Pending release: 1 change(s)"), "{log}");
    assert!(summary.contains("\n| alpha | MEMORY | **256** | 512 |\n"), "{log}");
    // drift only reads.
    assert_eq!(world.pve.ct_config(101).unwrap()["memory"], 512);
}

#[test]
fn snapshot_workflow_snapshots_on_push_to_snapshot() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "push",
        "workflows/snapshot.yml",
        &serde_json::json!({"ref": "refs/heads/snapshot"}),
        &args(&[]),
    );
    let log = &run.log;
    // No container declares SNAPSHOT paths: each gets an ok artifact with a warning, none is
    // contacted.
    for name in ["config", "alpha", "beta"] {
        assert!(
            run.job_has(
                "snapshot",
                "snapshot",
                &format!("{name}: {name} declares no SNAPSHOT paths: nothing to snapshot")
            ),
            "{log}"
        );
        assert!(run.job_has("snapshot", "snapshot", &format!("{name}: snapshot ok in")), "{log}");
    }
    assert!(
        run.job_has("snapshot", "snapshot", "result=ok") || run.job_has("snapshot", "snapshot", "Job succeeded"),
        "{log}"
    );
    assert_eq!(run.code, 0, "{log}");
}

#[test]
fn a_broken_container_env_fails_the_run_and_names_the_file() {
    let repo = monorepo(&[("libs/beta/container.env", "ID=102\nIP=127.0.30.3/24\nCORES=lots\n")]);
    let run =
        act(repo.path(), "push", "workflows/pipeline.yml", &serde_json::json!({"ref": "refs/heads/main"}), &args(&[]));
    let log = &run.log;
    assert_ne!(run.code, 0, "{log}");
    assert!(run.step_failed("pipeline", "deploy", RESOLVE), "{log}");
    assert!(
        run.step_has(
            "pipeline",
            "deploy",
            RESOLVE,
            "libs/beta/container.env:3 (CORES): expected CORES as a whole number"
        ),
        "{log}"
    );
    assert!(run.step("pipeline", "deploy", CONFIGURE).iter().all(|l| !l.contains("configure failed")), "{log}");
}

/// Without a prebuilt binary the action builds one with cargo, once per source version and
/// runner: a stand-in `cargo` first on PATH records its calls and "builds" by copying the binary
/// under test to where cargo would put it.
#[test]
fn without_a_binary_the_action_builds_once_per_source_version_and_caches_it() {
    let repo = monorepo_with(&[], true);
    let tools = tempfile::tempdir().unwrap();
    let calls = tools.path().join("calls");
    let cargo = tools.path().join("bin/cargo");
    write_files(
        tools.path(),
        &[(
            "bin/cargo",
            &format!(
                "#!/bin/bash\nset -eu\necho \"$*\" >> '{calls}'\nprofile=release\n\
                 while [ $# -gt 0 ]; do [ \"$1\" = --profile ] && profile=$2; shift; done\n\
                 case $profile in dev) out=debug;; *) out=$profile;; esac\n\
                 mkdir -p \"$CARGO_TARGET_DIR/$out\"\ncp '{bin}' \"$CARGO_TARGET_DIR/$out/proxmox-gitops\"\n",
                calls = calls.display(),
                bin = env!("CARGO_BIN_EXE_proxmox-gitops"),
            ),
        )],
    );
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = tools.path().join("cache");
    let path = format!("PATH={}:{}", tools.path().join("bin").display(), std::env::var("PATH").unwrap());
    let cache_env = format!("PROXMOX_GITOPS_CACHE={}", cache.display());
    let run = |repo: &std::path::Path| {
        act_with(
            repo,
            "push",
            "workflows/pipeline.yml",
            &serde_json::json!({"ref": "refs/heads/main"}),
            None,
            &args(&["--env", &path, "--env", &cache_env]),
        )
    };
    let calls_made = || std::fs::read_to_string(&calls).unwrap_or_default().lines().count();

    let first = run(repo.path());
    assert!(first.step_ok("pipeline", "deploy", RESOLVE), "{}", first.log);
    assert!(
        first.step_has("pipeline", "deploy", CONFIGURE, &format!("alpha: configure failed: alpha: {NO_PROVISION}")),
        "{}",
        first.log
    );
    // Built once for the whole job.
    assert_eq!(calls_made(), 1, "{}", first.log);
    let line = std::fs::read_to_string(&calls).unwrap();
    assert!(line.starts_with("build --profile release --locked --manifest-path "), "{line}");
    assert!(line.trim_end().ends_with("/Cargo.toml"), "{line}");
    let built: Vec<_> = std::fs::read_dir(cache.join("bin")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(built.len(), 1);

    // Same sources: the cached binary is used.
    let second = run(repo.path());
    assert!(second.step_ok("pipeline", "deploy", RESOLVE), "{}", second.log);
    assert_eq!(calls_made(), 1, "{}", second.log);

    // Changed sources: built again.
    write_files(
        repo.path(),
        &[("src/lib.rs", &(std::fs::read_to_string(repo.path().join("src/lib.rs")).unwrap() + "\n"))],
    );
    commit_all(repo.path(), "touch");
    let third = run(repo.path());
    assert!(third.step_ok("pipeline", "deploy", RESOLVE), "{}", third.log);
    assert_eq!(calls_made(), 2, "{}", third.log);
}

#[test]
fn a_binary_input_that_is_not_executable_is_refused() {
    let repo = monorepo(&[]);
    let run = act_with(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/main"}),
        Some("/nonexistent/proxmox-gitops"),
        &args(&[]),
    );
    assert_ne!(run.code, 0);
    assert!(
        run.step_has(
            "pipeline",
            "deploy",
            RESOLVE,
            "input binary: '/nonexistent/proxmox-gitops' is not an executable file"
        ),
        "{}",
        run.log
    );
    assert!(run.step("pipeline", "deploy", CONFIGURE).iter().all(|l| !l.contains("configure failed")), "{}", run.log);
}

// ------------------------------------------------------------------------------------------------
// End to end: real containers, real configuration, fakepve
// ------------------------------------------------------------------------------------------------

const LOGIN: &str = "pgo-admin";
const PASSWORD: &str = "mqtt-pw-7c1e94";

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// `mosquitto_pub` to the broker at `addr` with `password`; true when the broker accepted it.
fn mqtt_pub(addr: &str, password: &str, topic: &str, message: &str) -> bool {
    std::process::Command::new("mosquitto_pub")
        .args(["-h", addr, "-p", "1883", "-u", LOGIN, "-P", password, "-t", topic, "-m", message, "-q", "1"])
        .output()
        .unwrap()
        .status
        .success()
}

/// Asserts the broker at `addr` answers with the credentials (a message published by one client
/// reaches a subscriber) and refuses a wrong password. Polls (bounded) while it comes up.
fn assert_broker_answers(addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut wait = std::time::Duration::from_millis(100);
    while !mqtt_pub(addr, PASSWORD, "pgo/ping", "ping") {
        assert!(std::time::Instant::now() < deadline, "the broker at {addr} never accepted {LOGIN}");
        std::thread::sleep(wait);
        wait = (wait * 2).min(std::time::Duration::from_secs(2));
    }
    let sub = std::process::Command::new("mosquitto_sub")
        .args(["-h", addr, "-p", "1883", "-u", LOGIN, "-P", PASSWORD, "-t", "pgo/e2e", "-C", "1", "-W", "20"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Publish until the subscriber (which may not have subscribed yet) got a message; bounded
    // by its own -W timeout.
    let child = std::sync::Arc::new(std::sync::Mutex::new(sub));
    let mut tries = 0;
    let out = loop {
        assert!(mqtt_pub(addr, PASSWORD, "pgo/e2e", "hello from the host"));
        std::thread::sleep(std::time::Duration::from_millis(200));
        tries += 1;
        let mut c = child.lock().unwrap();
        if let Some(status) = c.try_wait().unwrap() {
            let mut text = String::new();
            std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut text).unwrap();
            break (status, text);
        }
        assert!(tries < 150, "mosquitto_sub never received the message");
    };
    assert!(out.0.success(), "mosquitto_sub: {:?}", out);
    assert_eq!(out.1, "hello from the host\n");
    assert!(!mqtt_pub(addr, "wrong-password", "pgo/e2e", "x"), "the broker accepted a wrong password");
}

fn stat_and_pid(ct: &str) -> String {
    let (code, files) =
        attach(ct, &["stat", "-c", "%n %Y %i", "/etc/mosquitto/passwd", "/etc/mosquitto/conf.d/proxmox-gitops.conf"]);
    assert_eq!(code, 0, "{files}");
    let (_, pid) = attach(ct, &["systemctl", "show", "-p", "MainPID", "--value", "mosquitto"]);
    format!("{files}pid {pid}")
}

use workflows::attach;

/// The whole pipeline for real, on one LXC container (shared by every part to keep the wall
/// time down; destroyed when the test ends, also on failure):
///
/// a. backend `lxc`: push to `release` provisions the container and configures the shipped
///    broker (mosquitto answers with LOGIN/PASSWORD from the host); a push to `main` that only
///    touches the lib's docs configures again and changes nothing (no provision, base recap
///    `changed=0`, the broker's files and process untouched); `snapshot.yml` on `snapshot` writes
///    a verified archive of the declared paths;
/// c. a lib whose configuration fails on `main`: the run fails, act exits non-zero, the log names
///    the lib and the step;
/// b. backend `pve` against fakepve: `release` creates the CT in fakepve with the spec's config;
///    the spec's address is the real container's, so the SSH wait and configure reach it.
#[test]
fn end_to_end_lxc_then_a_failing_lib_then_pve() {
    let _heavy = support::heavy::area("workflows_act");
    let _cleanup = workflows::LxcCleanup::new();
    let stage = workflows::lxc_stage();
    let ct = format!("{stage}-broker");
    // This process's own base (bootstrapped, then removed with its containers), or one kept
    // between runs (`benches/real_host.sh` measures with a warm base).
    let base = std::env::var("PGO_TEST_LXC_BASE").unwrap_or_else(|_| format!("{}base", workflows::lxc_prefix()));
    let state = tempfile::tempdir().unwrap();
    let artifacts = state.path().join("artifacts");
    let share = state.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    let repo = broker_repo("", None);
    let common: Vec<String> = vec![
        "--var".into(),
        format!("PROXMOX_GITOPS_STAGE={stage}"),
        "--var".into(),
        format!("PROXMOX_SHARE={}", share.display()),
        "--var".into(),
        format!("LOGIN={LOGIN}"),
        "-s".into(),
        format!("PASSWORD={PASSWORD}"),
        "--env".into(),
        format!("PGO_LXC_BASE={base}"),
    ];
    let lxc_args = |artifacts: &Path| -> Vec<String> {
        let mut a = common.clone();
        a.extend(["--var".into(), "PROXMOX_GITOPS_BACKEND=lxc".into()]);
        a.extend(["--var".into(), format!("PROXMOX_GITOPS_ARTIFACTS={}", artifacts.display())]);
        a
    };
    let run = |repo: &Path, workflow: &str, git_ref: &str, args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = std::time::Instant::now();
        let r = act(repo, "push", workflow, &serde_json::json!({"ref": git_ref}), &args);
        eprintln!("act {workflow} {git_ref}: exit {} in {:.1}s", r.code, t.elapsed().as_secs_f64());
        assert!(!r.log.contains(PASSWORD), "the password leaked into the log:\n{}", r.log);
        r
    };

    // a1. release: provision + configure on a real container.
    let r = run(repo.path(), "workflows/pipeline.yml", "refs/heads/release", &lxc_args(&artifacts));
    let log = &r.log;
    assert_eq!(r.code, 0, "{log}");
    assert!(r.step_ok("pipeline", "deploy", PROVISION), "{log}");
    assert!(r.step_ok("pipeline", "deploy", CONFIGURE), "{log}");
    let prov = read_json(&artifacts.join("provision/broker.json"));
    assert_eq!(prov["result"], "ok", "{prov:#}");
    assert_eq!(prov["backend"], "lxc");
    assert_eq!(prov["hostname"], ct.as_str());
    assert_eq!(prov["vmid"], 120);
    assert_eq!(prov["created"], true);
    let deploy = read_json(&artifacts.join("deploy.json"));
    assert_eq!(prov["inputs_digest"], deploy["containers"][0]["inputs_digest"]);
    let addr = prov["address"].as_str().unwrap().to_string();
    assert!(addr.starts_with("10.0.3."), "the container's address is on lxcbr0: {addr}");
    let cfg = read_json(&artifacts.join("configure/broker.json"));
    assert_eq!(cfg["result"], "ok", "{cfg:#}");
    assert_eq!(cfg["outputs"]["LIBS_BROKER_ENDPOINT"], format!("mqtt://{addr}:1883").as_str(), "{cfg:#}");
    assert_broker_answers(&addr);
    let before = stat_and_pid(&ct);

    // a2. main, with a change to the lib's docs only: configure only, and nothing changes.
    let readme = repo.path().join("libs/broker/README.md");
    std::fs::write(&readme, std::fs::read_to_string(&readme).unwrap() + "\nSee also docs/workflows.md.\n").unwrap();
    commit_all(repo.path(), "broker: docs");
    let r = run(repo.path(), "workflows/pipeline.yml", "refs/heads/main", &lxc_args(&artifacts));
    let log = &r.log;
    assert_eq!(r.code, 0, "{log}");
    assert!(r.step("pipeline", "deploy", PROVISION).is_empty(), "main does not provision:\n{log}");
    assert!(r.step_ok("pipeline", "deploy", CONFIGURE), "{log}");
    let deploy = read_json(&artifacts.join("deploy.json"));
    assert_eq!(deploy["ref"], "refs/heads/main");
    assert_eq!(deploy["steps"], serde_json::json!(["configure"]));
    assert_eq!(deploy["containers"][0]["steps"][0]["state"], "ok", "{deploy:#}");
    let cfg = read_json(&artifacts.join("configure/broker.json"));
    assert_eq!(cfg["result"], "ok", "{cfg:#}");
    assert_eq!(cfg["base"]["changed"], 0, "the base role changed something on main: {cfg:#}");
    assert_eq!(stat_and_pid(&ct), before, "the broker's files or process changed on main");
    assert_broker_answers(&addr);

    // a3. snapshot.yml on snapshot: a verified archive of the declared paths. A retained message
    // lives only in mosquitto's memory until it writes its database (every 30 min by default):
    // the lib's pre-snapshot hook has it written first, so the archive holds the message.
    let retained = std::process::Command::new("mosquitto_pub")
        .args(["-h", &addr, "-p", "1883", "-u", LOGIN, "-P", PASSWORD, "-t", "pgo/state", "-q", "1", "-r"])
        .args(["-m", "retained-before-snapshot"])
        .output()
        .unwrap();
    assert!(retained.status.success(), "{retained:?}");
    let r = run(repo.path(), "workflows/snapshot.yml", "refs/heads/snapshot", &lxc_args(&artifacts));
    let log = &r.log;
    assert_eq!(r.code, 0, "{log}");
    let snap = read_json(&artifacts.join("snapshot/broker.json"));
    assert_eq!(snap["result"], "ok", "{snap:#}");
    assert_eq!(snap["verification"], "verified", "{snap:#}");
    assert_eq!(snap["paths"], serde_json::json!(["/var/lib/mosquitto", "/etc/mosquitto"]));
    let archive = Path::new(snap["archive"].as_str().unwrap());
    assert!(archive.starts_with(share.join("snapshots/broker")), "{}", archive.display());
    assert!(Path::new(snap["manifest"].as_str().unwrap()).is_file());
    let listing = std::process::Command::new("tar").arg("tzf").arg(archive).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.lines().any(|l| l.trim_end_matches('/').ends_with("etc/mosquitto/passwd")), "{listing}");
    assert!(listing.lines().any(|l| l.trim_end_matches('/').ends_with("var/lib/mosquitto")), "{listing}");
    assert!(snap["entry_count"].as_u64().unwrap() >= 4, "{snap:#}");
    let mut db = Vec::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(archive).unwrap()));
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().as_ref() == Path::new("var/lib/mosquitto/mosquitto.db") {
            std::io::Read::read_to_end(&mut entry, &mut db).unwrap();
        }
    }
    assert!(
        db.windows(24).any(|w| w == b"retained-before-snapshot"),
        "the archived mosquitto.db ({} bytes) lacks the retained message: the pre-snapshot hook did not run",
        db.len()
    );

    // c. a failing lib on main: the run fails and says which lib and step.
    let script = repo.path().join("libs/broker/configure.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let broken =
        text.replacen("set -euo pipefail\n", "set -euo pipefail\necho 'mosquitto.conf: bad listener' >&2\nexit 7\n", 1);
    assert_ne!(broken, text);
    std::fs::write(&script, broken).unwrap();
    commit_all(repo.path(), "broker: broken");
    let r = run(repo.path(), "workflows/pipeline.yml", "refs/heads/main", &lxc_args(&artifacts));
    let log = &r.log;
    assert_ne!(r.code, 0, "{log}");
    assert!(r.step_failed("pipeline", "deploy", CONFIGURE), "{log}");
    assert!(r.step_has("pipeline", "deploy", CONFIGURE, "broker: configure failed:"), "{log}");
    assert!(r.step_has("pipeline", "deploy", CONFIGURE, "error: 1 of 1 container(s) failed: broker"), "{log}");
    assert!(
        r.step_has("pipeline", "deploy", CONFIGURE, "mosquitto.conf: bad listener"),
        "the lib's own error reaches the log:\n{log}"
    );
    let cfg = read_json(&artifacts.join("configure/broker.json"));
    assert_eq!(cfg["result"], "failed", "{cfg:#}");
    assert_broker_answers(&addr);

    // b. backend pve against fakepve, the spec's address being the real container.
    let pve = fakepve::FakePve::start();
    pve.add_template();
    let pve_repo = broker_repo("", Some(&format!("{addr}/24")));
    let pve_artifacts = state.path().join("pve-artifacts");
    let mut args = common.clone();
    args.extend(
        [
            ("--var", "PROXMOX_GITOPS_BACKEND=pve".to_string()),
            ("--var", format!("PROXMOX_GITOPS_ARTIFACTS={}", pve_artifacts.display())),
            ("--var", "PROXMOX_HOST=127.0.0.1".to_string()),
            ("--var", format!("PROXMOX_PORT={}", pve.port)),
            ("--var", "PROXMOX_USER=root@pam".to_string()),
            ("-s", format!("PROXMOX_PASSWORD={}", fakepve::PASSWORD)),
            ("--var", format!("PROXMOX_TEMPLATE={}", fakepve::TEMPLATE)),
            ("--var", "PROXMOX_STORAGE=local".to_string()),
            ("--var", "PROXMOX_GATEWAY=10.0.3.1".to_string()),
            ("--var", format!("PROXMOX_CA={}", pve.ca.display())),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v]),
    );
    let r = run(pve_repo.path(), "workflows/pipeline.yml", "refs/heads/release", &args);
    let log = &r.log;
    assert_eq!(r.code, 0, "{log}");
    let conf = pve.ct_config(120).unwrap_or_else(|| panic!("CT 120 was not created in fakepve:\n{log}"));
    eprintln!("fakepve CT 120: {conf:#}");
    assert_eq!(conf["hostname"], ct.as_str(), "{conf:#}");
    assert_eq!(conf["cores"].to_string().trim_matches('"'), "1", "{conf:#}");
    assert_eq!(conf["memory"].to_string().trim_matches('"'), "256", "{conf:#}");
    assert_eq!(conf["swap"].to_string().trim_matches('"'), "256", "{conf:#}");
    assert_eq!(conf["status"], "running", "{conf:#}");
    let net0 = conf["net0"].as_str().unwrap_or_default();
    assert!(net0.contains(&format!("ip={addr}/24")) && net0.contains("gw=10.0.3.1"), "{conf:#}");
    assert!(conf["rootfs"].as_str().unwrap_or_default().starts_with("local-lvm:"), "{conf:#}");
    let prov = read_json(&pve_artifacts.join("provision/broker.json"));
    assert_eq!(prov["result"], "ok", "{prov:#}");
    assert_eq!(prov["backend"], "pve");
    assert_eq!(prov["node"], "pve1");
    assert_eq!(prov["address"], addr.as_str());
    let actions: Vec<&str> =
        prov["actions"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"create") && actions.contains(&"start") && actions.contains(&"wait-ssh"), "{prov:#}");
    let cfg = read_json(&pve_artifacts.join("configure/broker.json"));
    assert_eq!(cfg["result"], "ok", "configure reached the real container: {cfg:#}");
    assert_eq!(cfg["address"], addr.as_str());
    assert_eq!(cfg["base"]["changed"], 0, "{cfg:#}");
    assert_broker_answers(&addr);
}
