//! Publishing one repository: created when missing, its units switched off, its refs pushed in one
//! atomic push, its `stage` fork created or moved, its release pull request opened.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::report::{ForkReport, ItemAction, PullReport, RefReport, RepoReport};
use super::{RELEASE_PR_TITLE, STAGE_ORG, label};
use crate::git::Git;
use crate::gitea::{
    Client, CreateForkOption, CreatePullRequestOption, CreateRepoOption, Created, EditRepoOption, Repository,
};

/// The wanted repository units (the seed's `repo/init.rb` switches these off).
fn wanted_units(r: &Repository) -> EditRepoOption {
    let off = |have: bool| have.then_some(false);
    EditRepoOption {
        has_issues: off(r.has_issues),
        has_wiki: off(r.has_wiki),
        has_projects: off(r.has_projects),
        has_packages: off(r.has_packages),
        has_releases: off(r.has_releases),
        default_branch: None,
        description: None,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn publish_repo(
    client: &Client,
    git: &Git,
    org: &str,
    repo: &str,
    dir: &Path,
    commit: &str,
    path: Option<PathBuf>,
    staged: bool,
    release_from_root: bool,
) -> anyhow::Result<RepoReport> {
    let full_name = format!("{org}/{repo}");
    let url = client.clone_url(org, repo);
    let (existing, action) = match client.get_repo(org, repo).await? {
        Some(r) => (r, ItemAction::Unchanged),
        None => {
            let opt = CreateRepoOption {
                name: repo.to_string(),
                private: false,
                auto_init: false,
                default_branch: Some("main".into()),
                description: None,
            };
            match client.create_org_repo(org, &opt).await? {
                Created::New(r) => (r, ItemAction::Created),
                Created::Exists => (
                    client
                        .get_repo(org, repo)
                        .await?
                        .with_context(|| format!("{full_name} exists but cannot be read"))?,
                    ItemAction::Unchanged,
                ),
            }
        }
    };
    let units = wanted_units(&existing);
    let settings = if units.is_empty() {
        ItemAction::Unchanged
    } else {
        client.edit_repo(org, repo, &units).await?;
        ItemAction::Updated
    };

    // Branches: read, then one atomic push of what differs.
    let remote: BTreeMap<String, String> = git
        .ls_remote(dir, &url, &["refs/heads/main", "refs/heads/release", "refs/heads/snapshot", "refs/heads/rollback"])?
        .into_iter()
        .collect();
    let head = |b: &str| remote.get(&format!("refs/heads/{b}")).cloned();
    let mut refspecs = Vec::new();
    let mut refs = Vec::new();
    let old_main = head("main");
    let mut fetched = false;
    if old_main.as_deref().is_some_and(|o| o != commit) {
        git.run(dir, ["fetch", "-q", "--no-tags", "--", &url, "refs/heads/main"])?;
        fetched = true;
    }
    // What `main` becomes: the rewritten commit, or that commit on top of the previous `main`.
    let published = match old_main.as_deref() {
        Some(old) if fetched => chain_on_previous(git, dir, commit, old)?,
        _ => commit.to_string(),
    };
    let commit = published.as_str();
    if let Some(old) = old_main.as_deref().filter(|o| *o != commit) {
        // Keep the previous state (fetched above: the push needs the object locally) → rollback.
        refspecs.push(format!("+{old}:refs/heads/rollback"));
        refs.push(RefReport {
            branch: "rollback".into(),
            old: head("rollback"),
            new: old.to_string(),
            action: if head("rollback").is_some() { ItemAction::Updated } else { ItemAction::Created },
        });
    }
    for (branch, force) in [("main", true), ("release", false), ("snapshot", true)] {
        let old = head(branch);
        let action = match (&old, branch) {
            (Some(o), _) if o == commit => ItemAction::Unchanged,
            (Some(_), "release") => ItemAction::Unchanged, // moved by the release pull request
            (Some(_), _) => ItemAction::Updated,
            (None, _) => ItemAction::Created,
        };
        let new = if branch == "release" && action == ItemAction::Unchanged {
            old.clone().unwrap_or_default()
        } else if branch == "release" && release_from_root {
            // The first commit along first parents: `rev-list` lists oldest last.
            let out = git.run(dir, ["rev-list", "--first-parent", "--max-parents=0", commit])?;
            out.lines().last().map(str::trim).filter(|r| !r.is_empty()).unwrap_or(commit).to_string()
        } else {
            commit.to_string()
        };
        if action != ItemAction::Unchanged {
            refspecs.push(format!("{}{new}:refs/heads/{branch}", if force { "+" } else { "" }));
        }
        refs.push(RefReport { branch: branch.into(), old, new, action });
    }
    if !refspecs.is_empty() {
        let mut args: Vec<String> = vec!["push".into(), "-q".into(), "--atomic".into(), "--".into(), url.clone()];
        args.extend(refspecs);
        git.run(dir, &args)?;
    }
    for r in &refs {
        if r.action != ItemAction::Unchanged {
            tracing::info!(
                "{full_name} {}: {} → {}",
                r.branch,
                r.old.as_deref().map(short).unwrap_or("(none)"),
                short(&r.new)
            );
        }
    }

    let mut fork = None;
    let mut pull = None;
    if staged {
        let fork_name = format!("{STAGE_ORG}/{repo}");
        let action = match client.get_repo(STAGE_ORG, repo).await? {
            Some(_) => ItemAction::Unchanged,
            None => match client
                .create_fork(org, repo, &CreateForkOption { name: None, organization: Some(STAGE_ORG.into()) })
                .await?
            {
                Created::New(_) => ItemAction::Created,
                Created::Exists => ItemAction::Unchanged,
            },
        };
        // An existing fork follows `main` unless it has commits of its own (then a note).
        let (action, note) = if action == ItemAction::Unchanged {
            let upstream_heads: Vec<String> = [old_main.clone(), head("rollback")].into_iter().flatten().collect();
            sync_fork(client, git, dir, repo, commit, &upstream_heads)?
        } else {
            (action, None)
        };
        tracing::info!("fork {fork_name}: {}", label(action));
        if let Some(n) = &note {
            tracing::warn!("fork {fork_name}: {n}");
        }
        fork = Some(ForkReport { full_name: fork_name, action, note });

        let release = refs.iter().find(|r| r.branch == "release").map(|r| r.new.clone()).unwrap_or_default();
        // Nothing to release: `release` is `main`, or already holds all of it (a merged release
        // pull request leaves `release` a merge commit ahead of `main`).
        let released =
            release == commit || client.compare_pushed(org, repo, "release", "main").await?.total_commits == 0;
        pull = Some(if released {
            PullReport { number: None, action: ItemAction::Unchanged }
        } else {
            let open = client.list_pulls(org, repo, "open", Some("release")).await?;
            match open.iter().find(|p| p.head.ref_ == "main" && p.base.ref_ == "release") {
                Some(p) => PullReport { number: Some(p.number), action: ItemAction::Unchanged },
                None => {
                    let p = client
                        .create_pull(
                            org,
                            repo,
                            &CreatePullRequestOption {
                                head: "main".into(),
                                base: "release".into(),
                                title: RELEASE_PR_TITLE.into(),
                                body: Some("Created automatically for deployment by proxmox-gitops publish.".into()),
                            },
                        )
                        .await?;
                    tracing::info!("{full_name}: opened pull request #{} ({RELEASE_PR_TITLE})", p.number);
                    PullReport { number: Some(p.number), action: ItemAction::Created }
                }
            }
        });
    }
    Ok(RepoReport {
        full_name,
        path,
        url,
        commit: commit.to_string(),
        action,
        settings,
        refs,
        fork,
        pull,
        workflows: Vec::new(),
    })
}

/// The commit `main` of a repository becomes when publishing `commit` over the previous `main`
/// `old` (fetched into `dir`):
///
/// * `commit` itself when it already contains `old` (a fast-forward); `old` when it contains
///   `commit` and has its tree (an earlier publish of the same input chained it);
/// * otherwise a tool commit with the tree of `commit` and the parents `old` and `commit`
///   ("Publish … [skip ci]", dated like `commit`, so the same input gives the same id).
///
/// `rewrite` re-creates its tool commits from the user's history on every run, so two
/// publishes of a changed monorepo give two commits that only share the user's commit. Both
/// change the rewritten paths (submodule gitlinks, converted directories, installed
/// workflows), and merging the release pull request (`main` into `release`, which holds an
/// earlier publish) would conflict on each of them. Chained, the new `main` descends from
/// every earlier published `main`, so the release pull request always merges cleanly and
/// `release` never has to be forced.
///
/// # Errors
/// A failed git call.
fn chain_on_previous(git: &Git, dir: &Path, commit: &str, old: &str) -> anyhow::Result<String> {
    if old == commit || git.check(dir, ["merge-base", "--is-ancestor", old, commit])? {
        return Ok(commit.to_string());
    }
    let tree = git.run(dir, ["rev-parse", &format!("{commit}^{{tree}}")])?;
    let old_tree = git.run(dir, ["rev-parse", &format!("{old}^{{tree}}")])?;
    if tree.trim() == old_tree.trim() && git.check(dir, ["merge-base", "--is-ancestor", commit, old])? {
        return Ok(old.to_string());
    }
    let date = git.run(dir, ["log", "-1", "--format=%ct", commit])?;
    let msg = format!("Publish {} over the previous main [skip ci]", short(commit));
    Ok(git.commit_tree(dir, tree.trim(), &[old, commit], &msg, &format!("@{} +0000", date.trim()))?)
}

/// Brings `stage/<repo>`'s `main` to `commit` (what `main/<repo>` now holds) when the fork has
/// no commits of its own, i.e. its `main` is one of the upstream heads it could have come from:
/// an ancestor of `commit` or of one of `upstream_heads` (the previous `main` and `rollback`).
/// `rewrite` re-creates its tool commits, so the published history is not always a
/// fast-forward (and Gitea's `merge-upstream` would refuse or merge): the fork is moved with one
/// `git push --force-with-lease` that only succeeds while its `main` is still the head checked
/// here. A fork with commits of its own is left alone and gets a note.
///
/// Returns `Updated` when moved, `Unchanged` (with a note when it was not moved on purpose).
///
/// # Errors
/// A failed git call (ls-remote, fetch, push) against the fork.
fn sync_fork(
    client: &Client,
    git: &Git,
    dir: &Path,
    repo: &str,
    commit: &str,
    upstream_heads: &[String],
) -> anyhow::Result<(ItemAction, Option<String>)> {
    let fork_url = client.clone_url(STAGE_ORG, repo);
    let fork_main = git.ls_remote(dir, &fork_url, &["refs/heads/main"])?.into_iter().next().map(|(_, id)| id);
    let lease = match fork_main.as_deref() {
        Some(f) if f == commit => return Ok((ItemAction::Unchanged, None)),
        Some(f) => {
            git.run(dir, ["fetch", "-q", "--no-tags", "--", &fork_url, "refs/heads/main"])?;
            let mut candidates = vec![commit];
            candidates.extend(upstream_heads.iter().map(String::as_str));
            let mut tracked = false;
            for head in candidates {
                if git.check(dir, ["cat-file", "-e", &format!("{head}^{{commit}}")])?
                    && git.check(dir, ["merge-base", "--is-ancestor", f, head])?
                {
                    tracked = true;
                    break;
                }
            }
            if !tracked {
                let note = format!(
                    "main ({}) has commits of its own: not synced with {} (merge them upstream, or reset the \
                     fork's main, to have publish move it again)",
                    short(f),
                    short(commit)
                );
                return Ok((ItemAction::Unchanged, Some(note)));
            }
            format!("--force-with-lease=refs/heads/main:{f}")
        }
        // An empty fork: nothing of its own to lose, but still only while it is empty.
        None => "--force-with-lease=refs/heads/main:".to_string(),
    };
    git.run(dir, ["push", "-q", &lease, "--", &fork_url, &format!("{commit}:refs/heads/main")])?;
    tracing::info!(
        "fork {STAGE_ORG}/{repo}: main {} → {}",
        fork_main.as_deref().map(short).unwrap_or("(none)"),
        short(commit)
    );
    Ok((ItemAction::Updated, None))
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}
