//! Container snapshots with `lxc-snapshot`, and reading the `snaps/` directory it keeps.
//!
//! `lxc-snapshot` names snapshots itself (`snap0`, `snap1` …) and keeps them in
//! `<lxcpath>/<container>/snaps/snapN/` with a `ts` file (`YYYY:MM:DD HH:MM:SS`, local time of
//! the host) and the optional `comment` file given with `-c`. This file only runs the tool and
//! reads those files back; what the comment means (our `pgo-…` names) is
//! [`crate::snapshot::lxc`]'s business.
//!
//! `lxc-snapshot` refuses a running container. [`LxcClient::snapshot_running`] takes the same
//! snapshot of a running one the way PVE snapshots a running container: `lxc-freeze` (every
//! process of the container stopped where it is, nothing written any more), the clone
//! `lxc-snapshot` itself makes — `lxc-copy --allowrunning --keepname --keepmac` into the
//! `snaps/` directory, an overlay snapshot of an overlay rootfs (only its upper directory is
//! copied), a full copy of a directory rootfs — the `ts` and `comment` files, `lxc-unfreeze`.
//! The result is crash-consistent (what was written before the freeze, as after a power cut) and
//! indistinguishable for `lxc-snapshot -L`, `-r` and `-d`; the container's processes keep
//! running, paused for the copy only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{LxcClient, LxcError, QUICK_TIMEOUT, Result, run};

/// Bound of one `lxc-snapshot` call (a directory-backed rootfs is copied: minutes for a large
/// container), 1 hour.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(3600);

/// One snapshot directory `<lxcpath>/<name>/snaps/snapN/` as `lxc-snapshot` left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LxcSnapshot {
    /// `lxc-snapshot`'s own name, `snapN`.
    pub lxc_name: String,
    /// The `comment` file's text (empty when there is none).
    pub comment: String,
    /// The `ts` file read as UTC, in Unix seconds; `None` when missing or unparsable.
    pub time: Option<i64>,
}

impl LxcClient {
    /// `<lxcpath>/<name>/snaps`, where `lxc-snapshot` keeps the container's snapshots.
    pub fn snapshots_dir(&self, name: &str) -> PathBuf {
        self.container_dir(name).join("snaps")
    }

    /// The container's snapshots, sorted by their `snapN` name; empty when it has none.
    ///
    /// # Errors
    /// [`LxcError::Io`] when the `snaps` directory exists but cannot be read.
    pub fn list_snapshots(&self, name: &str) -> Result<Vec<LxcSnapshot>> {
        read_snapshots(&self.snapshots_dir(name))
    }

    /// Snapshots the stopped container (`lxc-snapshot -c COMMENT_FILE`); `lxc-snapshot` picks the
    /// `snapN` name. A directory-backed container must be stopped (the tool has no
    /// `--allowrunning`).
    ///
    /// # Errors
    /// [`LxcError::NotFound`], a failing `lxc-snapshot` (with its stderr), a timeout
    /// ([`SNAPSHOT_TIMEOUT`]).
    pub async fn snapshot_create(&self, name: &str, comment_file: &Path) -> Result<()> {
        let comment = comment_file.to_string_lossy();
        self.lxc_snapshot(name, &["-c", &comment]).await
    }

    /// Rolls the stopped container back to `snap` (`lxc-snapshot -r snapN`): its rootfs is
    /// replaced.
    ///
    /// # Errors
    /// As for [`LxcClient::snapshot_create`].
    pub async fn snapshot_restore(&self, name: &str, snap: &str) -> Result<()> {
        self.lxc_snapshot(name, &["-r", snap]).await
    }

    /// Deletes the snapshot `snap` (`lxc-snapshot -d snapN`).
    ///
    /// # Errors
    /// As for [`LxcClient::snapshot_create`].
    pub async fn snapshot_destroy(&self, name: &str, snap: &str) -> Result<()> {
        self.lxc_snapshot(name, &["-d", snap]).await
    }

    /// Snapshots the **running** container `name` (see the module docs: freeze, the clone
    /// `lxc-snapshot` makes, thaw) with `comment` as the comment file's text. Returns the
    /// `snapN` name and how long the container was frozen.
    ///
    /// The container is thawed whatever the copy did; a snapshot half made is removed.
    ///
    /// # Errors
    /// [`LxcError::NotFound`], a failing `lxc-freeze`, `lxc-copy` or `lxc-unfreeze` (the latter
    /// says the container is still frozen and how to thaw it), a timeout
    /// ([`SNAPSHOT_TIMEOUT`]), unwritable `ts`/`comment` files.
    pub async fn snapshot_running(&self, name: &str, comment: &str) -> Result<(String, Duration)> {
        self.must_exist(name)?;
        let config = self
            .read_config(name)?
            .ok_or_else(|| LxcError::NotFound { name: name.to_string(), path: self.path().to_path_buf() })?;
        let overlay =
            config.get("lxc.rootfs.path").is_some_and(|p| p.starts_with("overlay:") || p.starts_with("overlayfs:"));
        let dir = self.snapshots_dir(name);
        let snap = next_snap_name(&dir);
        let dir_arg = dir.to_string_lossy().into_owned();
        let mut copy = vec!["-n", name, "-N", &snap, "-p", &dir_arg, "--allowrunning", "--keepname", "--keepmac"];
        if overlay {
            copy.push("--snapshot");
        }
        // lxc-snapshot creates the directory; lxc-copy does not.
        std::fs::create_dir_all(&dir).map_err(|source| LxcError::Io { path: dir.clone(), source })?;
        let started = Instant::now();
        run("lxc-freeze", &self.args(&["-n", name]), None, QUICK_TIMEOUT).await?;
        let copied = run("lxc-copy", &self.args(&copy), None, SNAPSHOT_TIMEOUT).await;
        let thawed = match run("lxc-unfreeze", &self.args(&["-n", name]), None, QUICK_TIMEOUT).await {
            Ok(_) => Ok(()),
            // Once more: a frozen container is a down one.
            Err(_) => run("lxc-unfreeze", &self.args(&["-n", name]), None, QUICK_TIMEOUT).await.map(|_| ()),
        };
        let frozen = started.elapsed();
        let written = match &copied {
            Ok(_) => write_snapshot_files(&dir.join(&snap), comment),
            Err(_) => Ok(()),
        };
        if copied.is_err() || written.is_err() {
            // Nothing half-made stays behind.
            if dir.join(&snap).join("config").is_file() {
                let _ = self.lxc_snapshot(name, &["-d", &snap]).await;
            }
        }
        if let Err(e) = thawed {
            return Err(match e {
                LxcError::Command { command, status, stderr } => LxcError::Command {
                    command,
                    status,
                    stderr: format!("{stderr}\n(the container is still frozen: thaw it with `lxc-unfreeze -n {name}`)"),
                },
                e => e,
            });
        }
        copied?;
        written?;
        Ok((snap, frozen))
    }

