//! [`crate::live::Containers`] for the local LXC backend (dispatched by
//! [`crate::backend::live::Live`]), over its [`crate::lxc::LxcClient`] (the only door to
//! the `lxc-*` tools): state with `lxc-info`, identity from the backend's `proxmox-gitops.json`,
//! commands with `lxc-attach`, snapshots with `lxc-snapshot` through [`LxcSnapshots`] (our
//! `pgo-…` names kept in the snapshot's comment).
//!
//! A running container is snapshotted frozen (see [`crate::lxc::snapshot`]: paused for the copy,
//! not restarted; the pause is reported as the downtime). `lxc-snapshot -r` replaces the
//! container's directory and needs it stopped: a rollback stops it, restores, keeps the
//! backend's `proxmox-gitops.json` (which `lxc-snapshot -r` would drop) so the container stays
//! recognisably ours, and starts it again.
//!
//! Snapshot, snapshot delete, rollback and reboot hold the container's lock
//! ([`crate::backend::lxc::lock`]), like a provision, so they never run in the middle of another
//! run's create or recreate of it.

use std::time::Duration;

use anyhow::Context;

use crate::backend::lxc::LxcBackend;
use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::live::{CtState, SnapshotTaken};
use crate::lxc::META_FILE;
use crate::lxc::State;
use crate::snapshot::ct::{CtSnapshotInfo, CtSnapshots};
use crate::snapshot::lxc::LxcSnapshots;

/// Operations on the LXC containers of one LXC path.
pub struct LxcLive {
    backend: LxcBackend,
}

impl LxcLive {
    pub(crate) fn new(backend: LxcBackend) -> Self {
        Self { backend }
    }

    /// The LXC backend (client, options).
    pub(crate) fn backend(&self) -> &LxcBackend {
        &self.backend
    }

    fn snaps(&self, spec: &ContainerSpec) -> LxcSnapshots {
        LxcSnapshots::new(self.backend.client().clone(), &spec.hostname).keeping(META_FILE)
    }

    fn stop_timeout(&self) -> Duration {
        self.backend.options().stop_timeout
    }

    pub(crate) async fn status(&self, spec: &ContainerSpec) -> anyhow::Result<CtState> {
        let client = self.backend.client();
        let name = spec.hostname.as_str();
        if !client.exists(name) {
            return Ok(CtState::Absent);
        }
        match self.backend.not_ours(spec) {
            Ok(None) => {}
            Ok(Some(why)) => {
                return Ok(CtState::Foreign { detail: format!("{why}: it is not {}'s container", spec.name) });
            }
            Err(e) => {
                return Ok(CtState::Foreign { detail: format!("{e:#}: cannot tell whether it is {}'s", spec.name) });
            }
        }
        let state = client.state(name).await.with_context(|| format!("cannot read the state of `{name}`"))?;
        Ok(match state {
            State::Running => CtState::Running,
            other => CtState::NotRunning { state: other.as_str().to_string() },
        })
    }

    pub(crate) async fn exec(&self, spec: &ContainerSpec, timeout: Duration) -> anyhow::Result<Box<dyn RemoteExec>> {
        let attach = crate::access::attach_running(self.backend.client(), &spec.hostname, Some(timeout)).await?;
        Ok(Box::new(attach))
    }

    async fn start(&self, name: &str) -> anyhow::Result<()> {
        self.backend.client().start(name).await.with_context(|| format!("cannot start `{name}`"))
    }

    async fn stop(&self, name: &str) -> anyhow::Result<()> {
        self.backend.client().stop(name, self.stop_timeout()).await.with_context(|| format!("cannot stop `{name}`"))
    }

    pub(crate) async fn snapshot(
        &self,
        spec: &ContainerSpec,
        name: &str,
        description: &str,
    ) -> anyhow::Result<SnapshotTaken> {
        let _lock = self.backend.lock_container(&spec.hostname).await?;
        let created = self.snaps(spec).create(name, description).await?;
        Ok(SnapshotTaken { upid: None, restarted: false, downtime_ms: created.downtime_ms })
    }

    pub(crate) async fn snapshots(&self, spec: &ContainerSpec) -> anyhow::Result<Vec<CtSnapshotInfo>> {
        Ok(self.snaps(spec).list().await?)
    }

    pub(crate) async fn delete_snapshot(&self, spec: &ContainerSpec, name: &str) -> anyhow::Result<Option<String>> {
        let _lock = self.backend.lock_container(&spec.hostname).await?;
        Ok(self.snaps(spec).delete(name).await?)
    }

    pub(crate) async fn rollback(&self, spec: &ContainerSpec, name: &str) -> anyhow::Result<Option<String>> {
        let host = spec.hostname.as_str();
        let _lock = self.backend.lock_container(host).await?;
        let meta_path = self.backend.client().container_dir(host).join(META_FILE);
        if !meta_path.is_file() {
            anyhow::bail!("cannot read {}: not rolling back a container without it", meta_path.display());
        }
        // Checks that the snapshot exists before the container is stopped; stops a running
        // container, restores, keeps proxmox-gitops.json, starts it again.
        let snaps = self.snaps(spec);
        crate::snapshot::ct::rollback(&snaps, name).await?;
        if self.backend.client().state(host).await? != State::Running {
            self.start(host).await?;
        }
        Ok(None)
    }

    pub(crate) async fn reboot(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        let _lock = self.backend.lock_container(&spec.hostname).await?;
        let host = spec.hostname.as_str();
        self.stop(host).await?;
        self.start(host).await?;
        Ok(None)
    }
}
