//! `health` and `update` on the PVE backend against fakepve (PyPI) on loopback, with tasks that
//! take time (`time_scale` > 0, so every UPID is really polled):
//!
//! * `health` through the CLI: the state comes from `GET …/status/current` — a stopped CT, a CT
//!   with another hostname (foreign, never touched), a vmid without CT (not deployed), and a
//!   running CT whose address comes from `GET …/interfaces` but whose SSH key is missing
//!   (unreachable, no connection attempted);
//! * `update` through the step with the real PVE operations (snapshot, rollback with start,
//!   reboot, snapshot delete, each task waited for) and a scripted way into the container (a
//!   fake CT runs no commands): a failed upgrade is rolled back (`POST
//!   …/snapshot/{name}/rollback` with `start=1`), a good one that asks for a reboot is rebooted
//!   (`POST …/status/reboot`) and the older update snapshot deleted.
//!
//! Nothing but 127.0.0.1 is contacted.

use crate::support;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::backend::live::{Live, LiveOptions};
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::exec::{BoxFuture, ExecStatus, RemoteExec};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::live::{Containers, CtState, SnapshotTaken};
use proxmox_gitops::model::BackendKind;
use proxmox_gitops::snapshot::ct::CtSnapshotInfo;
use proxmox_gitops::steps::update::{self as step, UpdateOptions, UpdateResult};
use serde_json::{Value, json};
use support::fakepve::FakePve;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Real seconds per PVE second: a 3 s snapshot task takes 0.15 s, polled several times.
const TIME_SCALE: f64 = 0.05;

#[test]
fn health_reads_the_state_from_pve() {
    let pve = FakePve::start_scaled(TIME_SCALE);
    pve.exec(
        "pve.add_ct(9431, name='app', status='running', \
         config={'net0': 'name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=127.0.0.1/8'})\n\
         pve.add_ct(9432, name='web', status='stopped')\n\
         pve.add_ct(9433, name='other', status='running')",
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mono");
    support::fs::write_files(
        &root,
        &[
            ("container.env", "ID=9430\nIP=dhcp\n"),
            ("libs/app/container.env", "ID=9431\nIP=dhcp\nSERVICES=mosquitto\n"),
            ("libs/web/container.env", "ID=9432\nIP=127.0.0.2/8\n"),
            ("libs/db/container.env", "ID=9433\nIP=127.0.0.3/8\n"),
        ],
    );
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    for var in ["HOST", "GITEA_TOKEN", "PROXMOX_TOKEN", "PROXMOX_NODE", "PGO_BACKEND", "GITHUB_STEP_SUMMARY"] {
        cmd.env_remove(var);
    }
    let out = cmd
        .env("PROXMOX_HOST", "127.0.0.1")
        .env("PROXMOX_PORT", pve.port.to_string())
        .env("PROXMOX_USER", "root@pam")
        .env("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
        .env("PROXMOX_SHARE", &share)
        .arg("--repo")
        .arg(&root)
        .arg("--artifacts")
        .arg(&artifacts)
        .args(["health", "--json", "--pve-ca"])
        .arg(&pve.ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["backend"], "pve");
    let got: Vec<(String, String, String)> = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["state"].as_str().unwrap().to_string(),
                c["detail"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    let key = share.join(".keys/9431");
    let expected: Vec<(String, String, String)> = [
        (
            "config",
            "not-deployed",
            format!("no container `config` (vmid 9430) in the PVE cluster at https://127.0.0.1:{}/api2/json", pve.port),
        ),
        (
            "app",
            "unreachable",
            format!(
                "app (vmid 9431): no SSH key {} (the provision step creates it; is --share / PROXMOX_SHARE the same \
                 as for provision?)",
                key.display()
            ),
        ),
        (
            "db",
            "foreign",
            "CT 9433 on node pve1 holds hostname `other`, not `db`: it is not db's container".to_string(),
        ),
        ("web", "stopped", "container is stopped".to_string()),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c))
    .collect();
    assert_eq!(got, expected);
    assert!(stderr.contains("4 of 4 container(s) not healthy"), "{stderr}");
    // Read-only: every request a GET; the DHCP address came from the interfaces.
    let requests = pve.requests(false);
    assert!(requests.iter().all(|(m, p, _)| m == "GET" || p == "/access/ticket"), "{requests:?}");
    assert!(requests.iter().any(|(_, p, _)| p == "/nodes/pve1/lxc/9431/interfaces"), "{requests:?}");
    assert!(!requests.iter().any(|(_, p, _)| p.starts_with("/nodes/pve1/lxc/9433/") && !p.ends_with("status/current")));
}

/// What the scripted container does, shared with the test.
#[derive(Default)]
struct Script {
    /// Exit code of `apt-get update`.
    refresh_exit: i32,
    /// `dist-upgrade` leaves `/var/run/reboot-required`.
    asks_reboot: bool,
    reboot_required: bool,
    /// Every command run, space-joined.
    ran: Vec<String>,
}

/// The real PVE operations, with a scripted way into the container.
struct Scripted {
    live: Live,
    script: Arc<Mutex<Script>>,
}

struct ScriptedExec(Arc<Mutex<Script>>);

impl RemoteExec for ScriptedExec {
    fn target(&self) -> String {
        "scripted CT".into()
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        _stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            let (out, code, err) = {
                let mut s = self.0.lock().unwrap();
                s.ran.push(argv.join(" "));
                match argv {
                    ["systemctl", "is-system-running", ..] => ("running\n".to_string(), 0, String::new()),
                    ["systemctl", "is-active", "--", _] => ("active\n".into(), 0, String::new()),
                    ["cat", "/etc/os-release"] => {
                        ("ID=debian\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n".into(), 0, String::new())
                    }
                    ["test", "-e", _] => (String::new(), if s.reboot_required { 0 } else { 1 }, String::new()),
                    [.., "update"] => (String::new(), s.refresh_exit, "E: Some index files failed to download".into()),
                    [.., "dist-upgrade"] => {
                        s.reboot_required = s.asks_reboot;
                        ("1 upgraded, 0 newly installed\n".into(), 0, String::new())
                    }
                    other => (String::new(), 1, format!("unexpected {other:?}")),
                }
            };
            stdout.write_all(out.as_bytes()).await?;
            Ok(ExecStatus { code: Some(code), stderr: err })
        })
    }
}

