//! Which [`RemoteExec`] reaches a container, from its `provision/<name>.json` artifact (the
//! backend that made it, the address and port `provision` reached, whether it was just
//! created).
//!
//! * backend `lxc` with [`Transport::Auto`]: [`LxcAttach`] on this host, under the LXC path the
//!   backend uses ([`crate::lxc::resolve_path`]: `$PGO_LXC_PATH`, else `lxc-config
//!   lxc.lxcpath`) unless the caller hands over its own [`LxcClient`];
//! * backend `pve`, or [`Transport::Ssh`]: SSH to `Provision.address`:`Provision.ssh_port` with
//!   the key `<share>/.keys/<vmid>` ([`crate::ssh::keys`]), as `config` (commands through `sudo -n`)
//!   or, before the base role created `config`, as `root` — the same login and trust-on-first-use
//!   host keys as `configure` (`<artifacts>/known_hosts/<name>`, replaced when the artifact says
//!   the container was just (re)created).

use std::path::Path;

use super::{LxcAttach, ReachError, RemoteExec, SSH_EXEC_TIMEOUT, SshTransport};
use crate::artifact::{self, ArtifactDir};
use crate::inventory::ContainerSpec;
use crate::lxc::LxcClient;
use crate::model::{BackendKind, Provision};

/// How [`reach`] reaches a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `lxc-attach` for containers of the `lxc` backend (no network needed), SSH for the rest.
    #[default]
    Auto,
    /// SSH for every container, the `lxc` backend's included (as `configure` reaches them).
    Ssh,
}

/// Options of [`reach`].
#[derive(Debug, Clone, Default)]
pub struct ReachOptions {
    /// lxc-attach or SSH.
    pub transport: Transport,
    /// SSH connect tuning (timeouts, attempts).
    pub ssh: crate::ssh::ConnectOptions,
}

/// Reads `spec`'s `provision/<name>.json` (whatever its outcome).
///
/// # Errors
/// [`ReachError::NoProvision`] (run `provision` first), [`ReachError::Provision`] for an
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
        crate::model::Outcome::Failed { error } => Err(ReachError::ProvisionFailed {
            name: spec.name.clone(),
            vmid: spec.vmid,
            error: error.clone(),
            path: artifacts.provision(&spec.name),
        }),
        crate::model::Outcome::Ok => Ok(()),
    }
}

/// Opens the LXC client the `lxc` backend uses (default path resolution, see the module docs).
///
/// # Errors
/// [`ReachError::Lxc`]: not root, LXC tools missing, the path unusable.
pub async fn lxc_client(spec: &ContainerSpec) -> Result<LxcClient, ReachError> {
    LxcClient::connect(None).await.map_err(|source| ReachError::Lxc { name: spec.name.clone(), source })
}

/// The way into `spec`'s container that `prov` describes (see the module docs), whatever the
/// artifact's outcome: the provision step's safety rule uses it before a recreate, when the
/// container is known to exist even if the last run failed. `lxc`: the client to attach through
/// (`None`: opened here with the default resolution).
///
/// # Errors
/// [`ReachError`]: no address recorded, no key in the share, SSH unreachable / key refused /
/// host key changed, LXC unusable on this host.
pub async fn reach(
    spec: &ContainerSpec,
    prov: &Provision,
    artifacts: &ArtifactDir,
    share: &Path,
    opts: &ReachOptions,
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
    let key = crate::ssh::keys::key_dir(share).join(spec.vmid.to_string());
    if !key.is_file() {
        return Err(ReachError::NoKey { name: spec.name.clone(), vmid: spec.vmid, key });
    }
    let known_hosts = artifacts.known_hosts(&spec.name);
    let target = crate::ssh::Target {
        name: spec.name.clone(),
        address,
        port: prov.ssh_port,
        key,
        replace_host_key: crate::ssh::recreated_since_recorded(prov.created, &path, &known_hosts),
        known_hosts,
        users: vec!["config".into(), "root".into()],
    };
    let exec = SshTransport::connect(&target, &opts.ssh, SSH_EXEC_TIMEOUT).await?;
    tracing::info!("{}: connected over SSH as {}", spec.name, exec.connection().user());
    Ok(Box::new(exec))
}
