//! Operations on containers that already exist, per backend: their state, a way in, container
//! snapshots, reboot and rollback — what `health` and `update` need, from the inventory and the
//! settings alone.
//!
//! # Why not the provision artifact
//!
//! `snapshot` and `configure` reach a container through its `provision/<name>.json` (the
//! address `provision` read back). A scheduled task runs in a fresh job without artifacts, so
//! this module finds everything itself:
//!
//! * **lxc** — the container named after the spec's hostname under the LXC path
//!   ([`crate::lxc::resolve_path`]); ours when its `proxmox-gitops.json` names the spec's vmid
//!   ([`super::lxc::LxcBackend::owned`]); reached with `lxc-attach` (no network);
//! * **pve** — `GET /nodes/{node}/lxc/{vmid}/status/current` on the spec's node (`NODE`, else
//!   `PROXMOX_NODE`, else the only online node); ours when its `name` (the hostname) is the
//!   spec's; reached over SSH ([`crate::ssh`]) at the spec's static address, or for `IP=dhcp` the
//!   address `GET …/interfaces` reports for the configured interface, with the key
//!   `<share>/.keys/<vmid>`, as `config` (commands through `sudo -n`) or `root`, trusting the
//!   host key on first use into `<artifacts>/known_hosts/<name>` like `configure`.
//!
//! A container that is not ours is never touched: [`CtState::Foreign`] says why.
//!
//! # Files
//!
//! * this file — [`CtState`], the [`Containers`] trait (the one seam the steps use, so tests can
//!   replace the way in), [`Live`] (the real one) and [`open`];
//! * `pve` / `lxc` — the two implementations;
//! * [`drift`] — how a deployed container differs from its spec, key by key, and the
//!   containers carrying our mark whose lib is gone (`proxmox-gitops drift`);
//! * [`health`] — the container health check (state, answer, services) and waiting until a
//!   container answers after a start; `health` and `update` share it.

pub mod drift;
#[cfg(test)]
pub(crate) mod fake;
pub mod health;
mod lxc;
mod pve;

use std::time::Duration;

use crate::artifact::ArtifactDir;
use crate::error::Result;
use crate::exec::{BoxFuture, RemoteExec};
use crate::inventory::ContainerSpec;
use crate::model::BackendKind;
use crate::settings::Settings;
use crate::snapshot::ct::CtSnapshotInfo;

pub use drift::{KeyDrift, Orphan};
pub use health::{CheckOptions, ContainerHealth, HealthState, ServiceCheck, check, wait_ready};

/// What the backend says about the container a spec describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtState {
    /// There is no container at the spec's vmid (PVE) or hostname (LXC): not deployed.
    Absent,
    /// A container is there but was not made for this spec (another hostname on PVE, no or
    /// other metadata on LXC): it is never touched. `detail` says what was found.
    Foreign {
        /// What was found, one sentence.
        detail: String,
    },
    /// Running.
    Running,
    /// Exists and does not run: `stopped`, or the backend's other state (`frozen`, `starting`).
    NotRunning {
        /// The backend's state, lowercase.
        state: String,
    },
}

/// A container snapshot taken through [`Containers::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTaken {
    /// The PVE task's UPID (`None` for LXC).
    pub upid: Option<String>,
    /// True when the container was stopped for the snapshot and started again: the caller
    /// waits until it answers. (No backend does so today: LXC freezes a running container.)
    pub restarted: bool,
    /// How long the container was paused for it, in milliseconds (LXC: frozen while its rootfs
    /// was copied); `None` when it was not interrupted.
    pub downtime_ms: Option<u64>,
}

/// Operations on existing containers, one implementation per backend ([`Live`]); the steps
/// `health` and `update` only use this trait, so a test can replace a part (the way in) and
/// keep the rest. Every method is bounded in time; none of them creates or destroys a
/// container.
pub trait Containers: Send + Sync {
    /// The backend.
    fn kind(&self) -> BackendKind;

    /// Where this backend looks for containers, for a message about one it did not find
    /// (`LXC path /var/lib/lxc`, `the PVE cluster at https://pve:8006`).
    fn searched(&self) -> String {
        format!("the {} backend", self.kind())
    }

    /// The container's state, after the ownership check ([`CtState::Foreign`]).
    ///
    /// # Errors
    /// The backend cannot answer (API error, `lxc-info` failing).
    fn status<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<CtState>>;

    /// A way to run commands as root in the running container, each command bounded by
    /// `timeout` (see the module docs for how it is reached).
    ///
    /// # Errors
    /// Why it cannot be reached (no address, no key, SSH unreachable or refused, LXC unusable).
    fn exec<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        timeout: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn RemoteExec>>>;

    /// Takes container snapshot `name` with `description` (PVE `POST …/snapshot`, waited for;
    /// LXC: stopped, `lxc-snapshot`, started again when it ran).
    ///
    /// # Errors
    /// The backend's error (storage without snapshots, a lock, the name in use); an LXC
    /// container is started again before the error is returned.
    fn snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<SnapshotTaken>>;

    /// The container's snapshots (PVE's `current` left out; LXC by the names this tool gave).
    ///
    /// # Errors
    /// The backend's error.
    fn snapshots<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Vec<CtSnapshotInfo>>>;

    /// Deletes snapshot `name`; the UPID for PVE.
    ///
    /// # Errors
    /// The backend's error.
    fn delete_snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>>;

