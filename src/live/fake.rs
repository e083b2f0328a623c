//! An in-memory container for the unit tests of the health check and of `update`: a
//! [`Containers`] whose way in answers the commands those run (`systemctl`, `cat
//! /etc/os-release`, `test -e …`, the upgrade commands) from a small state machine, with
//! snapshots that really keep and restore that state. Every call is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{Containers, CtState, SnapshotTaken};
use crate::exec::{BoxFuture, ExecStatus, RemoteExec};
use crate::inventory::ContainerSpec;
use crate::model::BackendKind;
use crate::snapshot::ct::CtSnapshotInfo;

/// What survives a snapshot and comes back with a rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// A marker of the installed packages: `v1`, then `upgraded`.
    pub packages: String,
    /// Unit → `is-active` state.
    pub services: BTreeMap<String, String>,
}

/// The fake container's state.
#[derive(Debug, Clone)]
pub struct State {
    pub exists: bool,
    pub foreign: bool,
    pub running: bool,
    /// `false`: `exec` fails (no way in).
    pub reachable: bool,
    pub systemd: bool,
    pub os_release: String,
    pub disk: Disk,
    /// Failed units `systemctl --failed` lists.
    pub failed: Vec<String>,
    /// `/var/run/reboot-required` (a tmpfs: gone after a reboot or rollback).
    pub reboot_required: bool,
    /// Exit code of the first upgrade command (`apt-get update`, `apk update`).
    pub refresh_exit: i32,
    /// The unit the second upgrade command leaves failed.
    pub upgrade_breaks: Option<String>,
    /// The second upgrade command asks for a reboot.
    pub upgrade_asks_reboot: bool,
    /// After a reboot the container does not come back.
    pub reboot_kills: bool,
    /// Error of `snapshot`.
    pub snapshot_error: Option<String>,
    /// Error of `rollback`.
    pub rollback_error: Option<String>,
    /// Snapshots: info and the disk they hold.
    pub snapshots: Vec<(CtSnapshotInfo, Disk)>,
    /// Every call, in order: `status`, `exec`, `run <argv>`, `snapshot <name>`, `delete <name>`,
    /// `rollback <name>`, `reboot`.
    pub calls: Vec<String>,
}

/// A Debian 12 container running `mosquitto.service`, reachable, nothing failed.
pub fn debian() -> State {
    State {
        exists: true,
        foreign: false,
        running: true,
        reachable: true,
        systemd: true,
        os_release: "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n".into(),
        disk: Disk {
            packages: "v1".into(),
            services: [("mosquitto.service".to_string(), "active".to_string())].into(),
        },
        failed: vec![],
        reboot_required: false,
        refresh_exit: 0,
        upgrade_breaks: None,
        upgrade_asks_reboot: false,
        reboot_kills: false,
        snapshot_error: None,
        rollback_error: None,
        snapshots: vec![],
        calls: vec![],
    }
}

/// The fake backend over one container.
#[derive(Clone)]
pub struct Fake {
    pub kind: BackendKind,
    pub state: Arc<Mutex<State>>,
}

impl Fake {
    pub fn new(kind: BackendKind, state: State) -> Self {
        Fake { kind, state: Arc::new(Mutex::new(state)) }
    }

    pub fn get(&self) -> State {
        self.state.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<String> {
        self.get().calls
    }

    fn call(&self, c: String) {
        self.state.lock().unwrap().calls.push(c);
    }
}

struct FakeExec {
    state: Arc<Mutex<State>>,
}

impl FakeExec {
    /// The answer to `argv`: (stdout, exit code, stderr).
    fn answer(&self, argv: &[&str]) -> (String, i32, String) {
        let mut s = self.state.lock().unwrap();
        s.calls.push(format!("run {}", argv.join(" ")));
        if argv.first() == Some(&"systemctl") && !s.systemd {
            return (String::new(), 127, "systemctl: command not found".into());
        }
        match argv {
            ["systemctl", "is-system-running", ..] => {
                let state = if s.failed.is_empty() { "running" } else { "degraded" };
                (format!("{state}\n"), if s.failed.is_empty() { 0 } else { 1 }, String::new())
            }
            ["systemctl", "is-active", "--", unit] => {
                let st = s.disk.services.get(*unit).cloned().unwrap_or_else(|| "inactive".into());
                let code = if st == "active" { 0 } else { 3 };
                (format!("{st}\n"), code, String::new())
            }
            ["systemctl", "--failed", ..] => {
                (s.failed.iter().map(|u| format!("{u} loaded failed failed x\n")).collect(), 0, String::new())
            }
            ["cat", "/etc/os-release"] => (s.os_release.clone(), 0, String::new()),
            ["test", "-e", "/var/run/reboot-required"] => {
                (String::new(), if s.reboot_required { 0 } else { 1 }, String::new())
            }
            [.., "update"] => {
                let code = s.refresh_exit;
                let err = if code == 0 {
                    String::new()
                } else {
                    "E: Problem executing scripts APT::Update::Pre-Invoke".into()
                };
                ("Reading package lists...\n".into(), code, err)
            }
            [.., "dist-upgrade"] | ["apk", "upgrade", "--available"] => {
                s.disk.packages = "upgraded".into();
                if let Some(u) = s.upgrade_breaks.clone() {
                    s.disk.services.insert(u, "failed".into());
                }
                if s.upgrade_asks_reboot {
                    s.reboot_required = true;
                }
                ("Setting up libc6 ...\nDone\n".into(), 0, String::new())
            }
            other => (String::new(), 1, format!("fake: unexpected command {other:?}")),
        }
    }
}

impl RemoteExec for FakeExec {
    fn target(&self) -> String {
        "fake container".into()
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        _stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            let (out, code, stderr) = self.answer(argv);
            stdout.write_all(out.as_bytes()).await?;
            Ok(ExecStatus { code: Some(code), stderr })
        })
    }
}

