//! The `snapshot` step: a verified data snapshot of a container's declared paths (plus, when the
//! backend offers one, a container snapshot), retention, and restore.
//!
//! The transport to the container is chosen in one place, [`connect`]: containers made by the
//! `lxc` backend are reached with `lxc-attach` (no network needed) unless SSH is asked for;
//! everything else over SSH (`crate::ssh`), logged in like `configure`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::backend::model::{BackendKind, Outcome, Provision};
use crate::inventory::ContainerSpec;
use crate::snapshot::ct::{self, CtSnapshotRecord, CtSnapshots};
use crate::snapshot::data::{self, TakeRequest};
use crate::snapshot::lxc::LxcSnapshots;
use crate::snapshot::pve::PveSnapshots;
use crate::snapshot::remote::{CommandExec, RemoteExec, SshTransport};
use crate::snapshot::store::Store;

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

/// The `snapshot/<name>.json` artifact.
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

/// Options of the step.
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
}

fn failed(mut a: Snapshot, e: impl std::fmt::Display) -> Snapshot {
    a.outcome = Outcome::Failed { error: crate::ci::redact(&e.to_string()) };
    a
}

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
            Ok(t) => {
                a.snapshot_id = Some(t.manifest.id.clone());
                a.archive = Some(t.archive);
                a.manifest = Some(t.manifest_path);
                a.manifest_digest = Some(t.manifest.digest);
                a.entry_count = t.manifest.entry_count;
                a.bytes = t.manifest.archive_bytes;
                a.data_bytes = t.manifest.data_bytes;
                a.verification = Verification::Verified;
            }
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
            a.snapshot_id = Some(r.manifest.id.clone());
            a.archive = Some(r.stored.archive);
            a.manifest = Some(r.stored.manifest);
            a.manifest_digest = Some(r.manifest.digest);
            a.entry_count = r.manifest.entry_count;
            a.bytes = r.manifest.archive_bytes;
            a.data_bytes = r.manifest.data_bytes;
            a.verification = Verification::Verified;
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

/// A way into a container: the data transport and, when the backend has them, container
/// snapshots.
pub struct Connection {
    /// Runs the snapshot scripts as root in the container.
    pub exec: Box<dyn RemoteExec>,
    /// Container snapshots (PVE/LXC), when available.
    pub ct: Option<Box<dyn CtSnapshots>>,
}

/// Access to the PVE API for the container snapshots of `pve`-backend containers.
#[derive(Clone)]
pub struct PveCtAccess {
    /// The client (shared session).
    pub client: std::sync::Arc<crate::pve::PveClient>,
    /// Bound of one snapshot task (create, rollback, delete), e.g. 600 s.
    pub task_timeout: std::time::Duration,
}

impl std::fmt::Debug for PveCtAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PveCtAccess")
            .field("api", &self.client.base_url())
            .field("task_timeout", &self.task_timeout)
            .finish()
    }
}

/// The container snapshots of the container `prov` describes: `lxc-snapshot` for the `lxc`
/// backend; the PVE API (`…/lxc/{vmid}/snapshot`, [`PveSnapshots`]) for the `pve` backend when
/// `pve` access is given and the artifact names the node; otherwise none.
pub fn ct_snapshots(prov: &Provision, pve: Option<&PveCtAccess>) -> Option<Box<dyn CtSnapshots>> {
    match prov.backend {
        BackendKind::Lxc => Some(Box::new(LxcSnapshots::new(&prov.hostname, Path::new("/var/lib/lxc")))),
        BackendKind::Pve => {
            let (pve, node) = (pve?, prov.node.as_deref()?);
            Some(Box::new(PveSnapshots::new(pve.client.clone(), node, prov.vmid).with_timeout(pve.task_timeout)))
        }
    }
}

/// How [`connect`] reaches a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `lxc-attach` for containers of the `lxc` backend (no network needed), SSH for the rest.
    #[default]
    Auto,
    /// SSH for every container, the `lxc` backend's included (as `configure` reaches them).
    Ssh,
}

/// Options of [`connect`].
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// lxc-attach or SSH.
    pub transport: Transport,
    /// SSH connect tuning (timeouts, attempts).
    pub ssh: crate::ssh::ConnectOptions,
    /// PVE API access for the container snapshots of `pve` containers ([`ct_snapshots`]);
    /// `None`: no container snapshots for them.
    pub pve: Option<PveCtAccess>,
}

