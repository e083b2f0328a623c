//! The `snapshot` step: a verified data snapshot of a container's declared paths (plus, when the
//! backend offers one, a container snapshot) and retention; restore is
//! [`crate::snapshot::record::restore`].
//!
//! The way into the container is chosen by [`crate::access::open`]: containers made by the `lxc`
//! backend are entered with `lxc-attach` through the LXC client (no network needed) unless SSH
//! is asked for; everything else over SSH (`crate::ssh`), logged in like `configure`.
//! Those items, and the record types, are re-exported here for the callers of the step (the CLI,
//! `deploy`).

pub use crate::access::{
    Access, AccessOptions, PveCtAccess, Transport, ct_snapshots, open, open_recorded, read_provision,
};
pub use crate::snapshot::record::{Operation, Snapshot, SnapshotOptions, Verification, restore, restore_if_empty};

use crate::exec::RemoteExec;
use crate::inventory::ContainerSpec;
use crate::snapshot::ct::{self, CtSnapshots};
use crate::snapshot::data::{self, TakeRequest};
use crate::snapshot::record::failed;
use crate::snapshot::store::Store;

/// Takes a verified data snapshot of `spec` through `exec`, then (when `ct` is given) a container
/// snapshot, then applies retention. Never returns an error: the outcome is in the artifact.
/// Warnings (no SNAPSHOT paths, no container snapshot possible) are only recorded in
/// `warnings`, not logged: the caller logs them once (the `snapshot` command, `deploy`).
pub async fn snapshot(
    spec: &ContainerSpec,
    exec: &dyn RemoteExec,
    ct: Option<&dyn CtSnapshots>,
    opts: &SnapshotOptions,
) -> Snapshot {
    let mut a = Snapshot::new(spec, Operation::Snapshot);
    let store = Store::new(&opts.share);
    if spec.snapshot_paths.is_empty() {
        a.warnings.push(format!("{} declares no SNAPSHOT paths: no data snapshot taken", spec.name));
    } else {
        let req = TakeRequest {
            lib: spec.name.clone(),
            vmid: Some(spec.vmid),
            paths: spec.snapshot_paths.clone(),
            now: opts.now,
        };
        match data::take(exec, &store, &req).await {
            Ok(t) => a.set_verified(t.manifest, t.archive, t.manifest_path),
            Err(e) => {
                if matches!(e, data::DataError::Mismatch { .. }) {
                    a.verification = Verification::Failed;
                }
                return failed(a, e);
            }
        }
    }
    if let Some(ct) = ct {
        let desc = match &a.snapshot_id {
            Some(id) => format!("proxmox-gitops snapshot of {} (data archive {id})", spec.name),
            None => format!("proxmox-gitops snapshot of {}", spec.name),
        };
        match ct::take(ct, opts.now, &desc).await {
            Ok(r) => a.ct_snapshot = Some(r),
            // The data snapshot is what protects the data; a backend that cannot snapshot the
            // container (storage without snapshots, a running dir-backed LXC container) is
            // reported, not fatal. Not logged here: the callers log the artifact's warnings.
            Err(e @ ct::CtSnapshotError::NotSupported { .. }) => {
                a.warnings.push(format!("no container snapshot: {e}"));
            }
            Err(e) => return failed(a, e),
        }
    }
    if let Some(keep) = opts.keep {
        if !spec.snapshot_paths.is_empty() {
            match store.prune(&spec.name, keep) {
                Ok(p) => a.pruned = p,
                Err(e) => {
                    return failed(a, format!("retention in {}: {e}", store.lib_dir(&spec.name).display()));
                }
            }
        }
        if let Some(ct) = ct {
            match ct::prune(ct, keep).await {
                Ok(p) => a.ct_pruned = p,
                Err(e) => return failed(a, e),
            }
        }
    }
    a
}
