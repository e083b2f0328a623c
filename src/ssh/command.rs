//! Running commands over an open [`Connection`]: collected output ([`Connection::run`],
//! [`Connection::check`]) or streamed standard input and output ([`Connection::stream`], for a
//! tar of a container's data). Every argv word is quoted for the remote login shell; with
//! `as_root` the command runs through `sudo -n --` when the session's user is not root.

use std::time::Duration;

use openssh::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Connection, SshError};

/// Output of a remote command.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

impl Output {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Bytes of stderr kept by [`Connection::stream`] (the tail), 64 KiB.
pub const STDERR_TAIL: usize = 64 * 1024;

/// How a [`Connection::stream`] command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    /// Exit code; `None` when killed by a signal or ssh itself failed (exit 255).
    pub code: Option<i32>,
    /// The last [`STDERR_TAIL`] bytes of stderr, lossily decoded.
    pub stderr: String,
}

/// What [`Connection::hold`] got.
#[derive(Debug)]
pub enum Hold<'s> {
    /// The command printed its ready line and runs while this lives.
    Held(Box<Held<'s>>),
    /// The command ended before it printed the line: its exit code (`None`: killed, or the
    /// connection was lost).
    Ended(Option<i32>),
}

/// A remote command kept running (see [`Connection::hold`]); dropping it closes the command's
/// standard input, which ends it.
#[derive(Debug)]
pub struct Held<'s> {
    _child: openssh::RemoteChild<'s>,
    _stdin: openssh::ChildStdin,
}

/// `work` bounded by `timeout`; when it passes, `fail` describes it (`timed out after Ns`).
async fn bounded<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, SshError>>,
    fail: impl Fn(String) -> SshError,
) -> Result<T, SshError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(fail(format!("timed out after {}s", timeout.as_secs()))),
    }
}

impl Connection {
    /// The remote command for `argv` (`argv[0]` the program; panics when empty), each word quoted
    /// by `openssh`; with `as_root` it is run through `sudo -n --` when the session's user is not
    /// root.
    fn command(&self, argv: &[&str], as_root: bool) -> openssh::OwningCommand<&openssh::Session> {
        let (program, rest): (&str, Vec<&str>) = if as_root && self.user != "root" {
            ("sudo", [&["-n", "--"], argv].concat())
        } else {
            (argv[0], argv[1..].to_vec())
        };
        let mut cmd = self.session.command(program);
        for a in &rest {
            cmd.arg(*a);
        }
        cmd
    }

    /// Runs `argv` on the container (each element quoted, never interpreted by a shell), with
    /// `stdin` fed from `input`, for at most `timeout`. With `as_root`, the command is run through
    /// `sudo -n --` when the session's user is not root.
    ///
    /// # Errors
    /// [`SshError::Command`] when the command cannot be started, the connection breaks, or the
    /// timeout passes (the remote process is then left to be killed by the closing session).
    pub async fn run(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        as_root: bool,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let fail = |detail: String| SshError::Command {
            name: self.target.name.clone(),
            what: format!("running {}", argv.first().copied().unwrap_or("")),
            detail,
        };
        let mut cmd = self.command(argv, as_root);
        cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let work = async {
            let mut child = cmd.spawn().await.map_err(|e| fail(e.to_string()))?;
            if let (Some(data), Some(mut w)) = (input, child.stdin().take()) {
                w.write_all(data).await.map_err(|e| fail(format!("writing stdin: {e}")))?;
                w.shutdown().await.map_err(|e| fail(format!("closing stdin: {e}")))?;
            }
            let mut out = child.stdout().take();
            let mut err = child.stderr().take();
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let ro = async {
                if let Some(s) = out.as_mut() {
                    let _ = s.read_to_end(&mut o).await;
                }
            };
            let re = async {
                if let Some(s) = err.as_mut() {
                    let _ = s.read_to_end(&mut e).await;
                }
            };
            tokio::join!(ro, re);
            let status = child.wait().await.map_err(|e| fail(e.to_string()))?;
            Ok(Output { code: status.code(), stdout: o, stderr: e })
        };
        bounded(timeout, work, fail).await
    }

