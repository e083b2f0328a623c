//! Gitea API calls on the authenticated user, organizations, repositories, forks and pull requests.

use reqwest::Method;

use super::{
    Client, Compare, CreateForkOption, CreateOrgOption, CreatePullRequestOption, CreateRepoOption, Created,
    EditPullRequestOption, EditRepoOption, GiteaError, MergePullRequestOption, Organization, PullRequest, Repository,
    User,
};

impl Client {
    /// `GET /user` (`userGetCurrent`, 200): the authenticated user.
    pub async fn current_user(&self) -> Result<User, GiteaError> {
        let (a, path) = self.send(Method::GET, &["user"], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `GET /orgs/{org}` (`orgGet`, 200/404).
    pub async fn get_org(&self, org: &str) -> Result<Option<Organization>, GiteaError> {
        let (a, path) = self.send(Method::GET, &["orgs", org], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST /orgs` (`orgCreate`, 201); 422 (Gitea's "user already exists") and 409 give
    /// [`Created::Exists`] when the org can then be read.
    pub async fn create_org(&self, opt: &CreateOrgOption) -> Result<Created<Organization>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["orgs"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 | 422 => match self.get_org(&opt.username).await? {
                Some(_) => Ok(Created::Exists),
                None => Err(Self::status_error(Method::POST, path, &a)),
            },
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}` (`repoGet`, 200/404).
    pub async fn get_repo(&self, owner: &str, repo: &str) -> Result<Option<Repository>, GiteaError> {
        let (a, path) = self.send(Method::GET, &["repos", owner, repo], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST /orgs/{org}/repos` (`createOrgRepo`, 201); 409 (exists) gives [`Created::Exists`].
    pub async fn create_org_repo(&self, org: &str, opt: &CreateRepoOption) -> Result<Created<Repository>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["orgs", org, "repos"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `PATCH /repos/{owner}/{repo}` (`repoEdit`, 200).
    pub async fn edit_repo(&self, owner: &str, repo: &str, opt: &EditRepoOption) -> Result<Repository, GiteaError> {
        let (a, path) = self.send(Method::PATCH, &["repos", owner, repo], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::PATCH, path, &a),
            _ => Err(Self::status_error(Method::PATCH, path, &a)),
        }
    }

    /// `POST /repos/{owner}/{repo}/forks` (`createFork`, 202); 409 (the fork exists) gives
    /// [`Created::Exists`].
    pub async fn create_fork(
        &self,
        owner: &str,
        repo: &str,
        opt: &CreateForkOption,
    ) -> Result<Created<Repository>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["repos", owner, repo, "forks"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            202 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}/pulls?state=…&base_branch=…` (`repoListPullRequests`, 200),
    /// all pages (at most [`MAX_PAGES`](super::MAX_PAGES) of [`PAGE_LIMIT`](super::PAGE_LIMIT)).
    pub async fn list_pulls(
        &self,
        owner: &str,
        repo: &str,
        state: &str,
        base_branch: Option<&str>,
    ) -> Result<Vec<PullRequest>, GiteaError> {
        let mut q = vec![("state", state.to_string())];
        if let Some(b) = base_branch {
            q.push(("base_branch", b.to_string()));
        }
        self.get_pages(&["repos", owner, repo, "pulls"], &q).await
    }

    /// `POST /repos/{owner}/{repo}/pulls` (`repoCreatePullRequest`, 201).
    pub async fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        opt: &CreatePullRequestOption,
    ) -> Result<PullRequest, GiteaError> {
        let (a, path) = self.send(Method::POST, &["repos", owner, repo, "pulls"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `PATCH /repos/{owner}/{repo}/pulls/{index}` (`repoEditPullRequest`, 201): changes the
    /// fields `opt` sets (title, description) and returns the pull request as it is now.
    ///
    /// # Errors
    /// [`GiteaError::Status`] with Gitea's answer otherwise: 403 (the user may not edit it), 404
    /// (no such pull request), 409/412/422 (a change Gitea refuses).
    pub async fn edit_pull(
        &self,
        owner: &str,
        repo: &str,
        index: i64,
        opt: &EditPullRequestOption,
    ) -> Result<PullRequest, GiteaError> {
        let n = index.to_string();
        let (a, path) = self.send(Method::PATCH, &["repos", owner, repo, "pulls", &n], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::PATCH, path, &a),
            _ => Err(Self::status_error(Method::PATCH, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}/compare/{base}...{head}` (`repoCompareDiff`, 200/404): how many
    /// commits `head` has that `base` lacks; `None` when Gitea answers 404 (the repository or one
    /// of the refs does not exist).
    pub async fn compare(
        &self,
        owner: &str,
        repo: &str,
        base: &str,
        head: &str,
    ) -> Result<Option<Compare>, GiteaError> {
        let basehead = format!("{base}...{head}");
        let (a, path) = self.send(Method::GET, &["repos", owner, repo, "compare", &basehead], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}/pulls/{index}` (`repoGetPullRequest`, 200/404).
    pub async fn get_pull(&self, owner: &str, repo: &str, index: i64) -> Result<Option<PullRequest>, GiteaError> {
        let n = index.to_string();
        let (a, path) = self.send(Method::GET, &["repos", owner, repo, "pulls", &n], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}/pulls/{index}/merge` (`repoPullRequestIsMerged`): `true` for
    /// 204 (merged), `false` for 404 (not merged, or no such pull request).
    pub async fn is_pull_merged(&self, owner: &str, repo: &str, index: i64) -> Result<bool, GiteaError> {
        let n = index.to_string();
        let (a, path) = self.send(Method::GET, &["repos", owner, repo, "pulls", &n, "merge"], &[], None).await?;
        match a.status.as_u16() {
            204 => Ok(true),
            404 => Ok(false),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST /repos/{owner}/{repo}/pulls/{index}/merge` (`repoMergePullRequest`, 200): merges
    /// the pull request with `opt.style`; the base branch moves as with a push (which starts its
    /// workflows).
    ///
    /// # Errors
    /// [`GiteaError::Status`] with Gitea's answer otherwise: 404 (no such pull request, or it is
    /// closed), 405 (already merged, or the style or the user is not allowed), 409 (conflicts,
    /// or `head_commit_id` is not the head any more: "head out of date"), 423 (archived). A
    /// POST is not retried once sent (see [`Client`]), so a merge is never done twice.
    pub async fn merge_pull(
        &self,
        owner: &str,
        repo: &str,
        index: i64,
        opt: &MergePullRequestOption,
    ) -> Result<(), GiteaError> {
        let n = index.to_string();
        let (a, path) =
            self.send(Method::POST, &["repos", owner, repo, "pulls", &n, "merge"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            200 => Ok(()),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }
}
