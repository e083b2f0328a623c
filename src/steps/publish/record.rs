//! The record of the Actions secrets `publish` wrote, so that a second publish can say
//! `unchanged` although Gitea never hands a secret's value back.
//!
//! For each secret written the record keeps, under `"<gitea URL> <scope> <NAME>"` (e.g.
//! `http://10.0.0.2:8080 org main PASSWORD`), the HMAC-SHA256 of the value, keyed with a random
//! 32-byte key made once per installation. A bare hash of a low-entropy password could be
//! guessed from the file by trying passwords; without the key it cannot. The scope and name are
//! part of the message, so the same password in two organizations gives two unrelated digests.
//!
//! Both files live beside the other local state (the learned PVE task durations), in
//! `$XDG_CACHE_HOME/proxmox-gitops/` (else `$HOME/.cache/proxmox-gitops/`): `publish-secrets.key`
//! (the key, hex) and `publish-secrets.json` (the digests), both mode 0600 in a directory made
//! with mode 0700. Losing them costs nothing but one rewrite of every secret: a secret without a
//! record is written again. Deleting `publish-secrets.json` (or `publish --rewrite-secrets`)
//! forces that rewrite, e.g. after a secret was changed in Gitea's UI, which the record cannot
//! see.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::gitea::VariableScope;

/// The key file in the record directory.
pub const KEY_FILE: &str = "publish-secrets.key";
/// The digests file in the record directory.
pub const RECORD_FILE: &str = "publish-secrets.json";

/// The default record directory: `$XDG_CACHE_HOME/proxmox-gitops`, else
/// `$HOME/.cache/proxmox-gitops` (where [`crate::pve::task_wait::default_task_times_file`] keeps its
/// file); `None` when neither variable is set.
pub fn default_record_dir() -> Option<PathBuf> {
    crate::pve::task_wait::default_task_times_file().and_then(|f| f.parent().map(Path::to_path_buf))
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RecordFile {
    /// `"<gitea> <scope> <NAME>"` → hex HMAC-SHA256 of the value.
    secrets: BTreeMap<String, String>,
}

/// The digests of the secrets last written, with the installation's key.
pub struct SecretRecord {
    /// `None`: kept in memory only ([`SecretRecord::in_memory`]).
    dir: Option<PathBuf>,
    key: [u8; 32],
    entries: BTreeMap<String, String>,
}

impl std::fmt::Debug for SecretRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretRecord").field("dir", &self.dir).field("entries", &self.entries.len()).finish()
    }
}

fn entry_key(gitea: &str, scope: &VariableScope, name: &str) -> String {
    format!("{} {scope} {name}", gitea.trim_end_matches('/'))
}