    /// Runs `argv` on the container with **streamed** standard input and output, for commands
    /// whose data does not fit in memory (data snapshots: a tar stream of any size).
    ///
    /// Every argv word is quoted by the `openssh` crate for the remote login shell (POSIX single
    /// quotes), so constants with spaces, quotes and newlines (the fixed snapshot scripts) arrive
    /// as one word each. With `as_root` the command runs through `sudo -n --` when the session's
    /// user is not root (the `config` user has passwordless sudo after the base role).
    ///
    /// `stdin` is copied to the command until EOF, then the remote stdin is closed; `stdout` is
    /// filled concurrently; stderr is collected, keeping its last [`STDERR_TAIL`] bytes. A command
    /// that stops reading its input early (it failed) is not a transport error: its exit status
    /// says what happened. The whole run is bounded by `timeout`; when it passes, the local
    /// `ssh` channel is killed (the remote process gets EOF/SIGPIPE on its streams).
    ///
    /// Exit codes: OpenSSH uses 255 for its own failures, so a remote 255 is reported as
    /// `code: None` with a note in `stderr` (connection lost, or the command exited 255).
    ///
    /// # Errors
    /// [`SshError::Command`] when the command cannot be started, the local stdout writer fails,
    /// or the timeout passes.
    pub async fn stream(
        &self,
        argv: &[&str],
        stdin: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        as_root: bool,
        timeout: Duration,
    ) -> Result<StreamStatus, SshError> {
        let what = format!("running {}", argv.first().copied().unwrap_or(""));
        let fail = |detail: String| SshError::Command { name: self.target.name.clone(), what: what.clone(), detail };
        if argv.is_empty() {
            return Err(fail("empty command".into()));
        }
        let mut cmd = self.command(argv, as_root);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let work = async {
            let mut child = cmd.spawn().await.map_err(|e| fail(e.to_string()))?;
            let child_in = child.stdin().take().ok_or_else(|| fail("no stdin pipe".into()))?;
            let child_out = child.stdout().take().ok_or_else(|| fail("no stdout pipe".into()))?;
            let child_err = child.stderr().take().ok_or_else(|| fail("no stderr pipe".into()))?;
            let crate::pipe::Pumped { fed, drained, mut stderr } =
                crate::pipe::pump(stdin, child_in, child_out, stdout, child_err, STDERR_TAIL).await;
            if let Err(e) = drained {
                let _ = child.disconnect().await;
                return Err(fail(format!("writing the command's output: {e}")));
            }
            let code = match child.wait().await {
                Ok(status) => status.code(),
                Err(openssh::Error::RemoteProcessTerminated) => {
                    stderr.push_str("\nssh: exit status 255 (the connection was lost, or the command exited 255)");
                    None
                }
                // openssh reports a remote 127 this way; keep the code.
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
                Err(e) => return Err(fail(e.to_string())),
            };
            if let Err(e) = fed {
                // The input could not be read (a local failure), though the command finished.
                if code == Some(0) {
                    return Err(fail(format!("feeding the command's input: {e}")));
                }
                stderr.push_str(&format!("\nfeeding the command's input failed: {e}"));
            }
            Ok(StreamStatus { code, stderr })
        };
        bounded(timeout, work, fail).await
    }

    /// Starts `argv` on the container with its standard input open, and waits until it prints
    /// the line `ready`: the command is expected to keep running until its standard input
    /// closes (e.g. a lock held by `flock … cat`). `waiting` is called once when `ready` has not
    /// come after `patience`. Returns [`Hold::Held`], which keeps the command running until it is
    /// dropped (that closes the remote standard input), or [`Hold::Ended`] with the exit code
    /// when the command ended without printing `ready` (127: not found). Also ends when the
    /// connection closes, so a run that dies releases what it held.
    ///
    /// # Errors
    /// [`SshError::Command`] when the command cannot be started, or `ready` has not come after
    /// `timeout` (the command is then stopped).
    pub async fn hold(
        &self,
        argv: &[&str],
        as_root: bool,
        ready: &str,
        patience: Duration,
        waiting: &mut (dyn FnMut() + Send),
        timeout: Duration,
    ) -> Result<Hold<'_>, SshError> {
        let fail = |detail: String| SshError::Command {
            name: self.target.name.clone(),
            what: format!("running {}", argv.first().copied().unwrap_or("")),
            detail,
        };
        let mut cmd = self.command(argv, as_root);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().await.map_err(|e| fail(e.to_string()))?;
        let stdin = child.stdin().take().ok_or_else(|| fail("no stdin pipe".into()))?;
        let stdout = child.stdout().take().ok_or_else(|| fail("no stdout pipe".into()))?;
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut line = String::new();
        let read = async {
            loop {
                line.clear();
                match tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut line).await {
                    Ok(0) | Err(_) => return false,
                    Ok(_) if line.trim_end() == ready => return true,
                    Ok(_) => {}
                }
            }
        };
        tokio::pin!(read);
        let started = tokio::time::Instant::now();
        let got = match tokio::time::timeout(patience, &mut read).await {
            Ok(got) => Some(got),
            Err(_) => {
                waiting();
                tokio::time::timeout(timeout.saturating_sub(started.elapsed()), &mut read).await.ok()
            }
        };
        match got {
            Some(true) => Ok(Hold::Held(Box::new(Held { _child: child, _stdin: stdin }))),
            Some(false) => {
                drop(stdin);
                let code = match child.wait().await {
                    Ok(status) => status.code(),
                    Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
                    Err(_) => None,
                };
                Ok(Hold::Ended(code))
            }
            None => {
                drop(stdin);
                let _ = child.disconnect().await;
                Err(fail(format!("no `{ready}` after {}s", timeout.as_secs())))
            }
        }
    }

    /// Like [`Connection::run`], but a non-zero exit is an error carrying the command's stderr.
    pub async fn check(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        as_root: bool,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let out = self.run(argv, input, as_root, timeout).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(SshError::Command {
                name: self.target.name.clone(),
                what: format!("`{}` failed with exit code {:?}", argv.join(" "), out.code),
                detail: crate::actions::redact(String::from_utf8_lossy(&out.stderr).trim()),
            })
        }
    }
}
