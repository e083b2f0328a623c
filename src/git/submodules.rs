//! Reading a repository's submodule tree with gix (no git process, no network).
//!
//! For each repository we read `.gitmodules` from its working tree exactly as written (the URL a
//! user committed, not the one `git submodule init` may have rewritten into `.git/config`), the
//! gitlink recorded in its index, and whether the submodule is checked out. Checked-out
//! submodules are opened and walked in turn, to any depth (bounded by [`MAX_DEPTH`] against
//! cycles made with symlinks).
//!
//! Pushing is not done here: gix cannot push, the `rewrite`/`publish` steps use the git CLI.

use std::collections::HashMap;
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

/// One `[submodule "name"]` section of `.gitmodules` as written.
struct Entry {
    name: String,
    path: String,
    url: Option<String>,
    /// 1-based lines of the `path` and `url` keys (the last of each in the section), when found.
    path_line: Option<usize>,
    url_line: Option<usize>,
}

/// The 1-based line of the last `key = …` of every section of a `.gitmodules` text, read in one
/// pass (gix does not report positions; a scan of the whole text per submodule made reading a
/// `.gitmodules` quadratic in its submodules). A plain scan for messages: a section is matched
/// by its header as git writes it, `[submodule "name"]` (runs of whitespace as one space), keys
/// case-insensitively.
struct KeyLines(HashMap<String, HashMap<String, usize>>);

impl KeyLines {
    fn new(text: &str) -> Self {
        let mut sections: HashMap<String, HashMap<String, usize>> = HashMap::new();
        let mut header: Option<String> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with('[') {
                header = Some(t.split_whitespace().collect::<Vec<_>>().join(" "));
                continue;
            }
            let k = t.split(['=', ' ', '\t']).next().unwrap_or("");
            if let Some(h) = &header
                && !k.is_empty()
            {
                sections.entry(h.clone()).or_default().insert(k.to_ascii_lowercase(), i + 1);
            }
        }
        Self(sections)
    }

    /// The line of the last `key = …` in section `[submodule "name"]`.
    fn get(&self, name: &str, key: &str) -> Option<usize> {
        let header = format!("[submodule \"{}\"]", name.replace('\\', "\\\\").replace('"', "\\\""));
        self.0.get(&header)?.get(&key.to_ascii_lowercase()).copied()
    }
}

/// Why git must never see `url` (a submodule URL from `.gitmodules`), or `None` when it is an
/// ordinary URL or path. Refused:
///
/// * a URL starting with `-`: a `git` command line would read it as an option;
/// * `<transport>::<address>`, git's remote-helper syntax (`ext::` runs any command, `fd::`
///   talks over inherited file descriptors, any other name runs `git-remote-<name>`); git
///   recognises it whenever the part before `::` consists of URL-scheme characters;
/// * control characters (the URL is printed in tables and logs).
///
/// The URL itself is not quoted in the message: it may carry credentials.
pub fn refused_url(url: &str) -> Option<String> {
    const HINT: &str = "use an https://, ssh:// or scp-form (host:path) URL, or a relative path";
    if url.starts_with('-') {
        return Some(format!("the URL starts with `-`, which git would read as a command-line option; {HINT}"));
    }
    let scheme = url
        .char_indices()
        .take_while(|&(i, c)| c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || "+-.".contains(c))))
        .count();
    if scheme > 0 && url[scheme..].starts_with("::") {
        let transport = &url[..scheme];
        let what = match transport.to_ascii_lowercase().as_str() {
            "ext" => "runs an arbitrary command".to_string(),
            "fd" => "talks to inherited file descriptors".to_string(),
            _ => format!("runs the remote helper `git-remote-{transport}`"),
        };
        return Some(format!("the URL uses git's remote-helper transport `{transport}::`, which {what}; {HINT}"));
    }
    if let Some(c) = url.chars().find(|c| c.is_control()) {
        return Some(format!("the URL contains the control character U+{:04X}; {HINT}", c as u32));
    }
    None
}

