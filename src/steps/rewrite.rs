//! Step `rewrite`: a working copy of the monorepo whose submodules all live on the Gitea
//! control plane.
//!
//! The user's checkout is only read. In a fresh **working copy** (default
//! `<artifacts>/worktree`, built next to its final place and renamed over the previous one only
//! when complete):
//!
//! 1. the monorepo's `HEAD` is fetched from the checkout and checked out as branch `main`;
//! 2. every lib that is a plain directory (`libs/<name>/` as a tree, not a gitlink) becomes a
//!    submodule — and so do the base role `base/`, the shared helpers `config/libraries/` and each
//!    task `tasks/<name>/` (repositories `base`, `libraries`, `<name>`), as the seed publishes
//!    them: its own repository with one commit holding the directory's tree (the
//!    "fresh commit" of the seed, made deterministic: tool identity, dated like the monorepo's
//!    `HEAD`);
//! 3. every submodule, recursively, is fetched from the **checked-out** submodule in the user's
//!    checkout (never from its old URL: the old host may be gone or unreachable) at the commit
//!    its parent records, and its URL in `.gitmodules` is rewritten to
//!    `<gitea>/<org>/<name>.git`;
//! 4. each repository whose `.gitmodules` or gitlinks changed gets one tool commit whose
//!    message ends in `[skip ci]`, children before parents.
//!
//! The same input always produces the same commit ids, so publishing twice changes nothing.
//!
//! The repository name comes from the old URL's last path component (any form: see
//! [`repo_name_from_url`]) or, for converted directories, from the directory name, sanitized to
//! Gitea's rule ([`sanitize_repo_name`]). Two different contents mapping to one name (compared
//! case-insensitively, as Gitea does) are an input error.
//!
//! Output: the artifact `remotes.json` ([`Remotes`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::error::{Error, Location, Problems, Result};
use crate::git_cli::{Git, GitError};

/// Deepest submodule nesting followed (against cycles).
pub const MAX_DEPTH: usize = 16;
/// Marker file (inside the working copy's `.git`) that lets a later run replace the directory.
const MARKER: &str = "proxmox-gitops-worktree";

/// Options of the rewrite step.
#[derive(Debug, Clone)]
pub struct RewriteOptions {
    /// The user's checkout (read only).
    pub repo: PathBuf,
    /// Where the working copy is built (replaced on every run; must not be the checkout).
    pub workdir: PathBuf,
    /// The Gitea base URL, e.g. `http://10.0.3.2:8080` (see [`crate::gitea::base_url`]).
    pub gitea: String,
    /// The organization the repositories live in (default `main`).
    pub org: String,
    /// The monorepo's repository name; default: the checkout's directory name, sanitized.
    pub name: Option<String>,
}

/// The artifact `remotes.json` (kind `remotes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remotes {
    /// The Gitea base URL (no trailing slash, no credentials).
    pub gitea: String,
    /// The organization.
    pub org: String,
    /// The user's checkout the working copy was made from.
    pub source: PathBuf,
    /// The working copy.
    pub workdir: PathBuf,
    /// The monorepo itself.
    pub monorepo: MonorepoRemote,
    /// Every submodule, recursively, parents before children.
    pub modules: Vec<ModuleRemote>,
}

