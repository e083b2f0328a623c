//! Taking, verifying and restoring data snapshots through a [`RemoteExec`].
//!
//! **Take**: the container runs [`scripts::PRODUCER`] and streams its manifest and a tar of the
//! declared paths; the runner gzips the tar into a hidden temporary file in the lib's store
//! directory, then re-reads the finished `.tar.gz` and compares its per-entry manifest with the
//! container's. Only when they are identical is the manifest written next to the archive and the
//! archive renamed to its final name. Any failure removes the temporary file: no archive that
//! looks valid is ever left behind.
//!
//! **Restore**: the archive is first verified against its manifest (file SHA-256 and every
//! entry); a single corrupted byte stops the restore before anything reaches the container. Then,
//! per declared path, the tar stream goes to [`scripts::STAGE`], which extracts it into a fresh
//! staging directory next to the path and reports the staged tree's manifest; when every staged
//! tree matches the archive manifest, [`scripts::COMMIT`] swaps them in (a rename per path), and
//! a last manifest of the live paths is compared once more.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;

mod io;
mod restore;

pub use restore::{restore, verify};

use io::{BlockingRead, CountWrite, read_archive, read_framed};

use super::manifest::{self, Entry, ManifestError};
use super::scripts;
use super::store::{ArchiveManifest, Store, Stored};
use crate::artifact;
use crate::exec::{ExecStatus, RemoteExec, run_collect};

/// Why a data snapshot or restore failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The request is invalid (no paths, overlapping paths, no snapshot to restore, bad `--at`).
    #[error("{0}")]
    Input(String),
    /// The command on the container failed.
    #[error("{target}: {what} failed ({status})")]
    Remote {
        /// Who was reached.
        target: String,
        /// What ran.
        what: &'static str,
        /// Exit code and stderr tail.
        status: String,
    },
    /// The transport failed.
    #[error("{target}: {what}: transport error: {source}")]
    Transport {
        /// Who was reached.
        target: String,
        /// What ran.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The new archive does not match the container's manifest; nothing was kept.
    #[error(
        "snapshot of {lib} failed verification: the archive does not match the manifest computed on the \
         container (was the data changing? stop the service first); no archive was kept:\n  {}",
        diffs.join("\n  ")
    )]
    Mismatch {
        /// Lib.
        lib: String,
        /// The differences.
        diffs: Vec<String>,
    },
    /// A stored archive failed verification; nothing was restored.
    #[error("archive {} failed verification: {detail}; nothing was restored", path.display())]
    Corrupt {
        /// The archive.
        path: PathBuf,
        /// What did not match.
        detail: String,
    },
    /// The staged or restored tree differs from the archive's manifest.
    #[error("restore of {lib} from {id}: {stage} tree differs from the archive manifest:\n  {}", diffs.join("\n  "))]
    RestoreMismatch {
        /// Lib.
        lib: String,
        /// Snapshot id.
        id: String,
        /// `staged` (nothing swapped in) or `restored` (the data was swapped in).
        stage: &'static str,
        /// The differences.
        diffs: Vec<String>,
    },
    /// A runner-side file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The container's output could not be parsed.
    #[error("{target}: {source}")]
    Manifest {
        /// Who was reached.
        target: String,
        /// The error.
        #[source]
        source: ManifestError,
    },
}

/// What to snapshot.
#[derive(Debug, Clone)]
pub struct TakeRequest {
    /// Lib (container) name: the store directory and the archive name prefix.
    pub lib: String,
    /// vmid, recorded in the manifest.
    pub vmid: Option<u32>,
    /// Absolute paths in the container (the lib's `SNAPSHOT` key).
    pub paths: Vec<String>,
    /// The snapshot time (UTC is used for the name).
    pub now: OffsetDateTime,
}

/// A verified snapshot in the store.
#[derive(Debug, Clone)]
pub struct Taken {
    /// The archive.
    pub archive: PathBuf,
    /// The manifest file next to it.
    pub manifest_path: PathBuf,
    /// The manifest.
    pub manifest: ArchiveManifest,
}

/// A completed restore.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The snapshot restored.
    pub stored: Stored,
    /// Its manifest.
    pub manifest: ArchiveManifest,
}

