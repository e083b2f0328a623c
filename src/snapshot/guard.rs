//! The safety rule: no destroy or recreate without a verified data snapshot.
//!
//! [`protect`] is the rule as every caller applies it — `Backend::apply` before a recreate
//! ([`crate::backend::Backend`]) and the `destroy` step before a destroy: it decides through
//! [`before_destroy`] and returns what protected the container together with the `snapshot`
//! action to record. It does not know backends: the caller passes how to reach the container (for
//! a backend, [`crate::backend::Backend::guard_access`]) as a future, which is only awaited when the lib declares
//! data and `--no-snapshot` was not given.
//!
//! [`before_destroy`] is the decision itself. For
//! a container that declares data (`SNAPSHOT`), a verified snapshot is taken first; if it cannot
//! be taken — the container is unreachable, the snapshot fails, or it fails verification — the
//! destroy is refused, unless the user passed `--no-snapshot`, which is logged loudly as a
//! warning (and an Actions `::warning`). The returned id goes into `Provision.protected_by`.

use std::future::Future;
use std::path::Path;

use time::OffsetDateTime;

use super::data::{self, DataError, TakeRequest};
use super::store::Store;
use crate::error::{Hint, WithoutSnapshot};
use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::model::ActionRecord;

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

/// Why a destroy is refused. The message ends with the hint to go on without a snapshot
/// ([`Refused::hint`], a [`Hint::NoSnapshot`] rendered for the entry point).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The container declares data but cannot be reached to snapshot it.
    #[error(
        "refusing to destroy {name} (vmid {vmid}): it declares data ({paths}) but cannot be reached to \
         snapshot it: {reason}; {remedy}, or {}", no_snapshot(name, *then)
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
        /// What the destroy is part of ([`Refused::during`]).
        then: WithoutSnapshot,
    },
    /// The snapshot failed or could not be verified.
    #[error(
        "refusing to destroy {name} (vmid {vmid}): the data snapshot failed: {source}; fix the cause, or {}",
        no_snapshot(name, *then)
    )]
    SnapshotFailed {
        /// Container.
        name: String,
        /// vmid.
        vmid: u32,
        /// What the destroy is part of ([`Refused::during`]).
        then: WithoutSnapshot,
        /// The failure.
        #[source]
        source: DataError,
    },
}

fn no_snapshot(name: &str, then: WithoutSnapshot) -> Hint {
    Hint::NoSnapshot { container: name.to_string(), then }
}

impl Refused {
    /// The refusal of a destroy that is part of `then` (a recreate by `provision`, or the
    /// `destroy` step, the default), for the hint's command line.
    pub fn during(mut self, then: WithoutSnapshot) -> Self {
        match &mut self {
            Refused::Unreachable { then: t, .. } | Refused::SnapshotFailed { then: t, .. } => *t = then,
        }
        self
    }

    /// The remedy the message ends with: go on without a snapshot (`--no-snapshot`).
    pub fn hint(&self) -> Hint {
        match self {
            Refused::Unreachable { name, then, .. } | Refused::SnapshotFailed { name, then, .. } => {
                no_snapshot(name, *then)
            }
        }
    }
}

/// Why a container cannot be reached for its data snapshot, and what would make it reachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// What failed, e.g. ``LXC container `broker` is stopped, not running``.
    pub reason: String,
    /// What the user can do about it, for the container's backend and transport, e.g.
    /// ``start it (`lxc-start -n broker`)`` for the lxc backend (reached through `lxc-attach`),
    /// ``start it (`pct start 101` on its node, or the PVE API) and make SSH work`` for PVE (reached
    /// over SSH). Completed by ", or re-run with --no-snapshot …" ([`Refused::hint`]) in the refusal.
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
        crate::actions::warning_message(&msg);
        return Ok(Protection::Skipped);
    }
    let exec = exec.map_err(|u| Refused::Unreachable {
        name: spec.name.clone(),
        vmid: spec.vmid,
        paths: spec.snapshot_paths.join(", "),
        reason: u.reason,
        remedy: u.remedy,
        then: WithoutSnapshot::Destroy,
    })?;
    let req = TakeRequest { lib: spec.name.clone(), vmid: Some(spec.vmid), paths: spec.snapshot_paths.clone(), now };
    match data::take(exec, store, &req).await {
        Ok(t) => {
            tracing::info!("{}: protected by verified snapshot {}", spec.name, t.manifest.id);
            Ok(Protection::Snapshot { id: t.manifest.id, archive: t.archive })
        }
        Err(source) => Err(Refused::SnapshotFailed {
            name: spec.name.clone(),
            vmid: spec.vmid,
            then: WithoutSnapshot::Destroy,
            source,
        }),
    }
}

/// What [`protect`] decided, with the `snapshot` action to record when one was taken.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// What protects the destroy (`Provision.protected_by` is its [`Protection::protected_by`]).
    pub protection: Protection,
    /// `snapshot` action (detail: the archive) when a verified data snapshot was taken.
    pub record: Option<ActionRecord>,
}

/// Applies the safety rule before `spec`'s container is destroyed (a recreate included):
/// [`before_destroy`] with a data snapshot into `<share>/snapshots/<lib>/` when the lib declares
/// `SNAPSHOT` paths (awaiting `reach` for the transport to the container), nothing when it
/// declares none, a loud warning with `no_snapshot`. `reach` is not awaited in the last two
/// cases, so the container is not touched.
///
/// # Errors
/// [`Refused`]: the container declares data and cannot be reached, or its snapshot failed or
/// could not be verified — the caller must not destroy it.
pub async fn protect<R>(spec: &ContainerSpec, share: &Path, no_snapshot: bool, reach: R) -> Result<Guarded, Refused>
where
    R: Future<Output = Result<Box<dyn RemoteExec>, Unreachable>>,
{
    let store = Store::new(share);
    let now = time::OffsetDateTime::now_utc();
    if spec.snapshot_paths.is_empty() || no_snapshot {
        // before_destroy decides without touching the container.
        let protection =
            before_destroy(spec, Err(Unreachable::new("not needed", "")), &store, no_snapshot, now).await?;
        return Ok(Guarded { protection, record: None });
    }
    let started = std::time::Instant::now();
    let exec = reach.await;
    let protection = before_destroy(spec, exec.as_deref().map_err(Clone::clone), &store, false, now).await?;
    let record = match &protection {
        Protection::Snapshot { id, archive } => Some(ActionRecord {
            action: "snapshot".into(),
            upid: None,
            exit_status: Some("verified".into()),
            duration_ms: started.elapsed().as_millis() as u64,
            detail: Some(format!("{id}: {}", archive.display())),
        }),
        _ => None,
    };
    Ok(Guarded { protection, record })
}
