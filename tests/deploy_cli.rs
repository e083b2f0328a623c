//! The `deploy` and `artifacts` subcommands through the binary: exit codes, messages,
//! $GITHUB_OUTPUT, and the artifact bundle round trip.

#[path = "support/deploy.rs"]
mod deploy;

use std::path::Path;
use std::process::{Command, Output};

use deploy::monorepo;
use pretty_assertions::assert_eq;

fn pgo(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.arg("--repo").arg(root).args(args).env("NO_COLOR", "1");
    for v in ["GITHUB_ACTIONS", "GITEA_ACTIONS", "GITHUB_OUTPUT", "GITHUB_REF", "GITHUB_RUN_ID", "PGO_BUNDLE", "PGO_ARTIFACTS"] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn deploy_reports_each_failed_container_and_writes_outputs() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let out_file = root.join("gh-output");
    let out = pgo(
        root,
        &["deploy", "--ref", "refs/heads/main", "--container", "alpha"],
        &[("GITHUB_OUTPUT", out_file.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "error: 1 of 1 container(s) failed: alpha\n  alpha: configure: alpha: run `provision` first"
        ),
        "{stderr}"
    );
    let artifact = root.join(".proxmox-gitops/deploy.json");
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        format!(
            "artifact={}\nresult=failed\nsteps=configure\ncontainers=alpha\nsucceeded=\nfailed=alpha\nskipped=\n",
            artifact.display()
        )
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&artifact).unwrap()).unwrap();
    assert_eq!(v["kind"], "deploy");
    assert_eq!(v["containers"][0]["steps"][0]["state"], "failed");
    let human = text(&out.stdout);
    assert!(human.starts_with("NAME   VMID  STEPS             TIME  RESULT\nalpha  101   configure FAILED  "), "{human}");
}

#[test]
fn deploy_refuses_bad_usage_with_exit_code_2() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let out = pgo(root, &["deploy", "--ref", "refs/heads/main"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--container <CONTAINERS>|--all"), "{}", text(&out.stderr));
    let out = pgo(root, &["deploy", "--ref", "refs/heads/feature", "--all"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--ref (refs/heads/feature): ref `refs/heads/feature` does not deploy"),
        "{}",
        text(&out.stderr)
    );
    let out = pgo(root, &["deploy", "--ref", "refs/heads/main", "--all", "--step", "reboot"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!root.join(".proxmox-gitops/deploy.json").exists());
}

#[test]
fn artifacts_travel_in_a_bundle() {
    let a = monorepo(&["alpha"]);
    let out = pgo(a.path(), &["resolve"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = pgo(a.path(), &["artifacts", "pack"], &[]);
    assert!(out.status.success());
    let bundle = text(&out.stdout);
    assert!(bundle.starts_with("pgo1:") && bundle.trim_end().lines().count() == 1, "{bundle}");

    let b = tempfile::tempdir().unwrap();
    let out = pgo(b.path(), &["artifacts", "unpack"], &[("PGO_BUNDLE", bundle.trim())]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(b.path().join(".proxmox-gitops/inventory.json")).unwrap(),
        std::fs::read_to_string(a.path().join(".proxmox-gitops/inventory.json")).unwrap()
    );
    let out = pgo(b.path(), &["artifacts", "unpack"], &[("PGO_BUNDLE", "pgo1:@@@")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("error: cannot unpack the artifact bundle (PGO_BUNDLE): bundle 1: invalid base64"),
        "{}",
        text(&out.stderr)
    );
}
