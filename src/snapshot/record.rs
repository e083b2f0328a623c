//! The record of a data snapshot or restore — the `snapshot/<name>.json` artifact ([`Snapshot`]) —
//! and the restores that produce one: [`restore`] (the `snapshot --restore` step) and
//! [`restore_if_empty`] (what `configure` does before a lib's configuration runs).
//!
//! Here and not in `steps/snapshot.rs` because two steps share it: `snapshot` writes the record,
//! `configure` restores and embeds it; steps do not call each other.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::ct::CtSnapshotRecord;
use super::data;
use super::store::{ArchiveManifest, Store};
use crate::artifact::Artifact;
use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::model::Outcome;

/// What the step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Took a data snapshot.
    Snapshot,
    /// Restored one.
    Restore,
}

/// Result of verifying an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verification {
    /// The archive matches the manifest computed on the container (snapshot), or the archive and
    /// the restored tree match the stored manifest (restore).
    Verified,
    /// Verification failed (the reason is in `error`).
    Failed,
    /// Not reached (e.g. the container could not be reached) or nothing to verify.
    NotRun,
}

/// The `snapshot/<name>.json` artifact (also embedded in `configure`'s artifact when it
/// restored data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Container (lib) name.
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// Snapshot or restore.
    pub operation: Operation,
    /// The declared paths (`SNAPSHOT`).
    pub paths: Vec<String>,
    /// Snapshot id `<lib>-YYYYMMDD-HHMMSS[-N]`.
    pub snapshot_id: Option<String>,
    /// The archive `<share>/snapshots/<lib>/<id>.tar.gz`.
    pub archive: Option<PathBuf>,
    /// Its manifest (`<id>.json`).
    pub manifest: Option<PathBuf>,
    /// The manifest digest (`sha256:…`).
    pub manifest_digest: Option<String>,
    /// Number of entries (files, directories, links …).
    pub entry_count: u64,
    /// Archive size in bytes (compressed).
    pub bytes: u64,
    /// Sum of the regular files' sizes in bytes.
    pub data_bytes: u64,
    /// Verification result.
    pub verification: Verification,
    /// The container snapshot taken (PVE/LXC), when the backend offers one.
    pub ct_snapshot: Option<CtSnapshotRecord>,
    /// Container snapshots deleted by retention (names).
    pub ct_pruned: Vec<String>,
    /// Archives deleted by retention.
    pub pruned: Vec<PathBuf>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// Result.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Artifact for Snapshot {
    const KIND: &'static str = "snapshot";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// Options of a snapshot or restore.
#[derive(Debug, Clone)]
pub struct SnapshotOptions {
    /// The share directory (`<share>/snapshots`).
    pub share: PathBuf,
    /// Keep this many archives (and container snapshots named `pgo-…`) per lib; `None` keeps all.
    pub keep: Option<usize>,
    /// Time of the snapshot (names are its UTC second).
    pub now: OffsetDateTime,
}

impl Snapshot {
    /// An empty result for `spec` (outcome `ok`, nothing done yet).
    pub fn new(spec: &ContainerSpec, operation: Operation) -> Snapshot {
        Snapshot {
            name: spec.name.clone(),
            vmid: spec.vmid,
            operation,
            paths: spec.snapshot_paths.clone(),
            snapshot_id: None,
            archive: None,
            manifest: None,
            manifest_digest: None,
            entry_count: 0,
            bytes: 0,
            data_bytes: 0,
            verification: Verification::NotRun,
            ct_snapshot: None,
            ct_pruned: Vec::new(),
            pruned: Vec::new(),
            warnings: Vec::new(),
            outcome: Outcome::Ok,
        }
    }

    /// Records the verified archive `archive` (with its manifest file `manifest_path` and parsed
    /// `manifest`): its id, files, manifest digest, entry count and sizes; verification
    /// `verified`.
    pub fn set_verified(&mut self, manifest: ArchiveManifest, archive: PathBuf, manifest_path: PathBuf) {
        self.snapshot_id = Some(manifest.id);
        self.archive = Some(archive);
        self.manifest = Some(manifest_path);
        self.manifest_digest = Some(manifest.digest);
        self.entry_count = manifest.entry_count;
        self.bytes = manifest.archive_bytes;
        self.data_bytes = manifest.data_bytes;
        self.verification = Verification::Verified;
    }
}

/// `a` with outcome `failed` and the (redacted) error.
pub(crate) fn failed(mut a: Snapshot, e: impl std::fmt::Display) -> Snapshot {
    a.outcome = Outcome::Failed { error: crate::actions::redact(&e.to_string()) };
    a
}

/// Restores the newest (by parsed time) or the `at` data snapshot of `spec` through `exec`.
/// Never returns an error: the outcome is in the artifact.
pub async fn restore(
    spec: &ContainerSpec,
    exec: &dyn RemoteExec,
    opts: &SnapshotOptions,
    at: Option<&str>,
) -> Snapshot {
    let mut a = Snapshot::new(spec, Operation::Restore);
    let store = Store::new(&opts.share);
    match data::restore(exec, &store, &spec.name, at).await {
        Ok(r) => {
            if r.manifest.paths != spec.snapshot_paths {
                a.warnings.push(format!(
                    "restored the archive's paths {} while the lib now declares {}",
                    r.manifest.paths.join(","),
                    spec.snapshot_paths.join(",")
                ));
            }
            a.paths = r.manifest.paths.clone();
            a.set_verified(r.manifest, r.stored.archive, r.stored.manifest);
            a
        }
        Err(e) => {
            if matches!(e, data::DataError::Corrupt { .. } | data::DataError::RestoreMismatch { .. }) {
                a.verification = Verification::Failed;
            }
            failed(a, e)
        }
    }
}

/// What `configure` does before the lib's configuration runs (the seed's behaviour): when the
/// lib declares data, its paths are all missing or empty on the container, and a snapshot exists
/// in the store, the newest one is restored. Returns `None` when nothing was to be done (logged),
/// otherwise the restore's artifact (its outcome says whether it worked).
///
/// # Errors
/// Never fails on its own; a failed probe or restore is in the returned artifact's outcome.
pub async fn restore_if_empty(spec: &ContainerSpec, exec: &dyn RemoteExec, opts: &SnapshotOptions) -> Option<Snapshot> {
    if spec.snapshot_paths.is_empty() {
        return None;
    }
    let store = Store::new(&opts.share);
    match store.list(&spec.name) {
        Ok(l) if l.is_empty() => {
            tracing::info!("{}: no snapshot in {}; nothing to restore", spec.name, store.lib_dir(&spec.name).display());
            return None;
        }
        Ok(_) => {}
        Err(e) => return Some(failed(Snapshot::new(spec, Operation::Restore), e)),
    }
    match data::paths_empty(exec, &spec.snapshot_paths).await {
        Ok(false) => {
            tracing::info!("{}: data paths are not empty; not restoring", spec.name);
            None
        }
        Ok(true) => {
            tracing::info!("{}: data paths are empty and a snapshot exists: restoring the newest", spec.name);
            Some(restore(spec, exec, opts, None).await)
        }
        Err(e) => Some(failed(Snapshot::new(spec, Operation::Restore), e)),
    }
}
