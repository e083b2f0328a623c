//! The inputs digest of a container ([`inputs_digest`]): what a step's success is recorded under,
//! so that a re-run skips the steps whose inputs did not change.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::inventory::{ContainerSpec, Inventory};
use crate::settings::PublicSettings;

/// File names never part of a digest: `*.local.*` (machine-local overrides and secrets, git-ignored).
fn is_local_file(name: &str) -> bool {
    name.contains(".local.") || name.ends_with(".local")
}

/// One file of a tree as it enters the digest.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TreeFile {
    rel: String,
    /// Git-style mode: `100644`, `100755` or `120000` (symlink; content = link target).
    mode: &'static str,
    path: PathBuf,
}

/// Lists the files of the tree at `dir`, sorted by relative path (`/`-separated).
///
/// Walks like git would see the working tree: `.gitignore` files apply (so build outputs such as
/// `target/` do not count), hidden files are included, `.git` entries (directories, and the files
/// submodules have) are skipped, as are `*.local.*` files and every directory in `exclude`
/// (absolute paths: the base tree and the other containers' trees when `dir` is the monorepo root).
fn tree_files(dir: &Path, exclude: &[PathBuf]) -> Result<Vec<TreeFile>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    let exclude: Vec<PathBuf> = exclude.to_vec();
    let walker = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(false)
        .git_global(false)
        .ignore(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            let name = e.file_name().to_string_lossy();
            if name == ".git" || (e.depth() > 0 && exclude.iter().any(|x| x == e.path())) {
                return false;
            }
            !(e.file_type().is_some_and(|t| !t.is_dir()) && is_local_file(&name))
        })
        .build();
    for entry in walker {
        let entry = entry.map_err(|e| Error::Failed(anyhow::anyhow!("cannot walk {}: {e}", dir.display())))?;
        let Some(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .unwrap_or(entry.path())
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let mode = if ft.is_symlink() {
            "120000"
        } else {
            use std::os::unix::fs::PermissionsExt;
            let meta = entry
                .metadata()
                .map_err(|e| Error::Failed(anyhow::anyhow!("cannot stat {}: {e}", entry.path().display())))?;
            if meta.permissions().mode() & 0o111 != 0 { "100755" } else { "100644" }
        };
        out.push(TreeFile { rel, mode, path: entry.path().to_path_buf() });
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Feeds one length-prefixed field to the hasher (unambiguous framing).
fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

fn hash_tree(h: &mut Sha256, label: &str, dir: Option<&Path>, exclude: &[PathBuf]) -> Result<()> {
    field(h, label.as_bytes());
    let files = match dir {
        Some(d) => tree_files(d, exclude)?,
        None => Vec::new(),
    };
    h.update((files.len() as u64).to_be_bytes());
    let mut buf = vec![0u8; 64 * 1024];
    for f in files {
        field(h, f.rel.as_bytes());
        field(h, f.mode.as_bytes());
        let io = |e: std::io::Error| Error::Failed(anyhow::anyhow!("cannot read {}: {e}", f.path.display()));
        if f.mode == "120000" {
            let target = std::fs::read_link(&f.path).map_err(io)?;
            field(h, target.to_string_lossy().as_bytes());
        } else {
            let mut file = std::fs::File::open(&f.path).map_err(io)?;
            let len = file.metadata().map_err(io)?.len();
            h.update(len.to_be_bytes());
            let mut seen = 0u64;
            loop {
                let n = file.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                seen += n as u64;
                h.update(&buf[..n]);
            }
            if seen != len {
                return Err(Error::Failed(anyhow::anyhow!(
                    "{} changed while it was read for the inputs digest",
                    f.path.display()
                )));
            }
        }
    }
    Ok(())
}

/// The inputs digest of container `spec`: `sha256:<64 hex>` over
///
/// 1. the [`ContainerSpec`] serialized as JSON (so every `container*.env` value counts);
/// 2. the lib tree `<root>/<spec.dir>`: each file's `/`-separated relative path, git-style mode
///    (`100644`/`100755`/`120000`) and content (a symlink's target), sorted by path;
/// 3. the base tree `<root>/<inv.base>` the same way (empty when there is none);
/// 4. the resolved globals (`globals.json` overlaid by `globals.local.json`), which every lib's
///    configuration sees;
/// 5. the settings that shape what is built (see [`ShapingSettings`]): template, storage, node,
///    host, network defaults, share, Gitea host and login. How the tool connects (port, user,
///    auth kind) does not count, and secrets never do: after changing `PASSWORD` or a token,
///    re-run with `--force`.
///
/// `.git`, `*.local.*` and git-ignored files are left out, and so is `artifacts` (the artifacts
/// directory, when it lies inside a tree; pass it canonical, like `root`). For the control plane
/// (`dir` = `.`) the lib tree is the monorepo root without `libs/` (the other containers) and the
/// base tree.
///
/// # Errors
/// [`Error::Failed`] when a file cannot be read.
pub fn inputs_digest(root: &Path, inv: &Inventory, spec: &ContainerSpec, artifacts: &Path) -> Result<String> {
    let mut h = Sha256::new();
    field(&mut h, b"proxmox-gitops inputs digest v2");
    let spec_json = serde_json::to_vec(spec).map_err(|e| Error::Failed(e.into()))?;
    field(&mut h, &spec_json);
    let lib_dir = root.join(&spec.dir);
    let base_dir = inv.base.as_ref().map(|b| root.join(b));
    let mut exclude: Vec<PathBuf> = base_dir.iter().cloned().collect();
    exclude.push(artifacts.to_path_buf());
    if spec.dir == Path::new(".") || spec.dir.as_os_str().is_empty() {
        let lib_dir = root.to_path_buf();
        exclude.push(lib_dir.join("libs"));
        for c in &inv.containers {
            if c.name != spec.name {
                exclude.push(root.join(&c.dir));
            }
        }
        exclude.retain(|p| p != &lib_dir);
        hash_tree(&mut h, "lib", Some(&lib_dir), &exclude)?;
    } else {
        hash_tree(&mut h, "lib", Some(&lib_dir), &exclude)?;
    }
    hash_tree(&mut h, "base", base_dir.as_deref(), &[artifacts.to_path_buf()])?;
    field(&mut h, b"globals");
    field(&mut h, &serde_json::to_vec(&inv.globals).map_err(|e| Error::Failed(e.into()))?);
    field(&mut h, b"settings");
    let shaping = ShapingSettings::of(&inv.settings);
    field(&mut h, &serde_json::to_vec(&shaping).map_err(|e| Error::Failed(e.into()))?);
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// The part of [`PublicSettings`] that changes what `provision` builds or what `configure`
/// hands a lib, hashed into [`inputs_digest`]. Connection details (port, user, token id, auth
/// kind) are left out: reaching the same host another way builds the same containers.
#[derive(Debug, Serialize)]
pub struct ShapingSettings<'a> {
    /// `PROXMOX_HOST`: another cluster means other containers.
    pub pve_host: Option<&'a str>,
    /// `PROXMOX_NODE`.
    pub pve_node: Option<&'a str>,
    /// `PROXMOX_GATEWAY`.
    pub gateway: Option<&'a str>,
    /// `PROXMOX_MASK` (prefix length).
    pub mask: Option<u8>,
    /// `PROXMOX_INTERFACE` (net0's name in the container).
    pub interface: &'a str,
    /// `PROXMOX_BRIDGE`.
    pub bridge: &'a str,
    /// `PROXMOX_STORAGE` (template storage).
    pub storage: Option<&'a str>,
    /// `PROXMOX_TEMPLATE` (the ostemplate).
    pub template: Option<&'a str>,
    /// `PROXMOX_SHARE` on the runner (keys, snapshots).
    pub share: &'a Path,
    /// `HOST` (Gitea), which libs receive.
    pub gitea_host: Option<&'a str>,
    /// `LOGIN`, which libs receive (e.g. the broker's user).
    pub gitea_login: Option<&'a str>,
}

impl<'a> ShapingSettings<'a> {
    /// Borrows the shaping fields of `s`.
    pub fn of(s: &'a PublicSettings) -> Self {
        Self {
            pve_host: s.pve_host.as_deref(),
            pve_node: s.pve_node.as_deref(),
            gateway: s.gateway.as_deref(),
            mask: s.mask,
            interface: &s.interface,
            bridge: &s.bridge,
            storage: s.storage.as_deref(),
            template: s.template.as_deref(),
            share: &s.share,
            gitea_host: s.gitea_host.as_deref(),
            gitea_login: s.gitea_login.as_deref(),
        }
    }
}

/// The key a snapshot's success is recorded under: the inputs digest bound to the workflow run.
pub fn run_digest(digest: &str, run_id: &str) -> String {
    let mut h = Sha256::new();
    field(&mut h, digest.as_bytes());
    field(&mut h, run_id.as_bytes());
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files() {
        assert!(is_local_file("container.local.env"));
        assert!(is_local_file("config.local.json"));
        assert!(is_local_file("x.local"));
        assert!(!is_local_file("locale.json"));
    }
}