/// Checks declared snapshot paths: at least one, absolute, not `/`, no `.`/`..` components, a
/// first component not starting with `-()!` (`find` would parse it as an expression), no
/// path inside another (its entries would be archived twice).
///
/// # Errors
/// [`DataError::Input`] naming the offending path.
pub fn check_paths(paths: &[String]) -> Result<Vec<String>, DataError> {
    if paths.is_empty() {
        return Err(DataError::Input("no snapshot paths declared (SNAPSHOT in container.env)".into()));
    }
    let mut out: Vec<String> = Vec::new();
    for p in paths {
        let t = p.trim_end_matches('/');
        if !t.starts_with('/')
            || t.is_empty()
            || t.contains('\0')
            || t.split('/')
                .skip(1)
                .any(|c| c.is_empty() || c == "." || c == "..")
            // `find` would read a first component starting with these as an expression.
            || t[1..].starts_with(['-', '(', ')', '!'])
        {
            return Err(DataError::Input(format!(
                "snapshot path `{p}` must be absolute, not `/`, without `.`, `..` or `//`, and not start with `-`, `(`, `)` or `!`"
            )));
        }
        out.push(t.to_string());
    }
    // The same rule `resolve` applies to `SNAPSHOT`, checked again here: the paths may come from
    // an artifact or the command line.
    if let Some(m) = crate::inventory::spec::snapshot_overlap(&out) {
        return Err(DataError::Input(m));
    }
    Ok(out)
}

fn nul_list(paths: &[String]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in paths {
        v.extend_from_slice(p.as_bytes());
        v.push(0);
    }
    v
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io { path: path.to_path_buf(), source }
}

pub(super) fn remote_failed(exec: &dyn RemoteExec, what: &'static str, status: &ExecStatus) -> DataError {
    DataError::Remote { target: exec.target(), what, status: status.describe() }
}

/// Takes a verified data snapshot of `req.paths` into `store` (see the module docs).
///
/// # Errors
/// [`DataError::Input`] for bad paths; [`DataError::Remote`]/[`DataError::Transport`] when the
/// container side fails (a declared path missing is exit code 4 with its name);
/// [`DataError::Mismatch`] when the archive does not match the container's manifest;
/// [`DataError::Io`] for the store. In every error case no archive is left in the store.
pub async fn take(exec: &dyn RemoteExec, store: &Store, req: &TakeRequest) -> Result<Taken, DataError> {
    let paths = check_paths(&req.paths)?;
    let dir = store.lib_dir(&req.lib);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let stamp = store.free_stamp(&req.lib, req.now);
    let (id, archive_path, manifest_path) = store.paths(&req.lib, stamp);
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".tmp-{id}-"))
        .suffix(".tar.gz")
        .tempfile_in(&dir)
        .map_err(io_err(&dir))?;
    let tmp_file = tmp.as_file().try_clone().map_err(io_err(tmp.path()))?;

    // Receive: header + manifest, then the tar stream gzipped into the temp file.
    let (mut tx, rx) = tokio::io::duplex(1 << 20);
    let handle = tokio::runtime::Handle::current();
    let target = exec.target();
    let tmp_name = tmp.path().to_path_buf();
    let consumer = tokio::task::spawn_blocking(move || -> Result<(Vec<Entry>, u64), DataError> {
        let mut input = BlockingRead { inner: rx, handle };
        let framed = read_framed(&mut input).map_err(|source| DataError::Manifest { target, source })?;
        // Local write failures (disk full …) are reported as such, not as a broken stream.
        let local = |source: std::io::Error| DataError::Io { path: tmp_name.clone(), source };
        let gz = GzEncoder::new(BufWriter::with_capacity(1 << 20, tmp_file), Compression::new(6));
        let mut counted = CountWrite { inner: gz, bytes: 0 };
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(local(e)),
            };
            counted.write_all(&buf[..n]).map_err(local)?;
        }
        let mut w = counted.inner.finish().map_err(local)?;
        w.flush().map_err(local)?;
        let f = w.into_inner().map_err(|e| local(e.into_error()))?;
        f.sync_all().map_err(local)?;
        Ok((framed.entries, counted.bytes))
    });
    let stdin = nul_list(&paths);
    let argv = ["bash", "-c", scripts::PRODUCER, "pgo-snapshot", "archive"];
    let run = async {
        let mut input = &stdin[..];
        let r = exec.run(&argv, &mut input, &mut tx).await;
        let _ = tx.shutdown().await;
        drop(tx);
        r
    };
    let (ran, consumed) = tokio::join!(run, consumer);
    let consumed =
        consumed.map_err(|e| DataError::Io { path: tmp.path().to_path_buf(), source: std::io::Error::other(e) })?;
    // Report the root cause: the container's failure first (a short stream is its consequence),
    // then a local write failure (the broken pipe it causes is its consequence).
    let (container_entries, tar_bytes) = match (ran, consumed) {
        (Ok(status), _) if !status.success() => return Err(remote_failed(exec, "snapshot", &status)),
        (_, Err(e @ DataError::Io { .. })) => return Err(e),
        (Err(source), _) => return Err(DataError::Transport { target: exec.target(), what: "snapshot", source }),
        (Ok(_), Err(e)) => return Err(e),
        (Ok(_), Ok(v)) => v,
    };

    // Verify: re-read the finished archive from disk.
    let tmp_path = tmp.path().to_path_buf();
    let check = tokio::task::spawn_blocking(move || read_archive(&tmp_path))
        .await
        .map_err(|e| DataError::Io { path: tmp.path().to_path_buf(), source: std::io::Error::other(e) })?
        .map_err(|e| DataError::Mismatch {
            lib: req.lib.clone(),
            diffs: vec![format!("the archive cannot be read back: {e}")],
        })?;
    let diffs = manifest::diff(&container_entries, &check.entries, 20);
    if !diffs.is_empty() {
        return Err(DataError::Mismatch { lib: req.lib.clone(), diffs });
    }
    if check.tar_bytes != tar_bytes {
        return Err(DataError::Mismatch {
            lib: req.lib.clone(),
            diffs: vec![format!("tar stream of {tar_bytes} bytes received, {} bytes read back", check.tar_bytes)],
        });
    }

    let manifest = ArchiveManifest {
        lib: req.lib.clone(),
        vmid: req.vmid,
        id: id.clone(),
        created: req.now.to_offset(time::UtcOffset::UTC).replace_nanosecond(0).unwrap_or(req.now),
        source: exec.target(),
        paths,
        archive: format!("{id}.tar.gz"),
        archive_sha256: check.sha256,
        archive_bytes: check.bytes,
        tar_bytes,
        data_bytes: check.entries.iter().map(|e| e.size).sum(),
        entry_count: check.entries.len() as u64,
        digest: manifest::digest(&check.entries),
        entries: check.entries,
    };
    // Manifest first, then the archive: an archive under its final name always has one.
    artifact::write(&manifest_path, &manifest)
        .map_err(|e| DataError::Io { path: manifest_path.clone(), source: std::io::Error::other(e.to_string()) })?;
    if let Err(e) = tmp.persist_noclobber(&archive_path) {
        let _ = std::fs::remove_file(&manifest_path);
        return Err(DataError::Io { path: archive_path, source: e.error });
    }
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(Taken { archive: archive_path, manifest_path, manifest })
}