impl SecretRecord {
    /// Opens the record in `dir`: creates the directory (0700) and the key (0600) when missing,
    /// reads the digests (a missing file is an empty record).
    ///
    /// # Errors
    /// The directory or key cannot be made or read, the key file is not 64 hex digits, or the
    /// record is not the JSON this module writes; each names the file and how to recover.
    pub fn open(dir: &Path) -> anyhow::Result<SecretRecord> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let key_path = dir.join(KEY_FILE);
        let key = match std::fs::read_to_string(&key_path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim()).ok().filter(|b| b.len() == 32);
                let Some(bytes) = bytes else {
                    bail!(
                        "{}: expected 64 hex digits (the record's key); delete it and {} to have publish make a \
                         new key and write every secret again",
                        key_path.display(),
                        RECORD_FILE
                    );
                };
                let mut key = [0u8; 32];
                key.copy_from_slice(&bytes);
                key
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
                let key: [u8; 32] = rand::random();
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&key_path)
                    .with_context(|| format!("cannot create {}", key_path.display()))?;
                f.write_all(hex::encode(key).as_bytes())
                    .with_context(|| format!("cannot write {}", key_path.display()))?;
                // A record made with another key is worthless: start afresh.
                let _ = std::fs::remove_file(dir.join(RECORD_FILE));
                key
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", key_path.display())),
        };
        let path = dir.join(RECORD_FILE);
        let entries =
            match std::fs::read_to_string(&path) {
                Ok(text) => serde_json::from_str::<RecordFile>(&text)
                    .with_context(|| {
                        format!(
                            "{}: not a record of published secrets; delete it to have publish write every secret again",
                            path.display()
                        )
                    })?
                    .secrets,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
            };
        Ok(SecretRecord { dir: Some(dir.to_path_buf()), key, entries })
    }

    /// An empty record with a fresh key that is never saved (no place to keep one): every
    /// secret is written.
    pub fn in_memory() -> SecretRecord {
        SecretRecord { dir: None, key: rand::random(), entries: BTreeMap::new() }
    }

    /// The keyed digest of `value` as the secret `name` of `scope` on the Gitea at `gitea`
    /// (hex HMAC-SHA256).
    pub fn digest(&self, gitea: &str, scope: &VariableScope, name: &str, value: &SecretString) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(entry_key(gitea, scope, name).as_bytes());
        mac.update(b"\n");
        mac.update(value.expose_secret().as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The digest recorded for the secret, if any.
    pub fn recorded(&self, gitea: &str, scope: &VariableScope, name: &str) -> Option<&str> {
        self.entries.get(&entry_key(gitea, scope, name)).map(String::as_str)
    }

    /// Records `digest` as written (kept in memory until [`SecretRecord::save`]).
    pub fn set(&mut self, gitea: &str, scope: &VariableScope, name: &str, digest: String) {
        self.entries.insert(entry_key(gitea, scope, name), digest);
    }

    /// Forgets every secret of `gitea` (`publish --rewrite-secrets`).
    pub fn forget(&mut self, gitea: &str) {
        let prefix = format!("{} ", gitea.trim_end_matches('/'));
        self.entries.retain(|k, _| !k.starts_with(&prefix));
    }

    /// Writes the record (mode 0600, through a temporary file renamed over the old one); an
    /// in-memory record is not written.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self) -> anyhow::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(RECORD_FILE);
        let tmp = dir.join(format!(".{RECORD_FILE}.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(&RecordFile { secrets: self.entries.clone() })?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(o: &str) -> VariableScope {
        VariableScope::Org { org: o.into() }
    }

    #[test]
    fn digests_are_keyed_per_installation_scope_and_name_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("state");
        let pw = SecretString::from("hunter2".to_string());
        let mut r = SecretRecord::open(&d).unwrap();
        let a = r.digest("http://g", &org("main"), "PASSWORD", &pw);
        assert_eq!(a.len(), 64);
        assert_ne!(a, r.digest("http://g", &org("tasks"), "PASSWORD", &pw), "another org");
        assert_ne!(a, r.digest("http://g", &org("main"), "LOGIN", &pw), "another name");
        assert_ne!(a, r.digest("http://h", &org("main"), "PASSWORD", &pw), "another Gitea");
        assert_ne!(a, hex::encode(<Sha256 as sha2::Digest>::digest(b"hunter2")), "not a bare hash");
        r.set("http://g/", &org("main"), "PASSWORD", a.clone());
        r.save().unwrap();
        for (f, mode) in [(KEY_FILE, 0o600), (RECORD_FILE, 0o600)] {
            let m = std::fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(m, mode, "{f}");
        }
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        let text = std::fs::read_to_string(d.join(RECORD_FILE)).unwrap();
        assert!(!text.contains("hunter2"), "{text}");

        let r2 = SecretRecord::open(&d).unwrap();
        assert_eq!(r2.recorded("http://g", &org("main"), "PASSWORD"), Some(a.as_str()));
        assert_eq!(r2.digest("http://g", &org("main"), "PASSWORD", &pw), a, "same key after a reopen");
        assert_eq!(r2.recorded("http://g", &org("stage"), "PASSWORD"), None);

        // Another installation (another key) gets another digest.
        let other = SecretRecord::open(&dir.path().join("other")).unwrap();
        assert_ne!(other.digest("http://g", &org("main"), "PASSWORD", &pw), a);
    }

    #[test]
    fn forget_drops_one_gitea_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = SecretRecord::open(dir.path()).unwrap();
        r.set("http://g", &org("main"), "A", "1".into());
        r.set("http://h", &org("main"), "A", "2".into());
        r.forget("http://g/");
        assert_eq!(r.recorded("http://g", &org("main"), "A"), None);
        assert_eq!(r.recorded("http://h", &org("main"), "A"), Some("2"));

        std::fs::write(dir.path().join(RECORD_FILE), "[1]").unwrap();
        let e = format!("{:#}", SecretRecord::open(dir.path()).unwrap_err());
        assert!(e.contains(RECORD_FILE) && e.contains("delete it"), "{e}");
        std::fs::write(dir.path().join(KEY_FILE), "short").unwrap();
        let e = format!("{:#}", SecretRecord::open(dir.path()).unwrap_err());
        assert!(e.contains(KEY_FILE) && e.contains("64 hex digits"), "{e}");
    }
}
