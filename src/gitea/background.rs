//! Waiting for Gitea's background work: answers that mean "not yet", retried within a bound.
//!
//! Gitea 1.27.3 does some work after a request has been answered, in queues, and answers
//! differently until it is done:
//!
//! * **A pushed branch** is recorded in Gitea's branch table by the push queue
//!   (`services/repository/push.go`). Until then `POST /repos/{owner}/{repo}/pulls`
//!   (`repoCreatePullRequest`) answers 404 "not found" for the new head
//!   (`routers/api/v1/repo/pull.go`, `parseCompareInfo`).
//! * **The mergeable check** of a pull request runs in the pull-request check queue
//!   (`services/pull/check.go`) after it is opened, after a push to its head or base, and after a
//!   refused merge (409 "head out of date", 500 for a fast-forward-only merge of a diverged
//!   base). Until it has run the pull request is `mergeable: false`, and a merge answers 405
//!   "Please try again later" (`CheckPullMergeable` returns `ErrNotMergeableState` for any status
//!   but mergeable). A pull request the check found conflicting gets the same 405.
//!
//! The check normally takes well under a second, so these answers are retried with a short
//! exponential backoff, bounded by a [`Patience`] (attempts and total time); each retry is logged
//! at debug level. Both retried requests are POSTs that had no effect (404, 405), so repeating
//! them cannot do anything twice.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use super::GiteaError;

/// How long to wait for Gitea's background work before reporting its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// The longest total time from the first attempt to the last retry.
    pub budget: Duration,
    /// The most attempts, the first included (at least 1).
    pub max_attempts: usize,
}

impl Patience {
    /// Waits at most `budget` (and [`Patience::max_attempts`] 60 attempts).
    pub const fn within(budget: Duration) -> Patience {
        Patience { budget, max_attempts: 60 }
    }
}

/// For `repoCreatePullRequest` right after the push that made its head: ~10 s.
pub const CREATE_PULL_PATIENCE: Patience = Patience::within(Duration::from_secs(10));
/// For `repoMergePullRequest` while Gitea checks the pull request: ~20 s.
pub const MERGE_PATIENCE: Patience = Patience::within(Duration::from_secs(20));

/// What one attempt says.
pub(super) enum Step {
    /// Gitea is not done yet: try again (the error is what it answered).
    NotYet(GiteaError),
    /// A final answer: no retry.
    Fail(GiteaError),
}

/// Gave up waiting: Gitea's last answer, the attempts made and the time they took.
pub(super) struct GaveUp {
    pub(super) last: GiteaError,
    pub(super) attempts: usize,
    pub(super) waited: Duration,
}

impl GaveUp {
    /// `after N attempts over S s`, for messages.
    pub(super) fn how_long(&self) -> String {
        format!("after {} attempts over {:.1} s", self.attempts, self.waited.as_secs_f64())
    }
}

/// Runs `attempt` until it succeeds, fails for good ([`Step::Fail`], returned at once as
/// `Err(Ok(error))`), or `patience` runs out while it says [`Step::NotYet`] (`Err(Err(GaveUp))`).
/// Delays grow from 100 ms to 1 s with jitter.
pub(super) async fn until_done<T, F, Fut>(
    what: &str,
    patience: Patience,
    mut attempt: F,
) -> Result<T, Result<GiteaError, GaveUp>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Step>>,
{
    let started = Instant::now();
    let attempts = Cell::new(0usize);
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(patience.max_attempts.saturating_sub(1))
        .with_total_delay(Some(patience.budget))
        .with_jitter();
    let result = (|| {
        attempts.set(attempts.get() + 1);
        attempt()
    })
    .retry(backoff)
    .sleep(tokio::time::sleep)
    .when(|s: &Step| matches!(s, Step::NotYet(_)) && started.elapsed() < patience.budget)
    .notify(|s: &Step, dur: Duration| {
        if let Step::NotYet(e) = s {
            tracing::debug!("{what}: {e}; Gitea is not done yet, retrying in {:.1}s", dur.as_secs_f64());
        }
    })
    .await;
    result.map_err(|s| match s {
        Step::Fail(e) => Ok(e),
        Step::NotYet(last) => Err(GaveUp { last, attempts: attempts.get(), waited: started.elapsed() }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::Method;

    fn e(status: u16) -> GiteaError {
        GiteaError::Status { method: Method::POST, path: "/x".into(), status, message: "m".into() }
    }

    #[tokio::test]
    async fn not_yet_is_retried_until_done() {
        let n = Cell::new(0);
        let r = until_done("t", Patience::within(Duration::from_secs(5)), || {
            n.set(n.get() + 1);
            let k = n.get();
            async move { if k < 3 { Err(Step::NotYet(e(405))) } else { Ok(k) } }
        })
        .await;
        assert_eq!(r.ok(), Some(3));
    }

    #[tokio::test]
    async fn a_final_answer_is_not_retried() {
        let n = Cell::new(0);
        let r: Result<(), _> = until_done("t", Patience::within(Duration::from_secs(5)), || {
            n.set(n.get() + 1);
            async { Err(Step::Fail(e(409))) }
        })
        .await;
        assert!(matches!(r, Err(Ok(GiteaError::Status { status: 409, .. }))));
        assert_eq!(n.get(), 1);
    }

    #[tokio::test]
    async fn waiting_is_bounded_in_attempts_and_time() {
        let few = Patience { budget: Duration::from_secs(30), max_attempts: 3 };
        let Err(Err(g)) = until_done::<(), _, _>("t", few, || async { Err(Step::NotYet(e(405))) }).await else {
            panic!("expected to give up")
        };
        assert_eq!(g.attempts, 3);
        let short = Patience::within(Duration::from_millis(300));
        let Err(Err(g)) = until_done::<(), _, _>("t", short, || async { Err(Step::NotYet(e(405))) }).await else {
            panic!("expected to give up")
        };
        assert!(g.waited < Duration::from_secs(2), "{:?}", g.waited);
        assert!(g.how_long().starts_with(&format!("after {} attempts over ", g.attempts)));
    }
}
