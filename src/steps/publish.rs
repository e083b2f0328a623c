//! Step `publish`: put the rewritten monorepo and its submodules on the Gitea control plane.
//!
//! Input: the working copy and `remotes.json` of [`super::rewrite`]. In order:
//!
//! 1. **Organizations** `main` (the `--org`), `stage`, `tasks` exist (`orgCreate`; Gitea's
//!    422 "already exists" is fine).
//! 2. **Repositories**, each module deepest first, the monorepo last: created when missing
//!    (`createOrgRepo`, `auto_init: false`, `default_branch: main`) and, like the seed, with
//!    issues, wiki, projects, packages and releases switched off (`repoEdit`, sent only when a
//!    setting differs). Then, with the git CLI (credentials through `GIT_ASKPASS`):
//!    * when the repository already had a different `main`, that previous head is pushed to
//!      `rollback` first;
//!    * `main` and `snapshot` are set to the published commit; `release` is created at it when
//!      missing (the first publish is the bootstrap deploy, as in the seed), and otherwise left
//!      for the release pull request to move;
//!    * all ref updates of one repository go in one atomic push; refs already right are not
//!      pushed. Tool commits (made by `rewrite`) end in `[skip ci]`.
//! 3. **Forks**: every lib repository and the monorepo are forked into `stage` when that fork
//!    does not exist yet (`createFork`); an existing fork whose `main` only trails upstream is
//!    moved to the published commit (a lease-protected push, see `sync_fork`); a fork with
//!    commits of its own is never overwritten, the report notes it instead.
//! 4. **Release pull request** ("Release Pull Request", head `main`, base `release`) in every
//!    lib repository and the monorepo whose `main` differs from `release`, unless one is open.
//! 5. **Variables**: `globals.json` < `globals.local.json` → organization variables of `main`,
//!    `stage` and `tasks`; each lib's configure artifact `configure/<lib>.json`, key `outputs`
//!    (an object of `KEY: value`) → repository variables of that lib's repository. Names are
//!    validated before anything is sent (`^[A-Z_][A-Z0-9_]*$`, not `GITEA_`/`GITHUB_`).
//!    Missing variables are created (`POST`, and on 409 updated with `PUT`); different values
//!    are updated (`PUT`); equal ones are left alone.
//!
//! Everything is read before it is written, so a second publish of the same tree changes
//! nothing and reports every item `unchanged`. The summary is the artifact `publish.json`
//! ([`PublishReport`]); it never holds a credential or a variable value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::rewrite::Remotes;
use crate::artifact::{Artifact, ArtifactDir};
use crate::error::{Error, Location, Problems, Result};
use crate::git_cli::{Credentials, Git};
use crate::gitea::{
    Auth, Client, CreateForkOption, CreateOrgOption, CreatePullRequestOption, CreateRepoOption, CreateVariableOption,
    Created, EditRepoOption, Repository, UpdateVariableOption, VariableScope, valid_variable_name,
};

/// The organization that receives forks (the seed's `stage`).
pub const STAGE_ORG: &str = "stage";
/// The organization of scheduled-task repositories (the seed's `tasks`).
pub const TASKS_ORG: &str = "tasks";
/// Title of the release pull request (the seed's).
pub const RELEASE_PR_TITLE: &str = "Release Pull Request";

/// What happened to one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist and was created.
    Created,
    /// It existed and was changed.
    Updated,
    /// It existed as wanted.
    Unchanged,
}

/// An organization in [`PublishReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgReport {
    /// The organization.
    pub name: String,
    /// Created or unchanged.
    pub action: Action,
}

/// One branch of a repository in [`RepoReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefReport {
    /// Branch name (`main`, `release`, `snapshot`, `rollback`).
    pub branch: String,
    /// Its commit on Gitea before publishing.
    pub old: Option<String>,
    /// Its commit after publishing.
    pub new: String,
    /// Created, updated or unchanged.
    pub action: Action,
}

/// A fork in [`RepoReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkReport {
    /// `stage/<repo>`.
    pub full_name: String,
    /// Created, updated (an existing fork's `main` moved to the published commit) or unchanged.
    pub action: Action,
    /// Why an existing fork was not synced (it has commits of its own), when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The release pull request of a repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullReport {
    /// The pull request's number, `None` when none is needed (`main` equals `release`).
    pub number: Option<i64>,
    /// Created, or unchanged (already open / not needed).
    pub action: Action,
}