/// Reads `.gitmodules` of a working tree as written, one [`Entry`] per section, in file order.
fn read_gitmodules(workdir: &Path, display: &Path) -> Result<Vec<Entry>, String> {
    let file = workdir.join(".gitmodules");
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", display.display())),
    };
    let lines = KeyLines::new(&String::from_utf8_lossy(&bytes));
    let modules = gix::submodule::File::from_bytes(&bytes, file.clone(), &gix::config::File::default())
        .map_err(|e| format!("cannot parse: {e}"))?;
    let mut out = Vec::new();
    for name in modules.names() {
        let path = modules.path(name).map_err(|e| format!("submodule `{name}`: {e}"))?;
        let url =
            modules.config().string_by("submodule", Some(name), "url").map(|u| u.to_string()).filter(|u| !u.is_empty());
        let name = name.to_string();
        let (path_line, url_line) = (lines.get(&name, "path"), lines.get(&name, "url"));
        out.push(Entry { path: path.to_string(), url, path_line, url_line, name });
    }
    Ok(out)
}

/// Drops the entries git must never act on, recording a problem at the line of each: a URL
/// [`refused_url`] refuses, and a `path` already used by an earlier entry (git would check
/// two submodules out into one directory, and which one an artifact names would be a guess).
fn check_entries(entries: Vec<Entry>, display: &Path, problems: &mut Problems) -> Vec<Entry> {
    let at = |line: Option<usize>, name: &str, key: &str| {
        let mut loc = Location::file(display).with_key(format!("submodule.{name}.{key}"));
        loc.line = line;
        loc
    };
    let mut kept: Vec<Entry> = Vec::with_capacity(entries.len());
    // The index in `kept` of each path (a map: a scan of `kept` per entry was quadratic).
    let mut at_path: HashMap<String, usize> = HashMap::with_capacity(entries.len());
    for e in entries {
        if let Some(why) = e.url.as_deref().and_then(refused_url) {
            problems.add(at(e.url_line, &e.name, "url"), format!("submodule `{}`: {why}", e.name));
            continue;
        }
        let path = e.path.trim_end_matches('/');
        if let Some(first) = at_path.get(path).map(|&i| &kept[i]) {
            let first_at = first.path_line.map(|l| format!(" (line {l})")).unwrap_or_default();
            problems.add(
                at(e.path_line, &e.name, "path"),
                format!(
                    "submodule `{}` has path `{path}`, already used by submodule `{}`{first_at}: each path may \
                     be registered once",
                    e.name, first.name
                ),
            );
            continue;
        }
        at_path.insert(path.to_string(), kept.len());
        kept.push(e);
    }
    kept
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
        Ok(e) => check_entries(e, &display, problems),
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
    for Entry { name, path, url, .. } in entries {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_urls() {
        let hint = "use an https://, ssh:// or scp-form (host:path) URL, or a relative path";
        assert_eq!(
            refused_url("ext::sh -c touch% /tmp/pwned").unwrap(),
            format!("the URL uses git's remote-helper transport `ext::`, which runs an arbitrary command; {hint}")
        );
        assert_eq!(
            refused_url("fd::3,4").unwrap(),
            format!(
                "the URL uses git's remote-helper transport `fd::`, which talks to inherited file descriptors; {hint}"
            )
        );
        assert_eq!(
            refused_url("persistent-https::https://host/x.git").unwrap(),
            format!(
                "the URL uses git's remote-helper transport `persistent-https::`, which runs the remote helper \
                 `git-remote-persistent-https`; {hint}"
            )
        );
        assert_eq!(
            refused_url("--upload-pack=touch /tmp/pwned").unwrap(),
            format!("the URL starts with `-`, which git would read as a command-line option; {hint}")
        );
        assert_eq!(
            refused_url("https://host/\u{1b}[2J.git").unwrap(),
            format!("the URL contains the control character U+001B; {hint}")
        );
        for ok in [
            "https://git.example.com/a/b.git",
            "ssh://git@host:2222/a.git",
            "git@git.example.com:homelab/broker.git",
            "../sibling.git",
            "/srv/git/x.git",
            "file:///srv/git/x.git",
            "https://host/a::b.git",
            "host:path::x",
        ] {
            assert_eq!(refused_url(ok), None, "{ok}");
        }
    }

    #[test]
    fn key_lines_follow_sections() {
        let text = "[submodule \"a\"]\n\tpath = libs/a\n\turl = ../a.git\n[submodule \"b\"]\n\tURL=../b.git\n\tpath = libs/a\n\
                    [submodule  \"a\"]\n\tpath = libs/a2\n";
        let lines = KeyLines::new(text);
        assert_eq!(lines.get("a", "path"), Some(8), "the last in a repeated section");
        assert_eq!(lines.get("a", "url"), Some(3));
        assert_eq!(lines.get("b", "url"), Some(5));
        assert_eq!(lines.get("b", "PATH"), Some(6));
        assert_eq!(lines.get("c", "path"), None);
    }
}
