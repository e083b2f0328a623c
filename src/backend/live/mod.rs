//! [`Live`]: the real [`crate::live::Containers`] of a run, dispatched to the backend's own
//! implementation (`backend/pve/live.rs`, `backend/lxc/live.rs`) — state, a way in, container
//! snapshots, reboot and rollback, from the inventory and the settings alone — and [`drift`].
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
//! Both enter a container through [`crate::access`]. A container that is not ours is never
//! touched: [`CtState::Foreign`] says why.
//!
//! # Files
//!
//! * this file — [`Live`] and [`open`];
//! * [`drift`] — how a deployed container differs from its spec, key by key, and the
//!   containers carrying our mark whose lib is gone (`proxmox-gitops drift`).
//!
//! The [`crate::live::Containers`] trait (the one seam the steps use, so tests can replace the
//! way in) and the health check over it are in [`crate::live`], below the backends.

pub mod drift;

use std::time::Duration;

use super::lxc::live::LxcLive;
use super::pve::live::{PveLive, PveLiveOptions};
use crate::artifact::ArtifactDir;
use crate::error::Result;
use crate::exec::{BoxFuture, RemoteExec};
use crate::inventory::ContainerSpec;
use crate::live::{Containers, CtState, SnapshotTaken};
use crate::model::BackendKind;
use crate::settings::Settings;
use crate::snapshot::ct::CtSnapshotInfo;

pub use drift::{KeyDrift, Orphan};

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

impl LiveOptions {
    /// What the PVE implementation takes of these options.
    fn for_pve(self) -> PveLiveOptions {
        PveLiveOptions {
            timeouts: self.pve.timeouts,
            snapshot_timeout: self.snapshot_timeout,
            share: self.share,
            artifacts: self.artifacts,
            ssh: self.ssh,
            ssh_port: self.ssh_port,
        }
    }
}

/// The real [`Containers`] of a backend, opened once per run.
// One value per run (or per container): the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Live {
    /// Proxmox VE over its API (SSH into the containers).
    Pve(Box<PveLive>),
    /// LXC on this host (`lxc-attach` into the containers).
    Lxc(LxcLive),
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
            Ok(Live::Pve(Box::new(PveLive::new(
                std::sync::Arc::new(client),
                settings.pve.node.clone(),
                settings.pve.interface.clone(),
                opts.for_pve(),
            ))))
        }
        BackendKind::Lxc => Ok(Live::Lxc(LxcLive::new(super::lxc_backend(settings)?))),
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
        Live::Pve(Box::new(PveLive::new(client, node, interface, opts.for_pve())))
    }

    /// Operations over an opened LXC backend.
    pub fn lxc(backend: super::lxc::LxcBackend) -> Live {
        Live::Lxc(LxcLive::new(backend))
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
