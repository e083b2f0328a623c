//! Running the host's LXC tools as processes: finding them, one bounded call with its output
//! collected ([`run`]), and one call with streamed standard input and output
//! ([`run_streaming`], for `lxc-attach` carrying a tar stream of any size).
//!
//! This is the only place in the crate that spawns an `lxc-*` process; [`super::LxcClient`]
//! builds the argument lists (with `-P <lxcpath>`) on top of it.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{LxcError, Result};

/// The Debian/Ubuntu package that ships `tool`.
pub(crate) fn package_of(tool: &str) -> &'static str {
    match tool {
        "debootstrap" => "debootstrap",
        "ip" => "iproute2",
        _ => "lxc",
    }
}

/// Finds `tool` in `PATH` (and the sbin directories, which a non-login root shell may miss).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Fails unless `tool` is installed, naming the package to install.
///
/// # Errors
/// [`LxcError::ToolMissing`].
pub fn require_tool(tool: &str) -> Result<PathBuf> {
    which(tool).ok_or_else(|| LxcError::ToolMissing { tool: tool.to_string(), package: package_of(tool) })
}

/// The effective uid of this process (owner of `/proc/self`).
pub fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

pub(crate) fn command_line(tool: &str, args: &[OsString]) -> String {
    let mut s = tool.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// The last `lines` non-blank lines of `text`, lossily decoded.
pub(crate) fn tail(text: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `args` as separate argv entries.
pub(crate) fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// Runs `tool args…` (separate argv entries), feeding `stdin` when given, bounded by `timeout`.
/// Returns the output on exit status 0.
///
/// # Errors
/// [`LxcError::ToolMissing`], [`LxcError::Spawn`], [`LxcError::Timeout`] (the child is killed),
/// [`LxcError::Command`] with the last lines of stderr.
pub async fn run(
    tool: &str,
    args: &[OsString],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<std::process::Output> {
    run_in(tool, args, None, stdin, timeout).await
}

/// Like [`run`], with a **cleared** environment holding only `env` (names and values) when `env`
/// is given; the variables' values never appear in errors or logs.
///
/// # Errors
/// As for [`run`].
pub async fn run_in(
    tool: &str,
    args: &[OsString],
    env: Option<&[(String, String)]>,
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<std::process::Output> {
    let exe = require_tool(tool)?;
    let command = command_line(tool, args);
    let mut cmd = tokio::process::Command::new(exe);
    if let Some(env) = env {
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    cmd.args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tracing::debug!("run: {command}");
    let mut child = cmd.spawn().map_err(|source| LxcError::Spawn { command: command.clone(), source })?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        let input = input.to_vec();
        tokio::spawn(async move {
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        });
    }
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(r) => r.map_err(|source| LxcError::Spawn { command: command.clone(), source })?,
        Err(_) => return Err(LxcError::Timeout { command, secs: timeout.as_secs_f64() }),
    };
    if !out.status.success() {
        let mut stderr = tail(&out.stderr, 8);
        if stderr.is_empty() {
            stderr = tail(&out.stdout, 8);
        }
        if stderr.is_empty() {
            stderr = "no output".into();
        }
        return Err(LxcError::Command { command, status: out.status.to_string(), stderr });
    }
    Ok(out)
}

/// How a [`run_streaming`] command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    /// Exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    /// The last `keep` bytes of stderr (see [`run_streaming`]), lossily decoded.
    pub stderr: String,
}

/// Runs `tool args…` with **streamed** standard input and output: `stdin` is copied to the
/// process until EOF (then its stdin is closed), its stdout into `stdout`, and the last `keep`
/// bytes of its stderr are kept, all concurrently ([`crate::pipe::stream_child`]). The whole run is
/// bounded by `timeout` (the child is killed when it passes). A non-zero exit is *not* an error:
/// [`Streamed::code`] says so.
///
/// # Errors
/// [`LxcError::ToolMissing`], [`LxcError::Spawn`] (also when writing `stdout` fails, or reading
/// `stdin` fails while the command succeeded), [`LxcError::Timeout`].
pub async fn run_streaming(
    tool: &str,
    args: &[OsString],
    stdin: &mut (dyn AsyncRead + Send + Unpin),
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    keep: usize,
    timeout: Duration,
) -> Result<Streamed> {
    let exe = require_tool(tool)?;
    let command = command_line(tool, args);
    let spawn_err = |source: std::io::Error| LxcError::Spawn { command: command.clone(), source };
    tracing::debug!("run (streaming): {command}");
    let child = crate::pipe::spawn_piped(tokio::process::Command::new(exe).args(args)).map_err(spawn_err)?;
    let work = async {
        let (status, stderr) = crate::pipe::stream_child(child, stdin, stdout, keep).await.map_err(spawn_err)?;
        Ok(Streamed { code: status.code(), stderr })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(LxcError::Timeout { command: command.clone(), secs: timeout.as_secs_f64() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_names_the_package() {
        let e = require_tool("lxc-definitely-not-installed").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`lxc-definitely-not-installed` is not installed (not found in PATH): install it with `apt-get install lxc`"
        );
        let e = require_tool("debootstrap-not-here").unwrap_err();
        assert!(e.to_string().ends_with("`apt-get install lxc`"), "{e}");
        assert_eq!(package_of("debootstrap"), "debootstrap");
        assert_eq!(package_of("ip"), "iproute2");
    }

    #[tokio::test]
    async fn run_reports_status_stderr_and_timeouts() {
        let out = run("sh", &os(&["-c", "cat; echo done"]), Some(b"in "), super::super::QUICK_TIMEOUT).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "in done\n");
        let e =
            run("sh", &os(&["-c", "echo first >&2; echo 'it broke' >&2; exit 3"]), None, super::super::QUICK_TIMEOUT)
                .await
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`sh -c echo first >&2; echo 'it broke' >&2; exit 3` failed (exit status: 3): first\nit broke"
        );
        let e = run("sleep", &os(&["5"]), None, Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(e.to_string(), "`sleep 5` did not finish within 0.1s");
    }

    #[tokio::test]
    #[allow(unsafe_code)] // std::env::set_var, see SAFETY
    async fn run_in_clears_the_environment() {
        // SAFETY: a variable only this test reads; set before any process is spawned by it.
        unsafe { std::env::set_var("PGO_TEST_LEAK", "from the caller") };
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string()), ("MIRROR".to_string(), "http://m/".to_string())];
        let out = run_in("env", &[], Some(&env), None, super::super::QUICK_TIMEOUT).await.unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        lines.sort();
        assert_eq!(lines, ["MIRROR=http://m/", "PATH=/usr/bin:/bin"]);
    }

    #[tokio::test]
    async fn streaming_keeps_exit_code_and_stderr_tail() {
        let mut input: &[u8] = b"hello";
        let mut out = Vec::new();
        let s = run_streaming(
            "sh",
            &os(&["-c", "cat; echo oops >&2; exit 4"]),
            &mut input,
            &mut out,
            3,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(out, b"hello");
        assert_eq!(s, Streamed { code: Some(4), stderr: "ps\n".into() });
        let mut input: &[u8] = b"";
        let e = run_streaming("sleep", &os(&["5"]), &mut input, &mut Vec::new(), 10, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "`sleep 5` did not finish within 0.1s");
    }
}
