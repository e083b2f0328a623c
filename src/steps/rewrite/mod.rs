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
//!    message ends in `[skip ci]`, children before parents;
//! 5. the workflows are installed (unless switched off): the monorepo's `pipeline.yml` and
//!    `snapshot.yml`, each lib's pipeline, each task's workflow, under `.gitea/workflows/` (see
//!    [`crate::workflows`]); a repository whose files change gets one more `[skip ci]` tool commit.
//!
//! The same input always produces the same commit ids, so publishing twice changes nothing.
//!
//! The repository name comes from the old URL's last path component (any form: see
//! [`repo_name_from_url`]) or, for converted directories, from the directory name, sanitized to
//! Gitea's rule ([`sanitize_repo_name`]). Two different contents mapping to one name (compared
//! case-insensitively, as Gitea does) are an input error.
//!
//! Output: the artifact `remotes.json` ([`Remotes`]).

mod submodules;
mod workflows;

pub use crate::artifact::remotes::{ModuleRemote, MonorepoRemote, Remotes};
pub use crate::gitea::names::{MAX_REPO_NAME, RepoNameError, new_url, repo_name_from_url, sanitize_repo_name};

pub use workflows::WorkflowOptions;

use submodules::{Walk, check_collisions, process};

use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Problems, Result};
use crate::git::{Git, GitError};

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
    /// Install the workflows with these options; `None`: leave the repositories' workflows as
    /// they are.
    pub workflows: Option<WorkflowOptions>,
}

fn failed(e: GitError) -> Error {
    Error::Failed(anyhow::Error::new(e))
}

/// Runs the rewrite step.
///
/// # Errors
/// [`Error::Input`] for a checkout that is not a git repository, a submodule that is not
/// checked out or lacks its recorded commit, a URL without a usable name, name collisions, a
/// work directory that is the checkout (or holds something else), a broken workflow template or
/// a task without a script; [`Error::Failed`] when git fails.
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
        Some(n) => sanitize_repo_name(n).map_err(|e| Error::input(Location::file("--name"), e.to_string()))?,
        None => {
            let base = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            sanitize_repo_name(&base).map_err(|e| Error::input(Location::file(&opts.repo), e.to_string()))?
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

    let mut walk = Walk { git, gitea: gitea.clone(), org: &opts.org, modules: Vec::new(), problems: Problems::new() };
    let mut commit = process(&mut walk, &wc, &source, Path::new(""), 0, &repo_name)?;
    check_collisions(&walk.modules, &repo_name, &mut walk.problems);
    let Walk { git, mut modules, problems, .. } = walk;
    problems.into_result()?;
    let mut monorepo_workflows = Vec::new();
    if let Some(w) = &opts.workflows {
        monorepo_workflows = workflows::install(&git, &wc, &format!("{}/{repo_name}", opts.org), &mut modules, w)?;
        commit = git.run(&wc, ["rev-parse", "HEAD"]).map_err(failed)?;
    }

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
            workflows: monorepo_workflows,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::remotes::TASKS_ORG;

    pub(super) fn module(path: &str, repo: &str, commit: &str, converted: bool) -> ModuleRemote {
        ModuleRemote {
            path: path.into(),
            name: path.into(),
            repo: repo.into(),
            old_url: (!converted).then(|| crate::remote_url::RemoteUrl::new(format!("../{repo}.git"))),
            new_url: String::new(),
            source_commit: None,
            commit: commit.into(),
            converted,
            parent: None,
            owner: None,
            workflows: Vec::new(),
        }
    }

    /// Remotes of the monorepo `main/mono` (commit `9`, working copy `/wc`) with `modules`.
    fn remotes(modules: Vec<ModuleRemote>) -> Remotes {
        Remotes {
            gitea: "http://g".into(),
            org: "main".into(),
            source: "/src".into(),
            workdir: "/wc".into(),
            monorepo: MonorepoRemote {
                repo: "mono".into(),
                new_url: String::new(),
                source_commit: "0".into(),
                commit: "9".into(),
                workflows: Vec::new(),
            },
            modules,
        }
    }

    #[test]
    fn a_repo_at_two_paths_is_pushed_from_the_one_with_workflows() {
        let mut nested = module("libs/b/vendor/a", "a", "1", false);
        nested.parent = Some("libs/b".into());
        let mut top = module("libs/a", "a", "2", false);
        top.workflows = vec![".gitea/workflows/pipeline.yml".into()];
        let r = remotes(vec![top, module("libs/b", "b", "3", false), nested]);
        let order: Vec<(String, PathBuf, String)> =
            r.publish_order().into_iter().map(|(_, n, d, c, _)| (n, d, c)).collect();
        assert_eq!(
            order,
            vec![
                ("a".to_string(), PathBuf::from("/wc/libs/a"), "2".to_string()),
                ("b".into(), "/wc/libs/b".into(), "3".into()),
                ("mono".into(), "/wc".into(), "9".into()),
            ]
        );
    }

    #[test]
    fn publish_order_is_deepest_first_once_per_repo_monorepo_last() {
        let mut nested = module("libs/e/vendor/f", "f", "2", false);
        nested.parent = Some("libs/e".into());
        let r = remotes(vec![
            module("libs/a", "a", "1", false),
            module("libs/e", "e", "3", false),
            nested,
            module("x/a", "A", "1", false),
        ]);
        let order: Vec<(String, PathBuf, String)> =
            r.publish_order().into_iter().map(|(_, n, d, c, _)| (n, d, c)).collect();
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
    fn tasks_are_published_in_the_tasks_org_apart_from_a_lib_of_the_same_name() {
        let mut task = module("tasks/a", "a", "5", true);
        task.owner = Some(TASKS_ORG.into());
        let r = remotes(vec![module("libs/a", "a", "1", true), task]);
        let order: Vec<(String, String)> = r.publish_order().into_iter().map(|(o, n, ..)| (o, n)).collect();
        assert_eq!(
            order,
            vec![("main".to_string(), "a".to_string()), ("tasks".into(), "a".into()), ("main".into(), "mono".into())]
        );
        let mut p = Problems::new();
        submodules::check_collisions(&r.modules, "mono", &mut p);
        assert!(p.is_empty(), "a task and a lib of one name live in two orgs");
    }
}
