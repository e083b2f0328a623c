//! The per-container SSH key pair, kept in the share directory as the seed does.
//!
//! Layout: `<share>/.keys/<vmid>` (OpenSSH private key, mode 0600) and `<share>/.keys/<vmid>.pub`
//! (one `ssh-ed25519 …` line). The public key is installed into the container at creation (PVE
//! `ssh-public-keys`, or `authorized_keys` for the lxc backend) and authorized for `config` by the
//! base role; `configure` and `snapshot` log in with the private key. The private key is never
//! logged and never written to an artifact.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};

/// Paths of one container's key pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// The private key file (`<share>/.keys/<vmid>`).
    pub private: PathBuf,
    /// The public key file (`<share>/.keys/<vmid>.pub`).
    pub public: PathBuf,
    /// The public key line (`ssh-ed25519 AAAA… comment`).
    pub public_line: String,
}

/// The key directory `<share>/.keys`.
pub fn key_dir(share: &Path) -> PathBuf {
    share.join(".keys")
}

/// Returns the key pair of `vmid`, generating an ed25519 pair when the private key is missing.
///
/// The directory is created with mode 0700, the private key with 0600 (written to a temporary
/// file and renamed, so a crash never leaves half a key). An existing private key with group or
/// other permissions is refused, as OpenSSH would refuse to use it.
///
/// # Errors
/// I/O failures, an unreadable or malformed existing key, unsafe permissions.
pub fn ensure(share: &Path, vmid: u32, comment: &str) -> Result<KeyPair> {
    let dir = key_dir(share);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    let private = dir.join(vmid.to_string());
    let public = dir.join(format!("{vmid}.pub"));
    let key = if private.exists() {
        let mode = std::fs::metadata(&private)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(crate::error::Hinted::new(
                format!("{}: private key is accessible by others (mode {:o})", private.display(), mode & 0o777),
                crate::error::Hint::command(["chmod".to_string(), "600".into(), private.display().to_string()]),
            )
            .into());
        }
        PrivateKey::read_openssh_file(&private)
            .with_context(|| format!("{}: not an OpenSSH private key", private.display()))?
    } else {
        let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).context("cannot generate an ed25519 key")?;
        key.set_comment(comment);
        let pem = key.to_openssh(LineEnding::LF).context("cannot encode the private key")?;
        let mut tmp = tempfile::Builder::new().prefix(".tmp-key-").tempfile_in(&dir)?;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
        tmp.write_all(pem.as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(&private).map_err(|e| e.error).with_context(|| format!("cannot write {}", private.display()))?;
        key
    };
    let public_line = key.public_key().to_openssh().context("cannot encode the public key")?;
    let want = format!("{public_line}\n");
    if std::fs::read_to_string(&public).ok().as_deref() != Some(want.as_str()) {
        let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o644).open(&public)?;
        f.write_all(want.as_bytes())?;
    }
    Ok(KeyPair { private, public, public_line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_once_and_reuses() {
        let share = tempfile::tempdir().unwrap();
        let a = ensure(share.path(), 101, "ct101").unwrap();
        assert!(a.public_line.starts_with("ssh-ed25519 "));
        let mode = std::fs::metadata(&a.private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = ensure(share.path(), 101, "ct101").unwrap();
        assert_eq!(a, b);
        std::fs::set_permissions(&a.private, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(ensure(share.path(), 101, "x").is_err());
    }
}
