//! Artifact bundles: how artifacts travel between workflow jobs as job outputs.
//!
//! Jobs of a workflow run do not share a workspace (act_runner gives each job its own), so the
//! inventory and the provision artifacts a later job needs are handed over as a **job output**:
//! the artifacts directory packed into one line of text,
//!
//! ```text
//! pgo1:<base64 (standard, padded) of gzip(JSON object {"<relative path>": <artifact JSON>, …})>
//! ```
//!
//! One line, so it fits `$GITHUB_OUTPUT`'s `key=value` form and an environment variable. Its size
//! matters: a single environment variable is limited to 128 KiB on Linux (`MAX_ARG_STRLEN`) and
//! act_runner drops outputs over 1 MiB, so [`pack`] warns above [`WARN_BYTES`]; gzip brings a
//! typical inventory (~10 KiB per container) down to a tenth.
//!
//! Unpacking checks every entry: a relative path of plain components ending in `.json`, and a JSON
//! object with a string `kind` (an artifact). Files are written atomically.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;

use crate::artifact;

/// The prefix (and format version) of a bundle.
pub const PREFIX: &str = "pgo1:";
/// Bundles longer than this (bytes) get a warning: close to the 128 KiB limit of one environment
/// variable.
pub const WARN_BYTES: usize = 96 * 1024;
/// Largest decompressed bundle accepted (bytes), against decompression bombs.
pub const MAX_UNPACKED: u64 = 64 * 1024 * 1024;

/// Errors packing or unpacking a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Reading the artifacts directory or writing an artifact failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing an artifact failed.
    #[error(transparent)]
    Write(#[from] artifact::ArtifactError),
    /// The text is not a bundle of this format.
    #[error("bundle {index}: {message}")]
    Malformed {
        /// 1-based position of the bundle in the input.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// Packs every `*.json` artifact under `dir` (recursively, temp files excluded) into a bundle.
///
/// # Errors
/// [`BundleError::Io`] when the directory or a file cannot be read, [`BundleError::Malformed`]
/// (index 0) when a file there is not a JSON object.
pub fn pack(dir: &Path) -> Result<String, BundleError> {
    let mut files = BTreeMap::new();
    collect(dir, dir, &mut files)?;
    let json = serde_json::to_vec(&files).expect("JSON values render");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&json).map_err(|source| BundleError::Io { path: dir.into(), source })?;
    let compressed = gz.finish().map_err(|source| BundleError::Io { path: dir.into(), source })?;
    let text = format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(compressed));
    if text.len() > WARN_BYTES {
        tracing::warn!(
            "the artifact bundle is {} KiB, close to the 128 KiB limit of one environment variable; \
             set the action's `artifacts` input to a directory all jobs share instead",
            text.len() / 1024
        );
    }
    Ok(text)
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, serde_json::Value>) -> Result<(), BundleError> {
    let io = |source| BundleError::Io { path: dir.to_path_buf(), source };
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let mut entries: Vec<_> = rd.collect::<Result<_, _>>().map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let ft = e.file_type().map_err(io)?;
        if ft.is_dir() {
            collect(root, &path, out)?;
        } else if ft.is_file() && name.ends_with(".json") {
            let text =
                std::fs::read_to_string(&path).map_err(|source| BundleError::Io { path: path.clone(), source })?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| BundleError::Malformed {
                index: 0,
                message: format!("{}: not JSON: {e}", path.display()),
            })?;
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
            out.insert(rel, value);
        }
    }
    Ok(())
}

/// A safe relative artifact path: plain components, not hidden, ending in `.json`.
fn safe_path(rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    let ok = !rel.is_empty()
        && rel.ends_with(".json")
        && p.components().all(|c| matches!(c, Component::Normal(s) if !s.to_string_lossy().starts_with('.')));
    ok.then(|| p.to_path_buf())
}

