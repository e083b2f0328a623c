//! Container snapshots (PVE `…/lxc/{vmid}/snapshot`, `lxc-snapshot`) behind one trait, and the
//! policy this tool applies to them: names `pgo-YYYYMMDD-HHMMSS` (a second one within the same
//! second gets `-2`, `-3` …), a description, retention that only ever deletes names this tool
//! created, and clear errors.
//!
//! The PVE client implements [`CtSnapshots`] with (PVE API, `pve-docs/api-viewer`):
//! * `create`   — `POST /nodes/{node}/lxc/{vmid}/snapshot` (`snapname`, `description`), wait on the UPID;
//! * `list`     — `GET /nodes/{node}/lxc/{vmid}/snapshot` (drop the `current` pseudo-entry);
//! * `rollback` — `POST /nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback`, wait on the UPID;
//! * `delete`   — `DELETE /nodes/{node}/lxc/{vmid}/snapshot/{snapname}`, wait on the UPID;
//!
//! mapping API/task failure messages through [`classify`].

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::store::Stamp;
use crate::exec::BoxFuture;

/// Prefix of every container snapshot this tool creates; retention only touches these.
pub const PREFIX: &str = "pgo-";

/// One container snapshot as listed by the backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtSnapshotInfo {
    /// Snapshot name (PVE `snapname`; for LXC the name this tool gave, see [`super::lxc`]).
    pub name: String,
    /// Description.
    pub description: String,
    /// Creation time, seconds since the epoch, when known (PVE `snaptime`).
    pub snaptime: Option<i64>,
}

/// A container snapshot failure, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CtSnapshotError {
    /// The name exists already (PVE: "snapshot name '…' already used").
    #[error("{target}: snapshot name `{name}` is already used")]
    NameInUse {
        /// Container.
        target: String,
        /// The name.
        name: String,
    },
    /// The container is locked by another operation (PVE: "CT is locked (backup)").
    #[error(
        "{target}: the container is locked ({lock}); wait for the running {lock} task to finish or {} if it is stale",
        crate::error::Hint::command(["pct", "unlock"])
    )]
    Locked {
        /// Container.
        target: String,
        /// The lock (backup, snapshot, migrate …).
        lock: String,
    },
    /// The backend cannot snapshot this container now: a volume's storage cannot take snapshots
    /// (PVE: "snapshot feature is not available"), or an LXC container is running.
    #[error("{target}: cannot take a container snapshot: {detail}")]
    NotSupported {
        /// Container.
        target: String,
        /// Why, with a hint.
        detail: String,
    },
    /// No snapshot of that name.
    #[error("{target}: no snapshot named `{name}`")]
    NotFound {
        /// Container.
        target: String,
        /// The name.
        name: String,
    },
    /// Anything else (API/transport failure, task error), with the backend's message.
    #[error("{target}: {message}")]
    Failed {
        /// Container.
        target: String,
        /// What failed.
        message: String,
    },
}

/// Classifies a PVE error or task exit status for `target` (messages from PVE's
/// `PVE/AbstractConfig.pm` and `PVE/API2/LXC/Snapshot.pm`).
pub fn classify(target: &str, name: &str, message: &str) -> CtSnapshotError {
    let target = target.to_string();
    let m = message.trim();
    if m.contains("already used") {
        return CtSnapshotError::NameInUse { target, name: name.into() };
    }
    if let Some(rest) = m.split("is locked (").nth(1) {
        let lock = rest.split(')').next().unwrap_or("").to_string();
        return CtSnapshotError::Locked { target, lock };
    }
    if m.contains("snapshot feature is not available") {
        return CtSnapshotError::NotSupported {
            target,
            detail: format!(
                "{m} (a volume is on storage without snapshots; needs lvmthin, zfspool, btrfs, rbd, or qcow2 \
                 on a directory storage)"
            ),
        };
    }
    if m.contains("does not exist") && m.contains("snapshot") {
        return CtSnapshotError::NotFound { target, name: name.into() };
    }
    CtSnapshotError::Failed { target, message: m.into() }
}

/// What [`CtSnapshots::create`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CtCreated {
    /// The create task's UPID (PVE), `None` for LXC.
    pub upid: Option<String>,
    /// How long the container's processes were paused for the snapshot, in milliseconds (LXC: a
    /// running container is frozen while its rootfs is copied); `None` when it was not
    /// interrupted (PVE, a stopped container).
    pub downtime_ms: Option<u64>,
}

