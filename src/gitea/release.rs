//! Gitea's release site (`https://dl.gitea.com`): the published binaries of Gitea and of its
//! Actions runner, each next to a `.sha256` file, downloaded and verified before anyone may use
//! them.
//!
//! Layout of the site (from the projects' release configurations: Gitea's `Makefile` release
//! targets and the runner's `.goreleaser.yaml`, `blobs.directory` and `binary`):
//!
//! | program | binary | checksum |
//! |---|---|---|
//! | Gitea | `/gitea/<v>/gitea-<v>-linux-<arch>` | the same with `.sha256` |
//! | runner | `/gitea-runner/<v>/gitea-runner-<v>-linux-<arch>` | the same with `.sha256` |
//!
//! A `.sha256` file holds `<64 hex digits>  <file name>` (sha256sum's format). A download is
//! written to a temporary file next to its destination, hashed while it streams, and renamed into
//! place only when the digest matches the published one: a destination that exists was verified.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// The release site used unless the environment's `PGO_GITEA_DOWNLOAD` names another (a mirror,
/// or a test's loopback server).
pub const DEFAULT_SITE: &str = "https://dl.gitea.com";

/// Time for one whole download (binaries are 30–130 MB).
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// A program published on the release site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The Gitea server.
    Gitea,
    /// Gitea's Actions runner.
    Runner,
}

impl Program {
    /// The program's directory and file-name prefix on the site.
    pub fn name(self) -> &'static str {
        match self {
            Program::Gitea => "gitea",
            Program::Runner => "gitea-runner",
        }
    }
}

/// Why a verified download failed; every variant names the URL.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// This machine's architecture has no published binary.
    #[error("no {program} binary is published for this machine's architecture `{arch}` (only amd64, arm64)")]
    Arch {
        /// The program's name.
        program: &'static str,
        /// Rust's name of the architecture.
        arch: String,
    },
    /// The site could not be reached or answered with an error.
    #[error("cannot download {url}: {why}")]
    Fetch {
        /// The URL.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The checksum file is not in sha256sum's format.
    #[error("{url} is not a SHA-256 checksum file (expected `<64 hex digits>  <file name>`)")]
    Checksum {
        /// The checksum file's URL.
        url: String,
    },
    /// The binary's digest differs from the published one: nothing was installed.
    #[error("{url}: SHA-256 {found} differs from the published {expected}; the download was discarded")]
    Mismatch {
        /// The binary's URL.
        url: String,
        /// The published digest.
        expected: String,
        /// The downloaded file's digest.
        found: String,
    },
    /// The destination could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// The architecture part of a release file name for Rust's `std::env::consts::ARCH`.
fn arch_name(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" => Some("amd64"),
        "aarch64" => Some("arm64"),
        _ => None,
    }
}

/// The URL of `program` at `version` (without a leading `v`) for Linux on `arch` (Rust's name),
/// on `site`.
///
/// # Errors
/// [`DownloadError::Arch`] for an architecture without published binaries.
pub fn binary_url(site: &str, program: Program, version: &str, arch: &str) -> Result<String, DownloadError> {
    let a = arch_name(arch).ok_or_else(|| DownloadError::Arch { program: program.name(), arch: arch.into() })?;
    let name = program.name();
    Ok(format!("{}/{name}/{version}/{name}-{version}-linux-{a}", site.trim_end_matches('/')))
}

