//! Moving files to a container: an in-memory tar archive ([`TarUpload`]) streamed to `tar -x`
//! there, into a private temporary directory that is removed afterwards, and reading a file back.

use std::path::Path;
use std::time::Duration;

use super::{Connection, SshError};

/// Builds an in-memory tar archive to upload with [`Connection::upload_tar`] (the lib's files,
/// its env file, the configuration contract).
pub struct TarUpload {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for TarUpload {
    fn default() -> Self {
        Self::new()
    }
}

impl TarUpload {
    /// An empty archive.
    pub fn new() -> Self {
        let mut builder = tar::Builder::new(Vec::new());
        builder.mode(tar::HeaderMode::Deterministic);
        builder.follow_symlinks(false);
        Self { builder }
    }

    /// Adds a file with `data` and `mode` (e.g. 0o600) at `path` inside the archive.
    pub fn file(&mut self, path: &str, data: &[u8], mode: u32) -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        self.builder.append_data(&mut h, path, data)
    }

    /// Adds the directory tree `src` under `prefix`, skipping `.git`. Files keep their
    /// executable bit; everything else becomes 0644/0755.
    pub fn dir(&mut self, prefix: &str, src: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mut stack = vec![src.to_path_buf()];
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        self.builder.append_data(&mut h, prefix, std::io::empty())?;
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)?.filter_map(|e| e.ok()).collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                if e.file_name() == ".git" {
                    continue;
                }
                let path = e.path();
                let rel = path.strip_prefix(src).unwrap_or(&path);
                let name = format!("{prefix}/{}", rel.display());
                let ft = e.file_type()?;
                if ft.is_dir() {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o755);
                    h.set_size(0);
                    h.set_mtime(0);
                    self.builder.append_data(&mut h, &name, std::io::empty())?;
                    stack.push(path);
                } else if ft.is_file() {
                    let data = std::fs::read(&path)?;
                    let exec = e.metadata()?.permissions().mode() & 0o111 != 0;
                    self.file(&name, &data, if exec { 0o755 } else { 0o644 })?;
                }
            }
        }
        Ok(())
    }

    /// Finishes the archive and returns its bytes.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        self.builder.into_inner()
    }
}

impl Connection {
    /// Creates a private temporary directory (mode 0700, owned by root when `as_root`) and
    /// returns its path.
    pub async fn make_temp_dir(&self, as_root: bool) -> Result<String, SshError> {
        let out = self.check(&["mktemp", "-d", "/tmp/pgo.XXXXXXXX"], None, as_root, Duration::from_secs(30)).await?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !path.starts_with("/tmp/pgo.") {
            return Err(SshError::Command {
                name: self.target.name.clone(),
                what: "mktemp".into(),
                detail: format!("unexpected output `{path}`"),
            });
        }
        Ok(path)
    }

    /// Removes a directory made by [`Connection::make_temp_dir`] (best effort is not enough for
    /// secrets: an error is returned when removal fails).
    pub async fn remove_dir(&self, path: &str, as_root: bool) -> Result<(), SshError> {
        self.check(&["rm", "-rf", "--", path], None, as_root, Duration::from_secs(30)).await.map(|_| ())
    }

    /// Uploads a tar archive (built with [`tar::Builder`]) by streaming it to `tar -x` on the
    /// container, extracting below `dest` (which must exist). Modes in the archive are kept, so a
    /// file added with mode 0600 arrives with 0600.
    pub async fn upload_tar(
        &self,
        dest: &str,
        archive: &[u8],
        as_root: bool,
        timeout: Duration,
    ) -> Result<(), SshError> {
        self.check(&["tar", "-x", "--no-same-owner", "-p", "-C", dest, "-f", "-"], Some(archive), as_root, timeout)
            .await
            .map(|_| ())
    }

    /// Reads a file from the container (as root when `as_root`).
    pub async fn read_file(&self, path: &str, as_root: bool) -> Result<Vec<u8>, SshError> {
        Ok(self.check(&["cat", "--", path], None, as_root, Duration::from_secs(30)).await?.stdout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_upload_keeps_modes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        let mut b = TarUpload::new();
        b.dir("lib", dir.path()).unwrap();
        b.file("env", b"X=1\n", 0o600).unwrap();
        let bytes = b.finish().unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let got: Vec<(String, u32)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("lib".to_string(), 0o755),
                ("lib/sub".to_string(), 0o755),
                ("lib/sub/a.txt".to_string(), 0o644),
                ("env".to_string(), 0o600)
            ]
        );
    }
}
