//! `proxmox-gitops drift` through the binary against fakepve (loopback): a memory changed by
//! hand through fakepve's own model is reported as exactly that key, a stopped container, a
//! missing one, a tagged container whose lib is gone; the exit codes with and without
//! `--detailed-exitcode`; the ownership tag added in place to a container that lacks it.

use crate::support;

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::deploy::monorepo;
use support::fakepve::{self, FakePve, run_cli as pgo};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn env(pve: &FakePve, share: &Path) -> Vec<(String, String)> {
    fakepve::cli_env(pve, share)
}

fn provision(root: &Path, env: &[(String, String)], names: &str) {
    let out = pgo(
        root,
        &[
            "deploy",
            "--ref",
            "refs/heads/release",
            "--step",
            "provision",
            "--container",
            names,
            "--no-wait-ssh",
            "--force",
        ],
        env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `(container, key, desired, live)` of every row of `drift --json`.
fn rows(v: &Value) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for c in v["containers"].as_array().unwrap() {
        for d in c["differences"].as_array().unwrap() {
            out.push((
                c["name"].as_str().unwrap().into(),
                d["key"].as_str().unwrap().into(),
                d["desired"].as_str().unwrap().into(),
                d["live"].as_str().unwrap().into(),
            ));
        }
    }
    for o in v["orphans"].as_array().into_iter().flatten() {
        out.push((o["hostname"].as_str().unwrap().into(), "lib".into(), "-".into(), o["lib"].as_str().unwrap().into()));
    }
    out
}

fn s(a: &str, b: &str, c: &str, d: &str) -> (String, String, String, String) {
    (a.into(), b.into(), c.into(), d.into())
}

#[test]
fn drift_reports_hand_changes_stopped_missing_and_orphans() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    provision(root, &env, "alpha,beta");
    assert_eq!(pve.ct_config(101).unwrap()["tags"], "proxmox-gitops");

    // As provisioned: no drift, exit 0 even with --detailed-exitcode.
    let out = pgo(root, &["drift", "-c", "alpha,beta", "--detailed-exitcode", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows(&v), vec![]);
    assert_eq!((v["drifted"].as_bool(), &v["orphans"]), (Some(false), &Value::Null));

    // A memory changed by hand (fakepve's own model, as the PVE UI would): exactly that key.
    pve.exec("pve.ct(101).config['memory'] = 1024");
    let out = pgo(root, &["drift", "-c", "alpha", "--detailed-exitcode", "--json"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["containers"][0]["differences"], json!([{"key": "MEMORY", "desired": "512", "live": "1024"}]));
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/drift.json")).unwrap()).unwrap();
    assert_eq!(on_disk["containers"], v["containers"]);
    // Without the flag: drift is reported, exit 0 (terraform plan's convention).
    let out = pgo(root, &["drift", "-c", "alpha"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().take(2).collect::<Vec<_>>(),
        vec!["CONTAINER  KEY     DESIRED  LIVE", "alpha      MEMORY  512      1024"]
    );

    // beta stopped, config (vmid 100) never provisioned, a tagged CT whose lib is gone, a tagged
    // CT of another stage and a CT that is not ours: the whole stage with the job summary.
    pve.exec("pve.ct(102).status = 'stopped'");
    pve.exec(
        "pve.add_ct(105, name='old', status='running', config={'tags': 'proxmox-gitops;web', \
         'description': 'managed by proxmox-gitops: lib `old`\\n'})\n\
         pve.add_ct(106, name='dev-alpha', status='running', config={'tags': 'proxmox-gitops', \
         'description': 'managed by proxmox-gitops: lib `alpha`\\n'})\n\
         pve.add_ct(107, name='mine', status='running')",
    );
    let summary = root.join("summary.md");
    let mut env2 = env.clone();
    env2.push(("GITHUB_STEP_SUMMARY".into(), summary.display().to_string()));
    let out = pgo(root, &["drift", "--detailed-exitcode", "--json"], &env2);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows(&v),
        vec![
            s("config", "container", "CT 100", "absent"),
            s("alpha", "MEMORY", "512", "1024"),
            s("beta", "STATE", "running", "stopped"),
            s("old", "lib", "-", "old"),
        ]
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("### Drift of stage `main`: 4 difference(s)\n"), "{md}");
    assert!(md.contains("| alpha | MEMORY | 512 | **1024** |\n"), "{md}");
    // drift reads only.
    assert!(pve.writes(false).iter().all(|(m, p, _)| m != "PUT" || !p.contains("/105/")));
    assert!(pve.ct_config(105).is_some() && pve.ct_config(107).is_some());
}

#[test]
fn detailed_exitcode_keeps_two_for_drift_only() {
    let pve = FakePve::start();
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    let out = pgo(root, &["drift", "-c", "nosuch"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = pgo(root, &["drift", "-c", "nosuch", "--detailed-exitcode"], &env);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nosuch"), "{}", text(&out.stderr));
}

/// A container of ours made before the tag existed gets it in place (no recreate), next to the
/// user's own tags; drift reports the missing tag until then.
#[test]
fn missing_tag_is_added_in_place_keeping_user_tags() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    provision(root, &env, "alpha");
    pve.exec("pve.ct(101).config['tags'] = 'prod'");
    let out = pgo(root, &["drift", "-c", "alpha", "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["containers"][0]["differences"],
        json!([{"key": "tags", "desired": "includes proxmox-gitops", "live": "prod"}])
    );
    pve.requests(true);
    provision(root, &env, "alpha");
    let writes: Vec<String> = pve.writes(false).iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    assert!(writes.contains(&"PUT /nodes/pve1/lxc/101/config".to_string()), "{writes:?}");
    assert!(writes.iter().all(|w| !w.starts_with("DELETE") && w != "POST /nodes/pve1/lxc"), "no recreate: {writes:?}");
    assert_eq!(pve.ct_config(101).unwrap()["tags"], "prod;proxmox-gitops");
}

/// Issue 28, item 10: the repo is the released checkout and `--pending-repo` a checkout of
/// `main` with changes not released yet (alpha's MEMORY lowered, beta removed, a new lib
/// gamma). The live containers are as released: no drift (exit 0 with `--detailed-exitcode`),
/// and what main would change is listed as pending, in drift.json, the log and the summary. A
/// change by hand is still drift, next to the pending value; a pending checkout that does not
/// resolve fails nothing, a missing one is bad input.
#[test]
fn changes_on_main_not_released_are_pending_not_drift() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    provision(root, &env, "config,alpha,beta");
    let main = tempfile::tempdir().unwrap();
    support::fs::copy_dir(root, main.path());
    std::fs::remove_dir_all(main.path().join("libs/beta")).unwrap();
    support::fs::write_files(
        main.path(),
        &[
            ("libs/alpha/container.env", "ID=101\nIP=127.0.20.2/24\nMEMORY=256\n"),
            ("libs/gamma/container.env", "ID=103\nIP=127.0.20.4/24\n"),
        ],
    );
    let main_dir = main.path().to_str().unwrap();

    let summary = root.join("summary.md");
    let mut env2 = env.clone();
    env2.push(("GITHUB_STEP_SUMMARY".into(), summary.display().to_string()));
    let out = pgo(root, &["drift", "--detailed-exitcode", "--json", "--pending-repo", main_dir], &env2);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((rows(&v), v["drifted"].as_bool()), (vec![], Some(false)));
    assert_eq!(
        v["pending"],
        json!([
            {"name": "alpha", "vmid": 101, "hostname": "alpha", "error": null,
             "differences": [{"key": "MEMORY", "desired": "256", "live": "512"}]},
            {"name": "gamma", "vmid": 103, "hostname": "gamma", "error": null,
             "differences": [{"key": "container", "desired": "CT 103", "live": "absent"}]},
            {"name": "beta", "vmid": 102, "hostname": "beta", "error": null,
             "differences": [{"key": "lib", "desired": "(none: lib removed)", "live": "CT 102"}]},
        ])
    );
    assert_eq!(v["pending_error"], Value::Null);
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("### Drift of stage `main`: none (3 container(s) as desired)\n"), "{md}");
    assert!(md.contains("### Pending release: 3 change(s)\n"), "{md}");
    assert!(md.contains("| alpha | MEMORY | **256** | 512 |\n"), "{md}");

    // A change by hand is drift against the release (exit 2); main's value for that key is
    // still pending, next to it.
    pve.exec("pve.ct(101).config['memory'] = 1024");
    let out = pgo(root, &["drift", "-c", "alpha", "--detailed-exitcode", "--pending-repo", main_dir], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().take(7).collect::<Vec<_>>(),
        vec![
            "CONTAINER  KEY     DESIRED  LIVE",
            "alpha      MEMORY  512      1024",
            "",
            "pending: 1 change(s) not released yet (not drift; the release pull request shows them):",
            "CONTAINER  KEY     PENDING  LIVE",
            "alpha      MEMORY  256      1024",
            "",
        ]
    );

    // A pending checkout that does not resolve is reported and fails nothing more.
    pve.exec("pve.ct(101).config['memory'] = 512");
    support::fs::write_files(main.path(), &[("libs/alpha/container.env", "ID=101\nMEMORY=lots\n")]);
    let out = pgo(root, &["drift", "-c", "alpha", "--detailed-exitcode", "--json", "--pending-repo", main_dir], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pending"], Value::Null);
    let e = v["pending_error"].as_str().unwrap();
    assert!(e.contains("libs/alpha/container.env") && e.contains("MEMORY"), "{e}");
    // A pending checkout that is not there is bad input.
    let out = pgo(root, &["drift", "-c", "alpha", "--pending-repo", "/nonexistent/main"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--pending-repo /nonexistent/main: not a directory"), "{}", text(&out.stderr));
}
