//! The decision of `auto-merge`, pure: which open release pull request may be merged, given the
//! plan of every container of the stage and the commits the plan was made for.
//!
//! The rules (see the module docs of [`super`] for why):
//!
//! * a lib's pull request is merged when its head is the commit the checkout planned (the lib's
//!   submodule commit) and none of its containers is refused (a recreate the policy forbids) or
//!   could not be planned;
//! * the monorepo's pull request is merged when its head is the checkout's `HEAD` and no
//!   container of the stage is refused or unplannable (its release deploys every container);
//! * anything else is blocked, with the reason and what to do.

use super::{ContainerVerdict, PullKind, PullVerdict, Verdict};
use crate::model::{Action, RecreatePolicy};

/// An open release pull request and what the checkout says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// `owner/name`.
    pub repository: String,
    /// Lib or monorepo; a lib names its containers.
    pub kind: PullKind,
    /// The pull request's number.
    pub number: i64,
    /// Its title.
    pub title: String,
    /// Its web page.
    pub url: String,
    /// Its head commit (the repository's `main`).
    pub head: String,
    /// The containers this repository deploys (a lib's; empty for the monorepo).
    pub containers: Vec<String>,
    /// Where the checkout has this repository (`libs/web`; `.` for the monorepo).
    pub path: String,
    /// The commit the checkout (and so the plan) has at `path`: the submodule's checked-out
    /// commit, the checkout's `HEAD` for the monorepo; `None` when unknown (a plain directory,
    /// a checkout without commits).
    pub planned: Option<String>,
}

/// The verdict of every candidate before anything is merged: [`Verdict::Merge`] or
/// [`Verdict::Blocked`], with the reason. Libs keep their order; the monorepo comes last.
pub fn decide(candidates: &[Candidate], containers: &[ContainerVerdict], policy: RecreatePolicy) -> Vec<PullVerdict> {
    let mut out: Vec<PullVerdict> = candidates
        .iter()
        .filter(|c| c.kind == PullKind::Lib)
        .chain(candidates.iter().filter(|c| c.kind == PullKind::Monorepo))
        .map(|c| {
            let (verdict, reason) = match stale(c) {
                Some(why) => (Verdict::Blocked, why),
                None => match c.kind {
                    PullKind::Lib => lib(c, containers, policy),
                    PullKind::Monorepo => monorepo(containers, policy),
                },
            };
            PullVerdict {
                repository: c.repository.clone(),
                kind: c.kind,
                number: c.number,
                title: c.title.clone(),
                url: c.url.clone(),
                head: c.head.clone(),
                containers: c.containers.clone(),
                verdict,
                reason,
                merge_commit: None,
            }
        })
        .collect();
    // Deterministic order: libs by repository, then the monorepo.
    out.sort_by(|a, b| {
        (a.kind == PullKind::Monorepo, &a.repository).cmp(&(b.kind == PullKind::Monorepo, &b.repository))
    });
    out
}

/// Why the plan does not cover the pull request's head, if it does not.
fn stale(c: &Candidate) -> Option<String> {
    match &c.planned {
        Some(planned) if *planned == c.head => None,
        Some(planned) => Some(format!(
            "the pull request's head is {} but the checkout has {} at {}: the plan is not of what would be merged; \
             run auto-merge in an up-to-date checkout of the monorepo's main (git pull --recurse-submodules)",
            short(&c.head),
            c.path,
            short(planned)
        )),
        None if c.kind == PullKind::Monorepo => {
            Some("the checkout has no commit, so the plan cannot be matched with the pull request's head".into())
        }
        None => Some(format!(
            "{} is not a submodule in this checkout, so which commit of {} was planned is unknown: run auto-merge in \
             a checkout of the published monorepo's main",
            c.path, c.repository
        )),
    }
}

fn lib(c: &Candidate, containers: &[ContainerVerdict], policy: RecreatePolicy) -> (Verdict, String) {
    let mine: Vec<&ContainerVerdict> = containers.iter().filter(|v| c.containers.contains(&v.name)).collect();
    if mine.is_empty() {
        return (Verdict::Blocked, format!("no container of this stage is deployed from {}", c.repository));
    }
    let problems: Vec<String> = mine.iter().filter_map(|v| problem(v, policy)).collect();
    if !problems.is_empty() {
        return (Verdict::Blocked, problems.join("; "));
    }
    (Verdict::Merge, mine.iter().map(|v| format!("{}: {}", v.name, wording(v, policy))).collect::<Vec<_>>().join("; "))
}

