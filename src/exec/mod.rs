//! Running a command as root in a container, however it is reached: one trait
//! ([`RemoteExec`]), one implementation per way in, and the choice between them ([`reach`]).
//!
//! Why one module: the snapshot scripts, the protect-before-destroy guard and `configure`'s
//! restore all need "run this argv as root in that container, streaming stdin and stdout", and
//! none of them should know whether that means SSH, `lxc-attach` or this very host. The
//! implementations are thin adapters over the clients that own each system — [`crate::ssh`]
//! and [`crate::lxc`] (the only place an `lxc-*` process is spawned, with the configured LXC
//! path and a cleared environment):
//!
//! * [`local::LocalExec`] — this host, as the current user (the tests);
//! * [`lxc_attach::LxcAttach`] — a local LXC container through [`crate::lxc::LxcClient`];
//! * [`ssh::SshExec`] (borrowing a [`crate::ssh::Connection`], as `configure` does) and
//!   [`ssh::SshTransport`] (owning one, as the `snapshot` step does);
//! * [`reach`] — which of them reaches a container, from its `provision/<name>.json` artifact.
//!
//! A [`RemoteExec`] runs an argv of constant words only (`bash`, `-c`, one of the fixed
//! [`crate::snapshot::scripts`], a name and a mode); user values (paths) travel on stdin, never
//! in argv.

pub mod local;
pub mod lxc_attach;
pub mod reach;
pub mod ssh;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

pub use local::LocalExec;
pub use lxc_attach::LxcAttach;
pub use reach::{ReachOptions, Transport, reach, read_provision};
pub use ssh::{SSH_EXEC_TIMEOUT, SshExec, SshTransport};

/// A boxed, sendable future (keeps [`RemoteExec`] usable as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Bytes of a command's stderr an executor keeps (the tail), 64 KiB.
pub const STDERR_KEEP: usize = 64 * 1024;

/// How a command in the container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecStatus {
    /// Exit code; `None` when killed by a signal or the transport lost the session.
    pub code: Option<i32>,
    /// The last [`STDERR_KEEP`] bytes of stderr, lossily decoded.
    pub stderr: String,
}

impl ExecStatus {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// A one-line description for errors: `exit code 4: <last stderr lines, redacted>`.
    pub fn describe(&self) -> String {
        let code = self.code.map_or("killed by a signal".to_string(), |c| format!("exit code {c}"));
        let tail: Vec<&str> = self.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail.iter().rev().take(3).rev().copied().collect::<Vec<_>>().join(" | ");
        if tail.is_empty() { code } else { format!("{code}: {}", crate::actions::redact(&tail)) }
    }
}

/// Runs commands as root in one container.
pub trait RemoteExec: Send + Sync {
    /// Who is reached, for messages: e.g. `app at 10.0.3.15:22 over SSH (as config)`.
    fn target(&self) -> String;

    /// Runs `argv` (constant words only) as root; copies `stdin` to the command until EOF (then
    /// closes its stdin) and its stdout into `stdout`, concurrently.
    ///
    /// # Errors
    /// Transport failures (cannot connect or spawn, the stream broke, a timeout), as
    /// [`std::io::Error`] whose message names the cause. A command that runs and fails is *not*
    /// an error: its [`ExecStatus`] says so.
    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>>;
}

/// Runs a command with a small stdin and collects its stdout (for manifests and commits).
///
/// # Errors
/// See [`RemoteExec::run`].
pub async fn run_collect(exec: &dyn RemoteExec, argv: &[&str], stdin: &[u8]) -> std::io::Result<(Vec<u8>, ExecStatus)> {
    let mut input = stdin;
    let mut out = Vec::new();
    let status = exec.run(argv, &mut input, &mut out).await?;
    Ok((out, status))
}

/// Why a container cannot be reached (see [`reach`]). Each message names the container and says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// No `provision/<name>.json`.
    #[error(
        "{name} (vmid {vmid}): no provision artifact {}; run `provision` first (the snapshot step reaches the \
         container at the address and through the backend it recorded)",
        path.display()
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
