//! Per-entry manifests: what the container had at archive time, what an archive holds, and how
//! they are compared.
//!
//! One [`Entry`] per filesystem object below the declared paths (the roots included), keyed by
//! its path relative to `/` (`var/lib/app/db.sqlite`). Normalisation, so that the container's
//! `find` view and the tar view agree: `size` and `sha256` only for regular files (0/`None`
//! otherwise); `mode` is the permission bits (`& 0o7777`), always `0o777` for symlinks (Linux
//! ignores them); `mtime` is whole seconds since the epoch; a tar hard link is recorded as the
//! regular file it links to (GNU tar stores the second name of a file as a link); sockets are
//! skipped (tar cannot archive them).

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The type of a filesystem object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (stored as a link, never followed).
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    Char,
    /// Block device.
    Block,
}

/// One filesystem object of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Path relative to `/`, without a trailing `/`.
    pub path: String,
    /// Type.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Size in bytes (regular files; 0 otherwise).
    pub size: u64,
    /// Permission bits (`0o7777` mask), serialized as a number.
    pub mode: u32,
    /// Numeric owner.
    pub uid: u32,
    /// Numeric group.
    pub gid: u32,
    /// Modification time, whole seconds since the Unix epoch.
    pub mtime: i64,
    /// Lowercase hex SHA-256 of the content (regular files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Link target (symlinks only), as stored, never resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A manifest error: the input could not be read as a manifest or archive.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The container's manifest output is malformed.
    #[error("malformed manifest from the container: {0}")]
    Malformed(String),
    /// A path or link target is not UTF-8 (manifests are JSON).
    #[error("path is not UTF-8: {0}")]
    NotUtf8(String),
    /// The archive could not be read (corrupt gzip or tar, I/O).
    #[error("cannot read the archive: {0}")]
    Archive(#[source] std::io::Error),
    /// The archive holds an entry type this tool does not restore.
    #[error("archive entry {path}: unsupported tar entry type {kind:?}")]
    Unsupported {
        /// The entry.
        path: String,
        /// The tar type byte.
        kind: u8,
    },
}

fn utf8(b: &[u8]) -> Result<String, ManifestError> {
    String::from_utf8(b.to_vec()).map_err(|_| ManifestError::NotUtf8(String::from_utf8_lossy(b).into_owned()))
}

fn normalize_path(p: &str) -> String {
    p.trim_start_matches("./").trim_end_matches('/').to_string()
}

