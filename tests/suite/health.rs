//! `proxmox-gitops health` against a real LXC container made by the lxc backend, with the Gitea
//! double for the lib repository's description and a job summary file: a lib declaring
//! `SERVICES=ssh` is healthy (exit 0, description `healthy · ssh active · …`); with its service
//! stopped it is down (exit 1 naming the unit, description `DOWN: ssh inactive · …`); with the
//! container stopped it is reported stopped. The control plane of the fixture is not deployed:
//! checking the whole stage fails, naming where the backend looked (a wrong LXC path or stage
//! must not pass as healthy).
//!
//! Needs root and LXC. The container is `pgotest-hl-<pid>-app`, cloned from a ready base of the
//! lxc backend (see `support::lxc::ready_base`) and removed afterwards, also when the test
//! fails. It is reached with `lxc-attach` only; the Gitea double listens on 127.0.0.1.
//! Run: `cargo test --test suite health::`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use proxmox_gitops::gitea::{Auth, Client, CreateOrgOption, CreateRepoOption};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use secrecy::SecretString;
use serde_json::{Value, json};
use support::configure::{Lab, stage_for};
use support::gitea::{Creds, Double};

const KIND: &str = "hl";
const PASSWORD: &str = "double-pw-health";

/// The monorepo: the control plane (never deployed here) and the lib `app` declaring its
/// service.
fn monorepo(root: &Path) {
    support::fs::write_files(
        root,
        &[
            ("container.env", "ID=9410\nIP=dhcp\n"),
            ("libs/app/container.env", "ID=9411\nIP=dhcp\nMEMORY=256\nSWAP=0\nDISK=local:4\nBOOT=no\nSERVICES=ssh\n"),
        ],
    );
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `health` with the test's settings and `extra` arguments (after the subcommand).
fn health(root: &Path, artifacts: &Path, share: &Path, double: &Double, summary: &Path, extra: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    for var in ["PROXMOX_HOST", "PROXMOX_PASSWORD", "PROXMOX_TOKEN", "GITEA_TOKEN", "PGO_BACKEND", "PGO_JOBS"] {
        cmd.env_remove(var);
    }
    let out = cmd
        .env("PROXMOX_SHARE", share)
        .env("HOST", double.url())
        .env("LOGIN", "admin")
        .env("PASSWORD", PASSWORD)
        .env("GITHUB_STEP_SUMMARY", summary)
        .env_remove("GITHUB_OUTPUT")
        .arg("--repo")
        .arg(root)
        .args(["--stage", &stage_for(KIND), "--artifacts"])
        .arg(artifacts)
        .arg("health")
        .args(extra)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The artifact with what changes from run to run replaced: `checked_at`, each `duration_ms`
/// and `system` (`running` or `degraded`, the container's own business), and the check time at
/// the end of each description (checked against `checked_at` here).
fn normalized(mut v: Value) -> Value {
    let checked_at = v["checked_at"].as_str().unwrap().to_string();
    // `2026-12-01T17:00:05Z` → `2026-12-01 17:00 UTC`.
    let minute = format!("{} {} UTC", &checked_at[..10], &checked_at[11..16]);
    v["checked_at"] = json!("<time>");
    for c in v["containers"].as_array_mut().unwrap() {
        c["duration_ms"] = json!(0);
        if let Some(s) = c["system"].as_str() {
            assert!(s == "running" || s == "degraded", "{s}");
            c["system"] = json!("<booted>");
        }
    }
    for d in v["descriptions"].as_array_mut().unwrap() {
        let text = d["text"].as_str().unwrap().to_string();
        let suffix = format!(" · checked {minute}");
        assert!(text.ends_with(&suffix), "{text} should end with {suffix}");
        d["text"] = json!(text.replace(&suffix, " · checked <time>"));
    }
    v
}

fn attach(lab: &Lab, name: &str, argv: &[&str]) {
    let out = lab.attach(name, argv);
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The descriptions the double received, in order.
fn descriptions_sent(double: &Double) -> Vec<String> {
    double
        .exchanges()
        .iter()
        .filter(|e| e["method"] == "PATCH" && e["path"] == "/repos/main/app")
        .map(|e| e["request"]["description"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn services_up_down_and_a_stopped_container() {
    let _heavy = support::heavy::area("health");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mono");
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let summary = tmp.path().join("summary.md");
    monorepo(&root);
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    let inv = resolve(&ResolveOptions { repo: root.clone(), stage: stage_for(KIND) }, &env).unwrap();
    let lxc_path = support::lxc::lxc_path();
    let lab = Lab::open(&share, KIND, &support::lxc::ready_base(&lxc_path, "pgotest-hl-base")).await;
    let spec = inv.container("app").unwrap().clone();
    assert_eq!(spec.services, vec!["ssh.service".to_string()]);
    lab.provision(&spec, &tmp.path().join("provision-artifacts")).await;
    let host = spec.hostname.clone();

    let double = Double::start(Creds::basic("admin", PASSWORD));
    let client =
        Client::new(&double.url(), Some(Auth::Basic { login: "admin".into(), password: SecretString::from(PASSWORD) }))
            .unwrap();
    client.create_org(&CreateOrgOption { username: "main".into(), ..Default::default() }).await.unwrap();
    client.create_org_repo("main", &CreateRepoOption { name: "app".into(), ..Default::default() }).await.unwrap();

    let expected = |state: &str, services: Value, detail: Value, description: &str| {
        json!({
            "kind": "health",
            "schema_version": "1.0",
            "stage": stage_for(KIND),
            "backend": "lxc",
            "checked_at": "<time>",
            "healthy": state == "healthy",
            "containers": [
                {"name": "app", "hostname": host, "vmid": 9411, "state": state, "system": "<booted>",
                 "services": services, "failed_units": null, "detail": detail, "duration_ms": 0}
            ],
            "descriptions": [
                {"container": "app", "repository": "main/app", "text": description, "result": "ok"}
            ]
        })
    };

    // 0. The whole stage: the control plane is not deployed. A container the inventory expects
    // and the backend does not find fails the check, saying where it looked.
    let run = health(&root, &artifacts, &share, &double, &summary, &["--no-describe"]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let config_host = format!("{}-config", stage_for(KIND));
    assert!(
        run.stderr.contains(&format!(
            "1 of 2 container(s) not healthy:\n  config: not-deployed — no container `{config_host}` (vmid 9410) in LXC \
             path {}",
            lxc_path.display()
        )),
        "{}",
        run.stderr
    );
    std::fs::remove_file(&summary).unwrap();

    // 1. Healthy: exit 0, the artifact on stdout and in health.json, the description, the summary.
    let run = health(&root, &artifacts, &share, &double, &summary, &["--json", "-c", "app"]);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    let got: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        normalized(got.clone()),
        expected(
            "healthy",
            json!([{"unit": "ssh.service", "state": "active"}]),
            Value::Null,
            "healthy · ssh active · checked <time>"
        )
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(artifacts.join("health.json")).unwrap()).unwrap();
    assert_eq!(written, got);
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with(&format!("### Health of stage `{}`: all 1 container(s) healthy", stage_for(KIND))), "{md}");
    assert!(md.contains("| app | healthy | ssh active |   |\n"), "{md}");

    // 2. The service stopped: exit 1 naming the unit, the description says so.
    attach(&lab, &host, &["systemctl", "stop", "ssh.service"]);
    let run = health(&root, &artifacts, &share, &double, &summary, &["--json", "-c", "app"]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("error: 1 of 1 container(s) not healthy:\n  app: down — ssh inactive"),
        "{}",
        run.stderr
    );
    let got: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        normalized(got),
        expected(
            "down",
            json!([{"unit": "ssh.service", "state": "inactive"}]),
            json!("ssh inactive"),
            "DOWN: ssh inactive · checked <time>"
        )
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("| app | **down** | ssh inactive | ssh inactive |"), "{md}");
    assert_eq!(md.matches("### Health of stage").count(), 2, "appended, not replaced: {md}");

    // 3. The container stopped, one container selected, no description: the human table.
    let out = Command::new("lxc-stop").arg("-P").arg(&lxc_path).args(["-n", &host, "-k"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = health(&root, &artifacts, &share, &double, &summary, &["--container", "app", "--no-describe"]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let table: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(table[0].split_whitespace().collect::<Vec<_>>(), ["CONTAINER", "STATE", "SERVICES", "DETAIL"]);
    assert_eq!(table[1].split_whitespace().collect::<Vec<_>>(), ["app", "stopped", "-", "container", "is", "stopped"]);
    assert!(run.stderr.contains("app: stopped — container is stopped"), "{}", run.stderr);

    assert_eq!(
        descriptions_sent(&double).iter().map(|d| d.split(" · checked ").next().unwrap()).collect::<Vec<_>>(),
        ["healthy · ssh active", "DOWN: ssh inactive"],
        "one PATCH per run that describes; none with --no-describe"
    );
    double.assert_spec_conformant();
}
