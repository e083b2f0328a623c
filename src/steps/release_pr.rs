//! Step `release-pr`: open or update the monorepo's release pull request, with the plan of the
//! release as its description.
//!
//! A push to `main` configures; only a merged release pull request (head `main`, base `release`,
//! titled like the one `publish` opens) provisions. So whenever `main` has commits that `release`
//! lacks there must be a release pull request to accept — and what the reviewer accepts is the
//! plan of that release (each container's action and every changed setting old → new), not a
//! diff of gitlinks. The pipeline runs this step on every push to `main`.
//!
//! # Order
//!
//! 1. **Compare** `release...main` (`repoCompareDiff`): `total_commits` are the commits of `main`
//!    that `release` lacks. None: nothing to release — nothing is opened, and an open release
//!    pull request is left alone (a merge commit on `release` makes `release` differ from `main`
//!    by id while holding all of it; comparing ids would open an empty pull request).
//! 2. **List** the open release pull requests (`repoListPullRequests`, base `release`, head
//!    `main`); the first one is the release pull request.
//! 3. **Plan** (only now, and only when `main` is ahead): the caller's plan, rendered as Markdown
//!    (the `plan` step's job summary), becomes the description ([`render_body`]).
//! 4. **Decide** ([`decide`], pure): open one when none is open; update the open one's
//!    description when it differs from the rendered one; otherwise leave it (a re-run writes
//!    nothing and says so).
//! 5. **Write**: `repoCreatePullRequest` or `repoEditPullRequest` (only the body is sent).
//!
//! # The description
//!
//! [`MARKER`] (a hidden HTML comment) on the first line says the description is ours; it is
//! followed by a short header, the plan, a footer naming the commit of `main` planned and the
//! backend, and the line [`KEEP_MARKER`]. Whatever a user writes below that line is kept on every
//! update ([`kept_text`]); a description without our marker (written before, by hand) is kept
//! there too, except `publish`'s one-line default ([`PUBLISH_BODY`]), which the plan replaces.
//!
//! The result is the `release-pr.json` artifact ([`ReleasePr`]). The plan's errors are redacted
//! by the planner ([`crate::steps::plan::with_live_state`]); no credential is ever in the
//! description, the artifact or a message.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::error::{Error, Result};
use crate::gitea::{Client, CreatePullRequestOption, EditPullRequestOption, PullRequest};
use crate::steps::auto_merge::{MAIN_BRANCH, RELEASE_BRANCH, RepoRef};
use crate::steps::publish::RELEASE_PR_TITLE;

/// The first line of a description this step wrote (hidden when Gitea renders it).
pub const MARKER: &str = "<!-- proxmox-gitops release-pr: the plan of this release, written by proxmox-gitops -->";
/// The line after which a user's own text begins; that text is kept when the plan is updated.
pub const KEEP_MARKER: &str =
    "<!-- proxmox-gitops release-pr: end of the plan; text below this line is kept when the plan is updated -->";
/// The description `publish` gives a release pull request it opens (src/steps/publish/repo.rs):
/// ours as well, so the plan replaces it instead of keeping it as a user's text.
pub const PUBLISH_BODY: &str = "Created automatically for deployment by proxmox-gitops publish.";

/// The plan of the release, as the caller made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanText {
    /// The plan in Markdown (the `plan` step's job summary: a heading, the count line, a table of
    /// containers with their action and old → new).
    pub markdown: String,
    /// The commit of `main` planned (the checkout's `HEAD`); `None` when unknown.
    pub commit: Option<String>,
    /// Against what, in words: `the live pve backend, recreate policy never`, or why no live
    /// state was read.
    pub against: String,
}

/// Options of [`release_pr`].
#[derive(Debug, Clone)]
pub struct ReleasePrOptions {
    /// The monorepo on Gitea.
    pub monorepo: RepoRef,
}

/// What became of the release pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrAction {
    /// None was open: opened now with the plan.
    Opened,
    /// The open one's description was replaced by the new plan.
    Updated,
    /// The open one already shows this plan: nothing written.
    Unchanged,
    /// `main` has nothing `release` lacks: nothing opened (an open one is left alone).
    None,
}

