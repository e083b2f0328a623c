//! [`RemoteExec`] over SSH ([`crate::ssh::Connection::stream`]): each argv word is quoted by the
//! `openssh` crate for the remote shell (the scripts are constants, but contain spaces, quotes
//! and newlines).
//!
//! # Root over SSH
//!
//! The scripts need root (numeric owners, any mode). The SSH transport logs in like `configure`:
//! as `config` once the base role has created that user (root login is then disabled) and runs
//! the command through `sudo -n --` (passwordless sudo, set up by the base role; `-n` fails at
//! once instead of waiting for a password); before the base role ran, as `root` directly with the
//! container key the provision step authorized.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{BoxFuture, ExecStatus, RemoteExec};
use crate::ssh;

/// Upper bound of one command over SSH (archive or restore of one path), 4 hours.
pub const SSH_EXEC_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

fn ssh_label(conn: &ssh::Connection) -> String {
    let t = conn.target();
    format!("{} at {}:{} over SSH (as {})", t.name, t.address, t.port, conn.user())
}

async fn ssh_run(
    conn: &ssh::Connection,
    timeout: Duration,
    argv: &[&str],
    stdin: &mut (dyn AsyncRead + Send + Unpin),
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
) -> std::io::Result<ExecStatus> {
    match conn.stream(argv, stdin, stdout, true, timeout).await {
        Ok(s) => Ok(ExecStatus { code: s.code, stderr: s.stderr }),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// [`RemoteExec`] over a borrowed SSH connection (e.g. the one `configure` already holds); every
/// command runs as root (see the module docs), bounded by `timeout`.
pub struct SshExec<'c> {
    conn: &'c ssh::Connection,
    timeout: Duration,
}

impl<'c> SshExec<'c> {
    /// Wraps `conn`; each command may take at most `timeout` (e.g. [`SSH_EXEC_TIMEOUT`]).
    pub fn new(conn: &'c ssh::Connection, timeout: Duration) -> Self {
        Self { conn, timeout }
    }
}

impl RemoteExec for SshExec<'_> {
    fn target(&self) -> String {
        ssh_label(self.conn)
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(ssh_run(self.conn, self.timeout, argv, stdin, stdout))
    }
}

/// [`RemoteExec`] owning its SSH connection and the connection's control directory (the
/// ControlMaster socket lives there). Dropping it closes the master connection, then removes the
/// directory.
pub struct SshTransport {
    // Field order matters: the session closes before its control directory is removed.
    conn: ssh::Connection,
    _control: tempfile::TempDir,
    timeout: Duration,
}

impl SshTransport {
    /// Connects to `target` (users tried in order, e.g. `config` then `root`) with `opts`, with a
    /// fresh private control directory in `/tmp` (short path: socket names are limited to about
    /// 100 bytes).
    ///
    /// # Errors
    /// The SSH module's errors ([`ssh::SshError`]): unreachable, key refused, host key changed,
    /// local I/O.
    pub async fn connect(
        target: &ssh::Target,
        opts: &ssh::ConnectOptions,
        timeout: Duration,
    ) -> Result<Self, ssh::SshError> {
        let control = tempfile::Builder::new()
            .prefix("pgo-ssh-")
            .tempdir_in("/tmp")
            .map_err(|e| ssh::SshError::Io(format!("{}: cannot create an SSH control directory: {e}", target.name)))?;
        let conn = ssh::Connection::connect(target, opts, control.path()).await?;
        Ok(Self { conn, _control: control, timeout })
    }

    /// The connection.
    pub fn connection(&self) -> &ssh::Connection {
        &self.conn
    }
}

impl RemoteExec for SshTransport {
    fn target(&self) -> String {
        ssh_label(&self.conn)
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(ssh_run(&self.conn, self.timeout, argv, stdin, stdout))
    }
}
