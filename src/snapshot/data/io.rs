//! The byte plumbing of data snapshots: the manifest framing the container's scripts print
//! ([`read_framed`]), blocking adapters over async streams (the gzip and tar crates are
//! blocking), counting and hashing wrappers, and reading a finished `.tar.gz` back
//! ([`read_archive`]).

use std::io::{Read, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::manifest::{self, Entry, ManifestError};

/// The parsed manifest framing (see [`scripts`]).
pub(super) struct Framed {
    pub(super) entries: Vec<Entry>,
    pub(super) extra: Vec<u8>,
}

/// Reads `PGO-MANIFEST/1 m s e\n` + the three blocks from `r`.
pub(super) fn read_framed<R: Read>(r: &mut R) -> Result<Framed, ManifestError> {
    let bad = |m: String| ManifestError::Malformed(m);
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let n = r.read(&mut b).map_err(ManifestError::Archive)?;
        if n == 0 {
            return Err(bad(format!(
                "output ended before the manifest header (got {:?})",
                String::from_utf8_lossy(&line)
            )));
        }
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
        if line.len() > 200 {
            return Err(bad("no manifest header".into()));
        }
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut parts = text.split(' ');
    if parts.next() != Some("PGO-MANIFEST/1") {
        return Err(bad(format!("unexpected header `{text}`")));
    }
    let mut lens = [0usize; 3];
    for l in lens.iter_mut() {
        *l = parts.next().and_then(|p| p.parse().ok()).ok_or_else(|| bad(format!("bad header `{text}`")))?;
    }
    let mut read_n = |n: usize| -> Result<Vec<u8>, ManifestError> {
        let mut v = vec![0u8; n];
        r.read_exact(&mut v).map_err(|e| bad(format!("manifest block shorter than announced: {e}")))?;
        Ok(v)
    };
    let meta = read_n(lens[0])?;
    let sums = read_n(lens[1])?;
    let extra = read_n(lens[2])?;
    Ok(Framed { entries: manifest::parse_container(&meta, &sums)?, extra })
}

/// A blocking `Read` over an async reader (used inside `spawn_blocking`).
pub(super) struct BlockingRead<R> {
    pub(super) inner: R,
    pub(super) handle: tokio::runtime::Handle,
}

impl<R: tokio::io::AsyncRead + Unpin> Read for BlockingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.handle.block_on(self.inner.read(buf))
    }
}

/// A blocking `Write` over an async writer (used inside `spawn_blocking`).
pub(super) struct BlockingWrite<W> {
    pub(super) inner: W,
    pub(super) handle: tokio::runtime::Handle,
}

impl<W: tokio::io::AsyncWrite + Unpin> Write for BlockingWrite<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.handle.block_on(self.inner.write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.handle.block_on(self.inner.flush())
    }
}

/// Counts and hashes the bytes read through it.
pub(super) struct HashRead<R> {
    pub(super) inner: R,
    pub(super) hasher: Sha256,
    pub(super) bytes: u64,
}

impl<R: Read> Read for HashRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Counts the bytes written through it.
pub(super) struct CountWrite<W> {
    pub(super) inner: W,
    pub(super) bytes: u64,
}

impl<W: Write> Write for CountWrite<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Result of reading an archive file back.
pub(super) struct ArchiveCheck {
    pub(super) entries: Vec<Entry>,
    pub(super) sha256: String,
    pub(super) bytes: u64,
    pub(super) tar_bytes: u64,
}

/// Reads a `.tar.gz` completely: its file SHA-256 and size, and the per-entry manifest.
pub(super) fn read_archive(path: &Path) -> Result<ArchiveCheck, ManifestError> {
    let f = std::fs::File::open(path).map_err(ManifestError::Archive)?;
    let mut hashed = HashRead { inner: std::io::BufReader::with_capacity(1 << 20, f), hasher: Sha256::new(), bytes: 0 };
    let (entries, tar_bytes) = {
        let mut counted = HashRead { inner: GzDecoder::new(&mut hashed), hasher: Sha256::new(), bytes: 0 };
        let entries = manifest::from_tar(&mut counted)?;
        std::io::copy(&mut counted, &mut std::io::sink()).map_err(ManifestError::Archive)?;
        (entries, counted.bytes)
    };
    // Trailing bytes after the gzip member are part of the file's hash too.
    std::io::copy(&mut hashed, &mut std::io::sink()).map_err(ManifestError::Archive)?;
    Ok(ArchiveCheck { entries, sha256: hex::encode(hashed.hasher.finalize()), bytes: hashed.bytes, tar_bytes })
}
