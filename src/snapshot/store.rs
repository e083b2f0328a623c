//! The runner-side snapshot store: `<share>/snapshots/<lib>/<lib>-YYYYMMDD-HHMMSS.tar.gz`, each
//! with its manifest `<lib>-YYYYMMDD-HHMMSS.json` next to it.
//!
//! An archive counts as a snapshot only when both files exist and the name parses; temporary
//! files (`.tmp-*`) and foreign files are ignored. Order is by the **parsed** timestamp (UTC)
//! and then the sequence suffix `-N` that a second snapshot within the same second gets — never
//! by the file name's lexical order (`app-20250101-120000-10` is newer than `…-9`, and
//! `…-120000-2.tar.gz` is newer than `…-120000.tar.gz` though it sorts first).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::{OffsetDateTime, PrimitiveDateTime, macros::format_description};

use crate::artifact::Artifact;

use super::manifest::Entry;

/// A snapshot's time stamp: UTC second plus a same-second sequence number (0 for the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// UTC time, whole seconds.
    pub time: PrimitiveDateTime,
    /// 0 for the first snapshot of that second, then 2, 3, … (the `-N` suffix).
    pub seq: u32,
}

const STAMP_FMT: &[time::format_description::BorrowedFormatItem<'static>] =
    format_description!("[year][month][day]-[hour][minute][second]");

impl Stamp {
    /// The stamp of `now` (UTC), sequence 0.
    pub fn at(now: OffsetDateTime) -> Self {
        let utc = now.to_offset(time::UtcOffset::UTC);
        Stamp {
            time: PrimitiveDateTime::new(utc.date(), utc.time().replace_nanosecond(0).expect("0 is valid")),
            seq: 0,
        }
    }

    /// Parses `YYYYMMDD-HHMMSS` or `YYYYMMDD-HHMMSS-N` (N ≥ 2).
    pub fn parse(s: &str) -> Option<Self> {
        let (ts, seq) = match s.get(15..) {
            Some("") => (s, 0),
            Some(rest) => (&s[..15], rest.strip_prefix('-')?.parse::<u32>().ok().filter(|n| *n >= 2)?),
            None => return None,
        };
        if !ts.bytes().enumerate().all(|(i, b)| if i == 8 { b == b'-' } else { b.is_ascii_digit() }) {
            return None;
        }
        let time = PrimitiveDateTime::parse(ts, STAMP_FMT).ok()?;
        Some(Stamp { time, seq })
    }

    /// The same second with the next sequence number.
    pub fn next(self) -> Self {
        Stamp { seq: if self.seq == 0 { 2 } else { self.seq + 1 }, ..self }
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.time.format(STAMP_FMT).map_err(|_| std::fmt::Error)?)?;
        if self.seq > 0 {
            write!(f, "-{}", self.seq)?;
        }
        Ok(())
    }
}

/// What a valid `--at` looks like, for messages.
pub const AT_EXPECTED: &str =
    "expected a snapshot time YYYYMMDD-HHMMSS (UTC), optionally with -N, or a snapshot id <lib>-YYYYMMDD-HHMMSS[-N]";

/// Checks the form of a `--at` value before anything runs: a snapshot time
/// (`YYYYMMDD-HHMMSS` or `YYYYMMDD-HHMMSS-N`, see [`Stamp::parse`]) or a snapshot id
/// `<lib>-<time>`. Returns the lib the id names (`None` for a bare time).
///
/// # Errors
/// [`PickError::MalformedAt`] (naming `--at` and [`AT_EXPECTED`]) when it is neither.
pub fn parse_at(at: &str) -> Result<Option<&str>, PickError> {
    if Stamp::parse(at).is_some() {
        return Ok(None);
    }
    at.match_indices('-')
        .map(|(i, _)| i)
        .find(|&i| i > 0 && Stamp::parse(&at[i + 1..]).is_some())
        .map(|i| Some(&at[..i]))
        .ok_or_else(|| PickError::MalformedAt { at: at.to_string() })
}