impl std::fmt::Display for PrAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PrAction::Opened => "opened",
            PrAction::Updated => "updated",
            PrAction::Unchanged => "unchanged",
            PrAction::None => "none",
        })
    }
}

/// The `release-pr.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasePr {
    /// The monorepo, `owner/name`.
    pub repository: String,
    /// What was done.
    pub action: PrAction,
    /// The release pull request's number (`None` when none is open and none was opened).
    pub number: Option<i64>,
    /// Its web page.
    pub url: Option<String>,
    /// The head commit of the pull request (`main` on Gitea) as Gitea reported it.
    pub head: Option<String>,
    /// The commit of `main` that was planned (the checkout's); `None` when nothing was planned.
    pub planned: Option<String>,
    /// Commits of `main` that `release` lacks.
    pub ahead: i64,
    /// What to know: why nothing was opened, a pull request left alone, a head that moved on.
    pub note: Option<String>,
}

impl Artifact for ReleasePr {
    const KIND: &'static str = "release-pr";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl ReleasePr {
    /// The job summary line: `Release pull request [#3](url): updated with the plan of main at
    /// abc123def456.`, or the note when there is none.
    pub fn summary_line(&self) -> String {
        let cell = crate::actions::markdown_cell;
        let link = match (self.number, &self.url) {
            (Some(n), Some(u)) => format!("[#{n}]({})", cell(u)),
            (Some(n), None) => format!("#{n}"),
            _ => String::new(),
        };
        let at = self.planned.as_deref().map(|c| format!(" at `{}`", short(c))).unwrap_or_default();
        let what = match self.action {
            PrAction::Opened => format!("Release pull request {link} opened with the plan of `{MAIN_BRANCH}`{at}."),
            PrAction::Updated => {
                format!("Release pull request {link}: its plan was updated to `{MAIN_BRANCH}`{at}.")
            }
            PrAction::Unchanged => {
                format!("Release pull request {link} already shows the plan of `{MAIN_BRANCH}`{at}.")
            }
            PrAction::None => "No release pull request needed.".to_string(),
        };
        match &self.note {
            Some(n) => format!("{what} {}", cell(n)),
            None => what,
        }
    }
}

/// The first 12 characters of a commit id.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `text` with CRLF line ends as LF and no trailing whitespace at the end (Gitea's editor sends
/// CRLF; the API keeps what it is given).
fn normalized(text: &str) -> String {
    text.replace("\r\n", "\n").trim_end().to_string()
}

/// The user's text of an existing description `body`, to keep below [`KEEP_MARKER`]:
///
/// * ours with the keep line: what follows that line (leading blank lines dropped);
/// * ours without it (the user deleted the line): nothing;
/// * empty, or `publish`'s default ([`PUBLISH_BODY`]): nothing;
/// * anything else (a description written by hand before): all of it.
pub fn kept_text(body: &str) -> String {
    let body = normalized(body);
    if let Some(at) = body.find(KEEP_MARKER) {
        let rest = &body[at + KEEP_MARKER.len()..];
        return rest.trim_start_matches([' ', '\t']).trim_start_matches('\n').trim_end().to_string();
    }
    if body.contains(MARKER) || body.trim().is_empty() || body.trim() == PUBLISH_BODY {
        return String::new();
    }
    body
}

/// The description of the release pull request: [`MARKER`], a header, `plan.markdown`, a footer
/// naming the commit of `main` planned and what it was planned against, [`KEEP_MARKER`], then
/// `kept` (the user's text, see [`kept_text`]) when not empty. Ends with one newline.
pub fn render_body(plan: &PlanText, kept: &str) -> String {
    let at = match &plan.commit {
        Some(c) => format!("commit `{c}` of `{MAIN_BRANCH}`"),
        None => format!("`{MAIN_BRANCH}` (commit unknown)"),
    };
    let mut s = format!(
        "{MARKER}\n## Release plan\n\nMerging this pull request moves `{RELEASE_BRANCH}` to `{MAIN_BRANCH}`; the pipeline \
         then provisions and configures the containers as planned below. Accept the plan, not the diff of \
         gitlinks.\n\n{}\n\nPlanned at {at} against {} by `proxmox-gitops release-pr`. Every push to \
         `{MAIN_BRANCH}` plans again and replaces this description down to the hidden line below; text written under \
         it is kept.\n\n{KEEP_MARKER}\n",
        plan.markdown.trim(),
        plan.against
    );
    let kept = kept.trim();
    if !kept.is_empty() {
        s.push_str(kept);
        s.push('\n');
    }
    s
}