    async fn lxc_snapshot(&self, name: &str, args: &[&str]) -> Result<()> {
        self.must_exist(name)?;
        let mut a = vec!["-n", name];
        a.extend_from_slice(args);
        run("lxc-snapshot", &self.args(&a), None, SNAPSHOT_TIMEOUT).await?;
        Ok(())
    }
}

/// The first `snapN` not present in `dir`, as `lxc-snapshot` picks it.
fn next_snap_name(dir: &Path) -> String {
    (0..).map(|i| format!("snap{i}")).find(|n| !dir.join(n).exists()).expect("a free name")
}

/// Writes `lxc-snapshot`'s `ts` (now, UTC, `YYYY:MM:DD HH:MM:SS`: read back by
/// [`LxcClient::list_snapshots`] as UTC) and `comment` files into the snapshot directory `snap`.
fn write_snapshot_files(snap: &Path, comment: &str) -> Result<()> {
    let fmt = time::macros::format_description!("[year]:[month]:[day] [hour]:[minute]:[second]");
    let ts = time::OffsetDateTime::now_utc().format(fmt).unwrap_or_default();
    super::write_atomic(&snap.join("ts"), ts.as_bytes(), 0o644)?;
    super::write_atomic(&snap.join("comment"), comment.as_bytes(), 0o644)
}

/// Reads the `snapN` directories of `dir` (see [`LxcSnapshot`]).
fn read_snapshots(dir: &Path) -> Result<Vec<LxcSnapshot>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(LxcError::Io { path: dir.to_path_buf(), source }),
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let Some(lxc_name) = ent.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !lxc_name.starts_with("snap") || !ent.path().is_dir() {
            continue;
        }
        let comment = std::fs::read_to_string(ent.path().join("comment")).unwrap_or_default();
        let time = std::fs::read_to_string(ent.path().join("ts")).ok().and_then(|t| parse_ts(&t));
        out.push(LxcSnapshot { lxc_name, comment, time });
    }
    out.sort_by(|a, b| a.lxc_name.cmp(&b.lxc_name));
    Ok(out)
}

/// `YYYY:MM:DD HH:MM:SS` read as UTC, in Unix seconds.
fn parse_ts(text: &str) -> Option<i64> {
    let fmt = time::macros::format_description!("[year]:[month]:[day] [hour]:[minute]:[second]");
    time::PrimitiveDateTime::parse(text.trim(), fmt).ok().map(|d| d.assume_utc().unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_snapshot_name_is_the_first_free_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(next_snap_name(&dir.path().join("missing")), "snap0");
        for n in ["snap0", "snap1", "snap3"] {
            std::fs::create_dir(dir.path().join(n)).unwrap();
        }
        assert_eq!(next_snap_name(dir.path()), "snap2");
        let snap = dir.path().join("snap2");
        std::fs::create_dir(&snap).unwrap();
        write_snapshot_files(&snap, "pgo-20260101-000000\nbefore\n").unwrap();
        let read = read_snapshots(dir.path()).unwrap();
        let s = read.iter().find(|s| s.lxc_name == "snap2").unwrap();
        assert_eq!(s.comment, "pgo-20260101-000000\nbefore\n");
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!(s.time.is_some_and(|t| (now - 5..=now + 5).contains(&t)), "{:?}", s.time);
    }

    #[test]
    fn snapshot_directories_are_read_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_snapshots(&dir.path().join("missing")).unwrap(), vec![]);
        for (n, comment, ts) in [("snap1", None, "2026:01:02 03:04:05\n"), ("snap0", Some("pgo-x\ndesc\n"), "bad")] {
            let p = dir.path().join(n);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("ts"), ts).unwrap();
            if let Some(c) = comment {
                std::fs::write(p.join("comment"), c).unwrap();
            }
        }
        std::fs::write(dir.path().join("snapfile"), "").unwrap();
        std::fs::create_dir(dir.path().join("other")).unwrap();
        assert_eq!(
            read_snapshots(dir.path()).unwrap(),
            vec![
                LxcSnapshot { lxc_name: "snap0".into(), comment: "pgo-x\ndesc\n".into(), time: None },
                LxcSnapshot { lxc_name: "snap1".into(), comment: String::new(), time: Some(1_767_323_045) },
            ]
        );
    }
}
