//! Trust-on-first-use host keys: the fingerprint recorded in a container's own known-hosts file
//! (`<artifacts>/known_hosts/<name>`), and when a (re)created container's new key replaces it.

use std::path::Path;
use std::time::SystemTime;

use time::OffsetDateTime;

/// The SHA-256 fingerprint (`SHA256:…`) of the first key recorded in `known_hosts`.
pub fn recorded_fingerprint(known_hosts: &Path) -> Option<String> {
    let text = std::fs::read_to_string(known_hosts).ok()?;
    text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).find_map(|l| {
        let mut parts = l.split_whitespace();
        let _hosts = parts.next()?;
        let algo = parts.next()?;
        let data = parts.next()?;
        let key = ssh_key::PublicKey::from_openssh(&format!("{algo} {data}")).ok()?;
        Some(key.fingerprint(ssh_key::HashAlg::Sha256).to_string())
    })
}

/// True when the container's host key must be learned again: proxmox-gitops created the
/// container at `created_at` ([`crate::model::Provision::created_at`], carried across provision
/// runs that left it in place), after the key in `known_hosts` was recorded, or no key is
/// recorded yet. When the key was recorded is the file's modification time: the file belongs to
/// this one container and only ssh writes it, when it records a key (our client config leaves
/// `UpdateHostKeys` off). Once a connection has recorded the new key, the same creation no
/// longer replaces it, so a later change is refused again; an unknown creation time never
/// replaces a recorded key.
pub fn recreated_since_recorded(created_at: Option<OffsetDateTime>, known_hosts: &Path) -> bool {
    let Some(created) = created_at else {
        return false;
    };
    match std::fs::metadata(known_hosts).and_then(|m| m.modified()) {
        Ok(recorded) => recorded < SystemTime::from(created),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_key_is_replaced_only_when_recorded_before_the_last_creation() {
        let dir = tempfile::tempdir().unwrap();
        let kh = dir.path().join("known_hosts");
        // Whole seconds: every file system keeps them exactly.
        let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
        let set_recorded = |at: OffsetDateTime| {
            std::fs::File::options().write(true).open(&kh).unwrap().set_modified(SystemTime::from(at)).unwrap();
        };
        assert!(recreated_since_recorded(Some(now), &kh), "no record yet: learned");
        assert!(!recreated_since_recorded(None, &kh), "unknown creation");
        std::fs::write(&kh, "x").unwrap();
        set_recorded(now - time::Duration::minutes(1));
        assert!(recreated_since_recorded(Some(now), &kh), "recorded before the creation");
        assert!(!recreated_since_recorded(None, &kh), "unknown creation never replaces a record");
        assert!(!recreated_since_recorded(Some(now - time::Duration::minutes(2)), &kh), "recorded after it");
        set_recorded(now);
        assert!(!recreated_since_recorded(Some(now), &kh), "recorded at the same instant: kept");
    }

    #[test]
    fn fingerprint_of_recorded_key() {
        let dir = tempfile::tempdir().unwrap();
        let kh = dir.path().join("kh");
        std::fs::write(
            &kh,
            "10.0.3.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
        )
        .unwrap();
        let fp = recorded_fingerprint(&kh).unwrap();
        assert!(fp.starts_with("SHA256:"), "{fp}");
        assert_eq!(recorded_fingerprint(&dir.path().join("missing")), None);
    }
}
