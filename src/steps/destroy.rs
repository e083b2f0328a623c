//! Step `destroy`: remove containers, never without a snapshot of their data.
//!
//! For each container: check it exists and is the one the spec describes (PVE: the CT's
//! `hostname` is the spec's and its description carries our mark for the lib; LXC: the container's `proxmox-gitops.json` names the vmid); apply
//! the safety rule ([`crate::snapshot::guard::protect`] — a verified data snapshot when the lib
//! declares `SNAPSHOT` paths, refusal when that fails, unless `--no-snapshot`); then the backend's
//! `destroy` (PVE: shutdown, stop after the timeout, `DELETE …/lxc/{vmid}` with `purge=1` and
//! `destroy-unreferenced-disks=1`; LXC: `lxc-stop`, `lxc-destroy`).
//!
//! Artifacts: `destroy/<name>.json` (kind `destroy`, [`Destroy`]) for every container; and when
//! a `provision/<name>.json` exists and the container was destroyed, its `status` becomes
//! `destroyed` and `address` is cleared, so later steps do not try to reach it. A container that
//! failed is isolated: the others are still destroyed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::inventory::ContainerSpec;
use crate::model::{ActionRecord, BackendKind, Outcome, Provision};
use crate::snapshot::guard;

/// The `destroy/<name>.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destroy {
    /// Backend that managed the container.
    pub backend: BackendKind,
    /// Container (lib) name.
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// Hostname (the LXC container name for the lxc backend).
    pub hostname: String,
    /// True when the container existed (false: nothing to do).
    pub existed: bool,
    /// True when it was destroyed by this run.
    pub destroyed: bool,
    /// What protected the destroy: the data snapshot id, `none (no SNAPSHOT paths)` or
    /// `none (--no-snapshot)`; `None` when nothing was destroyed.
    pub protected_by: Option<String>,
    /// Every action taken (`snapshot`, `shutdown`, `stop`, `destroy` …) with its UPID (PVE).
    pub actions: Vec<ActionRecord>,
    /// Result.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Artifact for Destroy {
    const KIND: &'static str = "destroy";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// Options of the step.
#[derive(Debug, Clone)]
pub struct DestroyOptions {
    /// The share directory (`<share>/snapshots` for the data snapshot).
    pub share: PathBuf,
    /// `--no-snapshot`: destroy containers that declare data without a snapshot (logged loudly).
    pub no_snapshot: bool,
}

/// `<artifacts>/destroy/<name>.json`.
pub fn artifact_path(artifacts: &ArtifactDir, name: &str) -> PathBuf {
    artifacts.destroy(name)
}

/// Whether `spec`'s container exists and is the one the spec describes.
async fn exists(backend: &Backend, spec: &ContainerSpec) -> anyhow::Result<bool> {
    match backend {
        Backend::Lxc(b) => b.owned(spec),
        Backend::Pve(b) => match b.live_mark(spec).await? {
            None => Ok(false),
            Some((h, _)) if h != spec.hostname => anyhow::bail!(
                "CT {} holds hostname `{h}`, not `{}`: it is not {}'s container; not destroying it",
                spec.vmid,
                spec.hostname,
                spec.name
            ),
            Some((_, true)) => Ok(true),
            Some((h, false)) => anyhow::bail!(
                "CT {} (hostname `{h}`) was not created by proxmox-gitops for lib `{}` (its description lacks the line \
                 \"{}{}`\"): not destroying it; remove it yourself (`pct destroy {}` on its node) if it really must go",
                spec.vmid,
                spec.name,
                crate::backend::pve::desired::LIB_MARKER,
                spec.name,
                spec.vmid
            ),
        },
    }
}

/// Destroys one container (see the module docs). Never returns an error: the outcome is in the
/// artifact (and is not logged: the caller reports it).
pub async fn destroy_one(
    backend: &Backend,
    spec: &ContainerSpec,
    opts: &DestroyOptions,
    artifacts: &ArtifactDir,
) -> Destroy {
    let _group = crate::actions::Group::start(&format!("destroy {}", spec.name));
    let mut a = Destroy {
        backend: backend.kind(),
        name: spec.name.clone(),
        vmid: spec.vmid,
        hostname: spec.hostname.clone(),
        existed: false,
        destroyed: false,
        protected_by: None,
        actions: vec![],
        outcome: Outcome::Ok,
    };
    // Not logged here: the caller reports failed outcomes once (the `destroy` command in its
    // final error), like the other steps.
    let fail = |mut a: Destroy, e: String| {
        a.outcome = Outcome::Failed { error: crate::actions::redact(&e) };
        a
    };
    match exists(backend, spec).await {
        Ok(true) => a.existed = true,
        Ok(false) => {
            tracing::info!(
                "{}: container {} (vmid {}) does not exist; nothing to destroy",
                spec.name,
                spec.hostname,
                spec.vmid
            );
            return a;
        }
        Err(e) => return fail(a, format!("{e:#}")),
    }
    let reach = backend.guard_access(spec, artifacts, &opts.share);
    let guarded = match guard::protect(spec, &opts.share, opts.no_snapshot, reach).await {
        Ok(g) => g,
        Err(refused) => return fail(a, refused.to_string()),
    };
    a.actions.extend(guarded.record);
    let protected_by = guarded.protection.protected_by();
    match backend.destroy(spec).await {
        Ok(actions) => {
            a.actions.extend(actions);
            a.destroyed = true;
            a.protected_by = Some(protected_by);
            tracing::info!("{}: destroyed (protected by {})", spec.name, a.protected_by.as_deref().unwrap_or(""));
            a
        }
        Err(e) => {
            // The snapshot (if any) stays; record it, the container may be half-stopped.
            a.protected_by = Some(protected_by);
            fail(a, format!("{e:#}"))
        }
    }
}

/// Marks `provision/<name>.json` (when present) as destroyed: no address, no last creation.
fn mark_provision(path: &Path) -> anyhow::Result<()> {
    let mut p: Provision = match artifact::read(path) {
        Ok(p) => p,
        Err(artifact::ArtifactError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    p.status = Some("destroyed".into());
    p.address = None;
    p.created_at = None;
    artifact::write(path, &p)?;
    Ok(())
}

/// Destroys `specs` one after the other, writing `destroy/<name>.json` (and marking
/// `provision/<name>.json`) for each. Returns the artifacts in order.
///
/// # Errors
/// Only when an artifact cannot be written.
pub async fn destroy_all(
    backend: &Backend,
    specs: &[ContainerSpec],
    opts: &DestroyOptions,
    artifacts: &ArtifactDir,
) -> Result<Vec<Destroy>> {
    let mut out = Vec::new();
    for spec in specs {
        let d = destroy_one(backend, spec, opts, artifacts).await;
        let path = artifact_path(artifacts, &spec.name);
        artifact::write(&path, &d)
            .map_err(|e| Error::Failed(anyhow::Error::new(e).context(format!("cannot write {}", path.display()))))?;
        if d.destroyed {
            let prov = artifacts.provision(&spec.name);
            mark_provision(&prov).map_err(|e| Error::Failed(e.context(format!("cannot update {}", prov.display()))))?;
        }
        out.push(d);
    }
    Ok(out)
}
