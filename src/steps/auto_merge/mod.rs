//! Step `auto-merge`: merge the open release pull requests whose deploy needs no refused recreate
//! (the original project's `deploy` task, run when `AUTO_DEPLOY` is true).
//!
//! A release pull request (head `main`, base `release`, opened by `publish`) exists in the
//! monorepo and in each lib repository whose `main` moved. Merging one pushes `release`, which
//! runs that repository's pipeline: a lib's deploys its container, the monorepo's every container
//! of the stage. So a merge is only safe when the deploy it starts can apply every change in
//! place — or when the recreate it needs is one the policy allows (the `--recreate` policy of
//! `provision`: `never`, `when-needed`, `always`).
//!
//! # What is planned
//!
//! The inventory comes from a checkout of the monorepo's `main` with its submodules: after
//! `publish`, `main` records each lib's `main`, so the checkout *is* the state after every
//! release pull request is merged. Every container of the stage is planned against the live
//! backend with the policy (`refs/heads/release` provisions; the same
//! [`crate::backend::plan_all`] `plan` and `provision` use; reads only). A pull request whose
//! head is not the commit the checkout has for it is blocked: the plan would not be of what is
//! merged. The merge then names that head (`head_commit_id`), so Gitea refuses it (409, "head
//! out of date") if `main` moved in between.
//!
//! # Order and failures
//!
//! Libs first (by repository name), the monorepo last: the monorepo's release deploys the libs'
//! recorded commits too, so it is merged only when no container of the stage is refused or
//! unplannable, and — stricter than the plan alone — when no lib merge of this run failed (its
//! release branch would then lag the commit the monorepo deploys). A failed merge is recorded and
//! the others go on; blocked pull requests are not failures. Each merge is a merge commit (Gitea's
//! style `merge`) whose message names proxmox-gitops.
//!
//! Listing the pull requests happens before any merge; a listing that fails ends the run with an
//! error and nothing merged. With `dry_run` nothing is merged (verdict `would-merge`).
//!
//! The result is the `auto-merge.json` artifact ([`AutoMerge`]).

mod decide;

pub use decide::{Candidate, decide};

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::backend::{Backend, plan_all};
use crate::error::{Error, Location, Result};
use crate::gitea::{Client, MergePullRequestOption, MergeStyle, PullRequest};
use crate::inventory::Inventory;
use crate::model::{BackendKind, ContainerPlan, RecreatePolicy};

/// The branch a release pull request merges into.
pub const RELEASE_BRANCH: &str = "release";
/// The branch a release pull request merges from.
pub const MAIN_BRANCH: &str = "main";

/// `owner/name` of a Gitea repository.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoRef {
    /// The owner (organization or user).
    pub owner: String,
    /// The repository's name.
    pub name: String,
}

impl RepoRef {
    /// Parses `OWNER/REPO` (names of letters, digits, `-`, `_`, `.`, as Gitea accepts).
    ///
    /// # Errors
    /// [`Error::Input`] at `what` (the flag or variable it came from) for anything else.
    pub fn parse(text: &str, what: &str) -> Result<RepoRef> {
        let ok = |x: &str| {
            !x.is_empty()
                && x != "."
                && x != ".."
                && x.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        match text.trim().split_once('/') {
            Some((owner, name)) if ok(owner) && ok(name) => {
                Ok(RepoRef { owner: owner.to_string(), name: name.to_string() })
            }
            _ => Err(Error::input(Location::file(what), format!("expected OWNER/REPO, found `{text}`"))),
        }
    }
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// Whether `AUTO_DEPLOY` turns auto-merge on: `true`, `1` or `yes` (any case, surrounding
/// blanks ignored) → `Ok(true)`; unset, empty, `false`, `0`, `no` → `Ok(false)`; anything else
/// → `Err(value)`, which callers treat as off and report.
pub fn auto_deploy(value: Option<&str>) -> std::result::Result<bool, String> {
    let Some(v) = value else { return Ok(false) };
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "" | "false" | "0" | "no" => Ok(false),
        _ => Err(v.to_string()),
    }
}

/// Options of [`auto_merge`].
#[derive(Debug, Clone)]
pub struct AutoMergeOptions {
    /// The monorepo on Gitea (`PROXMOX_GITOPS_MONOREPO`); its owner is also the organization of
    /// libs whose submodule URL is relative.
    pub monorepo: RepoRef,
    /// The recreate policy the plan is made with.
    pub policy: RecreatePolicy,
    /// Decide, merge nothing.
    pub dry_run: bool,
    /// At most this many containers planned at once (≥ 1).
    pub jobs: usize,
}

/// Lib or monorepo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullKind {
    /// A lib repository: its release deploys its container(s).
    Lib,
    /// The monorepo: its release deploys every container of the stage.
    Monorepo,
}

