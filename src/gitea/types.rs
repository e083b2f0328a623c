//! Request and response bodies: the subset of the Swagger `definitions` the tool uses.
//!
//! Request structs serialize only the fields that are set, with the spec's names; response
//! structs read only what the tool needs and tolerate any other field (and missing ones).

use serde::{Deserialize, Serialize};

/// `CreateOrgOption` (body of `POST /orgs`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateOrgOption {
    /// `username`: the organization's name (required).
    pub username: String,
    /// `full_name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
    /// `description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `visibility`: `public`, `limited` or `private`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
}

/// `CreateRepoOption` (body of `POST /orgs/{org}/repos`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateRepoOption {
    /// `name` (required).
    pub name: String,
    /// `private`.
    pub private: bool,
    /// `auto_init`: false, we push the content ourselves.
    pub auto_init: bool,
    /// `default_branch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_branch: Option<String>,
    /// `description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `EditRepoOption` (body of `PATCH /repos/{owner}/{repo}`); only set fields are sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EditRepoOption {
    /// `has_issues`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_issues: Option<bool>,
    /// `has_wiki`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_wiki: Option<bool>,
    /// `has_projects`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_projects: Option<bool>,
    /// `has_packages`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_packages: Option<bool>,
    /// `has_releases`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_releases: Option<bool>,
    /// `default_branch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_branch: Option<String>,
    /// `description` (Gitea limits it to 2048 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl EditRepoOption {
    /// True when nothing is set (no request needed).
    pub fn is_empty(&self) -> bool {
        *self == EditRepoOption::default()
    }
}

/// `CreateForkOption` (body of `POST /repos/{owner}/{repo}/forks`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateForkOption {
    /// `name` of the fork.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `organization` to fork into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
}

/// `CreatePullRequestOption` (body of `POST /repos/{owner}/{repo}/pulls`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreatePullRequestOption {
    /// `head` branch.
    pub head: String,
    /// `base` branch.
    pub base: String,
    /// `title`.
    pub title: String,
    /// `body`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `EditPullRequestOption` (body of `PATCH /repos/{owner}/{repo}/pulls/{index}`), the fields the
/// tool changes; a field left `None` is not sent, so Gitea keeps it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EditPullRequestOption {
    /// `title`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `body`: the new description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `Compare` (subset): the answer of `GET /repos/{owner}/{repo}/compare/{base}...{head}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Compare {
    /// `total_commits`: the commits of the head that the base lacks (since their merge base).
    pub total_commits: i64,
}

/// How a pull request is merged: `MergePullRequestOption.do` (Gitea's `MergeStyle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MergeStyle {
    /// A merge commit whose parents are the base and the head (Gitea never fast-forwards here).
    Merge,
    /// The head's commits replayed onto the base.
    Rebase,
    /// Replayed onto the base, then a merge commit.
    RebaseMerge,
    /// One commit on the base with the merged tree.
    Squash,
    /// Only when the base is an ancestor of the head: the base moves to the head.
    FastForwardOnly,
    /// Records the pull request as merged by `merge_commit_id`, changing no branch.
    ManuallyMerged,
}

/// `MergePullRequestOption` (body of `POST /repos/{owner}/{repo}/pulls/{index}/merge`); only set
/// fields are sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergePullRequestOption {
    /// `do` (required): the merge style.
    #[serde(rename = "do")]
    pub style: MergeStyle,
    /// `merge_title_field`: the merge commit's first line (Gitea's default names the pull
    /// request and its branches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_title_field: Option<String>,
    /// `merge_message_field`: the rest of the commit message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_message_field: Option<String>,
    /// `head_commit_id`: merge only when the head is still this commit (else HTTP 409, "head
    /// out of date"): what was checked is what is merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_commit_id: Option<String>,
    /// `delete_branch_after_merge`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_branch_after_merge: Option<bool>,
}

impl MergePullRequestOption {
    /// Merge with `style`, nothing else set.
    pub fn new(style: MergeStyle) -> Self {
        Self {
            style,
            merge_title_field: None,
            merge_message_field: None,
            head_commit_id: None,
            delete_branch_after_merge: None,
        }
    }
}

/// `CreateVariableOption` (body of `POST …/actions/variables/{name}`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateVariableOption {
    /// `value` (required).
    pub value: String,
    /// `description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `UpdateVariableOption` (body of `PUT …/actions/variables/{name}`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpdateVariableOption {
    /// `value` (required).
    pub value: String,
    /// `name`: a new name (unset keeps it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `User` (subset).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct User {
    /// `id`.
    pub id: i64,
    /// `login`.
    pub login: String,
    /// `is_admin`.
    pub is_admin: bool,
}

/// `Organization` (subset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Organization {
    /// `id`.
    pub id: i64,
    /// `name` (also `username`).
    pub name: String,
}

/// `Repository` (subset).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Repository {
    /// `id`.
    pub id: i64,
    /// `name`.
    pub name: String,
    /// `full_name`, `owner/name`.
    pub full_name: String,
    /// `clone_url` (HTTP).
    pub clone_url: String,
    /// `default_branch`.
    pub default_branch: String,
    /// `empty`: no commits yet.
    pub empty: bool,
    /// `fork`.
    pub fork: bool,
    /// `has_issues`.
    pub has_issues: bool,
    /// `has_wiki`.
    pub has_wiki: bool,
    /// `has_projects`.
    pub has_projects: bool,
    /// `has_packages`.
    pub has_packages: bool,
    /// `has_releases`.
    pub has_releases: bool,
    /// `description`.
    pub description: String,
}

/// `PRBranchInfo` (subset).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PrBranchInfo {
    /// `ref`: the branch name.
    #[serde(rename = "ref")]
    pub ref_: String,
    /// `sha`.
    pub sha: String,
}

/// `PullRequest` (subset).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PullRequest {
    /// `number`: the index in the repository.
    pub number: i64,
    /// `title`.
    pub title: String,
    /// `body`: the description (Markdown); `None` when Gitea sends none.
    pub body: Option<String>,
    /// `state`: `open` or `closed`.
    pub state: String,
    /// `html_url`.
    pub html_url: String,
    /// `head`.
    pub head: PrBranchInfo,
    /// `base`.
    pub base: PrBranchInfo,
    /// `mergeable`: Gitea's last mergeable check found no conflict between base and head. Gitea
    /// 1.27.3 checks in the background: `false` until the check of a new or changed pull request
    /// has run (so `false` is not a conflict by itself), and `true` on a merged one
    /// (`models/issues/pull.go`, `Mergeable`). Decide nothing on it alone: a merge answers 405
    /// while it is not mergeable (see [`crate::gitea::Client::merge_pull`]).
    pub mergeable: bool,
    /// `merged`.
    pub merged: bool,
    /// `merge_commit_sha`: the commit that merged it (`None` until merged; Gitea sends `null`).
    pub merge_commit_sha: Option<String>,
}

/// `ActionVariable`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ActionVariable {
    /// `name`.
    pub name: String,
    /// `data`: the value.
    pub data: String,
    /// `description`.
    pub description: String,
}

/// `Secret`: what Gitea tells about an Actions secret (never its value).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Secret {
    /// `name` (Gitea stores it upper-cased).
    pub name: String,
    /// `description`.
    pub description: String,
    /// `created_at` (RFC 3339).
    pub created_at: String,
}