impl Artifact for Remotes {
    const KIND: &'static str = "remotes";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// The monorepo's entry in [`Remotes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonorepoRemote {
    /// Repository name on Gitea.
    pub repo: String,
    /// `<gitea>/<org>/<repo>.git`.
    pub new_url: String,
    /// The checkout's `HEAD`.
    pub source_commit: String,
    /// The working copy's `main` (equal to `source_commit` when nothing was rewritten).
    pub commit: String,
}

/// One submodule in [`Remotes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRemote {
    /// Path relative to the monorepo root.
    pub path: PathBuf,
    /// The submodule's name in its parent's `.gitmodules`.
    pub name: String,
    /// Repository name on Gitea.
    pub repo: String,
    /// The URL as written before (`None` for a directory converted to a submodule).
    pub old_url: Option<String>,
    /// `<gitea>/<org>/<repo>.git`.
    pub new_url: String,
    /// The commit the parent recorded before (`None` for a converted directory).
    pub source_commit: Option<String>,
    /// The commit the working copy records now (what is published).
    pub commit: String,
    /// True when the lib was a plain directory and became a submodule.
    pub converted: bool,
    /// The parent submodule's path, `None` for the monorepo.
    pub parent: Option<PathBuf>,
}

impl Remotes {
    /// Every repository to publish, once each: modules deepest first, the monorepo last, as
    /// `(repo name, working directory, commit, module path or None for the monorepo)`.
    pub fn publish_order(&self) -> Vec<(String, PathBuf, String, Option<PathBuf>)> {
        let mut mods: Vec<&ModuleRemote> = self.modules.iter().collect();
        mods.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for m in mods {
            if seen.insert(m.repo.to_lowercase()) {
                out.push((m.repo.clone(), self.workdir.join(&m.path), m.commit.clone(), Some(m.path.clone())));
            }
        }
        out.push((self.monorepo.repo.clone(), self.workdir.clone(), self.monorepo.commit.clone(), None));
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Pure URL logic
// ---------------------------------------------------------------------------------------------

/// Gitea's longest repository name (`CreateRepoOption.name`: `MaxSize(100)`).
pub const MAX_REPO_NAME: usize = 100;

/// Sanitizes `raw` to a repository name Gitea accepts.
///
/// Gitea's rule (`CreateRepoOption.name` binding `AlphaDashDot;MaxSize(100)` and
/// `IsUsableRepoName`): characters `[A-Za-z0-9_.-]`, at most 100, not `.`, `..` or `-`, not
/// ending in `.git`, `.wiki`, `.rss` or `.atom`. Other characters become `-`; a forbidden
/// suffix's dot becomes `-`.
///
/// # Errors
/// A name that is empty, `.`/`..`/`-` or longer than 100 characters after sanitizing.
pub fn sanitize_repo_name(raw: &str) -> std::result::Result<String, String> {
    let mut s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '-' }).collect();
    for suffix in [".git", ".wiki", ".rss", ".atom"] {
        if s.len() >= suffix.len() && s.to_ascii_lowercase().ends_with(suffix) {
            let at = s.len() - suffix.len();
            s.replace_range(at..at + 1, "-");
        }
    }
    if s.is_empty() || s == "." || s == ".." || s == "-" {
        return Err(format!("`{raw}` gives no usable Gitea repository name"));
    }
    if s.len() > MAX_REPO_NAME {
        return Err(format!("repository name `{s}` is longer than Gitea's {MAX_REPO_NAME} characters"));
    }
    Ok(s)
}

/// The repository name a submodule URL points at, in any form git accepts:
///
/// * `http(s)://[user@]host[:port]/org/name(.git)`, `ssh://…`, `git://…`, `file:///…`;
/// * scp-like `[user@]host:org/name.git`;
/// * relative `../name.git`, `./name`, and local paths `/srv/git/name.git`;
///
/// with any number of trailing slashes. The name is the last path component without `.git`,
/// sanitized with [`sanitize_repo_name`].
///
/// # Errors
/// An empty URL, a URL without a path component (`https://host/`, `../`), or a name Gitea
/// cannot take.
pub fn repo_name_from_url(url: &str) -> std::result::Result<String, String> {
    let trimmed = url.trim();
    if trimmed.is_empty() {
        return Err("the URL is empty".into());
    }
    let path: String = if let Some(idx) = trimmed.find("://") {
        // scheme://[userinfo@]host[:port]/path — take everything after the authority.
        let rest = &trimmed[idx + 3..];
        match rest.find('/') {
            Some(p) => rest[p..].to_string(),
            None => String::new(),
        }
    } else if is_scp_like(trimmed) {
        let colon = trimmed.find(':').expect("scp-like has a colon");
        trimmed[colon + 1..].to_string()
    } else {
        trimmed.to_string()
    };
    // Drop query/fragment in URL forms (rare, but then they are not part of the name).
    let path = path.split(['?', '#']).next().unwrap_or("");
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let last = last.strip_suffix(".git").unwrap_or(last);
    if last.is_empty() || last == "." || last == ".." {
        return Err(format!("`{url}` has no repository name in its path"));
    }
    sanitize_repo_name(last)
}

/// True for git's scp-like syntax `[user@]host:path`: a colon before any slash, and not a
/// local path (git: "if there is a slash before the first colon it is a local path").
fn is_scp_like(s: &str) -> bool {
    match (s.find(':'), s.find('/')) {
        (Some(c), Some(sl)) => c < sl && c > 0,
        (Some(c), None) => c > 0,
        _ => false,
    }
}

/// The new URL of repository `repo`: `<gitea>/<org>/<repo>.git`.
pub fn new_url(gitea: &url::Url, org: &str, repo: &str) -> String {
    format!("{}/{org}/{repo}.git", gitea.as_str().trim_end_matches('/'))
}

// ---------------------------------------------------------------------------------------------
// The working copy
// ---------------------------------------------------------------------------------------------

fn failed(e: GitError) -> Error {
    Error::Failed(anyhow::Error::new(e))
}

struct Ctx<'a> {
    git: Git,
    gitea: url::Url,
    org: &'a str,
    modules: Vec<ModuleRemote>,
    problems: Problems,
}

/// One `.gitmodules` entry.
#[derive(Debug)]
struct Entry {
    name: String,
    path: Option<String>,
    url: Option<String>,
}

/// Reads `.gitmodules` of `dir` with `git config -z --list` (values as written).
fn read_gitmodules(git: &Git, dir: &Path) -> Result<Vec<Entry>> {
    if !dir.join(".gitmodules").is_file() {
        return Ok(Vec::new());
    }
    let out = git.run(dir, ["config", "-f", ".gitmodules", "-z", "--list"]).map_err(failed)?;
    let mut entries: Vec<Entry> = Vec::new();
    for item in out.split('\0').filter(|s| !s.is_empty()) {
        let (key, value) = item.split_once('\n').unwrap_or((item, ""));
        let Some(rest) = key.strip_prefix("submodule.") else { continue };
        let Some((name, var)) = rest.rsplit_once('.') else { continue };
        let idx = match entries.iter().position(|e| e.name == name) {
            Some(i) => i,
            None => {
                entries.push(Entry { name: name.to_string(), path: None, url: None });
                entries.len() - 1
            }
        };
        match var {
            "path" => entries[idx].path = Some(value.to_string()),
            "url" => entries[idx].url = Some(value.to_string()),
            _ => {}
        }
    }
    Ok(entries)
}

/// The id of the gitlink at `path` in `HEAD` of `dir`, if it is one.
fn gitlink(git: &Git, dir: &Path, path: &str) -> Result<Option<String>> {
    let out = git.run(dir, ["ls-tree", "HEAD", "--", path]).map_err(failed)?;
    Ok(out.lines().next().and_then(|l| {
        let mut parts = l.split_whitespace();
        let mode = parts.next()?;
        let _kind = parts.next()?;
        let id = parts.next()?;
        (mode == "160000").then(|| id.to_string())
    }))
}

/// The commit date of `HEAD` in `dir`, as `@<unix> +0000` (the date of tool commits).
fn head_date(git: &Git, dir: &Path) -> Result<String> {
    let ct = git.run(dir, ["log", "-1", "--format=%ct", "HEAD"]).map_err(failed)?;
    Ok(format!("@{} +0000", ct.trim()))
}

/// Runs the rewrite step.
///
/// # Errors
/// [`Error::Input`] for a checkout that is not a git repository, a submodule that is not
/// checked out or lacks its recorded commit, a URL without a usable name, name collisions, a
/// work directory that is the checkout (or holds something else); [`Error::Failed`] when git
/// fails.
pub fn rewrite(opts: &RewriteOptions) -> Result<Remotes> {
    let gitea =
        crate::gitea::base_url(&opts.gitea).map_err(|e| Error::input(Location::file("--gitea"), e.to_string()))?;
    if sanitize_repo_name(&opts.org).ok().as_deref() != Some(opts.org.as_str()) {
        return Err(Error::input(
            Location::file("--org"),
            format!("`{}` is not a valid Gitea organization name", opts.org),
        ));
    }
    let source = opts
        .repo
        .canonicalize()
        .map_err(|e| Error::input(Location::file(&opts.repo), format!("cannot open the repository directory: {e}")))?;
    let git = Git::new();
    if !source.join(".git").exists()
        || !git.check(&source, ["rev-parse", "--verify", "-q", "HEAD^{commit}"]).map_err(failed)?
    {
        return Err(Error::input(Location::file(&opts.repo), "not a git repository with at least one commit"));
    }
    let repo_name = match &opts.name {
        Some(n) => sanitize_repo_name(n).map_err(|m| Error::input(Location::file("--name"), m))?,
        None => {
            let base = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            sanitize_repo_name(&base).map_err(|m| Error::input(Location::file(&opts.repo), m))?
        }
    };

    // The working copy: never the checkout, never inside-out, never someone else's directory.
    let workdir = absolute(&opts.workdir)?;
    if workdir == source || source.starts_with(&workdir) {
        return Err(Error::input(
            Location::file(&opts.workdir),
            "the working copy must not be the checkout or contain it (choose another --workdir)",
        ));
    }
    if workdir.exists() {
        let empty = std::fs::read_dir(&workdir).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty && !workdir.join(".git").join(MARKER).is_file() {
            return Err(Error::input(
                Location::file(&opts.workdir),
                "exists and is not a working copy made by proxmox-gitops; refusing to replace it",
            ));
        }
    }
    let parent = workdir.parent().unwrap_or(Path::new("/")).to_path_buf();
    std::fs::create_dir_all(&parent)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot create {}: {e}", parent.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".pgo-worktree-")
        .tempdir_in(&parent)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot create a directory in {}: {e}", parent.display())))?;
    let wc = tmp.path().to_path_buf();

    git.run(&wc, ["init", "-q", "-b", "main"]).map_err(failed)?;
    std::fs::write(wc.join(".git").join(MARKER), "working copy made by proxmox-gitops rewrite\n")
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write the marker: {e}")))?;
    git.run(&wc, [std::ffi::OsStr::new("fetch"), "-q".as_ref(), source.as_os_str(), "HEAD".as_ref()])
        .map_err(failed)?;
    git.run(&wc, ["checkout", "-q", "-B", "main", "FETCH_HEAD"]).map_err(failed)?;
    let source_commit = git.run(&wc, ["rev-parse", "HEAD"]).map_err(failed)?;

    let mut ctx = Ctx { git, gitea: gitea.clone(), org: &opts.org, modules: Vec::new(), problems: Problems::new() };
    let commit = process(&mut ctx, &wc, &source, Path::new(""), 0, &repo_name)?;
    check_collisions(&ctx.modules, &repo_name, &mut ctx.problems);
    let Ctx { modules, problems, .. } = ctx;
    problems.into_result()?;

    // Replace the previous working copy only now that the new one is complete.
    if workdir.exists() {
        std::fs::remove_dir_all(&workdir).map_err(|e| {
            Error::Failed(anyhow::anyhow!("cannot remove the old working copy {}: {e}", workdir.display()))
        })?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, &workdir)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot move the working copy to {}: {e}", workdir.display())))?;

    Ok(Remotes {
        gitea: gitea.as_str().trim_end_matches('/').to_string(),
        org: opts.org.clone(),
        source,
        workdir,
        monorepo: MonorepoRemote {
            new_url: new_url(&gitea, &opts.org, &repo_name),
            repo: repo_name,
            source_commit,
            commit,
        },
        modules,
    })
}

fn absolute(p: &Path) -> Result<PathBuf> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| Error::Failed(anyhow::anyhow!("no current directory: {e}")))?.join(p)
    };
    // Resolve `..` lexically on the existing prefix, so comparisons with the checkout hold.
    match abs.parent().and_then(|d| d.canonicalize().ok()) {
        Some(dir) => Ok(dir.join(abs.file_name().unwrap_or_default())),
        None => Ok(abs),
    }
}

