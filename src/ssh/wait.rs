//! Small network helpers shared by the backends: waiting for a container's SSH server to answer.
//!
//! Streaming a command's pipes lives in [`crate::pipe`]; running a command in a container lives in
//! [`crate::exec`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Waits until a TCP connection to `addr` succeeds and the peer sends an SSH banner
/// (`SSH-2.0-…`), polling with capped exponential backoff (0.05 s doubling up to 0.25 s: a
/// container that just started has sshd listening within a second, and a refused connection
/// costs nothing, so a coarser interval would only add idle time) for at most `timeout`. A port
/// that accepts but never sends a banner keeps being retried.
///
/// # Errors
/// When `timeout` passes first: the error names the address and the last failure.
pub async fn wait_for_ssh(addr: SocketAddr, timeout: Duration) -> Result<Duration> {
    use tokio::io::AsyncReadExt;
    let start = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut last = String::from("no attempt");
    let mut wait = crate::progress::Wait::start(format!("waiting for SSH at {addr}"));
    loop {
        let remaining = timeout.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            bail!("SSH at {addr} did not answer within {}s (last: {last})", timeout.as_secs());
        }
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            let mut buf = [0u8; 8];
            let n = s.read(&mut buf).await?;
            if buf[..n].starts_with(b"SSH-") {
                Ok(())
            } else {
                Err(std::io::Error::other("connected, but no SSH banner"))
            }
        };
        match tokio::time::timeout(remaining.min(Duration::from_secs(5)), attempt).await {
            Ok(Ok(())) => {
                wait.finish("answered");
                return Ok(start.elapsed());
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "attempt timed out".into(),
        }
        tracing::debug!("SSH at {addr} not answering yet after {:?}: {last}", start.elapsed());
        wait.state(&last);
        tokio::time::sleep(delay.min(timeout.saturating_sub(start.elapsed()))).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn waits_for_banner_and_times_out() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(b"SSH-2.0-test\r\n").await;
            }
        });
        wait_for_ssh(addr, Duration::from_secs(5)).await.unwrap();
        // A closed port on loopback fails within the timeout.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let e = wait_for_ssh(closed, Duration::from_millis(500)).await.unwrap_err();
        assert!(e.to_string().contains("did not answer"), "{e}");
    }
}
