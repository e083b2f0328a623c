//! Creates that a killed run left half made.
//!
//! A create clones the base (`lxc-copy`), writes the container's config and guest files, and writes
//! its metadata (`proxmox-gitops.json`) last: only that file makes the container ours. A run
//! killed in between (the runner's host rebooted, `kill -9` of the job) leaves a container without
//! it, or a directory `lxc-copy` did not finish, and every later plan refused it as "not made by
//! proxmox-gitops": the deploy could not converge without a hand on the host.
//!
//! So the create writes a marker first, `<lxcpath>/.<name>.creating` (the vmid and the run, beside
//! the container's lock file), and removes it once the metadata is written. A container (or a
//! bare directory) under that name without metadata, with a marker for the same vmid, is what an
//! interrupted create of ours left: it never ran and holds no data, so the next create of that
//! vmid removes it and starts over, under the container's lock (so its writer is gone). Without
//! the marker, or for another vmid, the container stays untouched and refused as before.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The marker of an unfinished create of container `name`: `<lxcpath>/.<name>.creating`.
pub fn marker_path(lxc_path: &Path, name: &str) -> PathBuf {
    lxc_path.join(format!(".{name}.creating"))
}

/// Writes the marker at `path` (atomically): `vmid VMID` and the run's holder line.
///
/// # Errors
/// The file cannot be written.
pub fn mark(path: &Path, vmid: u32) -> Result<()> {
    let text = format!("vmid {vmid}\nby {}\n", crate::backend::pve::lease::holder());
    crate::lxc::write_atomic(path, text.as_bytes(), 0o644)
        .with_context(|| format!("cannot write the create marker {}", path.display()))
}

/// The vmid the marker at `path` names; `None` when there is no marker or it is unreadable.
pub fn marked_vmid(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix("vmid ")).and_then(|v| v.trim().parse().ok())
}

/// Removes the marker at `path` (a missing one is fine).
///
/// # Errors
/// It exists and cannot be removed.
pub fn clear(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove the create marker {}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_names_its_vmid_and_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let path = marker_path(dir.path(), "web");
        assert_eq!(path, dir.path().join(".web.creating"));
        assert_eq!(marked_vmid(&path), None);
        mark(&path, 120).unwrap();
        assert_eq!(marked_vmid(&path), Some(120));
        clear(&path).unwrap();
        assert_eq!(marked_vmid(&path), None);
        clear(&path).unwrap();
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(marked_vmid(&path), None);
    }
}
