//! Containers that already exist, whatever their backend: what a backend says about one
//! ([`CtState`]), the operations `health` and `update` need on it ([`Containers`]: state, a way
//! in, container snapshots, reboot, rollback), and the container health check over that trait
//! ([`health`], pure in what it reads, unit-tested against an in-memory fake).
//!
//! The backends implement [`Containers`] in their own folders (`backend/pve/live.rs`,
//! `backend/lxc/live.rs`), and [`crate::backend::live::Live`] dispatches over them; this module
//! knows no backend. A container that is not ours is never touched: [`CtState::Foreign`] says
//! why.

#[cfg(test)]
pub(crate) mod fake;
pub mod health;

use std::time::Duration;

use crate::exec::{BoxFuture, RemoteExec};
use crate::inventory::ContainerSpec;
use crate::model::BackendKind;
use crate::snapshot::ct::CtSnapshotInfo;

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

/// Operations on existing containers, one implementation per backend
/// ([`crate::backend::live::Live`]); the steps
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