/// Decodes one bundle into `{relative path: artifact}`.
///
/// # Errors
/// [`BundleError::Malformed`] naming what is wrong (prefix, base64, gzip, JSON, a path or an entry).
pub fn decode(text: &str, index: usize) -> Result<BTreeMap<String, serde_json::Value>, BundleError> {
    let bad = |message: String| BundleError::Malformed { index, message };
    let body = text.trim().strip_prefix(PREFIX).ok_or_else(|| {
        let head: String = text.trim().chars().take(24).collect();
        bad(format!("`{head}` does not start with `{PREFIX}` (not an output of `artifacts pack`)"))
    })?;
    let compressed =
        base64::engine::general_purpose::STANDARD.decode(body).map_err(|e| bad(format!("invalid base64: {e}")))?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .take(MAX_UNPACKED + 1)
        .read_to_end(&mut json)
        .map_err(|e| bad(format!("invalid gzip data: {e}")))?;
    if json.len() as u64 > MAX_UNPACKED {
        return Err(bad(format!("unpacks to more than {} MiB", MAX_UNPACKED / 1024 / 1024)));
    }
    let files: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&json).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    for (rel, value) in &files {
        if safe_path(rel).is_none() {
            return Err(bad(format!("entry `{rel}` is not a relative `*.json` path of plain components")));
        }
        if value.get("kind").and_then(|k| k.as_str()).is_none() {
            return Err(bad(format!("entry `{rel}` is not an artifact (a JSON object with a string `kind`)")));
        }
    }
    Ok(files)
}

/// Unpacks the whitespace-separated bundles in `text` into `dir`, later bundles overwriting
/// earlier ones. Every bundle is decoded and checked before anything is written. Returns the
/// relative paths written, sorted.
///
/// # Errors
/// See [`decode`]; [`BundleError::Write`] when a file cannot be written.
pub fn unpack(text: &str, dir: &Path) -> Result<Vec<String>, BundleError> {
    let mut merged = BTreeMap::new();
    for (i, part) in text.split_whitespace().enumerate() {
        merged.extend(decode(part, i + 1)?);
    }
    for (rel, value) in &merged {
        let path = dir.join(safe_path(rel).expect("checked in decode"));
        let mut s = serde_json::to_string_pretty(value).expect("JSON values render");
        s.push('\n');
        artifact::write_bytes(&path, s.as_bytes())?;
    }
    Ok(merged.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_merge() {
        let a = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("inventory.json"), r#"{"kind":"inventory","v":1}"#).unwrap();
        std::fs::create_dir(a.path().join("provision")).unwrap();
        std::fs::write(a.path().join("provision/web.json"), r#"{"kind":"provision","result":"ok"}"#).unwrap();
        std::fs::write(a.path().join(".tmp-x.json"), "half").unwrap();
        let first = pack(a.path()).unwrap();
        assert!(first.starts_with(PREFIX) && !first.contains('\n'));
        std::fs::write(a.path().join("inventory.json"), r#"{"kind":"inventory","v":2}"#).unwrap();
        let second = pack(a.path()).unwrap();

        let b = tempfile::tempdir().unwrap();
        let written = unpack(&format!("{first}\n{second}"), b.path()).unwrap();
        assert_eq!(written, vec!["inventory.json".to_string(), "provision/web.json".to_string()]);
        let inv: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(b.path().join("inventory.json")).unwrap()).unwrap();
        assert_eq!(inv, serde_json::json!({"kind":"inventory","v":2}));
        assert!(unpack("", b.path()).unwrap().is_empty());
    }

    #[test]
    fn refuses_escapes_and_garbage() {
        let enc = |files: serde_json::Value| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(files.to_string().as_bytes()).unwrap();
            format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap()))
        };
        let dir = tempfile::tempdir().unwrap();
        let e = unpack(&enc(serde_json::json!({"../evil.json": {"kind":"x"}})), dir.path()).unwrap_err();
        assert_eq!(e.to_string(), "bundle 1: entry `../evil.json` is not a relative `*.json` path of plain components");
        let e = unpack(&enc(serde_json::json!({"a.json": [1]})), dir.path()).unwrap_err();
        assert_eq!(e.to_string(), "bundle 1: entry `a.json` is not an artifact (a JSON object with a string `kind`)");
        let ok = enc(serde_json::json!({"a.json": {"kind":"x"}}));
        let e = unpack(&format!("{ok} nope"), dir.path()).unwrap_err();
        assert_eq!(e.to_string(), "bundle 2: `nope` does not start with `pgo1:` (not an output of `artifacts pack`)");
        // Nothing was written: every bundle is checked first.
        assert!(!dir.path().join("a.json").exists());
    }
}