fn monorepo(containers: &[ContainerVerdict], policy: RecreatePolicy) -> (Verdict, String) {
    let problems: Vec<String> = containers.iter().filter_map(|v| problem(v, policy)).collect();
    if !problems.is_empty() {
        return (
            Verdict::Blocked,
            format!("its release deploys every container of the stage: {}", problems.join("; ")),
        );
    }
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for v in containers {
        *counts.entry(kind_word(v)).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    (Verdict::Merge, format!("no container of the stage is refused ({})", parts.join(", ")))
}

/// Why `v` blocks a merge: refused by the policy, or not planned.
fn problem(v: &ContainerVerdict, policy: RecreatePolicy) -> Option<String> {
    match (&v.plan, &v.plan_error) {
        (Some(p), _) => match &p.action {
            Action::Refused { reasons, needs_recreate: true } => Some(format!(
                "{} needs a recreate ({}), which the recreate policy `{}` refuses: merge it by hand after a \
                 snapshot, or {}",
                v.name,
                reasons.join("; "),
                policy.as_str(),
                crate::error::Hint::RecreateWhenNeeded
            )),
            Action::Refused { reasons, needs_recreate: false } => {
                Some(format!("{} cannot be provisioned as specified: {}", v.name, reasons.join("; ")))
            }
            Action::Foreign { reason } => Some(format!("{}: {reason}", v.name)),
            _ => None,
        },
        (None, Some(e)) => Some(format!("{} could not be planned: {}", v.name, e.lines().next().unwrap_or(""))),
        (None, None) => Some(format!("{} was not planned", v.name)),
    }
}

/// What provisioning will do to `v`, in a few words (its plan is not refused).
fn wording(v: &ContainerVerdict, policy: RecreatePolicy) -> String {
    let Some(plan) = &v.plan else { return "not planned".into() };
    let what = wording_action(plan, policy);
    match &plan.migrate {
        Some(m) if !matches!(plan.action, Action::Recreate { .. }) => {
            format!("migrate {} → {}{}, then {what}", m.from, m.to, if m.restart { " (restart)" } else { "" })
        }
        _ => what,
    }
}

fn wording_action(plan: &crate::model::ContainerPlan, policy: RecreatePolicy) -> String {
    match &plan.action {
        Action::Create => "create".into(),
        Action::Nothing => "no change".into(),
        Action::Update { changes, resizes, reboot_needed } => {
            let mut parts: Vec<String> = changes.iter().map(|c| c.key.clone()).collect();
            parts.extend(resizes.iter().map(|r| format!("{} {}→{} GiB", r.disk, r.from_gib, r.to_gib)));
            format!("update in place ({}){}", parts.join(", "), if *reboot_needed { ", reboot needed" } else { "" })
        }
        Action::Recreate { reasons } => {
            format!("recreate, allowed by the recreate policy `{}` ({})", policy.as_str(), reasons.join("; "))
        }
        Action::Refused { reasons, .. } => format!("refused ({})", reasons.join("; ")),
        Action::Adopt { changes, .. } => {
            let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
            format!("adopt in place ({})", keys.join(", "))
        }
        Action::Foreign { reason } => format!("foreign ({reason})"),
    }
}

fn kind_word(v: &ContainerVerdict) -> &'static str {
    match v.plan.as_ref().map(|p| &p.action) {
        Some(Action::Nothing | Action::Update { .. }) if v.plan.as_ref().is_some_and(|p| p.migrate.is_some()) => {
            "to migrate"
        }
        Some(Action::Create) => "to create",
        Some(Action::Nothing) => "unchanged",
        Some(Action::Update { .. }) => "to update in place",
        Some(Action::Recreate { .. }) => "to recreate",
        Some(Action::Refused { .. }) => "refused",
        Some(Action::Adopt { .. }) => "to adopt",
        Some(Action::Foreign { .. }) => "foreign",
        None => "not planned",
    }
}

