//! The working copy's submodules: reading `.gitmodules` and gitlinks, turning plain directories into
//! submodule repositories, pointing every submodule at the control plane (recursively), and the
//! name collisions that cannot be published.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{MAX_DEPTH, ModuleRemote, failed, new_url, repo_name_from_url, sanitize_repo_name};
use crate::artifact::remotes::TASKS_ORG;
use crate::error::{Error, Location, Problems, Result};
use crate::git::Git;
use crate::remote_url::RemoteUrl;

/// The state of one walk over the working copy's submodules: the git runner, the control
/// plane's URL and org, the remotes recorded so far and the problems found.
pub(super) struct Walk<'a> {
    pub(super) git: Git,
    pub(super) gitea: url::Url,
    pub(super) org: &'a str,
    pub(super) modules: Vec<ModuleRemote>,
    pub(super) problems: Problems,
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
pub(super) fn head_date(git: &Git, dir: &Path) -> Result<String> {
    let ct = git.run(dir, ["log", "-1", "--format=%ct", "HEAD"]).map_err(failed)?;
    Ok(format!("@{} +0000", ct.trim()))
}

/// Rewrites the repository at `dir` (working copy path) whose user-side checkout is `src`;
/// `prefix` is its path from the monorepo root. Returns its new `HEAD`.
pub(super) fn process(
    walk: &mut Walk<'_>,
    dir: &Path,
    src: &Path,
    prefix: &Path,
    depth: usize,
    top_name: &str,
) -> Result<String> {
    let date = head_date(&walk.git, dir)?;
    let gm_display = prefix.join(".gitmodules");
    let mut changed = false;

    // 1. Plain directories of the monorepo that are repositories of their own on the control
    //    plane become submodules: each lib, the base role, the shared libraries, each task.
    if depth == 0 {
        let listing = walk
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
                    walk.problems.add(Location::file(path), m.to_string());
                    continue;
                }
            };
            let owner = owner_of(Path::new(path));
            let url = new_url(&walk.gitea, owner.as_deref().unwrap_or(walk.org), &repo);
            let commit = convert_dir(walk, dir, path, tree, top_name, &url, &date)?;
            walk.modules.push(ModuleRemote {
                path: PathBuf::from(path),
                name: path.to_string(),
                repo,
                old_url: None,
                new_url: url,
                source_commit: None,
                commit,
                converted: true,
                parent: None,
                owner,
                workflows: Vec::new(),
            });
            changed = true;
        }
    }

    // 2. Existing submodules, recursively.
    let entries = read_gitmodules(&walk.git, dir)?;
    for e in entries {
        let key = format!("submodule.{}.url", e.name);
        let Some(path) = e.path.clone() else {
            walk.problems.add(
                Location::file(&gm_display).with_key(format!("submodule.{}.path", e.name)),
                "submodule without a path",
            );
            continue;
        };
        let rel = prefix.join(&path);
        if walk.modules.iter().any(|m| m.path == rel && m.converted) {
            continue; // added in step 1 above
        }
        let Some(old) = e.url.clone().map(RemoteUrl::new) else {
            walk.problems.add(Location::file(&gm_display).with_key(&key), "submodule without a url");
            continue;
        };
        let repo = match repo_name_from_url(old.expose()) {
            Ok(r) => r,
            Err(m) => {
                walk.problems.add(Location::file(&gm_display).with_key(&key), m.to_string());
                continue;
            }
        };
        let Some(recorded) = gitlink(&walk.git, dir, &path)? else {
            walk.problems.add(
                Location::file(&gm_display).with_key(format!("submodule.{}.path", e.name)),
                format!("`{path}` is listed in .gitmodules but the commit has no submodule there"),
            );
            continue;
        };
        let sub_src = src.join(&path);
        if !sub_src.join(".git").exists() {
            walk.problems.add(
                Location::file(&rel),
                format!(
                    "submodule is not checked out in the repository; {} first (its content is taken from the \
                     checkout, never from the old URL)",
                    crate::error::Hint::command(["git", "submodule", "update", "--init", "--recursive"])
                ),
            );
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            walk.problems
                .add(Location::file(&rel), format!("submodules nested deeper than {MAX_DEPTH} levels (a cycle?)"));
            continue;
        }
        let sub = dir.join(&path);
        std::fs::create_dir_all(&sub)
            .map_err(|err| Error::Failed(anyhow::anyhow!("cannot create {}: {err}", sub.display())))?;
        walk.git.run(&sub, ["init", "-q", "-b", "main"]).map_err(failed)?;
        walk.git
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
        if !walk.git.check(&sub, ["cat-file", "-e", &format!("{recorded}^{{commit}}")]).map_err(failed)? {
            walk.problems.add_hinted(
                Location::file(&rel),
                format!("the recorded commit {recorded} is not in the checked-out submodule"),
                crate::error::Hint::command(["git", "submodule", "update", "--init", "--recursive"]),
            );
            continue;
        }
        walk.git.run(&sub, ["checkout", "-q", "-B", "main", &recorded]).map_err(failed)?;
        for r in
            walk.git.run(&sub, ["for-each-ref", "--format=%(refname)", "refs/pgo-source/"]).map_err(failed)?.lines()
        {
            walk.git.run(&sub, ["update-ref", "-d", r]).map_err(failed)?;
        }
        let index = walk.modules.len();
        let owner = if depth == 0 { owner_of(&rel) } else { None };
        let url = new_url(&walk.gitea, owner.as_deref().unwrap_or(walk.org), &repo);
        walk.modules.push(ModuleRemote {
            path: rel.clone(),
            name: e.name.clone(),
            repo,
            old_url: Some(old.clone()),
            new_url: url.clone(),
            source_commit: Some(recorded.clone()),
            commit: recorded.clone(),
            converted: false,
            owner,
            parent: (!prefix.as_os_str().is_empty()).then(|| prefix.to_path_buf()),
            workflows: Vec::new(),
        });
        let commit = process(walk, &sub, &sub_src, &rel, depth + 1, top_name)?;
        walk.modules[index].commit = commit.clone();
        if old.expose() != url {
            walk.git.run(dir, ["config", "-f", ".gitmodules", &key, &url]).map_err(failed)?;
            changed = true;
        }
        if commit != recorded {
            walk.git.run(dir, ["add", "--", &path]).map_err(failed)?;
            changed = true;
        }
    }

    if changed {
        walk.git.run(dir, ["add", "--", ".gitmodules"]).map_err(failed)?;
        if !walk.git.check(dir, ["diff", "--cached", "--quiet"]).map_err(failed)? {
            let gitea = walk.gitea.as_str().trim_end_matches('/').to_string();
            let msg = format!("Point submodules at {gitea}/{} [skip ci]", walk.org);
            walk.git.commit(dir, &msg, &date).map_err(failed)?;
        }
    }
    walk.git.run(dir, ["rev-parse", "HEAD"]).map_err(failed)
}

