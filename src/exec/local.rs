//! [`RemoteExec`] on this host: the argv runs as a local process, as the current user (root in
//! the tests, which use it to snapshot directories of the test machine).

use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{BoxFuture, ExecStatus, RemoteExec, STDERR_KEEP};

/// Runs argv on this host, without a timeout (the caller bounds it if needed).
#[derive(Debug, Clone, Default)]
pub struct LocalExec;

impl LocalExec {
    /// This host, as the current user.
    pub fn new() -> Self {
        LocalExec
    }
}

impl RemoteExec for LocalExec {
    fn target(&self) -> String {
        "this host".into()
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            let Some((program, args)) = argv.split_first() else {
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
            let crate::pipe::Pumped { fed, drained, stderr } =
                crate::pipe::pump(stdin, child_in, child_out, stdout, child_err, STDERR_KEEP).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_argv_with_streams_and_status() {
        let exec = LocalExec::new();
        let (out, status) =
            super::super::run_collect(&exec, &["sh", "-c", "cat; echo bad >&2; exit 3"], b"data").await.unwrap();
        assert_eq!(out, b"data");
        assert_eq!(status, ExecStatus { code: Some(3), stderr: "bad\n".into() });
        assert_eq!(status.describe(), "exit code 3: bad");
        let e = super::super::run_collect(&exec, &["/nonexistent/tool"], b"").await.unwrap_err();
        assert!(e.to_string().starts_with("cannot run /nonexistent/tool:"), "{e}");
    }
}
