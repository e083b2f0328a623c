//! Entering a container from its `provision/<name>.json` artifact: the backend that made it,
//! the node, the address and port `provision` reached, and when proxmox-gitops last created it.
//!
//! * backend `lxc` with [`Transport::Auto`]: `lxc-attach` on this host, under the LXC path the
//!   backend uses ([`crate::lxc::resolve_path`]: `$PGO_LXC_PATH`, else `lxc-config
//!   lxc.lxcpath`);
//! * backend `pve`, or [`Transport::Ssh`]: SSH to the recorded address and port
//!   ([`super::door::ssh_target`]), the recorded host key replaced when the artifact says the
//!   container was (re)created since it was recorded.
//!
//! Container snapshots come along: `lxc-snapshot` for the `lxc` backend (whatever the data
//! transport, through the same [`LxcClient`]), the PVE API for `pve` when API access is given
//! and the artifact names the node.

use std::path::Path;

use super::{Access, AccessOptions, PveCtAccess, ReachError, Transport};
use crate::artifact::{self, ArtifactDir};
use crate::exec::{LxcAttach, RemoteExec, SSH_EXEC_TIMEOUT};
use crate::inventory::ContainerSpec;
use crate::lxc::LxcClient;
use crate::model::{BackendKind, Outcome, Provision};
use crate::snapshot::ct::CtSnapshots;
use crate::snapshot::lxc::LxcSnapshots;
use crate::snapshot::pve::PveSnapshots;

/// Reads `spec`'s `provision/<name>.json` (whatever its outcome).
///
/// # Errors
/// [`ReachError::NoProvision`] (run `provision` first, [`crate::error::Hint::RunStep`]), [`ReachError::Provision`] for an
/// unreadable one.
pub fn read_provision(spec: &ContainerSpec, artifacts: &ArtifactDir) -> Result<Provision, ReachError> {
    let path = artifacts.provision(&spec.name);
    match artifact::read::<Provision>(&path) {
        Ok(p) => Ok(p),
        Err(artifact::ArtifactError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(ReachError::NoProvision { name: spec.name.clone(), vmid: spec.vmid, path })
        }
        Err(source) => Err(ReachError::Provision { name: spec.name.clone(), vmid: spec.vmid, source }),
    }
}

/// Fails when `prov` records a failed provision run (no container known to be reachable).
///
/// # Errors
/// [`ReachError::ProvisionFailed`].
pub fn require_provisioned(spec: &ContainerSpec, prov: &Provision, artifacts: &ArtifactDir) -> Result<(), ReachError> {
    match &prov.outcome {
        Outcome::Failed { error } => Err(ReachError::ProvisionFailed {
            name: spec.name.clone(),
            vmid: spec.vmid,
            error: error.clone(),
            path: artifacts.provision(&spec.name),
        }),
        Outcome::Ok => Ok(()),
    }
}

/// The LXC client the `lxc` backend uses (default path resolution, see the module docs).
async fn lxc_client(spec: &ContainerSpec) -> Result<LxcClient, ReachError> {
    LxcClient::connect(None).await.map_err(|source| ReachError::Lxc { name: spec.name.clone(), source })
}

/// The command transport into the container `prov` describes (see the module docs), whatever
/// the artifact's outcome: the protect-before-destroy guard uses it before a recreate, when the
/// container is known to exist even if the last run failed. `lxc`: the client to attach through
/// (`None`: opened here with the default resolution).
///
/// # Errors
/// [`ReachError`]: no address recorded, no key in the share, SSH unreachable / key refused /
/// host key changed, LXC unusable on this host.
pub async fn exec_recorded(
    spec: &ContainerSpec,
    prov: &Provision,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &AccessOptions,
    lxc: Option<&LxcClient>,
) -> Result<Box<dyn RemoteExec>, ReachError> {
    let path = artifacts.provision(&spec.name);
    if prov.backend == BackendKind::Lxc && opts.transport == Transport::Auto {
        let client = match lxc {
            Some(c) => c.clone(),
            None => lxc_client(spec).await?,
        };
        return Ok(Box::new(LxcAttach::new(client, &prov.hostname)));
    }
    let address = prov.address.clone().ok_or_else(|| ReachError::NoAddress {
        name: spec.name.clone(),
        vmid: spec.vmid,
        path: path.clone(),
    })?;
    let known_hosts = artifacts.known_hosts(&spec.name);
    let replace = crate::ssh::recreated_since_recorded(prov.last_creation(&path), &known_hosts);
    let target = super::ssh_target(&spec.name, spec.vmid, &address, prov.ssh_port, share, known_hosts, replace)?;
    let exec = super::ssh_exec(&target, &opts.ssh, SSH_EXEC_TIMEOUT).await?;
    tracing::info!("{}: connected over SSH as {}", spec.name, exec.connection().user());
    Ok(Box::new(exec))
}