/// The organization of the monorepo's top-level repository at `path` when it is not the
/// monorepo's own: a task (`tasks/<name>`) lives in [`TASKS_ORG`], as in the seed.
fn owner_of(path: &Path) -> Option<String> {
    let mut c = path.components();
    (c.next().is_some_and(|f| f.as_os_str() == "tasks") && c.next().is_some() && c.next().is_none())
        .then(|| TASKS_ORG.to_string())
}

/// Turns the directory `path` (tree `tree`) of the monorepo working copy `dir` into a submodule
/// repository with one deterministic commit; returns that commit.
fn convert_dir(
    walk: &Walk<'_>,
    dir: &Path,
    path: &str,
    tree: &str,
    top: &str,
    url: &str,
    date: &str,
) -> Result<String> {
    let g = &walk.git;
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
pub(super) fn check_collisions(modules: &[ModuleRemote], monorepo: &str, problems: &mut Problems) {
    let mut by_name: BTreeMap<String, &ModuleRemote> = BTreeMap::new();
    for m in modules {
        let key = format!("{}/{}", m.owner.as_deref().unwrap_or("").to_lowercase(), m.repo.to_lowercase());
        if m.owner.is_none() && m.repo.to_lowercase() == monorepo.to_lowercase() {
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
                    first.old_url.as_ref().map_or_else(|| "converted directory".into(), |u| u.to_string()),
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
    use crate::steps::rewrite::tests::module;

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