impl Containers for Fake {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn status<'a>(&'a self, _spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<CtState>> {
        Box::pin(async move {
            self.call("status".into());
            let s = self.get();
            Ok(if !s.exists {
                CtState::Absent
            } else if s.foreign {
                CtState::Foreign { detail: "CT 120 holds hostname `other`".into() }
            } else if s.running {
                CtState::Running
            } else {
                CtState::NotRunning { state: "stopped".into() }
            })
        })
    }

    fn exec<'a>(
        &'a self,
        _spec: &'a ContainerSpec,
        _timeout: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn RemoteExec>>> {
        Box::pin(async move {
            self.call("exec".into());
            let s = self.get();
            if !s.reachable || !s.running {
                anyhow::bail!("cannot reach SSH at 10.0.0.5:22");
            }
            Ok(Box::new(FakeExec { state: self.state.clone() }) as Box<dyn RemoteExec>)
        })
    }

    fn snapshot<'a>(
        &'a self,
        _spec: &'a ContainerSpec,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<SnapshotTaken>> {
        Box::pin(async move {
            self.call(format!("snapshot {name}"));
            let mut s = self.state.lock().unwrap();
            if let Some(e) = &s.snapshot_error {
                anyhow::bail!("{e}");
            }
            let info = CtSnapshotInfo { name: name.into(), description: description.into(), snaptime: None };
            let disk = s.disk.clone();
            s.snapshots.push((info, disk));
            // As the backends do: PVE returns a UPID; LXC freezes the running container.
            let lxc = self.kind == BackendKind::Lxc;
            Ok(SnapshotTaken {
                upid: (!lxc).then(|| format!("UPID:pve1:vzsnapshot:{name}")),
                restarted: false,
                downtime_ms: lxc.then_some(120),
            })
        })
    }

    fn snapshots<'a>(&'a self, _spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Vec<CtSnapshotInfo>>> {
        Box::pin(async move { Ok(self.get().snapshots.into_iter().map(|(i, _)| i).collect()) })
    }

    fn delete_snapshot<'a>(
        &'a self,
        _spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        Box::pin(async move {
            self.call(format!("delete {name}"));
            self.state.lock().unwrap().snapshots.retain(|(i, _)| i.name != name);
            Ok(Some(format!("UPID:pve1:vzdelsnapshot:{name}")))
        })
    }

    fn rollback<'a>(
        &'a self,
        _spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        Box::pin(async move {
            self.call(format!("rollback {name}"));
            let mut s = self.state.lock().unwrap();
            if let Some(e) = &s.rollback_error {
                anyhow::bail!("{e}");
            }
            let disk = s.snapshots.iter().find(|(i, _)| i.name == name).map(|(_, d)| d.clone());
            let Some(disk) = disk else { anyhow::bail!("no snapshot named `{name}`") };
            s.disk = disk;
            s.reboot_required = false;
            s.running = true;
            s.reachable = true;
            Ok(Some(format!("UPID:pve1:vzrollback:{name}")))
        })
    }

    fn reboot<'a>(&'a self, _spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        Box::pin(async move {
            self.call("reboot".into());
            let mut s = self.state.lock().unwrap();
            s.reboot_required = false;
            if s.reboot_kills {
                s.reachable = false;
            }
            Ok(Some("UPID:pve1:vzreboot".into()))
        })
    }
}