/// What became of a pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// May be merged (the decision, before anything is merged; never in the artifact).
    Merge,
    /// Merged now.
    Merged,
    /// Would be merged (`--dry-run`).
    WouldMerge,
    /// Not merged: the plan or the checkout does not allow it (not a failure).
    Blocked,
    /// The merge was tried and Gitea refused it (a failure: exit 1).
    Failed,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Merge => "merge",
            Verdict::Merged => "merged",
            Verdict::WouldMerge => "would-merge",
            Verdict::Blocked => "blocked",
            Verdict::Failed => "failed",
        })
    }
}

/// One container of the stage and its plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerVerdict {
    /// Container (lib) name.
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// The Gitea repository (`owner/name`) it is deployed from; `None` for the control plane.
    pub repository: Option<String>,
    /// What provisioning the release would do.
    pub plan: Option<ContainerPlan>,
    /// Why it could not be planned.
    pub plan_error: Option<String>,
}

/// One open release pull request and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullVerdict {
    /// `owner/name`.
    pub repository: String,
    /// Lib or monorepo.
    pub kind: PullKind,
    /// The pull request's number.
    pub number: i64,
    /// Its title.
    pub title: String,
    /// Its web page.
    pub url: String,
    /// The head commit planned for (and named to Gitea when merging).
    pub head: String,
    /// The containers its release deploys (a lib's; empty for the monorepo: all).
    pub containers: Vec<String>,
    /// What became of it.
    pub verdict: Verdict,
    /// Why (the plan's words, the block's reason and what to do, or Gitea's error).
    pub reason: String,
    /// The merge commit, when merged.
    pub merge_commit: Option<String>,
}

/// Overall result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeResult {
    /// No merge failed (blocked ones are fine).
    Ok,
    /// Some merge failed.
    Failed,
}

/// The `auto-merge.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoMerge {
    /// The monorepo, `owner/name` (`None` when auto-merge is off and none was given).
    pub monorepo: Option<String>,
    /// The stage planned.
    pub stage: String,
    /// True when `AUTO_DEPLOY` was true or `--force` was given; otherwise nothing else was done.
    pub enabled: bool,
    /// `--force`: run although `AUTO_DEPLOY` is not true.
    pub forced: bool,
    /// `--dry-run`.
    pub dry_run: bool,
    /// The recreate policy of the plan.
    pub recreate: RecreatePolicy,
    /// The backend that planned (`None` when nothing was planned).
    pub backend: Option<BackendKind>,
    /// Why nothing was done, when so (auto-merge off, no open release pull request).
    pub note: Option<String>,
    /// Every container of the stage with its plan (empty when nothing needed planning).
    pub containers: Vec<ContainerVerdict>,
    /// Every open release pull request: libs by repository name, then the monorepo.
    pub pulls: Vec<PullVerdict>,
    /// `failed` when a merge failed.
    pub result: MergeResult,
}

impl Artifact for AutoMerge {
    const KIND: &'static str = "auto-merge";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl AutoMerge {
    /// The artifact of a run that did nothing because auto-merge is off (`note` says why).
    pub fn off(stage: &str, monorepo: Option<String>, recreate: RecreatePolicy, note: String) -> AutoMerge {
        AutoMerge {
            monorepo,
            stage: stage.to_string(),
            enabled: false,
            forced: false,
            dry_run: false,
            recreate,
            backend: None,
            note: Some(note),
            containers: Vec::new(),
            pulls: Vec::new(),
            result: MergeResult::Ok,
        }
    }

    /// The pull requests with `verdict`.
    pub fn pulls_with(&self, verdict: Verdict) -> Vec<&PullVerdict> {
        self.pulls.iter().filter(|p| p.verdict == verdict).collect()
    }
}

/// The open release pull requests of `owner/name` (base `release`, head `main`; all pages).
/// A repository that does not exist on Gitea has none.
async fn release_pulls(client: &Client, repo: &RepoRef) -> anyhow::Result<Vec<PullRequest>> {
    match client.list_pulls(&repo.owner, &repo.name, "open", Some(RELEASE_BRANCH)).await {
        Ok(pulls) => {
            Ok(pulls.into_iter().filter(|p| p.base.ref_ == RELEASE_BRANCH && p.head.ref_ == MAIN_BRANCH).collect())
        }
        Err(e) if e.status() == Some(404) => {
            tracing::warn!("{repo} does not exist on Gitea: no release pull request there (publish creates it)");
            Ok(Vec::new())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("listing the release pull requests of {repo}"))),
    }
}