/// Parses the container-side manifest: `meta` (find `-printf` records, 8 NUL-terminated fields
/// each: type letter, octal mode, uid, gid, `mtime.frac`, size, path, link target) and `sums`
/// (`sha256sum -z` lines `"<hex>  <path>\0"`). The result is sorted by path.
///
/// # Errors
/// [`ManifestError::Malformed`] for a short record, a bad number, an unknown type letter or a
/// regular file without a checksum; [`ManifestError::NotUtf8`].
pub fn parse_container(meta: &[u8], sums: &[u8]) -> Result<Vec<Entry>, ManifestError> {
    let bad = |m: String| ManifestError::Malformed(m);
    let mut hashes: BTreeMap<String, String> = BTreeMap::new();
    for line in sums.split(|b| *b == 0).filter(|l| !l.is_empty()) {
        if line.len() < 66
            || !line[..64].iter().all(u8::is_ascii_hexdigit)
            || &line[64..66] != b"  " && &line[64..66] != b" *"
        {
            return Err(bad(format!("bad checksum line `{}`", String::from_utf8_lossy(line))));
        }
        hashes.insert(normalize_path(&utf8(&line[66..])?), utf8(&line[..64])?.to_ascii_lowercase());
    }
    let fields: Vec<&[u8]> = meta.split(|b| *b == 0).collect();
    // A trailing NUL leaves one empty element at the end.
    let fields = match fields.split_last() {
        Some((&[], rest)) => rest,
        _ if meta.is_empty() => &[][..],
        _ => return Err(bad("metadata does not end with a NUL".into())),
    };
    if fields.len() % 8 != 0 {
        return Err(bad(format!("{} metadata fields, not a multiple of 8", fields.len())));
    }
    let num = |f: &[u8], what: &str, radix: u32| -> Result<u64, ManifestError> {
        std::str::from_utf8(f)
            .ok()
            .and_then(|s| u64::from_str_radix(s, radix).ok())
            .ok_or_else(|| bad(format!("bad {what} `{}`", String::from_utf8_lossy(f))))
    };
    let mut out = Vec::with_capacity(fields.len() / 8);
    for r in fields.chunks(8) {
        let path = normalize_path(&utf8(r[6])?);
        let kind = match r[0] {
            b"f" => Kind::File,
            b"d" => Kind::Dir,
            b"l" => Kind::Symlink,
            b"p" => Kind::Fifo,
            b"c" => Kind::Char,
            b"b" => Kind::Block,
            other => {
                return Err(bad(format!("{path}: unsupported file type `{}`", String::from_utf8_lossy(other))));
            }
        };
        let mtime_text = std::str::from_utf8(r[4]).map_err(|_| bad(format!("{path}: bad mtime")))?;
        let mtime = mtime_text
            .parse::<f64>()
            .map(|t| t.floor() as i64)
            .map_err(|_| bad(format!("{path}: bad mtime `{mtime_text}`")))?;
        let mode = num(r[1], "mode", 8)? as u32 & 0o7777;
        let sha256 = if kind == Kind::File {
            Some(
                hashes
                    .remove(&path)
                    .ok_or_else(|| bad(format!("{path}: regular file without a checksum (did it vanish?)")))?,
            )
        } else {
            None
        };
        out.push(Entry {
            kind,
            size: if kind == Kind::File { num(r[5], "size", 10)? } else { 0 },
            mode: if kind == Kind::Symlink { 0o777 } else { mode },
            uid: num(r[2], "uid", 10)? as u32,
            gid: num(r[3], "gid", 10)? as u32,
            mtime,
            sha256,
            target: if kind == Kind::Symlink { Some(utf8(r[7])?) } else { None },
            path,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Reads a tar stream (already decompressed) and returns its manifest, sorted by path. Every
/// regular file is hashed while read; hard links take the type, size and hash of their target.
/// The stream is read to its end (padding included).
///
/// # Errors
/// [`ManifestError::Archive`] for a truncated or corrupt stream, [`ManifestError::Unsupported`]
/// for sparse or other exotic entries, [`ManifestError::NotUtf8`].
pub fn from_tar<R: Read>(reader: R) -> Result<Vec<Entry>, ManifestError> {
    let mut archive = tar::Archive::new(reader);
    let mut out: Vec<Entry> = Vec::new();
    let mut by_path: BTreeMap<String, usize> = BTreeMap::new();
    let entries = archive.entries().map_err(ManifestError::Archive)?;
    for entry in entries {
        let mut entry = entry.map_err(ManifestError::Archive)?;
        let path = normalize_path(&utf8(&entry.path_bytes())?);
        let header = entry.header().clone();
        let mut mtime = header.mtime().map_err(ManifestError::Archive)? as i64;
        let mut uid = header.uid().map_err(ManifestError::Archive)? as u32;
        let mut gid = header.gid().map_err(ManifestError::Archive)? as u32;
        if let Ok(Some(pax)) = entry.pax_extensions() {
            for ext in pax.flatten() {
                let (Ok(k), Ok(v)) = (ext.key(), ext.value()) else {
                    continue;
                };
                match k {
                    "mtime" => mtime = v.parse::<f64>().map(|t| t.floor() as i64).unwrap_or(mtime),
                    "uid" => uid = v.parse().unwrap_or(uid),
                    "gid" => gid = v.parse().unwrap_or(gid),
                    _ => {}
                }
            }
        }
        let mode = header.mode().map_err(ManifestError::Archive)? & 0o7777;
        let et = header.entry_type();
        let base =
            Entry { path: path.clone(), kind: Kind::File, size: 0, mode, uid, gid, mtime, sha256: None, target: None };
        let e = match et {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut h = Sha256::new();
                let n = std::io::copy(&mut entry, &mut HashWriter(&mut h)).map_err(ManifestError::Archive)?;
                Entry { size: n, sha256: Some(hex::encode(h.finalize())), ..base }
            }
            tar::EntryType::Directory => Entry { kind: Kind::Dir, ..base },
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|b| utf8(&b)).transpose()?.unwrap_or_default();
                Entry { kind: Kind::Symlink, mode: 0o777, target: Some(target), ..base }
            }
            tar::EntryType::Link => {
                let target = entry.link_name_bytes().map(|b| utf8(&b)).transpose()?.unwrap_or_default();
                let Some(&i) = by_path.get(&normalize_path(&target)) else {
                    return Err(ManifestError::Archive(std::io::Error::other(format!(
                        "{path}: hard link to `{target}`, which is not earlier in the archive"
                    ))));
                };
                let t = &out[i];
                Entry { kind: t.kind, size: t.size, sha256: t.sha256.clone(), ..base }
            }
            tar::EntryType::Fifo => Entry { kind: Kind::Fifo, ..base },
            tar::EntryType::Char => Entry { kind: Kind::Char, ..base },
            tar::EntryType::Block => Entry { kind: Kind::Block, ..base },
            other => {
                return Err(ManifestError::Unsupported { path, kind: other.as_byte() });
            }
        };
        by_path.insert(path, out.len());
        out.push(e);
    }
    // Drain the end-of-archive blocks and record padding so a caller hashing the raw bytes sees
    // the whole stream.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink()).map_err(ManifestError::Archive)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The digest of a manifest: lowercase hex SHA-256 of its entries as compact JSON (sorted by
/// path), prefixed `sha256:`. Two manifests with the same digest describe the same tree.
pub fn digest(entries: &[Entry]) -> String {
    let json = serde_json::to_vec(entries).expect("entries serialize");
    format!("sha256:{}", hex::encode(Sha256::digest(&json)))
}

/// Compares `actual` with `expected` (both sorted by path) and describes every difference, at
/// most `limit` of them plus a count of the rest; empty when they are identical.
pub fn diff(expected: &[Entry], actual: &[Entry], limit: usize) -> Vec<String> {
    let exp: BTreeMap<&str, &Entry> = expected.iter().map(|e| (e.path.as_str(), e)).collect();
    let act: BTreeMap<&str, &Entry> = actual.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut out = Vec::new();
    let paths: std::collections::BTreeSet<&str> = exp.keys().chain(act.keys()).copied().collect();
    for p in paths {
        let line = match (exp.get(p), act.get(p)) {
            (Some(_), None) => format!("/{p}: missing"),
            (None, Some(_)) => format!("/{p}: unexpected"),
            (Some(e), Some(a)) if e != a => {
                let mut what = Vec::new();
                if e.kind != a.kind {
                    what.push(format!("type {:?} ≠ {:?}", e.kind, a.kind));
                }
                if e.size != a.size {
                    what.push(format!("size {} ≠ {}", e.size, a.size));
                }
                if e.mode != a.mode {
                    what.push(format!("mode {:o} ≠ {:o}", e.mode, a.mode));
                }
                if (e.uid, e.gid) != (a.uid, a.gid) {
                    what.push(format!("owner {}:{} ≠ {}:{}", e.uid, e.gid, a.uid, a.gid));
                }
                if e.mtime != a.mtime {
                    what.push(format!("mtime {} ≠ {}", e.mtime, a.mtime));
                }
                if e.sha256 != a.sha256 {
                    what.push("content (sha256) differs".to_string());
                }
                if e.target != a.target {
                    what.push(format!("link target {:?} ≠ {:?}", e.target, a.target));
                }
                format!("/{p}: {}", what.join(", "))
            }
            _ => continue,
        };
        out.push(line);
    }
    if out.len() > limit {
        let rest = out.len() - limit;
        out.truncate(limit);
        out.push(format!("… and {rest} more"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_find_and_sha256sum_output() {
        let meta = b"d\x00755\x000\x000\x001700000000.5\x004096\x00var/lib/app\x00\x00\
f\x00600\x004242\x004242\x001700000001.0000000000\x005\x00var/lib/app/secret\x00\x00\
l\x00777\x000\x000\x001700000002.9\x004\x00var/lib/app/link\x00secret\x00";
        let sums = format!("{}  var/lib/app/secret\0", "ab".repeat(32));
        let m = parse_container(meta, sums.as_bytes()).unwrap();
        assert_eq!(
            m,
            vec![
                Entry {
                    path: "var/lib/app".into(),
                    kind: Kind::Dir,
                    size: 0,
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                    mtime: 1700000000,
                    sha256: None,
                    target: None
                },
                Entry {
                    path: "var/lib/app/link".into(),
                    kind: Kind::Symlink,
                    size: 0,
                    mode: 0o777,
                    uid: 0,
                    gid: 0,
                    mtime: 1700000002,
                    sha256: None,
                    target: Some("secret".into())
                },
                Entry {
                    path: "var/lib/app/secret".into(),
                    kind: Kind::File,
                    size: 5,
                    mode: 0o600,
                    uid: 4242,
                    gid: 4242,
                    mtime: 1700000001,
                    sha256: Some("ab".repeat(32)),
                    target: None
                },
            ]
        );
    }

    #[test]
    fn malformed_manifests_are_errors() {
        assert!(parse_container(b"f\x00600\x00", b"").is_err());
        let meta = b"f\x00600\x000\x000\x001.0\x005\x00a\x00\x00";
        let e = parse_container(meta, b"").unwrap_err();
        assert!(e.to_string().contains("without a checksum"), "{e}");
        let e = parse_container(b"s\x00600\x000\x000\x001.0\x005\x00a\x00\x00", b"").unwrap_err();
        assert!(e.to_string().contains("unsupported file type"), "{e}");
    }

    #[test]
    fn tar_roundtrip_with_hardlink_and_diff() {
        // A GNU header: entry type, mode, uid, gid, mtime, size.
        let header = |kind, mode, uid, gid, mtime, size| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_uid(uid);
            h.set_gid(gid);
            h.set_mtime(mtime);
            h.set_size(size);
            h
        };
        let mut b = tar::Builder::new(Vec::new());
        b.append_data(&mut header(tar::EntryType::Directory, 0o750, 1, 2, 10, 0), "d/", std::io::empty()).unwrap();
        b.append_data(&mut header(tar::EntryType::Regular, 0o640, 0, 0, 11, 3), "d/f", &b"abc"[..]).unwrap();
        b.append_link(&mut header(tar::EntryType::Link, 0o640, 0, 0, 11, 0), "d/g", "d/f").unwrap();
        let bytes = b.into_inner().unwrap();
        let m = from_tar(&bytes[..]).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].sha256, m[2].sha256);
        assert_eq!(m[2].kind, Kind::File);
        assert_eq!(m[2].size, 3);
        let mut other = m.clone();
        other[1].mode = 0o600;
        other.pop();
        assert_eq!(diff(&m, &other, 10), vec!["/d/f: mode 640 ≠ 600".to_string(), "/d/g: missing".to_string()]);
        assert!(diff(&m, &m, 10).is_empty());
        assert_eq!(digest(&m), digest(&m.clone()));
        assert_ne!(digest(&m), digest(&other));
    }
}