/// The manifest stored next to an archive (`<id>.json`, artifact kind `snapshot-manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveManifest {
    /// Lib (container) name.
    pub lib: String,
    /// vmid of the container it was taken from, when known.
    pub vmid: Option<u32>,
    /// `<lib>-<stamp>`: the snapshot id, also the archive's file stem.
    pub id: String,
    /// When the snapshot was taken (RFC 3339, UTC).
    #[serde(with = "time::serde::rfc3339")]
    pub created: OffsetDateTime,
    /// Where it was taken from (the transport's target).
    pub source: String,
    /// The declared absolute paths archived.
    pub paths: Vec<String>,
    /// Archive file name (in the same directory).
    pub archive: String,
    /// Lowercase hex SHA-256 of the archive file (`.tar.gz` bytes).
    pub archive_sha256: String,
    /// Archive size in bytes (compressed).
    pub archive_bytes: u64,
    /// Uncompressed tar stream size in bytes.
    pub tar_bytes: u64,
    /// Sum of the regular files' sizes in bytes.
    pub data_bytes: u64,
    /// Number of entries.
    pub entry_count: u64,
    /// [`super::manifest::digest`] of `entries`.
    pub digest: String,
    /// Every entry, sorted by path, as computed on the container at archive time.
    pub entries: Vec<Entry>,
}

impl Artifact for ArchiveManifest {
    const KIND: &'static str = "snapshot-manifest";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// Why [`Store::pick`] found no snapshot to restore. The messages are the user's: they name the
/// lib, the share directory or the `--at` value.
#[derive(Debug, thiserror::Error)]
pub enum PickError {
    /// The lib's snapshot directory cannot be read.
    #[error("cannot list the snapshots of {lib}: {source}")]
    List {
        /// The lib.
        lib: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The lib has no snapshot.
    #[error("no snapshot of {lib} in {}", dir.display())]
    None {
        /// The lib.
        lib: String,
        /// `<share>/snapshots/<lib>`.
        dir: PathBuf,
    },
    /// `--at` is not a stamp or an id.
    #[error("--at `{at}`: {AT_EXPECTED}")]
    MalformedAt {
        /// The value given.
        at: String,
    },
    /// No snapshot has that stamp.
    #[error("--at `{at}`: no snapshot of {lib} at that time; available: {available}")]
    NotAt {
        /// The value given.
        at: String,
        /// The lib.
        lib: String,
        /// The stamps that exist, comma-separated, oldest first.
        available: String,
    },
}

/// One complete snapshot in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// `<lib>-<stamp>`.
    pub id: String,
    /// Parsed stamp.
    pub stamp: Stamp,
    /// The `.tar.gz`.
    pub archive: PathBuf,
    /// The `.json` manifest.
    pub manifest: PathBuf,
}

/// The snapshot store under a share directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store of `share`: `<share>/snapshots`.
    pub fn new(share: &Path) -> Self {
        Self { root: share.join("snapshots") }
    }

    /// `<share>/snapshots`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<share>/snapshots/<lib>`.
    pub fn lib_dir(&self, lib: &str) -> PathBuf {
        self.root.join(lib)
    }

    /// Archive and manifest paths of `<lib>-<stamp>`.
    pub fn paths(&self, lib: &str, stamp: Stamp) -> (String, PathBuf, PathBuf) {
        let id = format!("{lib}-{stamp}");
        let dir = self.lib_dir(lib);
        (id.clone(), dir.join(format!("{id}.tar.gz")), dir.join(format!("{id}.json")))
    }

