//! How the snapshot code gets into a container: the data transport ([`crate::exec::reach`]) plus,
//! when the backend has them, container snapshots ([`ct_snapshots`]), from the container's
//! `provision/<name>.json` artifact.
//!
//! Both halves of an `lxc` container use one [`LxcClient`], opened with the same LXC path
//! resolution as the lxc backend ([`crate::lxc::resolve_path`]): with `PGO_LXC_PATH` set to
//! another path, `lxc-attach` and `lxc-snapshot` look where `provision` created the container.

use std::path::Path;

use super::ct::CtSnapshots;
use super::lxc::LxcSnapshots;
use super::pve::PveSnapshots;
use crate::artifact::ArtifactDir;
use crate::exec::{ReachError, ReachOptions, RemoteExec, Transport};
use crate::inventory::ContainerSpec;
use crate::lxc::LxcClient;
use crate::model::{BackendKind, Provision};

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

/// The container snapshots of the container `prov` describes: `lxc-snapshot` through `lxc` for
/// the `lxc` backend; the PVE API (`…/lxc/{vmid}/snapshot`, [`PveSnapshots`]) for the `pve`
/// backend when `pve` access is given and the artifact names the node; otherwise none.
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

/// The container snapshots of the container `prov` describes (see [`connect_to`]); for the
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

/// How the snapshot step reaches `spec`'s container, from its `provision/<name>.json` artifact
/// (which must exist and record a successful run).
///
/// # Errors
/// [`ReachError`] naming the container and why it cannot be reached: no or failed provision
/// artifact, no address recorded, no key in the share, SSH unreachable / key refused / host key
/// changed, LXC unusable on this host.
pub async fn connect(
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &ConnectOptions,
) -> Result<Connection, ReachError> {
    let prov = crate::exec::read_provision(spec, artifacts)?;
    crate::exec::reach::require_provisioned(spec, &prov, artifacts)?;
    connect_to(spec, &prov, artifacts, share, opts).await
}

/// [`connect`] with the provision artifact already read, whatever its outcome: the data
/// transport is [`crate::exec::reach`]; container snapshots are `lxc-snapshot` for the `lxc`
/// backend (whatever the data transport) and the PVE API for `pve` when `opts.pve` is given.
///
/// # Errors
/// See [`connect`].
pub async fn connect_to(
    spec: &ContainerSpec,
    prov: &Provision,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &ConnectOptions,
) -> Result<Connection, ReachError> {
    let lxc = match prov.backend {
        BackendKind::Lxc => Some(crate::exec::reach::lxc_client(spec).await?),
        BackendKind::Pve => None,
    };
    let reach = ReachOptions { transport: opts.transport, ssh: opts.ssh.clone() };
    let exec = crate::exec::reach(spec, prov, artifacts, share, &reach, lxc.as_ref()).await?;
    Ok(Connection { exec, ct: ct_snapshots_with(prov, opts.pve.as_ref(), lxc.as_ref()) })
}
