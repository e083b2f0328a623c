//! [`RemoteExec`] on this host: the argv runs as a local process, as the current user (root in
//! the tests, which use it to snapshot directories of the test machine).

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
            let child = crate::pipe::spawn_piped(tokio::process::Command::new(program).args(args))
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot run {program}: {e}")))?;
            let (status, stderr) = crate::pipe::stream_child(child, stdin, stdout, STDERR_KEEP).await?;
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
