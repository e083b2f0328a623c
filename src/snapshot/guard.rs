//! The safety rule: no destroy or recreate without a verified data snapshot.
//!
//! `provision` calls [`before_destroy`] before it destroys a container (a recreate included). For
//! a container that declares data (`SNAPSHOT`), a verified snapshot is taken first; if it cannot
//! be taken — the container is unreachable, the snapshot fails, or it fails verification — the
//! destroy is refused, unless the user passed `--no-snapshot`, which is logged loudly as a
//! warning (and an Actions `::warning`). The returned id goes into `Provision.protected_by`.

use time::OffsetDateTime;

use super::data::{self, DataError, TakeRequest};
use super::remote::RemoteExec;
use super::store::Store;
use crate::inventory::ContainerSpec;

/// What protected (or did not need to protect) a destroy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// A verified snapshot was taken: its id (`<lib>-YYYYMMDD-HHMMSS`) and archive path.
    Snapshot {
        /// Snapshot id, recorded in `Provision.protected_by`.
        id: String,
        /// The archive.
        archive: std::path::PathBuf,
    },
    /// The lib declares no data (`SNAPSHOT` empty): nothing to protect.
    NoData,
    /// `--no-snapshot`: the user accepted losing the data (already logged as a warning).
    Skipped,
}

impl Protection {
    /// The value for `Provision.protected_by`: the snapshot id, or `none (no SNAPSHOT paths)` /
    /// `none (--no-snapshot)`.
    pub fn protected_by(&self) -> String {
        match self {
            Protection::Snapshot { id, .. } => id.clone(),
            Protection::NoData => "none (no SNAPSHOT paths)".into(),
            Protection::Skipped => "none (--no-snapshot)".into(),
        }
    }
}

/// Why a destroy is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The container declares data but cannot be reached to snapshot it.
    #[error(
        "refusing to destroy {name} (vmid {vmid}): it declares data ({paths}) but cannot be reached to \
         snapshot it: {reason}; {remedy}, or pass --no-snapshot to destroy without a snapshot"
    )]
    Unreachable {
        /// Container.
        name: String,
        /// vmid.
        vmid: u32,
        /// The declared paths.
        paths: String,
        /// Why it is unreachable.
        reason: String,
        /// What makes it reachable, for its backend (see [`Unreachable::remedy`]).
        remedy: String,
    },
    /// The snapshot failed or could not be verified.
    #[error(
        "refusing to destroy {name} (vmid {vmid}): the data snapshot failed: {source}; fix the cause, or pass \
         --no-snapshot to destroy without a snapshot"
    )]
    SnapshotFailed {
        /// Container.
        name: String,
        /// vmid.
        vmid: u32,
        /// The failure.
        #[source]
        source: DataError,
    },
}

/// Why a container cannot be reached for its data snapshot, and what would make it reachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// What failed, e.g. ``LXC container `broker` is stopped, not running``.
    pub reason: String,
    /// What the user can do about it, for the container's backend and transport, e.g.
    /// ``start it (`lxc-start -n broker`)`` for the lxc backend (reached through `lxc-attach`),
    /// ``start it (`pct start 101` on its node, or the PVE API) and make SSH work`` for PVE (reached
    /// over SSH). Completed by ", or pass --no-snapshot …" in the refusal.
    pub remedy: String,
}

impl Unreachable {
    /// An unreachable container with its `reason` and `remedy`.
    pub fn new(reason: impl Into<String>, remedy: impl Into<String>) -> Self {
        Self { reason: reason.into(), remedy: remedy.into() }
    }
}

/// Decides whether `spec`'s container may be destroyed, taking a verified data snapshot first.
///
/// `exec` is the transport to the container, or [`Unreachable`] (why, and what to do) when it
/// cannot be reached.
///
/// # Errors
/// [`Refused`] when the container declares data and the snapshot cannot be taken or verified
/// and `no_snapshot` is false.
pub async fn before_destroy(
    spec: &ContainerSpec,
    exec: Result<&dyn RemoteExec, Unreachable>,
    store: &Store,
    no_snapshot: bool,
    now: OffsetDateTime,
) -> Result<Protection, Refused> {
    if spec.snapshot_paths.is_empty() {
        return Ok(Protection::NoData);
    }
    if no_snapshot {
        let msg = format!(
            "--no-snapshot: destroying {} (vmid {}) WITHOUT a data snapshot; the data in {} will be lost",
            spec.name,
            spec.vmid,
            spec.snapshot_paths.join(", ")
        );
        tracing::warn!("{msg}");
        crate::ci::warning_message(&msg);
        return Ok(Protection::Skipped);
    }
    let exec = exec.map_err(|u| Refused::Unreachable {
        name: spec.name.clone(),
        vmid: spec.vmid,
        paths: spec.snapshot_paths.join(", "),
        reason: u.reason,
        remedy: u.remedy,
    })?;
    let req = TakeRequest { lib: spec.name.clone(), vmid: Some(spec.vmid), paths: spec.snapshot_paths.clone(), now };
    match data::take(exec, store, &req).await {
        Ok(t) => {
            tracing::info!("{}: protected by verified snapshot {}", spec.name, t.manifest.id);
            Ok(Protection::Snapshot { id: t.manifest.id, archive: t.archive })
        }
        Err(source) => Err(Refused::SnapshotFailed { name: spec.name.clone(), vmid: spec.vmid, source }),
    }
}
