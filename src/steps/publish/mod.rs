//! Step `publish`: put the rewritten monorepo and its submodules on the Gitea control plane.
//!
//! Input: the working copy and `remotes.json` of [`super::rewrite`] (which also installed the
//! workflows: the report lists each repository's, see [`RepoReport::workflows`]). In order:
//!
//! 1. **Organizations** `main` (the `--org`), `stage`, `tasks` exist (`orgCreate`; Gitea's
//!    422 "already exists" is fine).
//! 2. **Repositories** (the tasks in the org `tasks`, the others in the `--org`), each module
//!    deepest first, the monorepo last: created when missing
//!    (`createOrgRepo`, `auto_init: false`, `default_branch: main`) and, like the seed, with
//!    issues, wiki, projects, packages and releases switched off (`repoEdit`, sent only when a
//!    setting differs). Then, with the git CLI (credentials through `GIT_ASKPASS`):
//!    * when the repository already had a different `main`, that previous head is pushed to
//!      `rollback` first;
//!    * `main` and `snapshot` are set to the published commit — put over the previous `main` when
//!      `rewrite` made it anew (a tool commit with the same tree and both parents, so the release
//!      pull request merges cleanly); `release` is created at it when
//!      missing (its first deploy is a workflow dispatch on `release`: the pushed commits are
//!      `[skip ci]` tool commits), and otherwise left
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
//! 6. **Settings** ([`from_settings`]): the settings publish itself runs with (environment,
//!    `local/config*.json`) become the organization variables and secrets the workflows read,
//!    in `main`, `stage` and `tasks` (the orgs whose repositories run workflows; lib
//!    repositories inherit them): variables as in 5., secrets with `updateOrgSecret` when
//!    Gitea does not list them or their keyed digest differs from the one recorded at the last
//!    write ([`record`]). A setting without a value sets nothing.
//!
//! Everything is read before it is written, so a second publish of the same tree changes
//! nothing and reports every item `unchanged`. The summary is the artifact `publish.json`
//! ([`PublishReport`]); it never holds a credential, a variable's or a secret's value.

pub mod from_settings;
pub mod record;
mod repo;
mod report;
mod secrets;
mod variables;

pub use report::{
    ForkReport, ItemAction, OrgReport, PublishReport, PullReport, RefReport, RepoReport, SecretReport, Summary,
    VariableReport,
};
pub use variables::{ensure_variable, wanted_variables};

use std::path::PathBuf;

use anyhow::Context;

use crate::artifact::ArtifactDir;
use crate::artifact::remotes::Remotes;
use crate::error::{Error, Result};
use crate::git::{Credentials, Git};
use crate::gitea::{Auth, Client, CreateOrgOption, Created};
use crate::settings::Settings;

use repo::publish_repo;

/// The organization that receives forks (the seed's `stage`).
pub const STAGE_ORG: &str = "stage";
/// The organization of scheduled-task repositories (the seed's `tasks`).
pub use crate::artifact::remotes::TASKS_ORG;
/// Title of the release pull request (the seed's).
pub const RELEASE_PR_TITLE: &str = "Release Pull Request";

/// Options of the publish step.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The user's checkout (for `globals.json` / `globals.local.json`).
    pub repo: PathBuf,
    /// The artifacts directory (for `configure/<lib>.json`).
    pub artifacts: ArtifactDir,
    /// The settings publish runs with: their values become the organizations' Actions
    /// variables and secrets ([`from_settings`]).
    pub settings: Settings,
    /// The directory of the record of written secrets ([`record`]); `None`: no record, every
    /// secret is written (and reported `updated` when it existed).
    pub record: Option<PathBuf>,
    /// Forget the record of this Gitea first: every secret is written again.
    pub rewrite_secrets: bool,
    /// A `release` branch of the monorepo that this publish creates starts at its first commit
    /// (first parents followed from the published `main`) instead of at `main`, so that the
    /// release pull request opens; `main` with a single commit has no such start (then `release`
    /// is `main`).
    pub release_from_root: bool,
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

/// The usage error of a Gitea client without credentials (see [`require_credentials`]).
pub fn no_credentials() -> Error {
    Error::Usage(
        "no Gitea credentials: set GITEA_TOKEN (or token in local/config.json), or LOGIN and PASSWORD (login and \
         password)"
            .into(),
    )
}

