//! Reading a repository's submodule tree with gix (no git process, no network).
//!
//! For each repository we read `.gitmodules` from its working tree exactly as written (the URL a
//! user committed, not the one `git submodule init` may have rewritten into `.git/config`), the
//! gitlink recorded in its index, and whether the submodule is checked out. Checked-out
//! submodules are opened and walked in turn, to any depth (bounded by [`MAX_DEPTH`] against
//! cycles made with symlinks).
//!
//! Pushing is not done here: gix cannot push, the `rewrite`/`publish` steps use the git CLI.

use std::path::Path;

use crate::error::{Location, Problems};
use crate::inventory::Submodule;

/// Deepest submodule nesting walked.
pub const MAX_DEPTH: usize = 32;

/// What [`read_tree`] found.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// True when `root` is a git repository.
    pub is_repo: bool,
    /// The `HEAD` commit of the root repository (hex), if any.
    pub head: Option<String>,
    /// The submodules, recursively.
    pub submodules: Vec<Submodule>,
}

fn problem(file: &Path, msg: impl std::fmt::Display) -> Problems {
    let mut p = Problems::new();
    p.add(Location::file(file), msg.to_string());
    p
}

/// Opens a repository reading only its own configuration: no global or system config, no
/// environment overrides, no spawning of `git` to locate its installation config. What we read
/// (`.gitmodules`, the index, `HEAD`) does not depend on them, and each submodule is opened this
/// way, so the saving is paid back per submodule.
fn open(dir: &Path) -> gix::Result<gix::Repository> {
    gix::open_opts(dir, gix::open::Options::isolated())
}

/// The commit `HEAD` points at (hex), without peeling: a branch or a detached `HEAD` names a
/// commit directly, so the object itself need not be read (what `head_id()` would do to peel
/// tags). `None` on an unborn branch.
fn head_commit(repo: &gix::Repository) -> Option<String> {
    repo.head().ok()?.id().map(|id| id.to_string())
}

/// Opens the repository whose working tree is `root` and reads its submodules recursively.
///
/// A directory that is not a git repository yields an empty tree with `is_repo == false`.
///
/// # Errors
/// A malformed `.gitmodules` (file named, relative to `root`) or an unreadable repository.
pub fn read_tree(root: &Path) -> Result<Tree, Problems> {
    if !root.join(".git").exists() {
        return Ok(Tree::default());
    }
    let repo = open(root).map_err(|e| problem(Path::new(".git"), format!("cannot open the repository: {e}")))?;
    let head = head_commit(&repo);
    let mut problems = Problems::new();
    let submodules = walk(&repo, root, Path::new(""), 0, &mut problems);
    problems.into_result()?;
    Ok(Tree { is_repo: true, head, submodules })
}

/// Reads `.gitmodules` of a working tree as written: `(name, path, url)` per section, in file order.
fn read_gitmodules(workdir: &Path, display: &Path) -> Result<Vec<(String, String, Option<String>)>, String> {
    let file = workdir.join(".gitmodules");
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", display.display())),
    };
    let modules = gix::submodule::File::from_bytes(&bytes, file.clone(), &gix::config::File::default())
        .map_err(|e| format!("cannot parse: {e}"))?;
    let mut out = Vec::new();
    for name in modules.names() {
        let path = modules.path(name).map_err(|e| format!("submodule `{name}`: {e}"))?;
        let url =
            modules.config().string_by("submodule", Some(name), "url").map(|u| u.to_string()).filter(|u| !u.is_empty());
        out.push((name.to_string(), path.to_string(), url));
    }
    Ok(out)
}

fn walk(
    repo: &gix::Repository,
    workdir: &Path,
    prefix: &Path,
    depth: usize,
    problems: &mut Problems,
) -> Vec<Submodule> {
    let display = prefix.join(".gitmodules");
    let entries = match read_gitmodules(workdir, &display) {
        Ok(e) => e,
        Err(msg) => {
            problems.add(Location::file(&display), msg);
            return Vec::new();
        }
    };
    if entries.is_empty() {
        return Vec::new();
    }
    let index = repo.index_or_load_from_head_or_empty().ok();
    let mut out = Vec::with_capacity(entries.len());
    for (name, path, url) in entries {
        let commit = index.as_ref().and_then(|idx| {
            idx.entry_by_path(path.as_str().into())
                .filter(|e| e.mode == gix::index::entry::Mode::COMMIT)
                .map(|e| e.id.to_string())
        });
        let sub_dir = workdir.join(&path);
        let checked_out = sub_dir.join(".git").exists();
        let mut head = None;
        let mut children = Vec::new();
        if checked_out {
            match open(&sub_dir) {
                Ok(sub) => {
                    let h = head_commit(&sub);
                    if h != commit {
                        head = h;
                    }
                    if depth + 1 < MAX_DEPTH {
                        children = walk(&sub, &sub_dir, &prefix.join(&path), depth + 1, problems);
                    } else {
                        problems.add(
                            Location::file(prefix.join(&path)),
                            format!("submodules nested deeper than {MAX_DEPTH} levels (a cycle?)"),
                        );
                    }
                }
                Err(e) => problems.add(
                    Location::file(prefix.join(&path)),
                    format!("submodule `{name}` is checked out but cannot be opened: {e}"),
                ),
            }
        }
        let url = url.map(crate::remote_url::RemoteUrl::new);
        out.push(Submodule { name, path: prefix.join(&path), url, commit, checked_out, head, children });
    }
    out
}

/// Flattens a submodule tree depth-first (parents before children).
pub fn flatten(tree: &[Submodule]) -> Vec<&Submodule> {
    let mut out = Vec::new();
    fn go<'a>(s: &'a [Submodule], out: &mut Vec<&'a Submodule>) {
        for m in s {
            out.push(m);
            go(&m.children, out);
        }
    }
    go(tree, &mut out);
    out
}