/// Container snapshots of one container. Every call returns after the backend finished (PVE:
/// the task's UPID was waited on and ended `OK`); `Option<String>` is that UPID.
pub trait CtSnapshots: Send + Sync {
    /// The container, for messages (`CT 101 on pve1`).
    fn target(&self) -> String;
    /// Creates snapshot `name` with `description`, also of a running container.
    fn create<'a>(&'a self, name: &'a str, description: &'a str) -> BoxFuture<'a, Result<CtCreated, CtSnapshotError>>;
    /// Lists the snapshots (without PVE's `current`).
    fn list(&self) -> BoxFuture<'_, Result<Vec<CtSnapshotInfo>, CtSnapshotError>>;
    /// Rolls the container back to `name` (PVE stops a running container first).
    fn rollback<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>>;
    /// Deletes snapshot `name`.
    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>>;
}

/// The name for a snapshot at `stamp`: `pgo-YYYYMMDD-HHMMSS[-N]` (19–22 characters, valid as a
/// PVE `snapname`: a letter, then letters, digits, `-`, `_`, at most 40).
pub fn name_for(stamp: Stamp) -> String {
    format!("{PREFIX}{stamp}")
}

/// The stamp of a name this tool created, `None` for any other name (never pruned).
pub fn parse_name(name: &str) -> Option<Stamp> {
    name.strip_prefix(PREFIX).and_then(Stamp::parse)
}

/// A container snapshot taken, as recorded in the `snapshot` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtSnapshotRecord {
    /// Snapshot name.
    pub name: String,
    /// The create task's UPID (PVE), `None` for LXC.
    pub upid: Option<String>,
    /// Description given.
    pub description: String,
    /// How long the container was paused for it, in milliseconds (see [`CtCreated`]); absent
    /// when it was not interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downtime_ms: Option<u64>,
}

/// Takes a container snapshot named for `now` (next free `-N` when that second's name exists).
///
/// # Errors
/// Listing or creating fails (classified, see [`CtSnapshotError`]).
pub async fn take(
    ct: &dyn CtSnapshots,
    now: OffsetDateTime,
    description: &str,
) -> Result<CtSnapshotRecord, CtSnapshotError> {
    let existing = ct.list().await?;
    let mut stamp = Stamp::at(now);
    while existing.iter().any(|s| s.name == name_for(stamp)) {
        stamp = stamp.next();
    }
    let name = name_for(stamp);
    let CtCreated { upid, downtime_ms } = ct.create(&name, description).await?;
    Ok(CtSnapshotRecord { name, upid, description: description.into(), downtime_ms })
}

/// Keeps the newest `keep` snapshots named by this tool (ordered by the stamp in the name) and
/// deletes the older ones; snapshots with other names are never touched. Returns the deleted
/// names, oldest first.
///
/// # Errors
/// `keep` is 0, or listing/deleting fails (snapshots deleted before the failure stay deleted).
pub async fn prune(ct: &dyn CtSnapshots, keep: usize) -> Result<Vec<String>, CtSnapshotError> {
    if keep == 0 {
        return Err(CtSnapshotError::Failed { target: ct.target(), message: "--keep must be at least 1".into() });
    }
    let mut ours: Vec<(Stamp, String)> =
        ct.list().await?.into_iter().filter_map(|s| parse_name(&s.name).map(|st| (st, s.name))).collect();
    ours.sort();
    let n = ours.len().saturating_sub(keep);
    let mut deleted = Vec::new();
    for (_, name) in ours.into_iter().take(n) {
        ct.delete(&name).await?;
        deleted.push(name);
    }
    Ok(deleted)
}

