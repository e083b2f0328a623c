//! Gitea API calls on the authenticated user, organizations, repositories, forks and pull requests.

use reqwest::Method;

use super::background::{self, Step};
use super::{
    Client, Compare, CreateForkOption, CreateOrgOption, CreatePullRequestOption, CreateRepoOption, Created,
    EditPullRequestOption, EditRepoOption, GiteaError, MergePullRequestOption, MergeStyle, Organization, PullRequest,
    Repository, User,
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
    /// A 404 while the repository exists (Gitea 1.27.3 right after its first push, until its push
    /// queue marks it non-empty) is retried within the create-pull patience (~10 s).
    ///
    /// # Errors
    /// [`GiteaError`]: 404 at once when the repository does not exist, 404 with the attempts
    /// made after the wait, and any other failed request.
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
        // Right after the first push Gitea still takes the repository for empty and answers 404.
        let what = format!("listing the pull requests of {owner}/{repo}");
        let hint = |how_long: &str| {
            format!(
                "Gitea still answered 404 for the pull requests of {owner}/{repo} {how_long}: it records pushed \
                 branches in the background"
            )
        };
        let path = ["repos", owner, repo, "pulls"];
        self.while_push_unrecorded(owner, repo, &what, hint, || self.get_pages(&path, &q)).await
    }

    /// `POST /repos/{owner}/{repo}/pulls` (`repoCreatePullRequest`, 201).
    ///
    /// Right after the push that made the head (or base) branch, Gitea 1.27.3 answers 404 "not
    /// found" until its push queue has recorded the branch (see [`Patience`](super::Patience)): a 404 while the
    /// repository exists is retried within the client's create-pull patience (~10 s, see
    /// [`Client::with_patience`]).
    ///
    /// # Errors
    /// [`GiteaError::Status`] with Gitea's answer: 404 at once when the repository does not
    /// exist, 404 with the attempts made and a hint when a branch is still unknown after the
    /// wait, 409 when an open pull request has these branches, 422 for a bad option.
    pub async fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        opt: &CreatePullRequestOption,
    ) -> Result<PullRequest, GiteaError> {
        let request = || async {
            let (a, path) = self.send(Method::POST, &["repos", owner, repo, "pulls"], &[], Self::json(opt)).await?;
            match a.status.as_u16() {
                201 => Self::decode(Method::POST, path, &a),
                _ => Err(Self::status_error(Method::POST, path, &a)),
            }
        };
        let what = format!("opening a pull request {} → {} in {owner}/{repo}", opt.head, opt.base);
        let hint = |how_long: &str| {
            format!(
                "Gitea still did not know branch `{}` or `{}` of {owner}/{repo} {how_long}: it records pushed branches \
                 in the background; check that both were pushed",
                opt.head, opt.base
            )
        };
        self.while_push_unrecorded(owner, repo, &what, hint, request).await
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

    /// [`Client::compare`] of branches just pushed: Gitea 1.27.3 answers 404 until its push queue
    /// has recorded them, so a 404 while the repository exists is retried within the client's
    /// create-pull patience (~10 s).
    ///
    /// # Errors
    /// [`GiteaError::Status`]: 404 at once when the repository does not exist, 404 with the
    /// attempts made when a branch is still unknown after the wait; other answers as
    /// [`Client::compare`].
    pub async fn compare_pushed(&self, owner: &str, repo: &str, base: &str, head: &str) -> Result<Compare, GiteaError> {
        let request = || async {
            self.compare(owner, repo, base, head).await?.ok_or_else(|| GiteaError::Status {
                method: Method::GET,
                path: format!("/repos/{owner}/{repo}/compare/{base}...{head}"),
                status: 404,
                message: "not found".into(),
            })
        };
        let what = format!("comparing {base}...{head} in {owner}/{repo}");
        let hint = |how_long: &str| {
            format!(
                "Gitea still did not know branch `{base}` or `{head}` of {owner}/{repo} {how_long}: it records pushed \
                 branches in the background; check that both were pushed"
            )
        };
        self.while_push_unrecorded(owner, repo, &what, hint, request).await
    }

    /// Runs `request` again within the client's create-pull patience (~10 s) while it answers 404
    /// and the repository `owner/repo` exists: Gitea 1.27.3 answers 404 for a repository's pull
    /// requests and the branches of a push until its push queue has recorded that push (the
    /// repository still counts as empty after its first). `what` names the request in the retry
    /// log; `hint` says, given "after N attempts over S s", why a 404 outlasted the wait.
    ///
    /// # Errors
    /// `request`'s error at once when it is no 404 or the repository does not exist; the last
    /// 404 with the hint when the wait runs out; an error of the repository lookup.
    async fn while_push_unrecorded<T, F, Fut>(
        &self,
        owner: &str,
        repo: &str,
        what: &str,
        hint: impl FnOnce(&str) -> String,
        request: F,
    ) -> Result<T, GiteaError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, GiteaError>>,
    {
        let attempt = || async {
            match request().await {
                Ok(v) => Ok(v),
                Err(e) if e.status() == Some(404) => match self.get_repo(owner, repo).await {
                    Ok(Some(_)) => Err(Step::NotYet(e)),
                    Ok(None) => Err(Step::Fail(e)),
                    Err(e) => Err(Step::Fail(e)),
                },
                Err(e) => Err(Step::Fail(e)),
            }
        };
        background::until_done(what, self.create_pull_patience, attempt).await.map_err(|e| match e {
            Ok(e) => e,
            Err(gave_up) => {
                let hint = hint(&gave_up.how_long());
                with_hint(gave_up.last, &hint)
            }
        })
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
    /// Gitea 1.27.3 answers 405 "Please try again later" while its mergeable check of the pull
    /// request runs (after it was opened, after a push to its head or base, after a refused
    /// merge) and for a pull request the check found conflicting (`services/pull/check.go`,
    /// `CheckPullMergeable`). That answer is retried within the client's merge patience (~20 s,
    /// see [`Client::with_patience`]); every other answer is final.
    ///
    /// # Errors
    /// [`GiteaError::Status`] with Gitea's answer otherwise: 404 (no such pull request, or it is
    /// closed), 405 "The PR is already merged" (not retried), 405 "Please try again later" after
    /// the wait (the message then says whether the pull request is conflicting: `mergeable`
    /// still false), other 405s (the style or the user is not allowed), 409 (a rebase conflict,
    /// or `head_commit_id` is not the head any more: "head out of date"), 423 (archived), 500
    /// for a fast-forward-only merge whose base has diverged (Gitea 1.27.3 does not map
    /// `ErrMergeDivergingFastForwardOnly`; the message is Gitea's only for an admin). A 405
    /// or 404 had no effect, and no other answer is retried, so a merge is never done twice.
    pub async fn merge_pull(
        &self,
        owner: &str,
        repo: &str,
        index: i64,
        opt: &MergePullRequestOption,
    ) -> Result<(), GiteaError> {
        let n = index.to_string();
        let attempt = || async {
            let segments = ["repos", owner, repo, "pulls", &n, "merge"];
            let (a, path) = match self.send(Method::POST, &segments, &[], Self::json(opt)).await {
                Ok(answer) => answer,
                Err(e) if e.status() == Some(500) && opt.style == MergeStyle::FastForwardOnly => {
                    return Err(Step::Fail(with_hint(
                        e,
                        "with fast-forward-only, Gitea answers 500 when the base branch has diverged from the head",
                    )));
                }
                Err(e) => return Err(Step::Fail(e)),
            };
            match a.status.as_u16() {
                200 => Ok(()),
                405 => {
                    let e = Self::status_error(Method::POST, path, &a);
                    match &e {
                        GiteaError::Status { message, .. } if message == TRY_AGAIN_LATER => Err(Step::NotYet(e)),
                        _ => Err(Step::Fail(e)),
                    }
                }
                _ => Err(Step::Fail(Self::status_error(Method::POST, path, &a))),
            }
        };
        let what = format!("merging pull request #{index} of {owner}/{repo}");
        let gave_up = match background::until_done(&what, self.merge_patience, attempt).await {
            Ok(()) => return Ok(()),
            Err(Ok(e)) => return Err(e),
            Err(Err(gave_up)) => gave_up,
        };
        // Still "try again later": a conflict, or a check that takes unusually long.
        let hint = match self.get_pull(owner, repo, index).await {
            Ok(Some(p)) if p.state == "open" && !p.mergeable => format!(
                "pull request #{index} ({} → {}) is still not mergeable {}: Gitea's check finds a conflict between \
                 the branches; merge `{}` into `{}` (or rebase it) and push",
                p.head.ref_,
                p.base.ref_,
                gave_up.how_long(),
                p.base.ref_,
                p.head.ref_
            ),
            Ok(_) => format!("Gitea still refused the merge {}", gave_up.how_long()),
            Err(e) => {
                format!("Gitea still refused the merge {} (reading the pull request failed: {e})", gave_up.how_long())
            }
        };
        Err(with_hint(gave_up.last, &hint))
    }
}

/// Gitea's message for a pull request that is not (yet) mergeable: `ErrNotMergeableState` in
/// `routers/api/v1/repo/pull.go` (`MergePullRequest`), Gitea 1.27.3.
const TRY_AGAIN_LATER: &str = "Please try again later";

/// `e` with `hint` added to its message (a [`GiteaError::Status`]; other errors unchanged).
fn with_hint(e: GiteaError, hint: &str) -> GiteaError {
    match e {
        GiteaError::Status { method, path, status, message } => {
            GiteaError::Status { method, path, status, message: format!("{} ({hint})", message.trim_end()) }
        }
        other => other,
    }
}