/// Rewrites the repository at `dir` (working copy path) whose user-side checkout is `src`;
/// `prefix` is its path from the monorepo root. Returns its new `HEAD`.
fn process(ctx: &mut Ctx<'_>, dir: &Path, src: &Path, prefix: &Path, depth: usize, top_name: &str) -> Result<String> {
    let date = head_date(&ctx.git, dir)?;
    let gm_display = prefix.join(".gitmodules");
    let mut changed = false;

    // 1. Plain directories of the monorepo that are repositories of their own on the control
    //    plane become submodules: each lib, the base role, the shared libraries, each task.
    if depth == 0 {
        let listing = ctx
            .git
            .run(dir, ["ls-tree", "HEAD", "--", "libs/", "tasks/", "base", "config/libraries"])
            .map_err(failed)?;
        for line in listing.lines() {
            let Some((meta, path)) = line.split_once('\t') else { continue };
            let mut parts = meta.split_whitespace();
            let (mode, tree) = (parts.next().unwrap_or(""), parts.nth(1).unwrap_or(""));
            if mode != "040000" {
                continue;
            }
            let lib = path.rsplit('/').next().unwrap_or(path).to_string();
            if lib.starts_with('.') {
                continue;
            }
            let repo = match sanitize_repo_name(&lib) {
                Ok(r) => r,
                Err(m) => {
                    ctx.problems.add(Location::file(path), m);
                    continue;
                }
            };
            let url = new_url(&ctx.gitea, ctx.org, &repo);
            let commit = convert_dir(ctx, dir, path, tree, top_name, &url, &date)?;
            ctx.modules.push(ModuleRemote {
                path: PathBuf::from(path),
                name: path.to_string(),
                repo,
                old_url: None,
                new_url: url,
                source_commit: None,
                commit,
                converted: true,
                parent: None,
            });
            changed = true;
        }
    }

    // 2. Existing submodules, recursively.
    let entries = read_gitmodules(&ctx.git, dir)?;
    for e in entries {
        let key = format!("submodule.{}.url", e.name);
        let Some(path) = e.path.clone() else {
            ctx.problems.add(
                Location::file(&gm_display).with_key(format!("submodule.{}.path", e.name)),
                "submodule without a path",
            );
            continue;
        };
        let rel = prefix.join(&path);
        if ctx.modules.iter().any(|m| m.path == rel && m.converted) {
            continue; // added in step 1 above
        }
        let Some(old) = e.url.clone() else {
            ctx.problems.add(Location::file(&gm_display).with_key(&key), "submodule without a url");
            continue;
        };
        let repo = match repo_name_from_url(&old) {
            Ok(r) => r,
            Err(m) => {
                ctx.problems.add(Location::file(&gm_display).with_key(&key), m);
                continue;
            }
        };
        let Some(recorded) = gitlink(&ctx.git, dir, &path)? else {
            ctx.problems.add(
                Location::file(&gm_display).with_key(format!("submodule.{}.path", e.name)),
                format!("`{path}` is listed in .gitmodules but the commit has no submodule there"),
            );
            continue;
        };
        let sub_src = src.join(&path);
        if !sub_src.join(".git").exists() {
            ctx.problems.add(
                Location::file(&rel),
                "submodule is not checked out in the repository; run `git submodule update --init --recursive` first \
                 (its content is taken from the checkout, never from the old URL)",
            );
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            ctx.problems
                .add(Location::file(&rel), format!("submodules nested deeper than {MAX_DEPTH} levels (a cycle?)"));
            continue;
        }
        let sub = dir.join(&path);
        std::fs::create_dir_all(&sub)
            .map_err(|err| Error::Failed(anyhow::anyhow!("cannot create {}: {err}", sub.display())))?;
        ctx.git.run(&sub, ["init", "-q", "-b", "main"]).map_err(failed)?;
        ctx.git
            .run(
                &sub,
                [
                    std::ffi::OsStr::new("fetch"),
                    "-q".as_ref(),
                    "--no-tags".as_ref(),
                    sub_src.as_os_str(),
                    "+refs/*:refs/pgo-source/*".as_ref(),
                    "HEAD".as_ref(),
                ],
            )
            .map_err(failed)?;
        if !ctx.git.check(&sub, ["cat-file", "-e", &format!("{recorded}^{{commit}}")]).map_err(failed)? {
            ctx.problems.add(
                Location::file(&rel),
                format!("the recorded commit {recorded} is not in the checked-out submodule; run `git submodule update --init --recursive`"),
            );
            continue;
        }
        ctx.git.run(&sub, ["checkout", "-q", "-B", "main", &recorded]).map_err(failed)?;
        for r in ctx.git.run(&sub, ["for-each-ref", "--format=%(refname)", "refs/pgo-source/"]).map_err(failed)?.lines()
        {
            ctx.git.run(&sub, ["update-ref", "-d", r]).map_err(failed)?;
        }
        let index = ctx.modules.len();
        let url = new_url(&ctx.gitea, ctx.org, &repo);
        ctx.modules.push(ModuleRemote {
            path: rel.clone(),
            name: e.name.clone(),
            repo,
            old_url: Some(old.clone()),
            new_url: url.clone(),
            source_commit: Some(recorded.clone()),
            commit: recorded.clone(),
            converted: false,
            parent: (!prefix.as_os_str().is_empty()).then(|| prefix.to_path_buf()),
        });
        let commit = process(ctx, &sub, &sub_src, &rel, depth + 1, top_name)?;
        ctx.modules[index].commit = commit.clone();
        if old != url {
            ctx.git.run(dir, ["config", "-f", ".gitmodules", &key, &url]).map_err(failed)?;
            changed = true;
        }
        if commit != recorded {
            ctx.git.run(dir, ["add", "--", &path]).map_err(failed)?;
            changed = true;
        }
    }

    if changed {
        ctx.git.run(dir, ["add", "--", ".gitmodules"]).map_err(failed)?;
        if !ctx.git.check(dir, ["diff", "--cached", "--quiet"]).map_err(failed)? {
            let gitea = ctx.gitea.as_str().trim_end_matches('/').to_string();
            let msg = format!("Point submodules at {gitea}/{} [skip ci]", ctx.org);
            ctx.git.commit(dir, &msg, &date).map_err(failed)?;
        }
    }
    ctx.git.run(dir, ["rev-parse", "HEAD"]).map_err(failed)
}

