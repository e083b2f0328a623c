//! The one way into a container: from its `provision/<name>.json` artifact ([`recorded`]) or
//! from what its backend reports live ([`door`], used by [`crate::backend::live`]), and the
//! protect-before-destroy guard's way in with its remedies ([`guard`]).
//!
//! Whatever the starting point, a container is entered the same way: `lxc-attach` for a
//! running container of the `lxc` backend on this host ([`door::attach_running`]), otherwise
//! SSH with the container's own key pair from the share (`<share>/.keys/<vmid>`), as `config`
//! (commands through `sudo -n`) or, before the base role created `config`, as `root`, trusting
//! its host key on first use under `<artifacts>/known_hosts/<name>` ([`door::ssh_target`]).
//! `configure` takes the same [`crate::ssh::Target`] and keeps the connection for Ansible.
//!
//! [`crate::exec`] below is transport only (the [`RemoteExec`] trait and its SSH, `lxc-attach`
//! and local implementations); it reads no artifact and chooses nothing.

pub mod door;
pub mod guard;
pub mod recorded;

use std::path::PathBuf;

use crate::exec::RemoteExec;
use crate::snapshot::ct::CtSnapshots;

pub use door::{attach_running, ssh_exec, ssh_target};
pub use guard::for_guard;
pub use recorded::{ct_snapshots, exec_recorded, open, open_recorded, read_provision, require_provisioned};

/// How a container of the `lxc` backend is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `lxc-attach` for containers of the `lxc` backend (no network needed), SSH for the rest.
    #[default]
    Auto,
    /// SSH for every container, the `lxc` backend's included (as `configure` reaches them).
    Ssh,
}

/// A way into a container: commands as root and, when its backend has them, container
/// snapshots.
pub struct Access {
    /// Runs commands (the snapshot scripts) as root in the container.
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

/// Options of [`open`] and [`open_recorded`].
#[derive(Debug, Clone, Default)]
pub struct AccessOptions {
    /// lxc-attach or SSH.
    pub transport: Transport,
    /// SSH connect tuning (timeouts, attempts).
    pub ssh: crate::ssh::ConnectOptions,
    /// PVE API access for the container snapshots of `pve` containers ([`ct_snapshots`]);
    /// `None`: no container snapshots for them.
    pub pve: Option<PveCtAccess>,
}

/// Why a container cannot be entered. Each message names the container and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// No `provision/<name>.json`.
    #[error(
        "{name} (vmid {vmid}): no provision artifact {}; {} (the snapshot step reaches the \
         container at the address and through the backend it recorded)",
        path.display(),
        crate::error::Hint::RunStep { step: crate::error::Step::Provision, container: name.clone() }
    )]
    NoProvision {
        /// Container (lib) name.
        name: String,
        /// Its vmid.
        vmid: u32,
        /// The artifact looked for.
        path: PathBuf,
    },
    /// The provision artifact exists but cannot be read.
    #[error("{name} (vmid {vmid}): {source}")]
    Provision {
        /// Container (lib) name.
        name: String,
        /// Its vmid.
        vmid: u32,
        /// Why it cannot be read.
        #[source]
        source: crate::artifact::ArtifactError,
    },
    /// The last provision run failed: no container to reach.
    #[error(
        "{name} (vmid {vmid}): provisioning failed ({error}); {} records no reachable container",
        path.display()
    )]
    ProvisionFailed {
        /// Container (lib) name.
        name: String,
        /// Its vmid.
        vmid: u32,
        /// The failure the artifact records.
        error: String,
        /// The artifact.
        path: PathBuf,
    },
    /// SSH is needed but the artifact records no address.
    #[error("{name} (vmid {vmid}): {} records no address to reach over SSH", path.display())]
    NoAddress {
        /// Container (lib) name.
        name: String,
        /// Its vmid.
        vmid: u32,
        /// The artifact.
        path: PathBuf,
    },
    /// The container's private key is not in the share.
    #[error(
        "{name} (vmid {vmid}): no SSH key {} (the provision step creates it; is --share / PROXMOX_SHARE the \
         same as for provision?)",
        key.display()
    )]
    NoKey {
        /// Container (lib) name.
        name: String,
        /// Its vmid.
        vmid: u32,
        /// The key file looked for (`<share>/.keys/<vmid>`).
        key: PathBuf,
    },
    /// An `lxc` container that is not running: `lxc-attach` needs it running.
    #[error("LXC container `{name}` is {}, not running: lxc-attach needs it running", state.as_str())]
    NotRunning {
        /// The LXC container's name (the hostname).
        name: String,
        /// Its state.
        state: crate::lxc::State,
    },
    /// SSH failed (unreachable, key refused, host key changed, local I/O); boxed, it is large.
    #[error(transparent)]
    Ssh(Box<crate::ssh::SshError>),
    /// LXC cannot be used on this host (not root, tools missing, LXC path unusable).
    #[error("{name}: {source}")]
    Lxc {
        /// Container (lib) name.
        name: String,
        /// The LXC client's error.
        #[source]
        source: crate::lxc::LxcError,
    },
}

impl From<crate::ssh::SshError> for ReachError {
    fn from(e: crate::ssh::SshError) -> Self {
        ReachError::Ssh(Box::new(e))
    }
}