/// One published repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoReport {
    /// `org/repo`.
    pub full_name: String,
    /// Module path in the monorepo; `None` for the monorepo itself.
    pub path: Option<PathBuf>,
    /// Clone URL (no credentials).
    pub url: String,
    /// The published commit.
    pub commit: String,
    /// Created or unchanged (the repository itself).
    pub action: Action,
    /// Whether the repository settings (units) were changed.
    pub settings: Action,
    /// Branches touched or checked.
    pub refs: Vec<RefReport>,
    /// The fork in `stage`, for lib repositories and the monorepo.
    pub fork: Option<ForkReport>,
    /// The release pull request, for lib repositories and the monorepo.
    pub pull: Option<PullReport>,
}

/// One variable (never its value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableReport {
    /// Where it lives.
    #[serde(flatten)]
    pub scope: VariableScope,
    /// Its name.
    pub name: String,
    /// Created, updated or unchanged.
    pub action: Action,
}

/// Counts per action over everything in the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Items created.
    pub created: usize,
    /// Items updated.
    pub updated: usize,
    /// Items unchanged.
    pub unchanged: usize,
}

/// The artifact `publish.json` (kind `publish`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishReport {
    /// Gitea base URL.
    pub gitea: String,
    /// The main organization.
    pub org: String,
    /// Organizations.
    pub orgs: Vec<OrgReport>,
    /// Repositories, in publish order.
    pub repos: Vec<RepoReport>,
    /// Variables.
    pub variables: Vec<VariableReport>,
    /// Totals.
    pub summary: Summary,
}

impl Artifact for PublishReport {
    const KIND: &'static str = "publish";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl PublishReport {
    fn count(&mut self) {
        let mut s = Summary::default();
        let mut add = |a: Action| match a {
            Action::Created => s.created += 1,
            Action::Updated => s.updated += 1,
            Action::Unchanged => s.unchanged += 1,
        };
        self.orgs.iter().for_each(|o| add(o.action));
        for r in &self.repos {
            add(r.action);
            add(r.settings);
            r.refs.iter().for_each(|x| add(x.action));
            if let Some(f) = &r.fork {
                add(f.action);
            }
            if let Some(p) = &r.pull {
                add(p.action);
            }
        }
        self.variables.iter().for_each(|v| add(v.action));
        self.summary = s;
    }
}

/// Options of the publish step.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The user's checkout (for `globals.json` / `globals.local.json`).
    pub repo: PathBuf,
    /// The artifacts directory (for `configure/<lib>.json`).
    pub artifacts: ArtifactDir,
}

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
    }
}

/// The variables to set, validated: `(scope, name, value, source file, key)`.
type Wanted = Vec<(VariableScope, String, String)>;

/// Collects and validates every variable before anything is sent.
///
/// # Errors
/// Every bad name or value, with the file and key it came from.
pub fn wanted_variables(remotes: &Remotes, opts: &PublishOptions) -> Result<Wanted> {
    let mut problems = Problems::new();
    let globals = super::resolve::read_globals(&opts.repo, &mut problems);
    let mut out = Wanted::new();
    for (k, v) in &globals {
        let file =
            if has_key(&opts.repo.join("globals.local.json"), k) { "globals.local.json" } else { "globals.json" };
        if let Err(m) = valid_variable_name(k) {
            problems.add(Location::file(file).with_key(k), m.to_string());
            continue;
        }
        for org in [remotes.org.as_str(), STAGE_ORG, TASKS_ORG] {
            out.push((VariableScope::Org { org: org.to_string() }, k.clone(), v.clone()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for m in &remotes.modules {
        if m.parent.is_some() || !m.path.starts_with("libs") || !seen.insert(m.repo.clone()) {
            continue;
        }
        let lib = m.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = opts.artifacts.configure(&lib);
        let display = path.clone();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.add(Location::file(&display), format!("cannot read file: {e}"));
                continue;
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.add(Location::line(&display, e.line()), format!("invalid JSON: {e}"));
                continue;
            }
        };
        let outputs = match value.get("outputs") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Object(o)) => o,
            Some(other) => {
                problems.add(
                    Location::file(&display).with_key("outputs"),
                    format!("expected an object of KEY: value, found {other}"),
                );
                continue;
            }
        };
        for (k, v) in outputs {
            let key = format!("outputs.{k}");
            if let Err(msg) = valid_variable_name(k) {
                problems.add(Location::file(&display).with_key(&key), msg.to_string());
                continue;
            }
            let value = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    problems.add(
                        Location::file(&display).with_key(&key),
                        format!("expected a string, number or boolean, found {other}"),
                    );
                    continue;
                }
            };
            if value.is_empty() {
                problems.add(Location::file(&display).with_key(&key), "empty value (Gitea refuses empty variables)");
                continue;
            }
            out.push((VariableScope::Repo { owner: remotes.org.clone(), repo: m.repo.clone() }, k.clone(), value));
        }
    }
    problems.into_result()?;
    Ok(out)
}