/// A lib repository as the checkout has it.
struct LibRepo {
    /// The containers it deploys.
    containers: Vec<String>,
    /// Its directory in the checkout (`libs/web`).
    path: String,
    /// The commit the checkout has there (`None` for a plain directory).
    planned: Option<String>,
}

/// The lib repositories of `inv`, by name.
fn lib_repositories(inv: &Inventory, org: &str) -> std::collections::BTreeMap<RepoRef, LibRepo> {
    let subs = crate::git::flatten(&inv.submodules);
    let mut out: std::collections::BTreeMap<RepoRef, LibRepo> = Default::default();
    for spec in &inv.containers {
        let Some((owner, name)) = crate::gitea::names::lib_repository(inv, spec, org) else { continue };
        let planned = spec
            .submodule
            .as_ref()
            .and_then(|p| subs.iter().find(|s| &s.path == p))
            .and_then(|s| s.head.clone().or_else(|| s.commit.clone()));
        out.entry(RepoRef { owner, name })
            .or_insert_with(|| LibRepo { containers: Vec::new(), path: spec.dir.display().to_string(), planned })
            .containers
            .push(spec.name.clone());
    }
    out
}

/// Runs auto-merge for the stage of `inv` (see the module docs): lists the open release pull
/// requests of the monorepo and every lib repository, plans every container of the stage on
/// `backend` (only when some pull request is open), decides ([`decide`]), and merges — libs
/// first, the monorepo last — unless `opts.dry_run`.
///
/// # Errors
/// [`Error::Failed`] when a listing fails (nothing is merged then). Merge failures are not
/// errors: they are recorded (verdict `failed`, result `failed`).
pub async fn auto_merge(
    client: &Client,
    backend: &Backend,
    inv: &Inventory,
    opts: &AutoMergeOptions,
) -> Result<AutoMerge> {
    let libs = lib_repositories(inv, &opts.monorepo.owner);
    let mut candidates = Vec::new();
    for (repo, lib) in &libs {
        for p in release_pulls(client, repo).await.map_err(Error::Failed)? {
            let planned = lib.planned.clone().map(|c| same_content(&inv.root.join(&lib.path), c, &p.head.sha));
            candidates.push(candidate(repo, PullKind::Lib, &p, lib.containers.clone(), &lib.path, planned));
        }
    }
    for p in release_pulls(client, &opts.monorepo).await.map_err(Error::Failed)? {
        candidates.push(candidate(&opts.monorepo, PullKind::Monorepo, &p, Vec::new(), ".", inv.head.clone()));
    }
    let mut report = AutoMerge {
        monorepo: Some(opts.monorepo.to_string()),
        stage: inv.stage.clone(),
        enabled: true,
        forced: false,
        dry_run: opts.dry_run,
        recreate: opts.policy,
        backend: None,
        note: None,
        containers: Vec::new(),
        pulls: Vec::new(),
        result: MergeResult::Ok,
    };
    if candidates.is_empty() {
        report.note = Some(format!(
            "no open release pull request ({MAIN_BRANCH} → {RELEASE_BRANCH}) in {} or its {} lib repositories",
            opts.monorepo,
            libs.len()
        ));
        return Ok(report);
    }

    // Plan every container of the stage: the monorepo's release deploys them all.
    report.backend = Some(backend.kind());
    let repo_of =
        |name: &str| libs.iter().find(|(_, lib)| lib.containers.iter().any(|x| x == name)).map(|(r, _)| r.to_string());
    for p in plan_all(backend, inv.containers.clone(), opts.policy, opts.jobs).await {
        let (plan, plan_error) = match p.plan {
            Ok(plan) => (Some(plan), None),
            Err(e) => (None, Some(crate::actions::redact(&format!("{e:#}")))),
        };
        report.containers.push(ContainerVerdict {
            repository: repo_of(&p.spec.name),
            name: p.spec.name,
            vmid: p.spec.vmid,
            plan,
            plan_error,
        });
    }

    let mut pulls = decide(&candidates, &report.containers, opts.policy);
    let mut lib_failed: Vec<String> = Vec::new();
    for pull in &mut pulls {
        if pull.verdict != Verdict::Merge {
            continue;
        }
        if pull.kind == PullKind::Monorepo && !lib_failed.is_empty() {
            pull.verdict = Verdict::Blocked;
            pull.reason = format!(
                "the release pull request of {} failed to merge in this run; the monorepo's release would deploy \
                 what that release branch lacks",
                lib_failed.join(", ")
            );
            continue;
        }
        if opts.dry_run {
            pull.verdict = Verdict::WouldMerge;
            continue;
        }
        let repo = RepoRef::parse(&pull.repository, "repository").expect("candidates are OWNER/REPO");
        match merge(client, &repo, pull, inv, opts).await {
            Ok(commit) => {
                tracing::info!("{}#{}: merged ({})", pull.repository, pull.number, pull.reason);
                pull.verdict = Verdict::Merged;
                pull.merge_commit = commit;
            }
            Err(e) => {
                let msg = crate::actions::redact(&e.to_string());
                tracing::error!("{}#{}: merge failed: {msg}", pull.repository, pull.number);
                pull.verdict = Verdict::Failed;
                pull.reason = msg;
                report.result = MergeResult::Failed;
                if pull.kind == PullKind::Lib {
                    lib_failed.push(pull.repository.clone());
                }
            }
        }
    }
    report.pulls = pulls;
    Ok(report)
}

