//! [`RemoteExec`] into a local LXC container, through [`LxcClient::attach_streaming`]: the
//! container's own namespaces, as root, with the client's LXC path (`-P`), a cleared environment
//! (`--clear-env`, only `PATH` set) and a timeout. No network is needed.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{BoxFuture, ExecStatus, RemoteExec, STDERR_KEEP};
use crate::lxc::LxcClient;

/// Upper bound of one command through `lxc-attach` (archive or restore of one path), 4 hours —
/// the same as over SSH ([`super::SSH_EXEC_TIMEOUT`]).
pub const LXC_EXEC_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// Runs commands in the LXC container `name` of `client`'s LXC path.
#[derive(Debug, Clone)]
pub struct LxcAttach {
    client: LxcClient,
    name: String,
    timeout: Duration,
}

impl LxcAttach {
    /// The container `name` (its LXC name: the hostname) under `client`'s LXC path, each
    /// command bounded by [`LXC_EXEC_TIMEOUT`]. The name is one argv word, never parsed by a
    /// shell.
    pub fn new(client: LxcClient, name: &str) -> Self {
        Self { client, name: name.to_string(), timeout: LXC_EXEC_TIMEOUT }
    }

    /// The same with each command bounded by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The LXC client.
    pub fn client(&self) -> &LxcClient {
        &self.client
    }
}

impl RemoteExec for LxcAttach {
    fn target(&self) -> String {
        format!("LXC container {}", self.name)
    }

    fn run<'a>(
        &'a self,
        argv: &'a [&'a str],
        stdin: &'a mut (dyn AsyncRead + Send + Unpin),
        stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    ) -> BoxFuture<'a, std::io::Result<ExecStatus>> {
        Box::pin(async move {
            if argv.is_empty() {
                return Err(std::io::Error::other("empty argv"));
            }
            let s = self
                .client
                .attach_streaming(&self.name, argv, stdin, stdout, STDERR_KEEP, self.timeout)
                .await
                .map_err(std::io::Error::other)?;
            Ok(ExecStatus { code: s.code, stderr: s.stderr })
        })
    }
}