/// The first 12 hex digits of a commit id.
pub(super) fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Change, ContainerPlan};

    fn plan(name: &str, action: Action) -> ContainerVerdict {
        ContainerVerdict {
            name: name.into(),
            vmid: 101,
            repository: None,
            plan: Some(ContainerPlan::new(name, 101, name, action, false)),
            plan_error: None,
        }
    }

    fn lib_pr(repo: &str, containers: &[&str], head: &str, planned: Option<&str>) -> Candidate {
        Candidate {
            repository: repo.into(),
            kind: PullKind::Lib,
            number: 2,
            title: "Release Pull Request".into(),
            url: format!("http://gitea/{repo}/pulls/2"),
            head: head.into(),
            containers: containers.iter().map(|c| c.to_string()).collect(),
            path: format!("libs/{}", repo.rsplit('/').next().unwrap()),
            planned: planned.map(str::to_string),
        }
    }

    fn mono_pr(head: &str, planned: Option<&str>) -> Candidate {
        Candidate {
            repository: "main/mono".into(),
            kind: PullKind::Monorepo,
            number: 1,
            title: "Release Pull Request".into(),
            url: "http://gitea/main/mono/pulls/1".into(),
            head: head.into(),
            containers: vec![],
            path: ".".into(),
            planned: planned.map(str::to_string),
        }
    }

    fn verdicts(v: &[PullVerdict]) -> Vec<(&str, Verdict, &str)> {
        v.iter().map(|p| (p.repository.as_str(), p.verdict, p.reason.as_str())).collect()
    }

    #[test]
    fn everything_in_place_merges_libs_first_and_the_monorepo_last() {
        let update = Action::Update {
            changes: vec![Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) }],
            resizes: vec![],
            reboot_needed: false,
        };
        let containers = vec![plan("config", Action::Nothing), plan("web", update), plan("db", Action::Create)];
        let candidates = vec![
            mono_pr("m1", Some("m1")),
            lib_pr("main/web", &["web"], "w1", Some("w1")),
            lib_pr("main/db", &["db"], "d1", Some("d1")),
        ];
        let v = decide(&candidates, &containers, RecreatePolicy::Never);
        assert_eq!(
            verdicts(&v),
            vec![
                ("main/db", Verdict::Merge, "db: create"),
                ("main/web", Verdict::Merge, "web: update in place (memory)"),
                (
                    "main/mono",
                    Verdict::Merge,
                    "no container of the stage is refused (1 to create, 1 to update in place, 1 unchanged)"
                ),
            ]
        );
    }

    #[test]
    fn a_refused_recreate_blocks_its_lib_and_the_monorepo_only() {
        let refused = Action::refused_recreate(vec!["rootfs shrinks from 8 to 4 GiB".into()]);
        let containers = vec![plan("web", refused), plan("db", Action::Nothing)];
        let candidates = vec![
            lib_pr("main/web", &["web"], "w1", Some("w1")),
            lib_pr("main/db", &["db"], "d1", Some("d1")),
            mono_pr("m1", Some("m1")),
        ];
        let v = decide(&candidates, &containers, RecreatePolicy::Never);
        let why = "web needs a recreate (rootfs shrinks from 8 to 4 GiB), which the recreate policy `never` refuses: \
                   merge it by hand after a snapshot, or run with --recreate when-needed";
        assert_eq!(
            verdicts(&v),
            vec![
                ("main/db", Verdict::Merge, "db: no change"),
                ("main/web", Verdict::Blocked, why),
                ("main/mono", Verdict::Blocked, &format!("its release deploys every container of the stage: {why}")),
            ]
        );
        // The same plan made with when-needed is a recreate the policy allows.
        let containers = vec![plan("web", Action::Recreate { reasons: vec!["ostemplate changes".into()] })];
        let v = decide(&candidates[..1], &containers, RecreatePolicy::WhenNeeded);
        assert_eq!(
            verdicts(&v),
            vec![(
                "main/web",
                Verdict::Merge,
                "web: recreate, allowed by the recreate policy `when-needed` (ostemplate changes)"
            )]
        );
    }

    #[test]
    fn unplanned_and_stale_pull_requests_are_blocked() {
        let mut broken = plan("web", Action::Nothing);
        broken.plan = None;
        broken.plan_error = Some("PVE GET /nodes: connection refused\nmore".into());
        let containers = vec![broken, plan("db", Action::Nothing)];
        let candidates = vec![
            lib_pr("main/web", &["web"], "w1", Some("w1")),
            lib_pr("main/db", &["db"], "d2", Some("d1aaaaaaaaaaaaaaaa")),
            lib_pr("main/plain", &["plain"], "p1", None),
            mono_pr("m2", Some("m1")),
        ];
        let v = decide(&candidates, &containers, RecreatePolicy::Never);
        assert_eq!(
            verdicts(&v),
            vec![
                (
                    "main/db",
                    Verdict::Blocked,
                    "the pull request's head is d2 but the checkout has libs/db at d1aaaaaaaaaa: the plan is not of \
                     what would be merged; run auto-merge in an up-to-date checkout of the monorepo's main (git pull \
                     --recurse-submodules)"
                ),
                (
                    "main/plain",
                    Verdict::Blocked,
                    "libs/plain is not a submodule in this checkout, so which commit of main/plain was planned is \
                     unknown: run auto-merge in a checkout of the published monorepo's main"
                ),
                ("main/web", Verdict::Blocked, "web could not be planned: PVE GET /nodes: connection refused"),
                (
                    "main/mono",
                    Verdict::Blocked,
                    "the pull request's head is m2 but the checkout has . at m1: the plan is not of what would be \
                     merged; run auto-merge in an up-to-date checkout of the monorepo's main (git pull \
                     --recurse-submodules)"
                ),
            ]
        );
        // A lib whose repository deploys no container of the stage.
        let v = decide(&[lib_pr("main/tool", &[], "t", Some("t"))], &[], RecreatePolicy::Never);
        assert_eq!(
            verdicts(&v),
            vec![("main/tool", Verdict::Blocked, "no container of this stage is deployed from main/tool")]
        );
    }
}