    /// The complete snapshots of `lib`, oldest first by parsed stamp. A missing directory is an
    /// empty list.
    ///
    /// # Errors
    /// The directory exists but cannot be read.
    pub fn list(&self, lib: &str) -> std::io::Result<Vec<Stored>> {
        let dir = self.lib_dir(lib);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
            }
        };
        let prefix = format!("{lib}-");
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(".tar.gz") else {
                continue;
            };
            let Some(stamp) = stem.strip_prefix(&prefix).and_then(Stamp::parse) else {
                continue;
            };
            let manifest = dir.join(format!("{stem}.json"));
            if !ent.file_type()?.is_file() || !manifest.is_file() {
                continue;
            }
            out.push(Stored { id: stem.to_string(), stamp, archive: dir.join(name), manifest });
        }
        out.sort_by_key(|s| s.stamp);
        Ok(out)
    }

    /// A free stamp at `now`: `now`'s second, or the next sequence number when taken.
    pub fn free_stamp(&self, lib: &str, now: OffsetDateTime) -> Stamp {
        let mut stamp = Stamp::at(now);
        loop {
            let (_, a, m) = self.paths(lib, stamp);
            if !a.exists() && !m.exists() {
                return stamp;
            }
            stamp = stamp.next();
        }
    }

    /// Picks the snapshot to restore: the newest by parsed stamp, or the one at `at`
    /// (`YYYYMMDD-HHMMSS`, `YYYYMMDD-HHMMSS-N` or the exact id `<lib>-…`; a bare second without
    /// the lib prefix picks the last snapshot of that second).
    ///
    /// # Errors
    /// [`PickError`]: the snapshots of `lib` cannot be listed, there are none, `at` is
    /// malformed, or no snapshot is at `at` (the message lists the ones that exist).
    pub fn pick(&self, lib: &str, at: Option<&str>) -> Result<Stored, PickError> {
        let all = self.list(lib).map_err(|source| PickError::List { lib: lib.to_string(), source })?;
        if all.is_empty() {
            return Err(PickError::None { lib: lib.to_string(), dir: self.lib_dir(lib) });
        }
        let Some(at) = at else {
            return Ok(all.last().expect("non-empty").clone());
        };
        let full_id = at.strip_prefix(&format!("{lib}-"));
        let bare = full_id.unwrap_or(at);
        let Some(want) = Stamp::parse(bare) else {
            return Err(PickError::MalformedAt { at: at.to_string() });
        };
        let found = all
            .iter()
            .rev()
            .find(|s| if full_id.is_none() && bare.len() == 15 { s.stamp.time == want.time } else { s.stamp == want });
        found.cloned().ok_or_else(|| PickError::NotAt {
            at: at.to_string(),
            lib: lib.to_string(),
            available: all.iter().map(|s| s.stamp.to_string()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Keeps the newest `keep` snapshots of `lib` (by parsed stamp) and deletes the older ones'
    /// archives and manifests. Other libs' directories are never touched. Returns the archives
    /// deleted, oldest first.
    ///
    /// # Errors
    /// `keep` is 0 (that would delete every snapshot), or listing/deleting fails.
    pub fn prune(&self, lib: &str, keep: usize) -> std::io::Result<Vec<PathBuf>> {
        if keep == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "--keep must be at least 1"));
        }
        let all = self.list(lib)?;
        let n = all.len().saturating_sub(keep);
        let mut removed = Vec::new();
        for s in &all[..n] {
            // Archive first: a manifest without an archive is ignored by `list`.
            std::fs::remove_file(&s.archive)?;
            let _ = std::fs::remove_file(&s.manifest);
            removed.push(s.archive.clone());
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_is_a_time_or_an_id() {
        assert_eq!(parse_at("20261130-101010").ok(), Some(None));
        assert_eq!(parse_at("20261130-101010-2").ok(), Some(None));
        assert_eq!(parse_at("broker-20261130-101010").ok(), Some(Some("broker")));
        assert_eq!(parse_at("my-app-20261130-101010-3").ok(), Some(Some("my-app")));
        for bad in ["2026", "", "-20261130-101010", "broker-2026", "20261130-1010", "broker-20261130-101010-1"] {
            assert_eq!(
                parse_at(bad).unwrap_err().to_string(),
                format!(
                    "--at `{bad}`: expected a snapshot time YYYYMMDD-HHMMSS (UTC), optionally with -N, or a snapshot \
                     id <lib>-YYYYMMDD-HHMMSS[-N]"
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn stamps_parse_format_and_order() {
        let a = Stamp::parse("20250101-120000").unwrap();
        assert_eq!(a.to_string(), "20250101-120000");
        let b = Stamp::parse("20250101-120000-2").unwrap();
        let c = Stamp::parse("20250101-120000-10").unwrap();
        assert!(a < b && b < c);
        assert_eq!(a.next(), b);
        assert_eq!(b.to_string(), "20250101-120000-2");
        for bad in [
            "20250101",
            "2025010-1120000",
            "20251301-120000",
            "20250101-120000-1",
            "20250101-120000-x",
            "20250101-1200000",
        ] {
            assert_eq!(Stamp::parse(bad), None, "{bad}");
        }
        let now = time::macros::datetime!(2026-11-30 17:01:02.999 +01:00);
        assert_eq!(Stamp::at(now).to_string(), "20261130-160102");
    }
}
