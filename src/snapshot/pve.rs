//! [`CtSnapshots`] over the Proxmox VE API (one container on one node).
//!
//! The calls go through the container's handle ([`crate::pve::Ct`]: `snapshots`, `snapshot`,
//! `rollback`, `delete_snapshot`; PVE's `current` pseudo-entry is dropped there).
//!
//! Every UPID is waited on with the client's task polling ([`PveClient::wait_task`], backoff,
//! bounded by [`PveSnapshots::with_timeout`], 600 s by default). Failures — an HTTP error or a
//! task ending in `TASK ERROR` — are mapped through [`classify`]: "snapshot name '…' already
//! used", `CT is locked (…)` and "snapshot feature is not available" become their own
//! [`CtSnapshotError`] variants; anything else keeps the client's full message (method, path,
//! HTTP status, task log tail). A locked container is **not** waited for: snapshots are taken
//! on purpose, and a backup holding the lock for an hour should be reported, not outwaited.
//!
//! Writes are not repeated after a lost answer ([`crate::pve::Replay::Unsafe`]): a repeated create would
//! fail with "already used" and hide that the first one went through.

use std::sync::Arc;
use std::time::Duration;

use super::ct::{CtCreated, CtSnapshotError, CtSnapshotInfo, CtSnapshots, classify};
use crate::exec::BoxFuture;
use crate::pve::{PveClient, PveError};

/// Default bound of one snapshot task (create, rollback, delete): 600 s.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(600);

/// Container snapshots of CT `vmid` on `node`, through a shared [`PveClient`].
#[derive(Clone)]
pub struct PveSnapshots {
    client: Arc<PveClient>,
    node: String,
    vmid: u32,
    timeout: Duration,
}

impl std::fmt::Debug for PveSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PveSnapshots").field("node", &self.node).field("vmid", &self.vmid).finish()
    }
}

impl PveSnapshots {
    /// CT `vmid` on `node`; tasks are waited for at most [`DEFAULT_TASK_TIMEOUT`].
    pub fn new(client: Arc<PveClient>, node: &str, vmid: u32) -> Self {
        Self { client, node: node.into(), vmid, timeout: DEFAULT_TASK_TIMEOUT }
    }

    /// Bounds each task wait by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Refuses names that are not a PVE `pve-configid` (`[A-Za-z][A-Za-z0-9_-]*`, at most 40),
    /// before they are put into a path.
    fn check_name(&self, name: &str) -> Result<(), CtSnapshotError> {
        let mut chars = name.chars();
        let ok = name.len() <= 40
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if ok {
            Ok(())
        } else {
            Err(CtSnapshotError::Failed {
                target: self.target(),
                message: format!(
                    "`{name}` is not a valid PVE snapshot name (a letter, then letters, digits, `-` or `_`; at most 40)"
                ),
            })
        }
    }

    /// Maps a client error for snapshot `name` (see the module docs).
    fn map(&self, name: &str, e: PveError) -> CtSnapshotError {
        let target = self.target();
        match e.message().map(|m| classify(&target, name, m)) {
            Some(CtSnapshotError::Failed { .. }) | None => {
                CtSnapshotError::Failed { target, message: crate::actions::redact(&e.to_string()) }
            }
            Some(classified) => classified,
        }
    }

    /// Sends a write that answers with a UPID and waits for the task.
    async fn task(
        &self,
        what: &str,
        name: &str,
        call: impl std::future::Future<Output = Result<String, PveError>>,
    ) -> Result<Option<String>, CtSnapshotError> {
        let upid = call.await.map_err(|e| self.map(name, e))?;
        let out = self
            .client
            .wait_task(&upid, self.timeout, &format!("{what} CT {} snapshot {name}", self.vmid))
            .await
            .map_err(|e| self.map(name, e))?;
        for w in &out.warnings {
            tracing::warn!("{}: {w}", self.target());
        }
        Ok(Some(out.upid))
    }
}

impl CtSnapshots for PveSnapshots {
    fn target(&self) -> String {
        format!("CT {} on {}", self.vmid, self.node)
    }

    fn create<'a>(&'a self, name: &'a str, description: &'a str) -> BoxFuture<'a, Result<CtCreated, CtSnapshotError>> {
        Box::pin(async move {
            self.check_name(name)?;
            let ct = self.client.ct(&self.node, self.vmid);
            let upid = self.task("snapshot", name, ct.snapshot(name, description)).await?;
            Ok(CtCreated { upid, downtime_ms: None })
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<CtSnapshotInfo>, CtSnapshotError>> {
        Box::pin(async move {
            let entries = self.client.ct(&self.node, self.vmid).snapshots().await.map_err(|e| self.map("", e))?;
            Ok(entries
                .into_iter()
                .map(|s| CtSnapshotInfo { name: s.name, description: s.description, snaptime: s.snaptime })
                .collect())
        })
    }

    fn rollback<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            self.check_name(name)?;
            let ct = self.client.ct(&self.node, self.vmid);
            self.task("rollback", name, ct.rollback(name, false)).await
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            self.check_name(name)?;
            let ct = self.client.ct(&self.node, self.vmid);
            self.task("delsnapshot", name, ct.delete_snapshot(name)).await
        })
    }
}
