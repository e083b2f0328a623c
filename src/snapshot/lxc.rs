//! [`CtSnapshots`] for the local LXC backend, over [`LxcClient`]'s `lxc-snapshot` operations (so
//! the LXC path is the client's: `$PGO_LXC_PATH` or `lxc-config lxc.lxcpath`, never a
//! hard-coded `/var/lib/lxc`).
//!
//! `lxc-snapshot` names snapshots itself (`snap0`, `snap1` …; see [`crate::lxc::snapshot`]).
//! This module writes our name (`pgo-…`) as the comment's first line and the description after
//! it, and maps names back by reading the snapshots the client lists; snapshots without a
//! comment are listed under their `snapN` name (and so never pruned). `ts` is read as UTC (the
//! runner's clock is UTC in CI). A stopped container is snapshotted with `lxc-snapshot`; a
//! running one (which `lxc-snapshot` refuses) is frozen for the copy
//! ([`LxcClient::snapshot_running`], the same snapshot on disk), and the time it was frozen is
//! reported as the snapshot's downtime. Rollback (`lxc-snapshot -r snapN`) replaces the
//! container's rootfs and needs it stopped (see [`crate::backend::live`]).

use super::ct::{CtCreated, CtSnapshotError, CtSnapshotInfo, CtSnapshots};
use crate::exec::BoxFuture;
use crate::lxc::{LxcClient, State};

/// Snapshots of the local LXC container `name` under the client's LXC path.
#[derive(Debug, Clone)]
pub struct LxcSnapshots {
    client: LxcClient,
    name: String,
    /// Files of the container's directory kept across a rollback (see [`LxcSnapshots::keeping`]).
    keep: Vec<String>,
}

/// How long a rollback lets a running container shut down cleanly before it is killed.
pub const ROLLBACK_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A snapshot as `lxc-snapshot` names it and as we name it.
struct SnapDir {
    /// `snapN`.
    lxc_name: String,
    info: CtSnapshotInfo,
}

impl LxcSnapshots {
    /// Container `name` (its LXC name: the hostname) under `client`'s LXC path.
    pub fn new(client: LxcClient, name: &str) -> Self {
        Self { client, name: name.into(), keep: Vec::new() }
    }

    /// Keeps the file `file` of the container's directory (`<lxcpath>/<name>/FILE`, e.g. the lxc
    /// backend's `proxmox-gitops.json`) across a rollback: `lxc-snapshot -r` replaces the
    /// directory and would drop it.
    pub fn keeping(mut self, file: &str) -> Self {
        self.keep.push(file.to_string());
        self
    }

    fn scan(&self) -> Result<Vec<SnapDir>, CtSnapshotError> {
        let listed = self.client.list_snapshots(&self.name).map_err(|e| self.failed(e))?;
        Ok(listed
            .into_iter()
            .map(|s| {
                let mut lines = s.comment.lines();
                let name = lines.next().map(str::trim).filter(|l| !l.is_empty()).unwrap_or(&s.lxc_name).to_string();
                let description = lines.collect::<Vec<_>>().join("\n");
                SnapDir { info: CtSnapshotInfo { name, description, snaptime: s.time }, lxc_name: s.lxc_name }
            })
            .collect())
    }

    fn failed(&self, message: impl std::fmt::Display) -> CtSnapshotError {
        CtSnapshotError::Failed { target: self.target(), message: message.to_string() }
    }

    fn lxc_name_of(&self, name: &str) -> Result<String, CtSnapshotError> {
        self.scan()?
            .into_iter()
            .find(|s| s.info.name == name)
            .map(|s| s.lxc_name)
            .ok_or_else(|| CtSnapshotError::NotFound { target: self.target(), name: name.into() })
    }
}

impl CtSnapshots for LxcSnapshots {
    fn target(&self) -> String {
        format!("LXC container {}", self.name)
    }

    fn create<'a>(&'a self, name: &'a str, description: &'a str) -> BoxFuture<'a, Result<CtCreated, CtSnapshotError>> {
        Box::pin(async move {
            if self.scan()?.iter().any(|s| s.info.name == name) {
                return Err(CtSnapshotError::NameInUse { target: self.target(), name: name.into() });
            }
            let comment = format!("{name}\n{description}\n");
            match self.client.state(&self.name).await.map_err(|e| self.failed(e))? {
                State::Stopped => {
                    let mut file =
                        tempfile::NamedTempFile::new().map_err(|e| self.failed(format!("temp file: {e}")))?;
                    use std::io::Write;
                    file.write_all(comment.as_bytes()).map_err(|e| self.failed(e))?;
                    self.client.snapshot_create(&self.name, file.path()).await.map_err(|e| self.failed(e))?;
                    Ok(CtCreated::default())
                }
                State::Running => {
                    let (_, frozen) =
                        self.client.snapshot_running(&self.name, &comment).await.map_err(|e| self.failed(e))?;
                    Ok(CtCreated { upid: None, downtime_ms: Some(frozen.as_millis() as u64) })
                }
                other => Err(CtSnapshotError::NotSupported {
                    target: self.target(),
                    detail: format!(
                        "the container is {} (neither running nor stopped); try again once it has settled",
                        other.as_str()
                    ),
                }),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<CtSnapshotInfo>, CtSnapshotError>> {
        Box::pin(async move { Ok(self.scan()?.into_iter().map(|s| s.info).collect()) })
    }

    /// Rolls back with `lxc-snapshot -r`, which needs the container stopped: a running one is
    /// shut down cleanly (killed after [`ROLLBACK_STOP_TIMEOUT`]), restored and started again;
    /// the files named with [`LxcSnapshots::keeping`] are written back.
    fn rollback<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            let snap = self.lxc_name_of(name)?;
            let dir = self.client.container_dir(&self.name);
            let mut kept = Vec::new();
            for f in &self.keep {
                match std::fs::read(dir.join(f)) {
                    Ok(b) => kept.push((dir.join(f), b)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(self.failed(format!("cannot read {}: {e}", dir.join(f).display()))),
                }
            }
            let was = self.client.state(&self.name).await.map_err(|e| self.failed(e))?;
            if was != State::Stopped {
                self.client.stop(&self.name, ROLLBACK_STOP_TIMEOUT).await.map_err(|e| self.failed(e))?;
            }
            let restored = self.client.snapshot_restore(&self.name, &snap).await.map_err(|e| self.failed(e));
            for (path, bytes) in &kept {
                if !path.exists() {
                    crate::lxc::write_atomic(path, bytes, 0o644).map_err(|e| self.failed(e))?;
                }
            }
            restored?;
            if was == State::Running {
                self.client.start(&self.name).await.map_err(|e| self.failed(e))?;
            }
            Ok(None)
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            let snap = self.lxc_name_of(name)?;
            self.client.snapshot_destroy(&self.name, &snap).await.map_err(|e| self.failed(e))?;
            Ok(None)
        })
    }
}