/// Turns the directory `path` (tree `tree`) of the monorepo working copy `dir` into a submodule
/// repository with one deterministic commit; returns that commit.
fn convert_dir(ctx: &Ctx<'_>, dir: &Path, path: &str, tree: &str, top: &str, url: &str, date: &str) -> Result<String> {
    let g = &ctx.git;
    let msg = format!("Import {path} from {top} [skip ci]");
    let commit = g.commit_tree(dir, tree, &[], &msg, date).map_err(failed)?;
    let tmp_ref = format!("refs/pgo-import/{}", path.replace('/', "_"));
    g.run(dir, ["update-ref", &tmp_ref, &commit]).map_err(failed)?;
    g.run(dir, ["rm", "-r", "-q", "--cached", "--", path]).map_err(failed)?;
    let sub = dir.join(path);
    std::fs::remove_dir_all(&sub)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot remove {}: {e}", sub.display())))?;
    std::fs::create_dir_all(&sub)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot create {}: {e}", sub.display())))?;
    g.run(&sub, ["init", "-q", "-b", "main"]).map_err(failed)?;
    g.run(&sub, [std::ffi::OsStr::new("fetch"), "-q".as_ref(), dir.as_os_str(), tmp_ref.as_ref()]).map_err(failed)?;
    g.run(&sub, ["checkout", "-q", "-B", "main", "FETCH_HEAD"]).map_err(failed)?;
    g.run(dir, ["update-ref", "-d", &tmp_ref]).map_err(failed)?;
    g.run(dir, ["submodule", "--quiet", "add", "--name", path, "--", url, path]).map_err(failed)?;
    Ok(commit)
}

