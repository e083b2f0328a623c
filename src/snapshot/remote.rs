//! The transport seam: run a fixed command as root on the container, streaming stdin and stdout.
//!
//! Snapshot logic never knows how it reaches the container. A [`RemoteExec`] runs an argv (only
//! constant words: `bash`, `-c`, one of the fixed [`super::scripts`], a name and a mode) with a
//! byte stream on stdin and one on stdout, and reports the exit status and stderr. User values
//! (paths) always travel on stdin, never in argv.
//!
//! Implementations:
//! * [`CommandExec`] — runs the argv through a local command prefix: no prefix = this host (the
//!   tests), `lxc-attach -n NAME --` = a local LXC container;
//! * [`SshExec`] (borrowing a [`crate::ssh::Connection`], as `configure` does) and
//!   [`SshTransport`] (owning one, as the `snapshot` step does) — over the SSH module's
//!   [`crate::ssh::Connection::stream`]: each argv word is quoted by the `openssh` crate for the
//!   remote shell (the scripts are constants, but contain spaces, quotes and newlines).
//!
//! # Root over SSH
//!
//! The scripts need root (numeric owners, any mode). The SSH transport logs in like `configure`:
//! as `config` once the base role has created that user (root login is then disabled) and runs
//! the command through `sudo -n --` (passwordless sudo, set up by the base role; `-n` fails at
//! once instead of waiting for a password); before the base role ran, as `root` directly with the
//! container key the provision step authorized.

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::ssh;

/// A boxed, sendable future (keeps [`RemoteExec`] usable as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a remote command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecStatus {
    /// Exit code; `None` when killed by a signal or the transport lost the session.
    pub code: Option<i32>,
    /// The last 64 KiB of stderr, lossily decoded.
    pub stderr: String,
}

impl ExecStatus {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// A one-line description for errors: `exit code 4: <last stderr line>`.
    pub fn describe(&self) -> String {
        let code = self.code.map_or("killed by a signal".to_string(), |c| format!("exit code {c}"));
        let tail: Vec<&str> = self.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail.iter().rev().take(3).rev().copied().collect::<Vec<_>>().join(" | ");
        if tail.is_empty() { code } else { format!("{code}: {}", crate::ci::redact(&tail)) }
    }
}

/// Runs commands as root on one container.
pub trait RemoteExec: Send + Sync {
    /// Who is reached, for messages: e.g. `CT 101 (app) at 10.0.3.15 over SSH`.
    fn target(&self) -> String;

    /// Runs `argv` (constant words only) as root; copies `stdin` to the command until EOF (then
    /// closes its stdin) and its stdout into `stdout`, concurrently.
    ///
    /// # Errors
    /// Transport failures (cannot connect or spawn, the stream broke). A command that runs and
    /// fails is *not* an error: its [`ExecStatus`] says so.
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

const STDERR_KEEP: usize = 64 * 1024;

/// Runs argv locally, behind an optional command prefix (e.g. `lxc-attach -n NAME --`).
#[derive(Debug, Clone)]
pub struct CommandExec {
    prefix: Vec<String>,
    label: String,
}

impl CommandExec {
    /// Runs on this host, as the current user (root in the tests).
    pub fn local() -> Self {
        Self { prefix: Vec::new(), label: "this host".into() }
    }

    /// Runs inside the local LXC container `name` through `lxc-attach -n NAME --` (root, the
    /// container's own namespaces). The name is one argv word, never parsed by a shell.
    pub fn lxc_attach(name: &str) -> Self {
        Self {
            prefix: vec!["lxc-attach".into(), "-n".into(), name.into(), "--".into()],
            label: format!("LXC container {name}"),
        }
    }
}

impl RemoteExec for CommandExec {
    fn target(&self) -> String {
        self.label.clone()
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            let mut all: Vec<&str> = self.prefix.iter().map(String::as_str).collect();
            all.extend_from_slice(argv);
            let Some((program, args)) = all.split_first() else {
                return Err(std::io::Error::other("empty argv"));
            };
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot run {program}: {e}")))?;
            let child_in = child.stdin.take().expect("piped");
            let child_out = child.stdout.take().expect("piped");
            let child_err = child.stderr.take().expect("piped");
            let crate::net::Pumped { fed, drained, stderr } =
                crate::net::pump(stdin, child_in, child_out, stdout, child_err, STDERR_KEEP).await;
            if let Err(e) = drained {
                let _ = child.kill().await;
                return Err(e);
            }
            let status = child.wait().await?;
            fed?;
            Ok(ExecStatus { code: status.code(), stderr })
        })
    }
}

/// Upper bound of one snapshot command over SSH (archive or restore of one path), 4 hours.
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