fn has_key(file: &Path, key: &str) -> bool {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get(key).is_some())
}

/// Sets one variable: `GET`, then `POST` when missing (on 409 `PUT`), `PUT` when different.
///
/// # Errors
/// The Gitea error of the failing call.
pub async fn ensure_variable(
    client: &Client,
    scope: &VariableScope,
    name: &str,
    value: &str,
) -> anyhow::Result<Action> {
    match client.get_variable(scope, name).await? {
        Some(v) if v.data == value => Ok(Action::Unchanged),
        Some(_) => {
            client
                .update_variable(scope, name, &UpdateVariableOption { value: value.into(), ..Default::default() })
                .await?;
            Ok(Action::Updated)
        }
        None => match client
            .create_variable(scope, name, &CreateVariableOption { value: value.into(), description: None })
            .await?
        {
            Created::New(()) => Ok(Action::Created),
            Created::Exists => {
                client
                    .update_variable(scope, name, &UpdateVariableOption { value: value.into(), ..Default::default() })
                    .await?;
                Ok(Action::Updated)
            }
        },
    }
}

/// The git credentials for `client`'s auth: login/password, or the token with its owner's login.
async fn git_credentials(client: &Client) -> anyhow::Result<Option<Credentials>> {
    Ok(match client.auth() {
        Some(Auth::Basic { login, password }) => {
            Some(Credentials { username: login.clone(), secret: password.clone() })
        }
        Some(Auth::Token(t)) => {
            let user = client.current_user().await.context("cannot find the token's user for git over HTTP")?;
            Some(Credentials { username: user.login, secret: t.clone() })
        }
        None => None,
    })
}

/// Runs the publish step for the working copy described by `remotes`.
///
/// # Errors
/// [`Error::Input`] for invalid variable names/values (nothing is sent then);
/// [`Error::Failed`] naming the Gitea call or git command that failed. Work done before a
/// failure stays (every operation is idempotent: run it again).
pub async fn publish(client: &Client, remotes: &Remotes, opts: &PublishOptions) -> Result<PublishReport> {
    let variables = wanted_variables(remotes, opts)?;
    let git = match git_credentials(client).await? {
        Some(c) => Git::with_credentials(c).map_err(|e| Error::Failed(e.into()))?,
        None => {
            return Err(Error::Usage("no Gitea credentials: set GITEA_TOKEN, or LOGIN and PASSWORD".into()));
        }
    };
    let mut report = PublishReport {
        gitea: client.base().as_str().trim_end_matches('/').to_string(),
        org: remotes.org.clone(),
        orgs: Vec::new(),
        repos: Vec::new(),
        variables: Vec::new(),
        summary: Summary::default(),
    };

    // 1. organizations
    let mut orgs = vec![remotes.org.clone()];
    for o in [STAGE_ORG, TASKS_ORG] {
        if !orgs.iter().any(|x| x == o) {
            orgs.push(o.to_string());
        }
    }
    for org in &orgs {
        let ensure = async {
            Ok::<Action, crate::gitea::GiteaError>(match client.get_org(org).await? {
                Some(_) => Action::Unchanged,
                None => match client
                    .create_org(&CreateOrgOption {
                        username: org.clone(),
                        visibility: Some("public".into()),
                        ..Default::default()
                    })
                    .await?
                {
                    Created::New(_) => Action::Created,
                    Created::Exists => Action::Unchanged,
                },
            })
        };
        let action = ensure.await.map_err(|e| Error::Failed(e.into()))?;
        tracing::info!("org {org}: {}", label(action));
        report.orgs.push(OrgReport { name: org.clone(), action });
    }

    // 2.–4. repositories
    for (repo, dir, commit, path) in remotes.publish_order() {
        let staged = path.as_ref().is_none_or(|p| p.starts_with("libs") && p.components().count() == 2);
        let r = publish_repo(client, &git, &remotes.org, &repo, &dir, &commit, path, staged)
            .await
            .map_err(|e| Error::Failed(e.context(format!("publishing {}/{repo}", remotes.org))))?;
        report.repos.push(r);
    }

    // 5. variables
    for (scope, name, value) in &variables {
        let action = ensure_variable(client, scope, name, value)
            .await
            .map_err(|e| Error::Failed(e.context(format!("variable {name} of {scope}"))))?;
        tracing::info!("variable {name} ({scope}): {}", label(action));
        report.variables.push(VariableReport { scope: scope.clone(), name: name.clone(), action });
    }
    report.count();
    Ok(report)
}