/// What to do with the release pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Open one with this description.
    Open {
        /// The description.
        body: String,
    },
    /// Replace the description of the open pull request `number`.
    Update {
        /// The open release pull request.
        number: i64,
        /// The new description.
        body: String,
    },
    /// The open pull request `number` already shows this plan.
    Unchanged {
        /// The open release pull request.
        number: i64,
    },
    /// `main` has nothing `release` lacks: nothing to open (`open`, an open one, is left alone).
    Nothing {
        /// The open release pull request, if any.
        open: Option<i64>,
    },
}

/// Decides (pure): `ahead` commits of `main` that `release` lacks; `open` the open release pull
/// request's number and description; `plan` the plan (needed only when `ahead > 0`; `None`
/// then decides nothing to do, as when not ahead). The description an update writes keeps the
/// user's text of the open one ([`kept_text`]); equal descriptions (line ends and trailing
/// whitespace aside) are not written again.
pub fn decide(ahead: i64, open: Option<(i64, &str)>, plan: Option<&PlanText>) -> Decision {
    let (true, Some(plan)) = (ahead > 0, plan) else { return Decision::Nothing { open: open.map(|(n, _)| n) } };
    match open {
        None => Decision::Open { body: render_body(plan, "") },
        Some((number, existing)) => {
            let body = render_body(plan, &kept_text(existing));
            if normalized(&body) == normalized(existing) {
                Decision::Unchanged { number }
            } else {
                Decision::Update { number, body }
            }
        }
    }
}

/// The open release pull requests of `repo` (base `release`, head `main`), lowest number first.
async fn open_release_pulls(client: &Client, repo: &RepoRef) -> anyhow::Result<Vec<PullRequest>> {
    let mut pulls: Vec<PullRequest> = client
        .list_pulls(&repo.owner, &repo.name, "open", Some(RELEASE_BRANCH))
        .await
        .map_err(|e| anyhow::Error::new(e).context(format!("listing the release pull requests of {repo}")))?
        .into_iter()
        .filter(|p| p.base.ref_ == RELEASE_BRANCH && p.head.ref_ == MAIN_BRANCH)
        .collect();
    pulls.sort_by_key(|p| p.number);
    Ok(pulls)
}

