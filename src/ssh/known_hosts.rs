//! Trust-on-first-use host keys: the fingerprint recorded in a container's own known-hosts file
//! (`<artifacts>/known_hosts/<name>`), and when a (re)created container's new key replaces it.

use std::path::Path;

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

/// True when the container's host key must be learned again: the provision artifact at
/// `provision` says this provision run created the container (`created`), and that artifact is
/// newer than the recorded key (or no key is recorded). Once a later connection has recorded the
/// new key, the same `created` artifact no longer replaces it, so a changed key is refused again.
pub fn recreated_since_recorded(created: bool, provision: &Path, known_hosts: &Path) -> bool {
    if !created {
        return false;
    }
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(known_hosts), mtime(provision)) {
        (None, _) => true,
        (Some(recorded), Some(provisioned)) => provisioned > recorded,
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_key_is_replaced_only_for_a_newer_creation() {
        let dir = tempfile::tempdir().unwrap();
        let prov = dir.path().join("provision.json");
        let kh = dir.path().join("known_hosts");
        std::fs::write(&prov, "{}").unwrap();
        assert!(recreated_since_recorded(true, &prov, &kh), "no record yet");
        assert!(!recreated_since_recorded(false, &prov, &kh));
        std::fs::write(&kh, "x").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&prov).unwrap().set_modified(old).unwrap();
        assert!(!recreated_since_recorded(true, &prov, &kh), "key learned after the creation");
        std::fs::File::options()
            .write(true)
            .open(&kh)
            .unwrap()
            .set_modified(old - std::time::Duration::from_secs(60))
            .unwrap();
        assert!(recreated_since_recorded(true, &prov, &kh), "creation after the record");
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