/// Downloads `url` to `dest` (mode 0755) when its SHA-256 matches `url.sha256`; returns the
/// digest. Nothing is written at `dest` unless it matches. At most `DOWNLOAD_TIMEOUT` per file.
///
/// # Errors
/// [`DownloadError`]: unreachable site, HTTP error, malformed checksum file, digest mismatch,
/// or the destination not writable.
pub async fn download_verified(url: &str, dest: &Path) -> Result<String, DownloadError> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(DOWNLOAD_TIMEOUT)
        .user_agent(concat!("proxmox-gitops/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| DownloadError::Fetch { url: url.into(), why: e.to_string() })?;
    let fetch = |u: String| {
        let http = http.clone();
        async move {
            let resp = http
                .get(&u)
                .send()
                .await
                .map_err(|e| DownloadError::Fetch { url: u.clone(), why: e.without_url().to_string() })?;
            if !resp.status().is_success() {
                return Err(DownloadError::Fetch { url: u, why: format!("HTTP {}", resp.status()) });
            }
            Ok((u, resp))
        }
    };
    let sum_url = format!("{url}.sha256");
    let (_, sum) = fetch(sum_url.clone()).await?;
    let text = sum.text().await.map_err(|e| DownloadError::Fetch { url: sum_url.clone(), why: e.to_string() })?;
    let expected = text
        .split_whitespace()
        .next()
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or(DownloadError::Checksum { url: sum_url })?;

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DownloadError::Io { path, source }
    };
    let dir = dest.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
    let tmp = tempfile::Builder::new().prefix(".download-").tempfile_in(dir).map_err(io(dir))?;
    let (_, mut resp) = fetch(url.to_string()).await?;
    let mut file = tokio::fs::File::from_std(tmp.reopen().map_err(io(tmp.path()))?);
    let mut hasher = Sha256::new();
    while let Some(chunk) =
        resp.chunk().await.map_err(|e| DownloadError::Fetch { url: url.into(), why: e.without_url().to_string() })?
    {
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(io(tmp.path()))?;
    }
    file.flush().await.map_err(io(tmp.path()))?;
    file.sync_all().await.map_err(io(tmp.path()))?;
    drop(file);
    let found = hex::encode(hasher.finalize());
    if found != expected {
        return Err(DownloadError::Mismatch { url: url.into(), expected, found });
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).map_err(io(tmp.path()))?;
    tmp.persist(dest).map_err(|e| DownloadError::Io { path: dest.to_path_buf(), source: e.error })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A release site on loopback serving `files` (path → body); anything else is a 404.
    async fn site(files: Vec<(String, Vec<u8>)>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let files = files.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let path = req.split_whitespace().nth(1).unwrap_or("").to_string();
                    let (status, body) = match files.iter().find(|(p, _)| *p == path) {
                        Some((_, b)) => ("200 OK", b.clone()),
                        None => ("404 Not Found", b"not found".to_vec()),
                    };
                    let head =
                        format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(&body).await;
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_download_is_kept_only_when_its_digest_matches_the_published_one() {
        let binary = b"#!/bin/sh\necho gitea\n".to_vec();
        let good = format!("{}  gitea-1.27.3-linux-amd64\n", hex::encode(Sha256::digest(&binary)));
        let path = "/gitea/1.27.3/gitea-1.27.3-linux-amd64";
        let base = site(vec![
            (path.to_string(), binary.clone()),
            (format!("{path}.sha256"), good.into_bytes()),
            ("/bad/x".to_string(), binary.clone()),
            ("/bad/x.sha256".to_string(), format!("{}  x\n", "0".repeat(64)).into_bytes()),
            ("/nosum/x.sha256".to_string(), b"<html>moved</html>".to_vec()),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let url = binary_url(&base, Program::Gitea, "1.27.3", "x86_64").unwrap();
        let dest = dir.path().join("gitea-1.27.3/gitea");
        download_verified(&url, &dest).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), binary);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o755);

        // A digest that differs: nothing is kept, nothing half-written is left.
        let bad = dir.path().join("bad/x");
        let e = download_verified(&format!("{base}/bad/x"), &bad).await.unwrap_err();
        assert!(matches!(e, DownloadError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("differs from the published"), "{e}");
        assert!(!bad.exists());
        assert_eq!(std::fs::read_dir(dir.path().join("bad")).unwrap().count(), 0);
        // No checksum file, or not one: refused before the binary is fetched.
        let e = download_verified(&format!("{base}/missing/x"), &dir.path().join("m")).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 404"), "{e}");
        let e = download_verified(&format!("{base}/nosum/x"), &dir.path().join("n")).await.unwrap_err();
        assert!(matches!(e, DownloadError::Checksum { .. }), "{e}");
    }

    #[test]
    fn urls_follow_the_release_layout() {
        assert_eq!(
            binary_url("https://dl.gitea.com/", Program::Gitea, "1.27.3", "x86_64").unwrap(),
            "https://dl.gitea.com/gitea/1.27.3/gitea-1.27.3-linux-amd64"
        );
        assert_eq!(
            binary_url(DEFAULT_SITE, Program::Runner, "1.0.8", "aarch64").unwrap(),
            "https://dl.gitea.com/gitea-runner/1.0.8/gitea-runner-1.0.8-linux-arm64"
        );
        assert!(matches!(binary_url(DEFAULT_SITE, Program::Gitea, "1", "riscv64"), Err(DownloadError::Arch { .. })));
    }
}