/// Runs the step for the monorepo (see the module docs): compares `release...main`, lists the
/// open release pull request, awaits `plan` only when `main` is ahead, decides ([`decide`]) and
/// opens or updates the pull request.
///
/// # Errors
/// [`Error::Failed`] when the repository or one of its branches `main`/`release` does not exist
/// on Gitea (hint: publish first), when Gitea's answers fail, or when `plan` fails (nothing is
/// written then).
pub async fn release_pr(
    client: &Client,
    opts: &ReleasePrOptions,
    plan: impl Future<Output = Result<PlanText>>,
) -> Result<ReleasePr> {
    let repo = &opts.monorepo;
    let compare = client
        .compare(&repo.owner, &repo.name, RELEASE_BRANCH, MAIN_BRANCH)
        .await
        .map_err(|e| {
            Error::Failed(
                anyhow::Error::new(e).context(format!("comparing {RELEASE_BRANCH} with {MAIN_BRANCH} of {repo}")),
            )
        })?
        .ok_or_else(|| {
            Error::Failed(anyhow::anyhow!(
                "{repo} on Gitea has no branch `{MAIN_BRANCH}` or `{RELEASE_BRANCH}` (or does not exist): run \
                 `proxmox-gitops publish` first, which creates both"
            ))
        })?;
    let ahead = compare.total_commits;
    let pulls = open_release_pulls(client, repo).await.map_err(Error::Failed)?;
    let open = pulls.first();
    let mut report = ReleasePr {
        repository: repo.to_string(),
        action: PrAction::None,
        number: open.map(|p| p.number),
        url: open.map(|p| p.html_url.clone()),
        head: open.map(|p| p.head.sha.clone()),
        planned: None,
        ahead,
        note: None,
    };
    if ahead <= 0 {
        report.note = Some(match open {
            Some(p) => format!(
                "{MAIN_BRANCH} has no commit that {RELEASE_BRANCH} lacks; the open release pull request #{} is left \
                 alone",
                p.number
            ),
            None => format!("{MAIN_BRANCH} has no commit that {RELEASE_BRANCH} lacks: nothing to release"),
        });
        return Ok(report);
    }
    let plan = plan.await?;
    report.planned = plan.commit.clone();
    let pull = match decide(ahead, open.map(|p| (p.number, p.body.as_deref().unwrap_or(""))), Some(&plan)) {
        Decision::Open { body } => {
            let opt = CreatePullRequestOption {
                head: MAIN_BRANCH.into(),
                base: RELEASE_BRANCH.into(),
                title: RELEASE_PR_TITLE.into(),
                body: Some(body),
            };
            let p = client.create_pull(&repo.owner, &repo.name, &opt).await.map_err(|e| {
                Error::Failed(anyhow::Error::new(e).context(format!("opening the release pull request of {repo}")))
            })?;
            report.action = PrAction::Opened;
            tracing::info!("{repo}: opened release pull request #{} with the plan", p.number);
            p
        }
        Decision::Update { number, body } => {
            let opt = EditPullRequestOption { body: Some(body), ..Default::default() };
            let p = client.edit_pull(&repo.owner, &repo.name, number, &opt).await.map_err(|e| {
                Error::Failed(anyhow::Error::new(e).context(format!("updating the description of {repo}#{number}")))
            })?;
            report.action = PrAction::Updated;
            tracing::info!("{repo}#{number}: description updated to the new plan");
            p
        }
        Decision::Unchanged { number } => {
            report.action = PrAction::Unchanged;
            tracing::info!("{repo}#{number}: already shows this plan; nothing written");
            open.cloned().expect("an unchanged pull request is the open one")
        }
        Decision::Nothing { .. } => unreachable!("ahead > 0 with a plan always opens, updates or keeps"),
    };
    report.number = Some(pull.number);
    report.url = Some(pull.html_url.clone());
    report.head = Some(pull.head.sha.clone());
    if let (Some(planned), head) = (&report.planned, &pull.head.sha)
        && !head.is_empty()
        && planned != head
    {
        report.note = Some(format!(
            "{MAIN_BRANCH} moved on to {} after {} was planned; the run of that push updates the plan",
            short(head),
            short(planned)
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(md: &str) -> PlanText {
        PlanText {
            markdown: format!("### Plan: `refs/heads/release` (stage main)\n\n{md}\n"),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            against: "the live pve backend (recreate policy `never`)".into(),
        }
    }

    #[test]
    fn the_body_is_marker_header_plan_footer_and_keep_line() {
        assert_eq!(
            render_body(&plan("| web | update in place | MEMORY 512 → 1024 |"), ""),
            format!(
                "{MARKER}\n## Release plan\n\nMerging this pull request moves `release` to `main`; the pipeline then \
                 provisions and configures the containers as planned below. Accept the plan, not the diff of \
                 gitlinks.\n\n### Plan: `refs/heads/release` (stage main)\n\n| web | update in place | MEMORY 512 → \
                 1024 |\n\nPlanned at commit `0123456789abcdef0123456789abcdef01234567` of `main` against the live pve \
                 backend (recreate policy `never`) by `proxmox-gitops release-pr`. Every push to `main` plans again \
                 and replaces this description down to the hidden line below; text written under it is kept.\n\n\
                 {KEEP_MARKER}\n"
            )
        );
        let unknown = PlanText { commit: None, ..plan("x") };
        assert!(render_body(&unknown, "").contains("Planned at `main` (commit unknown) against"));
        assert!(render_body(&plan("x"), "\n\nmy note\n\n").ends_with(&format!("{KEEP_MARKER}\nmy note\n")));
    }

    #[test]
    fn the_users_text_below_the_keep_line_is_kept() {
        let ours = render_body(&plan("old"), "");
        assert_eq!(kept_text(&ours), "");
        let with_note = format!("{ours}\nPlease merge after 18:00.\r\n\r\n- check the broker\r\n");
        assert_eq!(kept_text(&with_note), "Please merge after 18:00.\n\n- check the broker");
        // The keep line deleted: our text, nothing of the user's.
        assert_eq!(kept_text(&ours.replace(KEEP_MARKER, "")), "");
        // publish's default body and an empty one are replaced; a hand-written one is kept.
        assert_eq!(kept_text(PUBLISH_BODY), "");
        assert_eq!(kept_text(&format!("{PUBLISH_BODY}\n")), "");
        assert_eq!(kept_text(""), "");
        assert_eq!(kept_text("Deploy on Friday.\r\n"), "Deploy on Friday.");
    }

    #[test]
    fn decisions() {
        let p = plan("| web | update in place | MEMORY 512 → 1024 |");
        // main is not ahead: nothing, whether or not one is open (and without a plan too).
        assert_eq!(decide(0, None, Some(&p)), Decision::Nothing { open: None });
        assert_eq!(decide(0, Some((4, "x")), Some(&p)), Decision::Nothing { open: Some(4) });
        assert_eq!(decide(2, Some((4, "x")), None), Decision::Nothing { open: Some(4) });
        // Ahead, none open: open with the plan.
        assert_eq!(decide(1, None, Some(&p)), Decision::Open { body: render_body(&p, "") });
        // publish's PR: its body becomes the plan.
        assert_eq!(
            decide(1, Some((1, PUBLISH_BODY)), Some(&p)),
            Decision::Update { number: 1, body: render_body(&p, "") }
        );
        // The same plan: unchanged, also with CRLF line ends and a trailing newline missing.
        let same = render_body(&p, "note");
        assert_eq!(decide(3, Some((1, &same)), Some(&p)), Decision::Unchanged { number: 1 });
        let crlf = same.trim_end().replace('\n', "\r\n");
        assert_eq!(decide(3, Some((1, &crlf)), Some(&p)), Decision::Unchanged { number: 1 });
        // A new plan: updated, the user's note kept.
        let newer = plan("| web | update in place | MEMORY 512 → 2048 |");
        assert_eq!(
            decide(3, Some((1, &same)), Some(&newer)),
            Decision::Update { number: 1, body: render_body(&newer, "note") }
        );
        // A hand-written description stays below the keep line.
        assert_eq!(
            decide(1, Some((7, "Deploy on Friday.")), Some(&p)),
            Decision::Update { number: 7, body: render_body(&p, "Deploy on Friday.") }
        );
    }

    #[test]
    fn summary_lines() {
        let mut r = ReleasePr {
            repository: "main/mono".into(),
            action: PrAction::Opened,
            number: Some(3),
            url: Some("http://g/main/mono/pulls/3".into()),
            head: Some("0123456789abcdef".into()),
            planned: Some("0123456789abcdef".into()),
            ahead: 1,
            note: None,
        };
        assert_eq!(
            r.summary_line(),
            "Release pull request [#3](http://g/main/mono/pulls/3) opened with the plan of `main` at `0123456789ab`."
        );
        r.action = PrAction::Unchanged;
        assert_eq!(
            r.summary_line(),
            "Release pull request [#3](http://g/main/mono/pulls/3) already shows the plan of `main` at `0123456789ab`."
        );
        r.action = PrAction::None;
        r.planned = None;
        r.note = Some("main has no commit that release lacks: nothing to release".into());
        assert_eq!(
            r.summary_line(),
            "No release pull request needed. main has no commit that release lacks: nothing to release"
        );
    }
}