/// Two different contents (different commits, or a converted directory) under one repository
/// name (case-insensitive, as Gitea compares names) are an error; the monorepo's own name too.
fn check_collisions(modules: &[ModuleRemote], monorepo: &str, problems: &mut Problems) {
    let mut by_name: BTreeMap<String, &ModuleRemote> = BTreeMap::new();
    for m in modules {
        let key = m.repo.to_lowercase();
        if key == monorepo.to_lowercase() {
            problems.add(
                Location::file(&m.path),
                format!("repository name `{}` collides with the monorepo's own repository name", m.repo),
            );
            continue;
        }
        match by_name.get(&key) {
            Some(first) if first.commit != m.commit || first.converted || m.converted => problems.add(
                Location::file(&m.path),
                format!(
                    "repository name `{}` collides with `{}` ({}): two different contents cannot be published \
                     as one Gitea repository; rename one of them",
                    m.repo,
                    first.path.display(),
                    first.old_url.as_deref().unwrap_or("converted directory"),
                ),
            ),
            Some(_) => {}
            None => {
                by_name.insert(key, m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_every_url_form() {
        let cases = [
            ("http://192.0.2.1/main/nginx.git", "nginx"),
            ("https://git.example.org/main/nginx", "nginx"),
            ("https://git.example.org:8443/a/b/c/nginx.git/", "nginx"),
            ("http://10.0.0.1:3000/main/nginx.git//", "nginx"),
            ("https://user@git.example.org/main/nginx.git", "nginx"),
            ("https://user:pw@git.example.org/main/nginx.git", "nginx"),
            ("ssh://git@git.example.org/main/nginx.git", "nginx"),
            ("ssh://git@git.example.org:2222/main/nginx.git", "nginx"),
            ("ssh://git.example.org/~user/nginx.git", "nginx"),
            ("git://git.example.org/nginx.git", "nginx"),
            ("file:///srv/git/nginx.git", "nginx"),
            ("git@github.com:stevius10/nginx.git", "nginx"),
            ("github.com:stevius10/nginx", "nginx"),
            ("git@host:nginx.git", "nginx"),
            ("../nginx.git", "nginx"),
            ("../../org/nginx", "nginx"),
            ("./nginx/", "nginx"),
            ("/srv/git/nginx.git", "nginx"),
            ("  https://h/x/nginx.git  ", "nginx"),
            ("https://h/x/my.lib.git", "my.lib"),
            ("https://h/x/My_Lib-2", "My_Lib-2"),
            ("https://h/x/name with space.git", "name-with-space"),
            ("https://h/x/ümlaut.git", "-mlaut"),
            ("https://h/x/repo.wiki.git", "repo-wiki"),
            ("https://h/x/feed.rss", "feed-rss"),
            ("https://h/x/nginx.git?ref=x", "nginx"),
            ("https://h/x/nginx.git.git", "nginx-git"),
        ];
        for (url, want) in cases {
            assert_eq!(repo_name_from_url(url).as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn urls_without_names_are_refused() {
        for url in [
            "",
            "   ",
            "https://host/",
            "https://host",
            "../",
            "..",
            ".",
            "git@host:",
            "ssh://h/.git",
            "https://h/x/.git/",
            "https://h/-",
        ] {
            assert!(repo_name_from_url(url).is_err(), "{url:?} should be refused");
        }
    }

    #[test]
    fn sanitizing() {
        assert_eq!(sanitize_repo_name("a.git").unwrap(), "a-git");
        assert_eq!(sanitize_repo_name("A.ATOM").unwrap(), "A-ATOM");
        assert_eq!(sanitize_repo_name(".git").unwrap(), "-git");
        assert_eq!(sanitize_repo_name("a/b").unwrap(), "a-b");
        assert!(sanitize_repo_name("..").is_err());
        assert!(sanitize_repo_name("-").is_err());
        assert!(sanitize_repo_name(&"x".repeat(101)).is_err());
        assert_eq!(sanitize_repo_name(&"x".repeat(100)).unwrap().len(), 100);
    }

    #[test]
    fn scp_detection() {
        assert!(is_scp_like("git@host:org/x.git"));
        assert!(is_scp_like("host:x"));
        assert!(!is_scp_like("./a:b"));
        assert!(!is_scp_like("/abs/path:x"));
        assert!(!is_scp_like("../x.git"));
        assert!(!is_scp_like(":x"));
    }

    #[test]
    fn new_urls() {
        let g = crate::gitea::base_url("http://127.0.0.1:3000/").unwrap();
        assert_eq!(new_url(&g, "main", "nginx"), "http://127.0.0.1:3000/main/nginx.git");
        let g = crate::gitea::base_url("https://h/gitea").unwrap();
        assert_eq!(new_url(&g, "main", "nginx"), "https://h/gitea/main/nginx.git");
    }

    fn module(path: &str, repo: &str, commit: &str, converted: bool) -> ModuleRemote {
        ModuleRemote {
            path: path.into(),
            name: path.into(),
            repo: repo.into(),
            old_url: (!converted).then(|| format!("../{repo}.git")),
            new_url: String::new(),
            source_commit: None,
            commit: commit.into(),
            converted,
            parent: None,
        }
    }

    #[test]
    fn publish_order_is_deepest_first_once_per_repo_monorepo_last() {
        let mut nested = module("libs/e/vendor/f", "f", "2", false);
        nested.parent = Some("libs/e".into());
        let r = Remotes {
            gitea: "http://g".into(),
            org: "main".into(),
            source: "/src".into(),
            workdir: "/wc".into(),
            monorepo: MonorepoRemote {
                repo: "mono".into(),
                new_url: String::new(),
                source_commit: "0".into(),
                commit: "9".into(),
            },
            modules: vec![
                module("libs/a", "a", "1", false),
                module("libs/e", "e", "3", false),
                nested,
                module("x/a", "A", "1", false),
            ],
        };
        let order: Vec<(String, PathBuf, String)> =
            r.publish_order().into_iter().map(|(n, d, c, _)| (n, d, c)).collect();
        assert_eq!(
            order,
            vec![
                ("f".to_string(), PathBuf::from("/wc/libs/e/vendor/f"), "2".to_string()),
                ("a".into(), "/wc/libs/a".into(), "1".into()),
                ("e".into(), "/wc/libs/e".into(), "3".into()),
                ("mono".into(), "/wc".into(), "9".into()),
            ]
        );
    }

    #[test]
    fn collisions() {
        let mut p = Problems::new();
        check_collisions(&[module("libs/a", "a", "1", false), module("libs/b/x/a", "A", "1", false)], "mono", &mut p);
        assert!(p.is_empty(), "same repo at the same commit is one repo");
        check_collisions(&[module("libs/a", "a", "1", false), module("x/a", "A", "2", false)], "mono", &mut p);
        assert_eq!(p.len(), 1);
        assert!(p.0[0].message.contains("collides with `libs/a`"), "{}", p.0[0].message);
        assert_eq!(p.0[0].location.file, Path::new("x/a"));
        let mut p = Problems::new();
        check_collisions(&[module("libs/a", "a", "1", true), module("y/a", "a", "1", false)], "mono", &mut p);
        assert_eq!(p.len(), 1);
        let mut p = Problems::new();
        check_collisions(&[module("libs/mono", "Mono", "1", false)], "mono", &mut p);
        assert_eq!(p.len(), 1);
    }
}
