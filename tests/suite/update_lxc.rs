//! `proxmox-gitops update` against a real LXC container made by the lxc backend, without any
//! package mirror:
//!
//! 1. an upgrade that fails with a side effect (an APT hook run by `apt-get update` removes a
//!    marker file, leaves another, then fails) is rolled back to the snapshot taken before: the
//!    marker is back, the side effect is gone, the report says `rolled-back`, the exit code is 1;
//! 2. an upgrade that succeeds (`apt-get update` and `dist-upgrade` have nothing to do: the
//!    container's package sources are removed first, so nothing is fetched in either phase) and asks for a reboot (a hook touches `/var/run/reboot-required`) is
//!    rebooted, checked healthy, and the older update snapshot is deleted while the new one is
//!    kept.
//!
//! Needs root and LXC. The container is `pgotest-up-<pid>-app`, cloned from a ready base of the
//! lxc backend (see `support::lxc::ready_base`) and removed afterwards, also when the test
//! fails. It is reached with `lxc-attach` only; no network traffic.
//! Run: `cargo test --test suite update_lxc::`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::lxc::LxcClient;
use proxmox_gitops::snapshot::ct::CtSnapshots;
use proxmox_gitops::snapshot::lxc::LxcSnapshots;
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use serde_json::Value;
use support::configure::{Lab, stage_for};

const KIND: &str = "up";

/// The APT hook of phase 1: `apt-get update` runs it first; it changes the container and fails.
const FAILING_HOOK: &str = r#"APT::Update::Pre-Invoke {"rm -f /root/marker; touch /root/upgraded; exit 1";};"#;
/// The APT hook of phase 2: after a successful `apt-get update`, the distribution asks for a
/// reboot (as a kernel or libc upgrade would).
const REBOOT_HOOK: &str = r#"APT::Update::Post-Invoke {"touch /var/run/reboot-required";};"#;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn update(root: &Path, artifacts: &Path, share: &Path, summary: &Path, extra: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    for var in ["PROXMOX_HOST", "HOST", "PGO_BACKEND", "PGO_UPGRADE_TIMEOUT", "GITHUB_OUTPUT"] {
        cmd.env_remove(var);
    }
    let out = cmd
        .env("PROXMOX_SHARE", share)
        .env("GITHUB_STEP_SUMMARY", summary)
        .arg("--repo")
        .arg(root)
        .args(["--stage", &stage_for(KIND), "--artifacts"])
        .arg(artifacts)
        .args(["update", "--container", "app", "--upgrade-timeout", "600", "--boot-timeout", "120"])
        .args(extra)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the constant test script `script` in the container; returns stdout.