impl Containers for Scripted {
    fn kind(&self) -> BackendKind {
        self.live.kind()
    }
    fn status<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<CtState>> {
        self.live.status(spec)
    }
    fn exec<'a>(&'a self, _: &'a ContainerSpec, _: Duration) -> BoxFuture<'a, anyhow::Result<Box<dyn RemoteExec>>> {
        let exec: Box<dyn RemoteExec> = Box::new(ScriptedExec(self.script.clone()));
        Box::pin(async move { Ok(exec) })
    }
    fn snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
        d: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<SnapshotTaken>> {
        self.live.snapshot(spec, name, d)
    }
    fn snapshots<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Vec<CtSnapshotInfo>>> {
        self.live.snapshots(spec)
    }
    fn delete_snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        self.live.delete_snapshot(spec, name)
    }
    fn rollback<'a>(&'a self, spec: &'a ContainerSpec, name: &'a str) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        self.live.rollback(spec, name)
    }
    fn reboot<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        let script = self.script.clone();
        Box::pin(async move {
            let upid = self.live.reboot(spec).await?;
            script.lock().unwrap().reboot_required = false;
            Ok(upid)
        })
    }
}

struct Env {
    pve: FakePve,
    containers: Scripted,
    _tmp: tempfile::TempDir,
}

/// fakepve with CT 101 `app` running on lvmthin (snapshots possible), tasks that take PVE
/// seconds (snapshot 3, rollback 3, delete 2, shutdown 2, start 2), and the real PVE operations
/// over a client that trusts its certificate.
fn env(script: Script) -> Env {
    let pve = FakePve::start_scaled(TIME_SCALE);
    pve.exec(
        "ct = pve.add_ct(101, name='app', status='running')\n\
         ct.shutdown_secs = 2\nct.start_secs = 2\n\
         pve.ct_secs.update(snapshot=3, rollback=3, delsnapshot=2)",
    );
    let tmp = tempfile::tempdir().unwrap();
    let settings = pve.settings(tmp.path());
    let connect = pve.connect(Timeouts::default());
    let client = Arc::new(proxmox_gitops::backend::pve_client(&settings, &connect).unwrap());
    let opts = LiveOptions {
        pve: connect,
        snapshot_timeout: Duration::from_secs(60),
        share: tmp.path().join("share"),
        artifacts: ArtifactDir::new(tmp.path().join("artifacts")),
        ssh: Default::default(),
        ssh_port: 22,
    };
    let live = Live::pve(client, None, "eth0".into(), opts);
    Env { pve, containers: Scripted { live, script: Arc::new(Mutex::new(script)) }, _tmp: tmp }
}

fn spec() -> ContainerSpec {
    support::spec::spec("app", 101).loopback().services(&["mosquitto.service"]).build()
}

fn opts() -> UpdateOptions {
    UpdateOptions {
        jobs: 2,
        check: Default::default(),
        upgrade_timeout: Duration::from_secs(60),
        boot_timeout: Duration::from_secs(60),
        settle_timeout: Duration::ZERO,
        now: time::macros::datetime!(2026-12-01 17:00:00 UTC),
        this_host: None,
    }
}

/// `UPID:pve1:…:TYPE:101:root@pam:` → `TYPE`.
fn task_type(upid: &Value) -> String {
    upid.as_str().unwrap_or_else(|| panic!("no UPID: {upid}")).split(':').nth(5).unwrap().to_string()
}

