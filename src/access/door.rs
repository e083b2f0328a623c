//! The two doors into a container, wherever its address came from: SSH with its own key pair
//! ([`ssh_target`], [`ssh_exec`]) and `lxc-attach` into a running `lxc` container on this host
//! ([`attach_running`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ReachError;
use crate::exec::{LxcAttach, SshTransport};
use crate::lxc::{LxcClient, State};

/// Who a container is entered as, in order: `config` (commands through `sudo -n`) once the base
/// role created it, else `root` (the key the container was created with).
pub const SSH_USERS: [&str; 2] = ["config", "root"];

/// The SSH target of container `name` (vmid `vmid`) at `address:port`: its private key
/// `<share>/.keys/<vmid>` ([`crate::ssh::keys`]), its host key trusted on first use in
/// `known_hosts` (replaced first when `replace_host_key`: the container was (re)created since
/// it was recorded, [`crate::ssh::recreated_since_recorded`]), as [`SSH_USERS`].
///
/// # Errors
/// [`ReachError::NoKey`] when the key is not in the share.
pub fn ssh_target(
    name: &str,
    vmid: u32,
    address: &str,
    port: u16,
    share: &Path,
    known_hosts: PathBuf,
    replace_host_key: bool,
) -> Result<crate::ssh::Target, ReachError> {
    let key = crate::ssh::keys::key_dir(share).join(vmid.to_string());
    if !key.is_file() {
        return Err(ReachError::NoKey { name: name.to_string(), vmid, key });
    }
    Ok(crate::ssh::Target {
        name: name.to_string(),
        address: address.to_string(),
        port,
        key,
        known_hosts,
        replace_host_key,
        users: SSH_USERS.iter().map(|u| u.to_string()).collect(),
    })
}

/// Connects to `target` ([`crate::ssh::Connection::connect`] with `opts`); each command may
/// take `timeout`.
///
/// # Errors
/// [`ReachError::Ssh`]: unreachable, key refused, host key changed, local I/O.
pub async fn ssh_exec(
    target: &crate::ssh::Target,
    opts: &crate::ssh::ConnectOptions,
    timeout: Duration,
) -> Result<SshTransport, ReachError> {
    Ok(SshTransport::connect(target, opts, timeout).await?)
}

/// `lxc-attach` into the `lxc` container `name` through `client`, after checking that it runs
/// (`lxc-info`); each command may take `timeout` when given.
///
/// # Errors
/// [`ReachError::NotRunning`] with its state; [`ReachError::Lxc`] when its state cannot be read.
pub async fn attach_running(
    client: &LxcClient,
    name: &str,
    timeout: Option<Duration>,
) -> Result<LxcAttach, ReachError> {
    let state = client.state(name).await.map_err(|source| ReachError::Lxc { name: name.to_string(), source })?;
    if state != State::Running {
        return Err(ReachError::NotRunning { name: name.to_string(), state });
    }
    let attach = LxcAttach::new(client.clone(), name);
    Ok(match timeout {
        Some(t) => attach.with_timeout(t),
        None => attach,
    })
}