fn sh(lab: &Lab, host: &str, script: &str) -> String {
    let out = lab.attach(host, &["sh", "-c", script]);
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn exists(lab: &Lab, host: &str, path: &str) -> bool {
    lab.attach(host, &["test", "-e", path]).status.success()
}

async fn snapshot_names(client: &LxcClient, host: &str) -> Vec<String> {
    LxcSnapshots::new(client.clone(), host).list().await.unwrap().into_iter().map(|s| s.name).collect()
}

fn actions(c: &Value) -> Vec<String> {
    c["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{} {}", a["action"].as_str().unwrap(), a["exit_status"].as_str().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_upgrade_rolls_back_and_a_good_one_reboots_and_prunes() {
    let _heavy = support::heavy::area("update_lxc");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mono");
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let summary = tmp.path().join("summary.md");
    support::fs::write_files(
        &root,
        &[
            ("container.env", "ID=9420\nIP=dhcp\n"),
            ("libs/app/container.env", "ID=9421\nIP=dhcp\nMEMORY=256\nSWAP=0\nDISK=local:4\nBOOT=no\nSERVICES=ssh\n"),
        ],
    );
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    let inv = resolve(&ResolveOptions { repo: root.clone(), stage: stage_for(KIND) }, &env).unwrap();
    let lxc_path = support::lxc::lxc_path();
    let lab = Lab::open(&share, KIND, &support::lxc::ready_base(&lxc_path, "pgotest-up-base")).await;
    let spec = inv.container("app").unwrap().clone();
    lab.provision(&spec, &tmp.path().join("provision-artifacts")).await;
    let host = spec.hostname.clone();
    let client = LxcClient::open(Some(lxc_path.clone())).unwrap();

    // 1. The upgrade fails after changing the container: rolled back.
    // No package sources: apt-get fetches nothing (apt runs the hook and still fetches).
    sh(&lab, &host, "echo kept > /root/marker; rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*");
    sh(&lab, &host, &format!("printf '%s\\n' '{FAILING_HOOK}' > /etc/apt/apt.conf.d/99pgo-test"));
    let run = update(&root, &artifacts, &share, &summary, &["--json"]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!((report["kind"].as_str(), report["ok"].as_bool()), (Some("update"), Some(false)));
    let c = &report["containers"][0];
    assert_eq!(c["result"], "rolled-back", "{c:#}");
    let first = c["snapshot"].as_str().unwrap().to_string();
    assert!(first.starts_with("pgo-update-"), "{first}");
    assert_eq!(c["rollback"]["snapshot"], first.as_str());
    assert_eq!(c["rollback"]["result"], "ok");
    assert_eq!(c["commands"].as_array().unwrap().len(), 1, "dist-upgrade is not run after a failed update");
    assert_eq!(c["commands"][0]["exit_code"], 100);
    assert!(!c["commands"][0]["output_tail"].as_str().unwrap().contains("Get:"), "nothing fetched: {c:#}");
    assert!(c["commands"][0]["stderr_tail"].as_str().unwrap().contains("APT::Update::Pre-Invoke"), "{c:#}");
    let reason = c["rollback"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "`env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 update` failed: exit code 100"
        ),
        "{reason}"
    );
    assert_eq!(c["error"].as_str().unwrap(), format!("{reason}; rolled back to {first}"));
    assert_eq!(c["health"]["state"], "healthy", "{c:#}");
    assert_eq!(c["health_before"]["state"], "healthy");
    assert_eq!(actions(c), ["check OK", "snapshot OK", "upgrade failed", "rollback OK", "wait OK", "check OK"]);
    // The running container was frozen for its snapshot, not restarted; the pause is recorded.
    let detail = c["actions"][1]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("{first} (the container was paused for ")) && detail.ends_with(" ms)"),
        "{detail}"
    );
    // The container is as before the upgrade.
    assert_eq!(sh(&lab, &host, "cat /root/marker"), "kept\n");
    assert!(!exists(&lab, &host, "/root/upgraded"), "the upgrade's change was rolled back");
    assert!(run.stderr.contains(&format!("app: rolled-back — {reason}; rolled back to {first}")), "{}", run.stderr);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(artifacts.join("update.json")).unwrap()).unwrap();
    assert_eq!(written, report);
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with(&format!("### Update of stage `{}`: 0 updated, 1 rolled back, 0 failed", stage_for(KIND))));
    assert!(md.contains(&format!("| app | **rolled-back** | {first} | - | healthy | ")), "{md}");
    assert_eq!(snapshot_names(&client, &host).await, [first.as_str()], "the snapshot is kept after a rollback");
    // The container is still the lxc backend's (lxc-snapshot -r would have dropped its metadata).
    assert!(lxc_path.join(&host).join("proxmox-gitops.json").is_file());

    // 2. An upgrade with nothing to fetch that asks for a reboot: updated, rebooted, pruned.
    sh(&lab, &host, &format!("printf '%s\\n' '{REBOOT_HOOK}' > /etc/apt/apt.conf.d/99pgo-test"));
    let run = update(&root, &artifacts, &share, &summary, &[]);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(artifacts.join("update.json")).unwrap()).unwrap();
    let c = &report["containers"][0];
    assert_eq!(c["result"], "updated", "{c:#}");
    let second = c["snapshot"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(c["rebooted"], true);
    assert_eq!(c["pruned"], serde_json::json!([first]));
    assert_eq!(c["error"], Value::Null);
    assert_eq!(c["commands"].as_array().unwrap().iter().map(|c| c["exit_code"].clone()).collect::<Vec<_>>(), [0, 0]);
    assert_eq!(
        actions(c),
        ["check OK", "snapshot OK", "upgrade OK", "upgrade OK", "reboot OK", "wait OK", "check OK", "prune OK"]
    );
    assert!(!exists(&lab, &host, "/var/run/reboot-required"), "the reboot cleared /run");
    assert_eq!(sh(&lab, &host, "cat /root/marker"), "kept\n");
    assert_eq!(snapshot_names(&client, &host).await, [second.as_str()]);
    let table: Vec<Vec<&str>> = run.stdout.lines().take(2).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(table[0], ["CONTAINER", "RESULT", "SNAPSHOT", "REBOOT", "HEALTH", "DETAIL"]);
    assert_eq!(table[1], ["app", "updated", second.as_str(), "yes", "healthy"]);
}