fn label(a: Action) -> &'static str {
    match a {
        Action::Created => "created",
        Action::Updated => "updated",
        Action::Unchanged => "unchanged",
    }
}

#[allow(clippy::too_many_arguments)]
async fn publish_repo(
    client: &Client,
    git: &Git,
    org: &str,
    repo: &str,
    dir: &Path,
    commit: &str,
    path: Option<PathBuf>,
    staged: bool,
) -> anyhow::Result<RepoReport> {
    let full_name = format!("{org}/{repo}");
    let url = client.clone_url(org, repo);
    let (existing, action) = match client.get_repo(org, repo).await? {
        Some(r) => (r, Action::Unchanged),
        None => {
            let opt = CreateRepoOption {
                name: repo.to_string(),
                private: false,
                auto_init: false,
                default_branch: Some("main".into()),
                description: None,
            };
            match client.create_org_repo(org, &opt).await? {
                Created::New(r) => (r, Action::Created),
                Created::Exists => (
                    client
                        .get_repo(org, repo)
                        .await?
                        .with_context(|| format!("{full_name} exists but cannot be read"))?,
                    Action::Unchanged,
                ),
            }
        }
    };
    let units = wanted_units(&existing);
    let settings = if units.is_empty() {
        Action::Unchanged
    } else {
        client.edit_repo(org, repo, &units).await?;
        Action::Updated
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
    if let Some(old) = old_main.as_deref().filter(|o| *o != commit) {
        // Keep the previous state: fetch it (the push needs the object locally) → rollback.
        git.run(dir, ["fetch", "-q", "--no-tags", "--", &url, "refs/heads/main"])?;
        refspecs.push(format!("+{old}:refs/heads/rollback"));
        refs.push(RefReport {
            branch: "rollback".into(),
            old: head("rollback"),
            new: old.to_string(),
            action: if head("rollback").is_some() { Action::Updated } else { Action::Created },
        });
    }
    for (branch, force) in [("main", true), ("release", false), ("snapshot", true)] {
        let old = head(branch);
        let action = match (&old, branch) {
            (Some(o), _) if o == commit => Action::Unchanged,
            (Some(_), "release") => Action::Unchanged, // moved by the release pull request
            (Some(_), _) => Action::Updated,
            (None, _) => Action::Created,
        };
        let new = if branch == "release" && action == Action::Unchanged {
            old.clone().unwrap_or_default()
        } else {
            commit.to_string()
        };
        if action != Action::Unchanged {
            refspecs.push(format!("{}{commit}:refs/heads/{branch}", if force { "+" } else { "" }));
        }
        refs.push(RefReport { branch: branch.into(), old, new, action });
    }
    if !refspecs.is_empty() {
        let mut args: Vec<String> = vec!["push".into(), "-q".into(), "--atomic".into(), "--".into(), url.clone()];
        args.extend(refspecs);
        git.run(dir, &args)?;
    }
    for r in &refs {
        if r.action != Action::Unchanged {
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
            Some(_) => Action::Unchanged,
            None => match client
                .create_fork(org, repo, &CreateForkOption { name: None, organization: Some(STAGE_ORG.into()) })
                .await?
            {
                Created::New(_) => Action::Created,
                Created::Exists => Action::Unchanged,
            },
        };
        // An existing fork follows `main` unless it has commits of its own (then a note).
        let (action, note) = if action == Action::Unchanged {
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
        pull = Some(if release == commit {
            PullReport { number: None, action: Action::Unchanged }
        } else {
            let open = client.list_pulls(org, repo, "open", Some("release")).await?;
            match open.iter().find(|p| p.head.ref_ == "main" && p.base.ref_ == "release") {
                Some(p) => PullReport { number: Some(p.number), action: Action::Unchanged },
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
                    PullReport { number: Some(p.number), action: Action::Created }
                }
            }
        });
    }
    Ok(RepoReport { full_name, path, url, commit: commit.to_string(), action, settings, refs, fork, pull })
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
) -> anyhow::Result<(Action, Option<String>)> {
    let fork_url = client.clone_url(STAGE_ORG, repo);
    let fork_main = git.ls_remote(dir, &fork_url, &["refs/heads/main"])?.into_iter().next().map(|(_, id)| id);
    let lease = match fork_main.as_deref() {
        Some(f) if f == commit => return Ok((Action::Unchanged, None)),
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
                return Ok((Action::Unchanged, Some(note)));
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
    Ok((Action::Updated, None))
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}
