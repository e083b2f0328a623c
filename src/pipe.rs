//! Streaming the three pipes of a child process concurrently, so a command carrying a stream of
//! any size (a tar of a container's data) never deadlocks on a full pipe.
//!
//! A leaf module on purpose: the LXC client ([`crate::lxc`], `lxc-attach`), the SSH client
//! ([`crate::ssh`]) and the local executor ([`crate::exec`]) all use it, and none of them should
//! depend on another for it. The two that spawn a local process ([`crate::lxc`] and
//! [`crate::exec::LocalExec`]) share all of it through [`spawn_piped`] and [`stream_child`]; the
//! SSH client has its own child type and pumps with [`pump`] directly.

use std::process::{ExitStatus, Stdio};

/// The result of [`pump`]: how feeding stdin and draining stdout went, and stderr's tail.
pub struct Pumped {
    /// Copying `stdin` into the child; a broken pipe (the command stopped reading, e.g. it
    /// exited) counts as success: its exit status tells why.
    pub fed: std::io::Result<()>,
    /// Copying the child's stdout into `stdout` (and flushing it).
    pub drained: std::io::Result<()>,
    /// The last `keep` bytes of the child's stderr, lossily decoded (a read error ends it).
    pub stderr: String,
}

/// Runs the three pipes of a child process concurrently: `stdin` → `child_in` (closed at EOF),
/// `child_out` → `stdout`, and `child_err` collected keeping its last `keep` bytes. Used for
/// local commands, `lxc-attach` and SSH alike, so streaming never deadlocks on a full pipe.
pub async fn pump<I, O, E>(
    stdin: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
    mut child_in: I,
    mut child_out: O,
    stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
    mut child_err: E,
    keep: usize,
) -> Pumped
where
    I: tokio::io::AsyncWrite + Unpin,
    O: tokio::io::AsyncRead + Unpin,
    E: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let feed = async {
        let r = tokio::io::copy(stdin, &mut child_in).await;
        let _ = child_in.shutdown().await;
        drop(child_in);
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map(|_| ()),
        }
    };
    let drain = async {
        tokio::io::copy(&mut child_out, stdout).await?;
        stdout.flush().await
    };
    let errs = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = match child_err.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 2 * keep {
                buf.drain(..buf.len() - keep);
            }
        }
        if buf.len() > keep {
            buf.drain(..buf.len() - keep);
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    let (fed, drained, stderr) = tokio::join!(feed, drain, errs);
    Pumped { fed, drained, stderr }
}

/// Spawns `cmd` with all three standard streams piped, killed when its handle is dropped (so a
/// caller's timeout that drops the future also ends the process).
///
/// # Errors
/// The spawn error (program missing, not executable, …), unchanged.
pub fn spawn_piped(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn()
}

/// Streams a child from [`spawn_piped`] to its end: [`pump`]s `stdin` into it and its stdout into
/// `stdout`, keeping the last `keep` bytes of its stderr, then waits for it. Returns its exit
/// status and that stderr tail; a non-zero exit is *not* an error.
///
/// # Errors
/// Writing `stdout` failed (the child is killed first), waiting for the child failed, or reading
/// `stdin` failed (after the child ended), in that order of precedence.
pub async fn stream_child(
    mut child: tokio::process::Child,
    stdin: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
    stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
    keep: usize,
) -> std::io::Result<(ExitStatus, String)> {
    let child_in = child.stdin.take().expect("piped");
    let child_out = child.stdout.take().expect("piped");
    let child_err = child.stderr.take().expect("piped");
    let Pumped { fed, drained, stderr } = pump(stdin, child_in, child_out, stdout, child_err, keep).await;
    if let Err(e) = drained {
        let _ = child.kill().await;
        return Err(e);
    }
    let status = child.wait().await?;
    fed?;
    Ok((status, stderr))
}