/// THE transport seam: how the step reaches `spec`'s container, from its `provision/<name>.json`
/// artifact (which must exist: it records the backend, the address and port `provision`
/// reached, and whether the container was just created).
///
/// * backend `lxc` with [`Transport::Auto`]: `lxc-attach -n <hostname> --` on this host;
/// * backend `pve`, or [`Transport::Ssh`]: SSH to `Provision.address`:`Provision.ssh_port` with
///   the key `<share>/.keys/<vmid>` ([`crate::keys`]), as `config` (commands through
///   `sudo -n`) or, before the base role created `config`, as `root` — the same login and
///   trust-on-first-use host keys as `configure` (`<artifacts>/known_hosts/<name>`, replaced
///   when the artifact says the container was just (re)created).
///
/// Container snapshots ([`ct_snapshots`]): `lxc-snapshot` for the `lxc` backend (whatever the
/// data transport); the PVE API for `pve` when `opts.pve` is given.
///
/// # Errors
/// A message naming the container and why it cannot be reached: no or failed provision
/// artifact, no address recorded, no key in the share, SSH unreachable / key refused / host key
/// changed.
pub async fn connect(
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &ConnectOptions,
) -> Result<Connection, String> {
    let prov = read_provision(spec, artifacts)?;
    if let Outcome::Failed { error } = &prov.outcome {
        let path = artifacts.provision(&spec.name);
        return Err(format!(
            "{} (vmid {}): provisioning failed ({error}); {} records no reachable container",
            spec.name,
            spec.vmid,
            path.display()
        ));
    }
    connect_to(spec, &prov, artifacts, share, opts).await
}

/// Reads `spec`'s `provision/<name>.json` (whatever its outcome).
///
/// # Errors
/// A message naming the container: no artifact (run `provision` first), or an unreadable one.
pub fn read_provision(spec: &ContainerSpec, artifacts: &ArtifactDir) -> Result<Provision, String> {
    let path = artifacts.provision(&spec.name);
    let who = format!("{} (vmid {})", spec.name, spec.vmid);
    match artifact::read::<Provision>(&path) {
        Ok(p) => Ok(p),
        Err(artifact::ArtifactError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(format!(
                "{who}: no provision artifact {}; run `provision` first (the snapshot step reaches the \
             container at the address and through the backend it recorded)",
                path.display()
            ))
        }
        Err(e) => Err(format!("{who}: {e}")),
    }
}

/// [`connect`] with the provision artifact already read, whatever its outcome: the provision
/// step's safety rule uses it before a recreate, when the container is known to exist even if
/// the last run failed (e.g. a recreate refused earlier).
///
/// # Errors
/// See [`connect`].
pub async fn connect_to(
    spec: &ContainerSpec,
    prov: &Provision,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &ConnectOptions,
) -> Result<Connection, String> {
    let who = format!("{} (vmid {})", spec.name, spec.vmid);
    let path = artifacts.provision(&spec.name);
    if prov.backend == BackendKind::Lxc && opts.transport == Transport::Auto {
        return Ok(Connection {
            exec: Box::new(CommandExec::lxc_attach(&prov.hostname)),
            ct: ct_snapshots(prov, opts.pve.as_ref()),
        });
    }
    let address = prov
        .address
        .clone()
        .ok_or_else(|| format!("{who}: {} records no address to reach over SSH", path.display()))?;
    let key = crate::keys::key_dir(share).join(spec.vmid.to_string());
    if !key.is_file() {
        return Err(format!(
            "{who}: no SSH key {} (the provision step creates it; is --share / PROXMOX_SHARE the same as for provision?)",
            key.display()
        ));
    }
    let target = crate::ssh::Target {
        name: spec.name.clone(),
        address,
        port: prov.ssh_port,
        key,
        known_hosts: artifacts.root().join("known_hosts").join(&spec.name),
        replace_host_key: crate::ssh::recreated_since_recorded(
            prov.created,
            &path,
            &artifacts.root().join("known_hosts").join(&spec.name),
        ),
        users: vec!["config".into(), "root".into()],
    };
    let exec = SshTransport::connect(&target, &opts.ssh, crate::snapshot::remote::SSH_EXEC_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!("{}: connected over SSH as {}", spec.name, exec.connection().user());
    Ok(Connection { exec: Box::new(exec), ct: ct_snapshots(prov, opts.pve.as_ref()) })
}

/// What `configure` calls before the lib's configuration runs (the seed's behaviour): when the
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