/// Checks that `client` has credentials, which publishing needs (pushes and every write call).
/// The CLI calls it before rewriting, so that nothing is written on this bad input.
///
/// # Errors
/// [`Error::Usage`] naming the settings to set.
pub fn require_credentials(client: &Client) -> Result<()> {
    match client.auth() {
        Some(_) => Ok(()),
        None => Err(no_credentials()),
    }
}

/// Runs the publish step for the working copy described by `remotes`.
///
/// # Errors
/// [`Error::Input`] for invalid variable names/values (nothing is sent then);
/// [`Error::Failed`] naming the Gitea call or git command that failed. Work done before a
/// failure stays (every operation is idempotent: run it again).
pub async fn publish(client: &Client, remotes: &Remotes, opts: &PublishOptions) -> Result<PublishReport> {
    let gitea = client.base().as_str().trim_end_matches('/').to_string();
    let mut variables = wanted_variables(remotes, opts)?;
    let settings = from_settings::from_settings(&opts.settings, &gitea, &orgs_of(remotes), &variables)?;
    variables.extend(settings.variables);
    require_credentials(client)?;
    // Opened before anything is sent: a broken record stops publish here.
    let mut record = match (&opts.record, settings.secrets.is_empty()) {
        (_, true) => None,
        (Some(dir), false) => Some(record::SecretRecord::open(dir).map_err(Error::Failed)?),
        (None, false) => {
            tracing::warn!(
                "no place for the record of written secrets (neither XDG_CACHE_HOME nor HOME is set): every secret \
                 is written"
            );
            Some(record::SecretRecord::in_memory())
        }
    };
    if let Some(r) = record.as_mut().filter(|_| opts.rewrite_secrets) {
        r.forget(&gitea);
    }
    let git = match git_credentials(client).await? {
        Some(c) => Git::with_credentials(c).map_err(|e| Error::Failed(e.into()))?,
        None => return Err(no_credentials()),
    };
    let mut report = PublishReport {
        gitea: gitea.clone(),
        org: remotes.org.clone(),
        orgs: Vec::new(),
        repos: Vec::new(),
        variables: Vec::new(),
        secrets: Vec::new(),
        summary: Summary::default(),
    };

    // 1. organizations
    for org in &orgs_of(remotes) {
        let ensure = async {
            Ok::<ItemAction, crate::gitea::GiteaError>(match client.get_org(org).await? {
                Some(_) => ItemAction::Unchanged,
                None => match client
                    .create_org(&CreateOrgOption {
                        username: org.clone(),
                        visibility: Some("public".into()),
                        ..Default::default()
                    })
                    .await?
                {
                    Created::New(_) => ItemAction::Created,
                    Created::Exists => ItemAction::Unchanged,
                },
            })
        };
        let action = ensure.await.map_err(|e| Error::Failed(e.into()))?;
        tracing::info!("org {org}: {}", label(action));
        report.orgs.push(OrgReport { name: org.clone(), action });
    }

    // 2.–4. repositories
    for (owner, repo, dir, commit, path) in remotes.publish_order() {
        let staged = path.as_ref().is_none_or(|p| p.starts_with("libs") && p.components().count() == 2);
        let workflows = match &path {
            None => remotes.monorepo.workflows.clone(),
            Some(p) => remotes.modules.iter().find(|m| &m.path == p).map(|m| m.workflows.clone()).unwrap_or_default(),
        };
        let from_root = opts.release_from_root && path.is_none();
        let mut r = publish_repo(client, &git, &owner, &repo, &dir, &commit, path, staged, from_root)
            .await
            .map_err(|e| Error::Failed(e.context(format!("publishing {owner}/{repo}"))))?;
        r.workflows = workflows;
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

    // 6. secrets
    if let Some(record) = record.as_mut() {
        report.secrets =
            secrets::ensure_secrets(client, &gitea, &settings.secrets, record).await.map_err(Error::Failed)?;
    }
    report.count();
    Ok(report)
}

/// The organizations publish makes and sets variables in: the `--org`, `stage`, `tasks`.
fn orgs_of(remotes: &Remotes) -> Vec<String> {
    let mut orgs = vec![remotes.org.clone()];
    for o in [STAGE_ORG, TASKS_ORG] {
        if !orgs.iter().any(|x| x == o) {
            orgs.push(o.to_string());
        }
    }
    orgs
}

fn label(a: ItemAction) -> &'static str {
    match a {
        ItemAction::Created => "created",
        ItemAction::Updated => "updated",
        ItemAction::Unchanged => "unchanged",
    }
}