    /// Rolls the container back to snapshot `name` and starts it (PVE: `POST
    /// …/snapshot/{name}/rollback` with `start=1`, waited for; LXC: stop, `lxc-snapshot -r`,
    /// start). Returns the UPID for PVE. The caller waits until it answers.
    ///
    /// # Errors
    /// The backend's error (no such snapshot, a lock, a failing task).
    fn rollback<'a>(&'a self, spec: &'a ContainerSpec, name: &'a str) -> BoxFuture<'a, anyhow::Result<Option<String>>>;

    /// Reboots the running container (PVE: `POST …/status/reboot`, waited for; LXC: stop,
    /// start). Returns the UPID for PVE. The caller waits until it answers.
    ///
    /// # Errors
    /// The backend's error.
    fn reboot<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Option<String>>>;
}

/// How [`open`] reaches containers and bounds the backend's operations.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// PVE TLS, request timeout and task timeouts (`start` for starts; `shutdown` for the clean
    /// part of a reboot).
    pub pve: super::PveConnect,
    /// Bound of one PVE snapshot task (create, rollback, delete), e.g. 600 s.
    pub snapshot_timeout: Duration,
    /// The share holding `.keys/<vmid>` (SSH to PVE containers).
    pub share: std::path::PathBuf,
    /// The artifacts directory: `known_hosts/<name>` of SSH connections.
    pub artifacts: ArtifactDir,
    /// SSH connect tuning (PVE containers).
    pub ssh: crate::ssh::ConnectOptions,
    /// SSH port (22).
    pub ssh_port: u16,
}

/// The real [`Containers`] of a backend, opened once per run.
// One value per run (or per container): the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Live {
    /// Proxmox VE over its API (SSH into the containers).
    Pve(Box<pve::PveLive>),
    /// LXC on this host (`lxc-attach` into the containers).
    Lxc(lxc::LxcLive),
}

/// Opens the backend `kind` for operations on existing containers: the PVE client from the
/// settings (`PROXMOX_HOST`, credentials, `PROXMOX_NODE`, `PROXMOX_INTERFACE`; no template
/// needed), or the LXC client (root, the LXC tools, the LXC path).
///
/// # Errors
/// [`crate::error::Error::Input`] for missing PVE settings; [`crate::error::Error::Failed`] when
/// LXC cannot run here or the TLS set-up is unusable.
pub fn open(kind: BackendKind, settings: &Settings, opts: LiveOptions) -> Result<Live> {
    match kind {
        BackendKind::Pve => {
            let client = super::pve_client(settings, &opts.pve)?;
            Ok(Live::Pve(Box::new(pve::PveLive::new(
                std::sync::Arc::new(client),
                settings.pve.node.clone(),
                settings.pve.interface.clone(),
                opts,
            ))))
        }
        BackendKind::Lxc => Ok(Live::Lxc(lxc::LxcLive::new(super::lxc_backend(settings)?))),
    }
}

impl Live {
    /// Operations over an already built PVE client (tests, callers holding a session).
    pub fn pve(
        client: std::sync::Arc<crate::pve::PveClient>,
        node: Option<String>,
        interface: String,
        opts: LiveOptions,
    ) -> Live {
        Live::Pve(Box::new(pve::PveLive::new(client, node, interface, opts)))
    }

    /// Operations over an opened LXC backend.
    pub fn lxc(backend: super::lxc::LxcBackend) -> Live {
        Live::Lxc(lxc::LxcLive::new(backend))
    }
}

impl Containers for Live {
    fn kind(&self) -> BackendKind {
        match self {
            Live::Pve(_) => BackendKind::Pve,
            Live::Lxc(_) => BackendKind::Lxc,
        }
    }

    fn searched(&self) -> String {
        match self {
            Live::Pve(p) => format!("the PVE cluster at {}", p.client().base_url()),
            Live::Lxc(l) => format!("LXC path {}", l.backend().client().path().display()),
        }
    }

    fn status<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<CtState>> {
        match self {
            Live::Pve(p) => Box::pin(p.status(spec)),
            Live::Lxc(l) => Box::pin(l.status(spec)),
        }
    }

    fn exec<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        timeout: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn RemoteExec>>> {
        match self {
            Live::Pve(p) => Box::pin(p.exec(spec, timeout)),
            Live::Lxc(l) => Box::pin(l.exec(spec, timeout)),
        }
    }

    fn snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<SnapshotTaken>> {
        match self {
            Live::Pve(p) => Box::pin(p.snapshot(spec, name, description)),
            Live::Lxc(l) => Box::pin(l.snapshot(spec, name, description)),
        }
    }

    fn snapshots<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Vec<CtSnapshotInfo>>> {
        match self {
            Live::Pve(p) => Box::pin(p.snapshots(spec)),
            Live::Lxc(l) => Box::pin(l.snapshots(spec)),
        }
    }

    fn delete_snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        match self {
            Live::Pve(p) => Box::pin(p.delete_snapshot(spec, name)),
            Live::Lxc(l) => Box::pin(l.delete_snapshot(spec, name)),
        }
    }

    fn rollback<'a>(&'a self, spec: &'a ContainerSpec, name: &'a str) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        match self {
            Live::Pve(p) => Box::pin(p.rollback(spec, name)),
            Live::Lxc(l) => Box::pin(l.rollback(spec, name)),
        }
    }

    fn reboot<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        match self {
            Live::Pve(p) => Box::pin(p.reboot(spec)),
            Live::Lxc(l) => Box::pin(l.reboot(spec)),
        }
    }
}