/// Rolls back to `name` after checking it exists.
///
/// # Errors
/// [`CtSnapshotError::NotFound`] when it does not exist, or the backend's error.
pub async fn rollback(ct: &dyn CtSnapshots, name: &str) -> Result<Option<String>, CtSnapshotError> {
    if !ct.list().await?.iter().any(|s| s.name == name) {
        return Err(CtSnapshotError::NotFound { target: ct.target(), name: name.into() });
    }
    ct.rollback(name).await
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An in-memory [`CtSnapshots`] that records calls and can fail creates.
    #[derive(Default)]
    pub struct Fake {
        pub snaps: Mutex<Vec<CtSnapshotInfo>>,
        pub calls: Mutex<Vec<String>>,
        pub fail_create: Option<String>,
    }

    impl CtSnapshots for Fake {
        fn target(&self) -> String {
            "CT 101".into()
        }
        fn create<'a>(&'a self, name: &'a str, d: &'a str) -> BoxFuture<'a, Result<CtCreated, CtSnapshotError>> {
            Box::pin(async move {
                self.calls.lock().unwrap().push(format!("create {name}"));
                if let Some(m) = &self.fail_create {
                    return Err(classify("CT 101", name, m));
                }
                let mut s = self.snaps.lock().unwrap();
                if s.iter().any(|x| x.name == name) {
                    return Err(classify("CT 101", name, &format!("snapshot name '{name}' already used")));
                }
                s.push(CtSnapshotInfo { name: name.into(), description: d.into(), snaptime: None });
                Ok(CtCreated { upid: Some(format!("UPID:pve1:create:{name}")), downtime_ms: None })
            })
        }
        fn list(&self) -> BoxFuture<'_, Result<Vec<CtSnapshotInfo>, CtSnapshotError>> {
            Box::pin(async move { Ok(self.snaps.lock().unwrap().clone()) })
        }
        fn rollback<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
            Box::pin(async move {
                self.calls.lock().unwrap().push(format!("rollback {name}"));
                Ok(None)
            })
        }
        fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
            Box::pin(async move {
                self.calls.lock().unwrap().push(format!("delete {name}"));
                self.snaps.lock().unwrap().retain(|s| s.name != name);
                Ok(None)
            })
        }
    }

    fn info(name: &str) -> CtSnapshotInfo {
        CtSnapshotInfo { name: name.into(), description: String::new(), snaptime: None }
    }

    #[tokio::test]
    async fn names_collide_to_next_sequence() {
        let fake = Fake::default();
        let now = time::macros::datetime!(2026-11-30 16:01:02 UTC);
        let a = take(&fake, now, "d").await.unwrap();
        let b = take(&fake, now, "d").await.unwrap();
        assert_eq!(
            a,
            CtSnapshotRecord {
                name: "pgo-20261130-160102".into(),
                upid: Some("UPID:pve1:create:pgo-20261130-160102".into()),
                description: "d".into(),
                downtime_ms: None,
            }
        );
        assert_eq!(b.name, "pgo-20261130-160102-2");
    }

    #[tokio::test]
    async fn prune_keeps_newest_of_ours_only() {
        let fake = Fake::default();
        *fake.snaps.lock().unwrap() = vec![
            info("pgo-20250101-000000-10"),
            info("before-upgrade"),
            info("pgo-20250101-000000-9"),
            info("pgo-20240101-000000"),
            info("pgo-manual"),
            info("pgo-20250101-000000"),
        ];
        let deleted = prune(&fake, 2).await.unwrap();
        assert_eq!(deleted, vec!["pgo-20240101-000000".to_string(), "pgo-20250101-000000".to_string()]);
        let left: Vec<String> = fake.snaps.lock().unwrap().iter().map(|s| s.name.clone()).collect();
        assert_eq!(left, vec!["pgo-20250101-000000-10", "before-upgrade", "pgo-20250101-000000-9", "pgo-manual"]);
        assert!(prune(&fake, 0).await.is_err());
    }

    #[tokio::test]
    async fn rollback_checks_existence() {
        let fake = Fake::default();
        *fake.snaps.lock().unwrap() = vec![info("pgo-20250101-000000")];
        let e = rollback(&fake, "pgo-x").await.unwrap_err();
        assert_eq!(e.to_string(), "CT 101: no snapshot named `pgo-x`");
        rollback(&fake, "pgo-20250101-000000").await.unwrap();
        assert_eq!(fake.calls.lock().unwrap().as_slice(), ["rollback pgo-20250101-000000"]);
    }

    #[test]
    fn classifies_pve_messages() {
        assert_eq!(
            classify("CT 101", "pgo-a", "snapshot name 'pgo-a' already used\n"),
            CtSnapshotError::NameInUse { target: "CT 101".into(), name: "pgo-a".into() }
        );
        assert_eq!(
            classify("CT 101", "x", "CT is locked (backup)"),
            CtSnapshotError::Locked { target: "CT 101".into(), lock: "backup".into() }
        );
        assert!(matches!(
            classify("CT 101", "x", "snapshot feature is not available"),
            CtSnapshotError::NotSupported { .. }
        ));
        assert!(matches!(classify("CT 101", "x", "snapshot 'x' does not exist"), CtSnapshotError::NotFound { .. }));
        assert!(matches!(classify("CT 101", "x", "500 boom"), CtSnapshotError::Failed { .. }));
        let e = classify("CT 101", "x", "CT is locked (snapshot-delete)");
        assert!(e.to_string().contains("locked (snapshot-delete)"), "{e}");
    }
}
