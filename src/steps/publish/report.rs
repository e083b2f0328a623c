//! The artifact `publish.json` ([`PublishReport`]): what happened to every organization,
//! repository, ref, fork, pull request, variable and secret (never a credential, a variable's or a
//! secret's value).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::gitea::VariableScope;

/// What happened to one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemAction {
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
    pub action: ItemAction,
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
    pub action: ItemAction,
}

/// A fork in [`RepoReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkReport {
    /// `stage/<repo>`.
    pub full_name: String,
    /// Created, updated (an existing fork's `main` moved to the published commit) or unchanged.
    pub action: ItemAction,
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
    pub action: ItemAction,
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
    pub action: ItemAction,
    /// Whether the repository settings (units) were changed.
    pub settings: ItemAction,
    /// Branches touched or checked.
    pub refs: Vec<RefReport>,
    /// The fork in `stage`, for lib repositories and the monorepo.
    pub fork: Option<ForkReport>,
    /// The release pull request, for lib repositories and the monorepo.
    pub pull: Option<PullReport>,
    /// The workflow files the published commit has installed (from `remotes.json`, relative to
    /// the repository), e.g. `.gitea/workflows/task.yml`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<PathBuf>,
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
    pub action: ItemAction,
}

/// One Actions secret (its name and what was done, never its value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretReport {
    /// Where it lives.
    #[serde(flatten)]
    pub scope: VariableScope,
    /// Its name.
    pub name: String,
    /// Created (Gitea had none), updated (written: another value than recorded, or no record of
    /// it) or unchanged (Gitea lists it and the record says it holds this value).
    pub action: ItemAction,
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
    /// Secrets (set from the settings, see `from_settings`).
    #[serde(default)]
    pub secrets: Vec<SecretReport>,
    /// Totals.
    pub summary: Summary,
}

impl Artifact for PublishReport {
    const KIND: &'static str = "publish";
    /// 1.1: `workflows` of each repository; 1.2: `secrets`.
    const SCHEMA_VERSION: (u32, u32) = (1, 2);
}

impl PublishReport {
    pub(super) fn count(&mut self) {
        let mut s = Summary::default();
        let mut add = |a: ItemAction| match a {
            ItemAction::Created => s.created += 1,
            ItemAction::Updated => s.updated += 1,
            ItemAction::Unchanged => s.unchanged += 1,
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
        self.secrets.iter().for_each(|v| add(v.action));
        self.summary = s;
    }
}
