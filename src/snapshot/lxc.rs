//! [`CtSnapshots`] for the local LXC backend, over the `lxc-snapshot` tool (argv only).
//!
//! `lxc-snapshot` names snapshots itself (`snap0`, `snap1` …) and keeps them in
//! `<lxcpath>/<container>/snaps/snapN/` with a `ts` file (`YYYY:MM:DD HH:MM:SS`, local time of
//! the host) and the optional `comment` file given with `-c`. This module writes our name
//! (`pgo-…`) as the comment's first line and the description after it, and maps names back by
//! reading that directory; snapshots without a comment are listed under their `snapN` name (and
//! so never pruned). `ts` is read as UTC (the runner's clock is UTC in CI). Creating a snapshot
//! of a directory-backed container needs it stopped (`lxc-snapshot` has no `--allowrunning`):
//! a running container gives [`CtSnapshotError::NotSupported`]. Rollback
//! (`lxc-snapshot -r snapN`) replaces the container's rootfs and also needs it stopped.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::ct::{CtSnapshotError, CtSnapshotInfo, CtSnapshots};
use super::remote::BoxFuture;

/// Snapshots of the local LXC container `name` under `lxcpath` (`/var/lib/lxc` by default).
#[derive(Debug, Clone)]
pub struct LxcSnapshots {
    name: String,
    lxcpath: PathBuf,
}

/// A snapshot directory and what it says.
struct SnapDir {
    /// `snapN`.
    lxc_name: String,
    info: CtSnapshotInfo,
}

impl LxcSnapshots {
    /// Container `name` under `lxcpath`.
    pub fn new(name: &str, lxcpath: &Path) -> Self {
        Self { name: name.into(), lxcpath: lxcpath.into() }
    }

    fn scan(&self) -> Result<Vec<SnapDir>, CtSnapshotError> {
        let dir = self.lxcpath.join(&self.name).join("snaps");
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.failed(format!("cannot read {}: {e}", dir.display()))),
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
            let mut lines = comment.lines();
            let name = lines.next().map(str::trim).filter(|l| !l.is_empty()).unwrap_or(&lxc_name).to_string();
            let description = lines.collect::<Vec<_>>().join("\n");
            let snaptime = std::fs::read_to_string(ent.path().join("ts")).ok().and_then(|t| {
                let fmt = time::macros::format_description!("[year]:[month]:[day] [hour]:[minute]:[second]");
                time::PrimitiveDateTime::parse(t.trim(), fmt).ok().map(|d| d.assume_utc().unix_timestamp())
            });
            out.push(SnapDir { lxc_name, info: CtSnapshotInfo { name, description, snaptime } });
        }
        out.sort_by(|a, b| a.lxc_name.cmp(&b.lxc_name));
        Ok(out)
    }

    fn failed(&self, message: String) -> CtSnapshotError {
        CtSnapshotError::Failed { target: self.target(), message }
    }

    fn lxc_name_of(&self, name: &str) -> Result<String, CtSnapshotError> {
        self.scan()?
            .into_iter()
            .find(|s| s.info.name == name)
            .map(|s| s.lxc_name)
            .ok_or_else(|| CtSnapshotError::NotFound { target: self.target(), name: name.into() })
    }

    /// True when `lxc-info -s` reports the container RUNNING.
    async fn running(&self) -> Result<bool, CtSnapshotError> {
        let out = tokio::process::Command::new("lxc-info")
            .arg("-n")
            .arg(&self.name)
            .arg("-P")
            .arg(&self.lxcpath)
            .arg("-s")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| self.failed(format!("cannot run lxc-info: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(self.failed(format!("lxc-info -s failed: {}", err.trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).contains("RUNNING"))
    }

    async fn lxc_snapshot(&self, args: &[&str]) -> Result<(), CtSnapshotError> {
        let out = tokio::process::Command::new("lxc-snapshot")
            .arg("-n")
            .arg(&self.name)
            .arg("-P")
            .arg(&self.lxcpath)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| self.failed(format!("cannot run lxc-snapshot: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let msg = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").to_string();
        Err(self.failed(format!("lxc-snapshot {} failed ({}): {msg}", args.join(" "), out.status)))
    }
}

impl CtSnapshots for LxcSnapshots {
    fn target(&self) -> String {
        format!("LXC container {}", self.name)
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        description: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            if self.scan()?.iter().any(|s| s.info.name == name) {
                return Err(CtSnapshotError::NameInUse { target: self.target(), name: name.into() });
            }
            if self.running().await? {
                return Err(CtSnapshotError::NotSupported {
                    target: self.target(),
                    detail: "the container is running, and lxc-snapshot copies a directory-backed rootfs \
                             only while the container is stopped"
                        .into(),
                });
            }
            let mut comment = tempfile::NamedTempFile::new().map_err(|e| self.failed(format!("temp file: {e}")))?;
            use std::io::Write;
            writeln!(comment, "{name}")
                .and_then(|_| writeln!(comment, "{description}"))
                .map_err(|e| self.failed(e.to_string()))?;
            let path = comment.path().to_string_lossy().into_owned();
            self.lxc_snapshot(&["-c", &path]).await?;
            Ok(None)
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<CtSnapshotInfo>, CtSnapshotError>> {
        Box::pin(async move { Ok(self.scan()?.into_iter().map(|s| s.info).collect()) })
    }

    fn rollback<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            let snap = self.lxc_name_of(name)?;
            self.lxc_snapshot(&["-r", &snap]).await?;
            Ok(None)
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, CtSnapshotError>> {
        Box::pin(async move {
            let snap = self.lxc_name_of(name)?;
            self.lxc_snapshot(&["-d", &snap]).await?;
            Ok(None)
        })
    }
}
