//! Running a command as root in a container, however it is reached: one trait
//! ([`RemoteExec`]) and one implementation per transport. Which transport enters which
//! container is chosen above, in [`crate::access`]; this module reads no artifact.
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
//!
//! A [`RemoteExec`] runs an argv of constant words only (`bash`, `-c`, one of the fixed
//! [`crate::snapshot::scripts`], a name and a mode); user values (paths) travel on stdin, never
//! in argv.

pub mod local;
pub mod lxc_attach;
pub mod ssh;

use std::future::Future;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

pub use local::LocalExec;
pub use lxc_attach::LxcAttach;
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
