//! Verifying a stored archive ([`verify`]) and restoring it onto the container ([`restore`]):
//! per declared path the tar stream goes to [`scripts::STAGE`] (a fresh staging directory next
//! to the path), and only when every staged tree matches the archive manifest does
//! [`scripts::COMMIT`] swap them in.

use std::io::Write;
use std::path::Path;

use flate2::read::GzDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::manifest::{self, Entry, ManifestError};
use super::super::scripts;
use super::super::store::{ArchiveManifest, Store, Stored};
use super::io::{BlockingWrite, read_archive, read_framed};
use super::{DataError, Restored, live_manifest, remote_failed};
use crate::artifact;
use crate::exec::{RemoteExec, run_collect};

/// Reads a stored snapshot's manifest and verifies the archive against it (file SHA-256, size,
/// every entry).
///
/// # Errors
/// [`DataError::Corrupt`] naming the archive and the first differences; nothing is modified.
pub async fn verify(stored: &Stored) -> Result<ArchiveManifest, DataError> {
    let manifest: ArchiveManifest = artifact::read(&stored.manifest).map_err(|e| DataError::Corrupt {
        path: stored.archive.clone(),
        detail: format!("its manifest is unreadable: {e}"),
    })?;
    let path = stored.archive.clone();
    let check = tokio::task::spawn_blocking(move || read_archive(&path))
        .await
        .map_err(|e| DataError::Io { path: stored.archive.clone(), source: std::io::Error::other(e) })?;
    let corrupt = |detail: String| DataError::Corrupt { path: stored.archive.clone(), detail };
    let check = check.map_err(|e| corrupt(e.to_string()))?;
    if check.sha256 != manifest.archive_sha256 || check.bytes != manifest.archive_bytes {
        return Err(corrupt(format!(
            "sha256 {} ({} bytes) ≠ recorded {} ({} bytes)",
            check.sha256, check.bytes, manifest.archive_sha256, manifest.archive_bytes
        )));
    }
    let diffs = manifest::diff(&manifest.entries, &check.entries, 20);
    if !diffs.is_empty() {
        return Err(corrupt(format!("entries differ from the manifest: {}", diffs.join("; "))));
    }
    if manifest::digest(&manifest.entries) != manifest.digest {
        return Err(corrupt("the manifest's digest does not match its entries".into()));
    }
    Ok(manifest)
}

fn under<'a>(entries: &'a [Entry], path: &str) -> Vec<Entry> {
    let rel = path.trim_start_matches('/');
    let prefix = format!("{rel}/");
    entries.iter().filter(|e: &&'a Entry| e.path == rel || e.path.starts_with(&prefix)).cloned().collect()
}

/// Streams the decompressed tar of `archive` into a stage command for `path`; returns the
/// staging directory and the staged tree's manifest.
async fn stage_one(exec: &dyn RemoteExec, archive: &Path, path: &str) -> Result<(String, Vec<Entry>), DataError> {
    let (tx, mut rx) = tokio::io::duplex(1 << 20);
    let handle = tokio::runtime::Handle::current();
    let src = archive.to_path_buf();
    let producer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let f = std::fs::File::open(&src)?;
        let mut gz = GzDecoder::new(std::io::BufReader::with_capacity(1 << 20, f));
        let mut out = BlockingWrite { inner: tx, handle };
        std::io::copy(&mut gz, &mut out)?;
        out.flush()?;
        out.handle.block_on(out.inner.shutdown())
    });
    let mut head = path.as_bytes().to_vec();
    head.push(0);
    let mut stdin = AsyncReadExt::chain(&head[..], &mut rx);
    let mut out = Vec::new();
    let argv = ["bash", "-c", scripts::STAGE, "pgo-restore", "stage"];
    let ran = exec.run(&argv, &mut stdin, &mut out).await;
    drop(stdin);
    drop(rx);
    let produced = producer.await;
    let status =
        ran.map_err(|source| DataError::Transport { target: exec.target(), what: "restore (stage)", source })?;
    if !status.success() {
        return Err(remote_failed(exec, "restore (stage)", &status));
    }
    if let Ok(Err(e)) | Err(e) = produced.map_err(std::io::Error::other) {
        return Err(DataError::Io { path: archive.to_path_buf(), source: e });
    }
    let framed = read_framed(&mut &out[..]).map_err(|source| DataError::Manifest { target: exec.target(), source })?;
    let stage = String::from_utf8(framed.extra).map_err(|_| DataError::Manifest {
        target: exec.target(),
        source: ManifestError::Malformed("staging directory is not UTF-8".into()),
    })?;
    Ok((stage, framed.entries))
}

async fn finish_stages(
    exec: &dyn RemoteExec,
    mode: &'static str,
    staged: &[(String, String)],
) -> Result<(), DataError> {
    if staged.is_empty() {
        return Ok(());
    }
    let mut stdin = Vec::new();
    for (stage, path) in staged {
        stdin.extend_from_slice(stage.as_bytes());
        stdin.push(0);
        stdin.extend_from_slice(path.as_bytes());
        stdin.push(0);
    }
    let what = if mode == "commit" { "restore (commit)" } else { "restore (abort)" };
    let (_, status) = run_collect(exec, &["bash", "-c", scripts::COMMIT, "pgo-restore", mode], &stdin)
        .await
        .map_err(|source| DataError::Transport { target: exec.target(), what, source })?;
    if !status.success() {
        return Err(remote_failed(exec, what, &status));
    }
    Ok(())
}

/// Restores the newest snapshot of `lib` (by parsed stamp), or the one at `at`, onto the
/// container (see the module docs). The paths restored are the archive's own.
///
/// # Errors
/// [`DataError::Input`] when there is no such snapshot; [`DataError::Corrupt`] when the archive
/// fails verification (nothing restored); [`DataError::RestoreMismatch`] with `stage: "staged"`
/// when a staged tree differs (staging removed, nothing swapped in) or `"restored"` when the live
/// tree differs afterwards; remote and transport errors.
pub async fn restore(exec: &dyn RemoteExec, store: &Store, lib: &str, at: Option<&str>) -> Result<Restored, DataError> {
    let stored = store.pick(lib, at).map_err(|e| DataError::Input(e.to_string()))?;
    let manifest = verify(&stored).await?;
    let mut staged: Vec<(String, String)> = Vec::new();
    for path in &manifest.paths {
        let result = stage_one(exec, &stored.archive, path).await;
        let failure = match result {
            Ok((stage, entries)) => {
                staged.push((stage, path.clone()));
                let diffs = manifest::diff(&under(&manifest.entries, path), &entries, 20);
                if diffs.is_empty() {
                    continue;
                }
                DataError::RestoreMismatch { lib: lib.into(), id: stored.id.clone(), stage: "staged", diffs }
            }
            Err(e) => e,
        };
        if let Err(e) = finish_stages(exec, "abort", &staged).await {
            tracing::warn!("could not remove staging directories: {e}");
        }
        return Err(failure);
    }
    finish_stages(exec, "commit", &staged).await?;
    let live = live_manifest(exec, &manifest.paths).await?;
    let diffs = manifest::diff(&manifest.entries, &live, 20);
    if !diffs.is_empty() {
        return Err(DataError::RestoreMismatch { lib: lib.into(), id: stored.id.clone(), stage: "restored", diffs });
    }
    Ok(Restored { stored, manifest })
}