/// `head` when the checked-out submodule at `dir` has that commit and it holds the same tree as
/// `planned` (publish puts a lib's rewritten commit over the previous `main` with a commit of
/// the same tree, while the monorepo records the rewritten one: see
/// `steps::publish`), else `planned`.
fn same_content(dir: &std::path::Path, planned: String, head: &str) -> String {
    if planned == head {
        return planned;
    }
    let git = crate::git::Git::new();
    let tree = |c: &str| git.run(dir, ["rev-parse", "--verify", "-q", &format!("{c}^{{tree}}")]).ok();
    match (tree(&planned), tree(head)) {
        (Some(a), Some(b)) if a == b => head.to_string(),
        _ => planned,
    }
}

fn candidate(
    repo: &RepoRef,
    kind: PullKind,
    p: &PullRequest,
    containers: Vec<String>,
    path: &str,
    planned: Option<String>,
) -> Candidate {
    Candidate {
        repository: repo.to_string(),
        kind,
        number: p.number,
        title: p.title.clone(),
        url: p.html_url.clone(),
        head: p.head.sha.clone(),
        containers,
        path: path.to_string(),
        planned,
    }
}

/// Merges `pull` (style `merge`, its planned head named) and reads back its merge commit.
async fn merge(
    client: &Client,
    repo: &RepoRef,
    pull: &PullVerdict,
    inv: &Inventory,
    opts: &AutoMergeOptions,
) -> std::result::Result<Option<String>, crate::gitea::GiteaError> {
    let what = match pull.kind {
        PullKind::Lib => format!("container(s) {}", pull.containers.join(", ")),
        PullKind::Monorepo => format!("every container of stage {}", inv.stage),
    };
    let opt = MergePullRequestOption {
        merge_title_field: Some(format!(
            "Merge release pull request #{} ({MAIN_BRANCH} into {RELEASE_BRANCH}) by proxmox-gitops auto-merge",
            pull.number
        )),
        merge_message_field: Some(format!(
            "Merged by `proxmox-gitops auto-merge` (AUTO_DEPLOY) at {}: the release plan of {what} needs no recreate \
             that the recreate policy `{}` refuses.\n\n{}",
            decide::short(&pull.head),
            opts.policy.as_str(),
            pull.reason
        )),
        head_commit_id: Some(pull.head.clone()),
        ..MergePullRequestOption::new(MergeStyle::Merge)
    };
    client.merge_pull(&repo.owner, &repo.name, pull.number, &opt).await?;
    // The merge commit, for the report; a failed read-back does not undo the merge.
    Ok(match client.get_pull(&repo.owner, &repo.name, pull.number).await {
        Ok(Some(p)) => p.merge_commit_sha,
        Ok(None) => None,
        Err(e) => {
            tracing::warn!("{repo}#{}: merged, but reading it back failed: {e}", pull.number);
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_deploy_values() {
        for on in ["true", "TRUE", " yes ", "1", "Yes"] {
            assert_eq!(auto_deploy(Some(on)), Ok(true), "{on}");
        }
        for off in ["", "false", "0", "no", "NO", " False "] {
            assert_eq!(auto_deploy(Some(off)), Ok(false), "{off}");
        }
        assert_eq!(auto_deploy(None), Ok(false));
        assert_eq!(auto_deploy(Some("on")), Err("on".to_string()));
    }

    #[test]
    fn repository_names() {
        assert_eq!(RepoRef::parse("main/mono", "x").unwrap().to_string(), "main/mono");
        for bad in ["mono", "a/b/c", "/x", "a/", "a b/c", "../x"] {
            let e = RepoRef::parse(bad, "PROXMOX_GITOPS_MONOREPO").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(
                e.to_string().contains(&format!("PROXMOX_GITOPS_MONOREPO: expected OWNER/REPO, found `{bad}`")),
                "{e}"
            );
        }
    }
}
