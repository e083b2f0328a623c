//! One actor per container: the lxc backend's counterpart of the pve backend's lease.
//!
//! Two runs on one host (two runners, or a monorepo pipeline and a lib's own pipeline started by
//! the same push) may provision the same container at the same moment; Gitea's concurrency
//! groups do not serialise them. Both used to plan `create` and both cloned the base: the second
//! `lxc-copy` failed. Every write sequence of a container — planning against live state again,
//! then create/clone, config, start, update in place, recreate, destroy, snapshot, rollback —
//! now holds an exclusive advisory lock (`flock`, std's [`File::try_lock`]) on
//! `<lxcpath>/.<name>.lock`, next to the base's bootstrap lock. The lock is the kernel's: it is
//! released when the holder closes the file or dies (kill -9 included), so no lease can outlive
//! its run, and it serialises threads of one process too (each acquisition opens the file anew).
//!
//! The holder writes who it is into the file (`HOST:PID[:run-ID]:NONCE pid PID since UNIX_SECS`,
//! see [`crate::backend::pve::lease::holder`]) and empties it on release, so a waiter can log
//! whom it waits for. The wait polls with a capped backoff and is bounded by
//! [`super::LxcOptions::lock_timeout`] (`--timeout-lease`, 900 s by default); then it fails
//! naming the container, the lock file and how to see its holder (`fuser -v FILE`).
//!
//! The lock file is never removed (not even by a destroy): a waiter holding the old file open
//! would otherwise lock a file nobody else sees.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::error::{Hint, Hinted, TimeoutOption};

/// First pause between two tries while the lock is held by another run; doubled up to
/// [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(50);
/// Longest pause between two tries.
const MAX_POLL: Duration = Duration::from_secs(1);

/// An exclusive lock on one container, held until dropped (the file is emptied, then closed,
/// which releases the `flock`).
#[derive(Debug)]
pub struct ContainerLock {
    file: File,
    path: PathBuf,
    /// When the lock was busy at first: how long this run waited, and the holder line the lock
    /// file showed (empty when the holder had not written it yet).
    pub waited: Option<(Duration, String)>,
}

impl ContainerLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ContainerLock {
    fn drop(&mut self) {
        // Best effort: a stale line in a released lock file misleads nobody who tries the lock.
        let _ = self.file.set_len(0);
    }
}

/// What the holder writes into the lock file: `HOLDER pid PID since UNIX_SECS`.
fn holder_line() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{} pid {} since {since}\n", crate::backend::pve::lease::holder(), std::process::id())
}

/// The holder line of the lock file at `path`, trimmed; empty when unreadable or empty.
fn read_holder(path: &Path) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The lock file of container `name` in the LXC path `lxc_path`: `<lxcpath>/.<name>.lock`.
pub fn lock_path(lxc_path: &Path, name: &str) -> PathBuf {
    lxc_path.join(format!(".{name}.lock"))
}

/// Takes the exclusive lock on the lock file `path` of container `name`, creating the file when
/// missing, waiting at most `timeout` while another run (process or thread) holds it; logs once
/// that it waits and for whom.
///
/// # Errors
/// The file cannot be opened, created or locked (other than busy), or it is still held after
/// `timeout`: the message names the container, the file, its holder line and `fuser -v FILE`.
pub async fn acquire(path: &Path, name: &str, timeout: Duration) -> Result<ContainerLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open the lock file {} of container `{name}`", path.display()))?;
    let started = Instant::now();
    let mut pause = FIRST_POLL;
    let mut seen: Option<String> = None;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot lock {} (container `{name}`)", path.display()))
                );
            }
        }
        let holder = read_holder(path);
        if seen.as_deref() != Some(holder.as_str()) {
            let who = if holder.is_empty() { "another run".to_string() } else { holder.clone() };
            tracing::info!(
                "container `{name}` is being changed by {who} (lock file {}); waiting for it, at most {} s",
                path.display(),
                timeout.as_secs()
            );
            seen = Some(holder);
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            let holder = read_holder(path);
            let who = if holder.is_empty() { String::new() } else { format!(", held by {holder}") };
            return Err(Hinted::new(
                format!(
                    "container `{name}` is still locked by another proxmox-gitops run after {} s (lock file {}{who}); \
                     see which process holds it with `fuser -v {}` (or `lsof {}`), and wait for it or stop it",
                    elapsed.as_secs(),
                    path.display(),
                    path.display(),
                    path.display()
                ),
                Hint::RaiseTimeout { option: TimeoutOption::Lease, now_secs: Some(timeout.as_secs()) },
            )
            .into());
        }
        tokio::time::sleep(pause.min(timeout - elapsed)).await;
        pause = (pause * 2).min(MAX_POLL);
    }
    // Ours now: say who we are for the next waiter.
    let _ = file.set_len(0);
    let _ = file.write_at(holder_line().as_bytes(), 0);
    let waited = seen.map(|h| (started.elapsed(), h));
    Ok(ContainerLock { file, path: path.to_path_buf(), waited })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_free_lock_is_taken_at_once_and_names_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".ct.lock");
        let lock = acquire(&path, "ct", Duration::from_secs(5)).await.unwrap();
        assert_eq!(lock.waited, None);
        let line = read_holder(&path);
        assert!(line.contains(&format!(" pid {} since ", std::process::id())), "{line}");
        drop(lock);
        assert_eq!(read_holder(&path), "", "a released lock file is emptied");
        // The file stays (see the module docs) and is taken again.
        assert!(path.is_file());
        acquire(&path, "ct", Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn a_held_lock_times_out_naming_the_container_the_file_and_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".ct.lock");
        let held = acquire(&path, "ct", Duration::from_secs(5)).await.unwrap();
        let holder = read_holder(&path);
        let e = acquire(&path, "ct", Duration::from_millis(200)).await.unwrap_err().to_string();
        let file = path.display();
        assert_eq!(
            e,
            format!(
                "container `ct` is still locked by another proxmox-gitops run after 0 s (lock file {file}, held by \
                 {holder}); see which process holds it with `fuser -v {file}` (or `lsof {file}`), and wait for it \
                 or stop it; raise --timeout-lease (now 0 s)"
            )
        );
        drop(held);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiter_gets_the_lock_when_the_holder_releases_it_and_says_whom_it_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".ct.lock");
        let held = acquire(&path, "ct", Duration::from_secs(5)).await.unwrap();
        let holder = read_holder(&path);
        let p = path.clone();
        let waiter = tokio::spawn(async move { acquire(&p, "ct", Duration::from_secs(30)).await });
        // One thread: the waiter runs to its first pause (the lock busy) before the release.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        let lock = waiter.await.unwrap().unwrap();
        assert_eq!(lock.waited.as_ref().map(|(_, h)| h.as_str()), Some(holder.as_str()));
        assert!(read_holder(lock.path()).contains(" since "));
    }
}