/// The container snapshots of the container `prov` describes: `lxc-snapshot` through `lxc` for
/// the `lxc` backend; the PVE API ([`PveSnapshots`]) for the `pve` backend when `pve` access is
/// given and the artifact names the node; otherwise none.
fn ct_snapshots_with(
    prov: &Provision,
    pve: Option<&PveCtAccess>,
    lxc: Option<&LxcClient>,
) -> Option<Box<dyn CtSnapshots>> {
    match prov.backend {
        BackendKind::Lxc => {
            Some(Box::new(LxcSnapshots::new(lxc?.clone(), &prov.hostname).keeping(crate::lxc::META_FILE)))
        }
        BackendKind::Pve => {
            let (pve, node) = (pve?, prov.node.as_deref()?);
            Some(Box::new(PveSnapshots::new(pve.client.clone(), node, prov.vmid).with_timeout(pve.task_timeout)))
        }
    }
}

/// The container snapshots of the container `prov` describes (see [`open_recorded`]); for the
/// `lxc` backend the LXC client is opened here (blocking: call it outside an async context).
///
/// # Errors
/// [`ReachError::Lxc`] for an `lxc` container when LXC cannot be used on this host (not root,
/// tools missing).
pub fn ct_snapshots(prov: &Provision, pve: Option<&PveCtAccess>) -> Result<Option<Box<dyn CtSnapshots>>, ReachError> {
    let lxc = match prov.backend {
        BackendKind::Lxc => {
            Some(LxcClient::open(None).map_err(|source| ReachError::Lxc { name: prov.hostname.clone(), source })?)
        }
        BackendKind::Pve => None,
    };
    Ok(ct_snapshots_with(prov, pve, lxc.as_ref()))
}

/// Enters `spec`'s container from its `provision/<name>.json` artifact, which must exist and
/// record a successful run.
///
/// # Errors
/// [`ReachError`] naming the container and why it cannot be entered: no or failed provision
/// artifact, no address recorded, no key in the share, SSH unreachable / key refused / host key
/// changed, LXC unusable on this host.
pub async fn open(
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &AccessOptions,
) -> Result<Access, ReachError> {
    let prov = read_provision(spec, artifacts)?;
    require_provisioned(spec, &prov, artifacts)?;
    open_recorded(spec, &prov, artifacts, share, opts).await
}

/// [`open`] with the provision artifact already read, whatever its outcome: commands through
/// [`exec_recorded`]; container snapshots `lxc-snapshot` for the `lxc` backend (whatever the
/// command transport) and the PVE API for `pve` when `opts.pve` is given.
///
/// # Errors
/// See [`open`].
pub async fn open_recorded(
    spec: &ContainerSpec,
    prov: &Provision,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &AccessOptions,
) -> Result<Access, ReachError> {
    let lxc = match prov.backend {
        BackendKind::Lxc => Some(lxc_client(spec).await?),
        BackendKind::Pve => None,
    };
    let exec = exec_recorded(spec, prov, artifacts, share, opts, lxc.as_ref()).await?;
    Ok(Access { exec, ct: ct_snapshots_with(prov, opts.pve.as_ref(), lxc.as_ref()) })
}
