//! The real workflows/pipeline.yml and action.yml, run by act (the engine of Gitea's act_runner)
//! in host mode, offline, on a fixture monorepo, with the binary under test.
//!
//! The tests of this file need no container: they run with backend `pve` and no `PROXMOX_HOST`
//! (`PVE_UNSET`), so every provision fails naming the missing setting, and configure has no
//! provision result to work from. They check everything around the steps: job order, outputs
//! passed between jobs, one step call per container, blocking, masking, the binary input. The
//! end-to-end runs against real containers and fakepve are in `workflows_e2e.rs`.

#[path = "support/workflows.rs"]
mod workflows;

use std::os::unix::fs::PermissionsExt;

use workflows::{act, act_with, commit_all, monorepo, monorepo_with, write_files};

/// Backend `pve` without `PROXMOX_HOST`: nothing is ever contacted (the default backend without a
/// PVE host would be `lxc`, i.e. real containers on this host).
const PVE_UNSET: [&str; 2] = ["--var", "PROXMOX_GITOPS_BACKEND=pve"];
const NO_HOST: &str = "1 problem in the input:";
const NO_PROVISION: &str = "run `provision` first";

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    PVE_UNSET.iter().copied().chain(extra.iter().copied()).collect()
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
    assert!(run.job_has("pipeline", "resolve", "Job succeeded"), "{log}");
    assert!(run.job_has("pipeline", "resolve", "containers=config,alpha,beta"), "{log}");
    // main does not provision.
    assert!(run.job("pipeline", "provision").is_empty(), "{log}");
    // configure got the inventory through the bundle output (it runs in another workspace).
    assert!(run.job_has("pipeline", "configure", "restored 1 artifact(s)"), "{log}");
    assert!(run.job_has("pipeline", "configure", "inventory.json"), "{log}");
    assert!(run.job_has("pipeline", "configure", "inventory was resolved in"), "{log}");
    // configure is invoked once per container; nothing was provisioned, so each one fails saying
    // so, and so do the job and act.
    for name in ["config", "alpha", "beta"] {
        let call = format!("INFO {name}: configure");
        assert_eq!(run.job("pipeline", "configure").iter().filter(|l| l.ends_with(&call)).count(), 1, "{name}\n{log}");
        let line = format!("{name}: configure failed: {name}: {NO_PROVISION}");
        assert!(run.job_has("pipeline", "configure", &line), "{name}\n{log}");
    }
    assert!(run.job_has("pipeline", "configure", "3 of 3 container(s) failed: config, alpha, beta"), "{log}");
    assert!(run.job_has("pipeline", "configure", "Job failed"), "{log}");
    assert_ne!(run.code, 0, "{log}");
    // The secret never shows.
    assert!(!log.contains("pve-secret-9f2c"), "{log}");
}

#[test]
fn push_to_release_provisions_then_configures_with_the_provision_results() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/release"}),
        &args(&[]),
    );
    let log = &run.log;
    assert!(run.job_has("pipeline", "resolve", "Job succeeded"), "{log}");
    for name in ["config", "alpha", "beta"] {
        let line = format!("{name}: provision failed: {NO_HOST}");
        assert!(run.job_has("pipeline", "provision", &line), "{name}\n{log}");
    }
    assert!(run.job_has("pipeline", "provision", "environment (PROXMOX_HOST): not set: the PVE API host"), "{log}");
    assert!(run.job_has("pipeline", "provision", "Job failed"), "{log}");
    // configure still runs after a failed provision and reads its results from the provision
    // job's bundle: every container's provision failed for these inputs, so each is blocked
    // rather than configured.
    assert!(
        run.job_has(
            "pipeline",
            "configure",
            "deploy.json, inventory.json, provision/alpha.json, provision/beta.json, provision/config.json"
        ),
        "{log}"
    );
    for name in ["config", "alpha", "beta"] {
        let line = format!("{name}: configure blocked: provision failed for the same inputs");
        assert!(run.job_has("pipeline", "configure", &line), "{name}\n{log}");
    }
    assert!(!run.job_has("pipeline", "configure", NO_PROVISION), "{log}");
    assert_ne!(run.code, 0, "{log}");
}

#[test]
fn dispatch_runs_the_chosen_step_for_the_chosen_container() {
    let repo = monorepo(&[]);
    let run = act(
        repo.path(),
        "workflow_dispatch",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/main", "inputs": {"step": "provision", "container": "beta"}}),
        &args(&[]),
    );
    let log = &run.log;
    assert!(run.job_has("pipeline", "provision", &format!("beta: provision failed: {NO_HOST}")), "{log}");
    assert!(!run.job_has("pipeline", "provision", "alpha:"), "{log}");
    assert!(run.job("pipeline", "configure").is_empty(), "{log}");
    assert_ne!(run.code, 0, "{log}");
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
        assert!(run.job_has("snapshot", "snapshot", &format!("{name}: {name} declares no SNAPSHOT paths: nothing to snapshot")), "{log}");
        assert!(run.job_has("snapshot", "snapshot", &format!("{name}: snapshot ok in")), "{log}");
    }
    assert!(run.job_has("snapshot", "snapshot", "result=ok") || run.job_has("snapshot", "snapshot", "Job succeeded"), "{log}");
    assert_eq!(run.code, 0, "{log}");
}

#[test]
fn a_broken_container_env_fails_the_run_and_names_the_file() {
    let repo = monorepo(&[("libs/beta/container.env", "ID=102\nIP=127.0.30.3/24\nCORES=lots\n")]);
    let run = act(
        repo.path(),
        "push",
        "workflows/pipeline.yml",
        &serde_json::json!({"ref": "refs/heads/main"}),
        &args(&[]),
    );
    let log = &run.log;
    assert_ne!(run.code, 0, "{log}");
    assert!(run.job_has("pipeline", "resolve", "Job failed"), "{log}");
    assert!(
        run.job_has("pipeline", "resolve", "libs/beta/container.env:3 (CORES): expected CORES as a whole number"),
        "{log}"
    );
    assert!(run.job("pipeline", "configure").iter().all(|l| !l.contains("configure failed")), "{log}");
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
    assert!(first.job_has("pipeline", "resolve", "Job succeeded"), "{}", first.log);
    assert!(first.job_has("pipeline", "configure", &format!("alpha: configure failed: alpha: {NO_PROVISION}")), "{}", first.log);
    // Built once for both jobs.
    assert_eq!(calls_made(), 1, "{}", first.log);
    let line = std::fs::read_to_string(&calls).unwrap();
    assert!(line.starts_with("build --profile release --locked --manifest-path "), "{line}");
    assert!(line.trim_end().ends_with("/Cargo.toml"), "{line}");
    let built: Vec<_> = std::fs::read_dir(cache.join("bin")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(built.len(), 1);

    // Same sources: the cached binary is used.
    let second = run(repo.path());
    assert!(second.job_has("pipeline", "resolve", "Job succeeded"), "{}", second.log);
    assert_eq!(calls_made(), 1, "{}", second.log);

    // Changed sources: built again.
    write_files(repo.path(), &[("src/lib.rs", &(std::fs::read_to_string(repo.path().join("src/lib.rs")).unwrap() + "\n"))]);
    commit_all(repo.path(), "touch");
    let third = run(repo.path());
    assert!(third.job_has("pipeline", "resolve", "Job succeeded"), "{}", third.log);
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
        run.job_has("pipeline", "resolve", "input binary: '/nonexistent/proxmox-gitops' is not an executable file"),
        "{}",
        run.log
    );
    assert!(run.job("pipeline", "configure").iter().all(|l| !l.contains("configure failed")), "{}", run.log);
}