fn snapshots_held(pve: &FakePve) -> Vec<String> {
    let v = pve.exec("result = sorted(pve.ct(101).snapshots)");
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_upgrade_is_rolled_back_with_start() {
    let e = env(Script { refresh_exit: 100, ..Default::default() });
    let report = step::update_all(&e.containers, "main", &[spec()], &opts()).await;
    let u = &report.containers[0];
    assert_eq!(u.result, UpdateResult::RolledBack, "{u:#?}");
    assert_eq!(u.snapshot.as_deref(), Some("pgo-update-20261201-170000"));
    let a = serde_json::to_value(&u.actions).unwrap();
    let names: Vec<&str> = a.as_array().unwrap().iter().map(|x| x["action"].as_str().unwrap()).collect();
    assert_eq!(names, ["check", "snapshot", "upgrade", "rollback", "wait", "check"]);
    assert_eq!(task_type(&a[1]["upid"]), "vzsnapshot");
    assert_eq!(task_type(&a[3]["upid"]), "vzrollback");
    assert_eq!(u.rollback.as_ref().unwrap().upid, a[3]["upid"].as_str().map(str::to_string));
    // One rollback call, with start=1; the CT runs on the snapshot afterwards.
    let writes = e.pve.writes(false);
    let rollbacks: Vec<&(String, String, String)> =
        writes.iter().filter(|(_, p, _)| p.ends_with("/rollback")).collect();
    assert_eq!(rollbacks.len(), 1, "{writes:?}");
    assert_eq!(rollbacks[0].1, "/nodes/pve1/lxc/101/snapshot/pgo-update-20261201-170000/rollback");
    assert_eq!(rollbacks[0].2, "start=1");
    let ct = e.pve.ct_config(101).unwrap();
    assert_eq!((ct["status"].as_str(), ct["parent"].as_str()), (Some("running"), Some("pgo-update-20261201-170000")));
    assert_eq!(snapshots_held(&e.pve), ["pgo-update-20261201-170000"]);
    // The task was polled: it ran for 3 PVE seconds.
    let polls = e.pve.requests(false).iter().filter(|(m, p, _)| m == "GET" && p.contains(":vzrollback:")).count();
    assert!(polls >= 2, "the rollback task was waited for: {polls} status reads");
    assert_eq!(u.health.as_ref().map(|h| h.state.as_str()), Some("healthy"));
    assert!(!report.ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_good_upgrade_reboots_and_prunes_older_update_snapshots() {
    let e = env(Script { asks_reboot: true, ..Default::default() });
    // An older update snapshot, and one of the snapshot step (never pruned by update).
    for name in ["pgo-update-20261124-170000", "pgo-20261124-000000"] {
        e.containers.live.snapshot(&spec(), name, "older").await.unwrap();
    }
    let pid_before = e.pve.exec("result = pve.ct(101).pid");
    let report = step::update_all(&e.containers, "main", &[spec()], &opts()).await;
    let u = &report.containers[0];
    assert_eq!(u.result, UpdateResult::Updated, "{u:#?}");
    assert!(u.rebooted);
    assert_eq!(u.pruned, ["pgo-update-20261124-170000"]);
    let a = serde_json::to_value(&u.actions).unwrap();
    let got: Vec<(String, Option<String>)> = a
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["action"].as_str().unwrap().to_string(), x["upid"].as_str().map(|_| task_type(&x["upid"]))))
        .collect();
    let want: Vec<(String, Option<String>)> = [
        ("check", None),
        ("snapshot", Some("vzsnapshot")),
        ("upgrade", None),
        ("upgrade", None),
        ("reboot", Some("vzreboot")),
        ("wait", None),
        ("check", None),
        ("prune", Some("vzdelsnapshot")),
    ]
    .into_iter()
    .map(|(a, t)| (a.to_string(), t.map(str::to_string)))
    .collect();
    assert_eq!(got, want);
    assert_eq!(snapshots_held(&e.pve), ["pgo-20261124-000000", "pgo-update-20261201-170000"]);
    let pid_after = e.pve.exec("result = pve.ct(101).pid");
    assert_ne!(pid_before, pid_after, "the CT was really restarted");
    assert_eq!(e.pve.ct_config(101).unwrap()["status"], json!("running"));
    let ran = e.containers.script.lock().unwrap().ran.clone();
    let upgrade: Vec<&String> = ran.iter().filter(|c| c.contains("apt-get")).collect();
    assert_eq!(upgrade.len(), 2, "{ran:?}");
    assert!(report.ok);
    let reboots = e.pve.writes(false).into_iter().filter(|(_, p, _)| p.ends_with("/status/reboot")).collect::<Vec<_>>();
    assert_eq!(
        reboots,
        [("POST".to_string(), "/nodes/pve1/lxc/101/status/reboot".to_string(), "timeout=120".to_string())]
    );
}