/// Computes the manifest of `paths` on the container (no archive).
///
/// # Errors
/// As for [`take`].
pub async fn live_manifest(exec: &dyn RemoteExec, paths: &[String]) -> Result<Vec<Entry>, DataError> {
    let (out, status) =
        run_collect(exec, &["bash", "-c", scripts::PRODUCER, "pgo-snapshot", "manifest"], &nul_list(paths))
            .await
            .map_err(|source| DataError::Transport { target: exec.target(), what: "manifest", source })?;
    if !status.success() {
        return Err(remote_failed(exec, "manifest", &status));
    }
    Ok(read_framed(&mut &out[..]).map_err(|source| DataError::Manifest { target: exec.target(), source })?.entries)
}

/// True when every path is missing on the container or an empty directory (nothing to lose by
/// restoring).
///
/// # Errors
/// Remote and transport failures, or unexpected output.
pub async fn paths_empty(exec: &dyn RemoteExec, paths: &[String]) -> Result<bool, DataError> {
    let paths = check_paths(paths)?;
    let (out, status) = run_collect(exec, &["bash", "-c", scripts::PROBE, "pgo-snapshot", "probe"], &nul_list(&paths))
        .await
        .map_err(|source| DataError::Transport { target: exec.target(), what: "probe", source })?;
    if !status.success() {
        return Err(remote_failed(exec, "probe", &status));
    }
    match String::from_utf8_lossy(&out).trim() {
        "empty" => Ok(true),
        "data" => Ok(false),
        other => Err(DataError::Manifest {
            target: exec.target(),
            source: ManifestError::Malformed(format!("unexpected probe output `{other}`")),
        }),
    }
}
