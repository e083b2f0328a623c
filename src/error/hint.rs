//! Hints: a remedy as data ([`Hint`]), rendered for the way the user runs proxmox-gitops
//! ([`EntryPoint`]); see the parent module's docs.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use super::Error;

/// How the user runs proxmox-gitops, which decides how a [`Hint`] is phrased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPoint {
    /// The binary itself (`proxmox-gitops provision …`): hints name its options.
    Binary,
    /// `./local/run.sh` (it exports `PGO_ENTRY=local-run`): hints name the script's options and
    /// a command line of it the user can run, where the script has the option.
    LocalRun,
    /// A Gitea (or GitHub) Actions workflow (`GITEA_ACTIONS`/`GITHUB_ACTIONS`): hints name the
    /// workflow's dispatch input or the repository variable where one exists, else the command.
    Actions,
}

static ENTRY: OnceLock<EntryPoint> = OnceLock::new();

/// Sets the entry point hints are rendered for, once per process (the CLI does, from
/// [`crate::settings::entry_point`]); later calls are ignored.
pub fn set_entry_point(entry: EntryPoint) {
    let _ = ENTRY.set(entry);
}

/// The entry point set by [`set_entry_point`]; [`EntryPoint::Binary`] when none was set (library
/// use, unit tests).
pub fn entry_point() -> EntryPoint {
    ENTRY.get().copied().unwrap_or(EntryPoint::Binary)
}

/// What a [`Hint::NoSnapshot`] lets the step do without a data snapshot first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutSnapshot {
    /// `destroy` (`./local/run.sh --destroy`).
    Destroy,
    /// A recreate by `provision` (with `--allow-recreate`).
    Recreate,
    /// A rollback by `update`.
    RollBack,
}

/// A `--timeout-*` option a [`Hint::RaiseTimeout`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutOption {
    /// `--timeout-lock`: how long to wait for PVE's config lock.
    Lock,
    /// `--timeout-create`: how long a create (or restore) task may take.
    Create,
    /// `--timeout-lease`: how long to wait for another run's lease (pve) or lock (lxc).
    Lease,
}

impl TimeoutOption {
    /// The option as the binary spells it.
    pub fn flag(self) -> &'static str {
        match self {
            TimeoutOption::Lock => "--timeout-lock",
            TimeoutOption::Create => "--timeout-create",
            TimeoutOption::Lease => "--timeout-lease",
        }
    }
}

/// A step a [`Hint::RunStep`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `provision` (its artifact is what later steps read).
    Provision,
}

/// A remedy for a failure, as data: what the user can do next. Rendered by [`Hint::render`] for
/// the [`EntryPoint`]; attached to a [`Problem`](super::Problem) ([`Problem::hint`](super::Problem::hint)) or to an `anyhow` failure
/// ([`Hinted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// Run again allowing a recreate of `container` (`--allow-recreate`; in Actions the
    /// `PROXMOX_GITOPS_RECREATE` variable, which the workflows pass as `--recreate`).
    AllowRecreate {
        /// The container (lib) name.
        container: String,
    },
    /// Run again without the data snapshot first (`--no-snapshot`): the data is lost.
    NoSnapshot {
        /// The container (lib) name.
        container: String,
        /// What then happens without a snapshot.
        then: WithoutSnapshot,
    },
    /// Run `deploy` again although it already failed for the same inputs (`--force`; the
    /// pipeline workflow's `force` input).
    Force,
    /// Take over a container proxmox-gitops did not create (`--adopt`; the pipeline workflow's
    /// `adopt` input).
    Adopt,
    /// Let `plan` wait for PVE's lock instead of failing (`--wait-for-locks`).
    WaitForLocks,
    /// Wait longer: raise a `--timeout-*` option.
    RaiseTimeout {
        /// The option.
        option: TimeoutOption,
        /// Its value in this run, in seconds, when known.
        now_secs: Option<u64>,
    },
    /// Run a command (on the PVE node `node`, when given; else where proxmox-gitops runs).
    RunCommand {
        /// The command and its arguments, quoted for a POSIX shell when shown.
        argv: Vec<String>,
        /// The PVE node to run it on.
        node: Option<String>,
    },
    /// Run a pipeline step for `container` first.
    RunStep {
        /// The step.
        step: Step,
        /// The container (lib) name.
        container: String,
    },
    /// The condition passes by itself: run again later.
    RerunLater,
    /// Plan with the recreate policy `when-needed` (`--recreate when-needed`, the option of
    /// `auto-merge` and `release-pr`; in Actions the `PROXMOX_GITOPS_RECREATE` variable).
    RecreateWhenNeeded,
    /// Give the binary an option, or set the environment variable that stands for it.
    PassOption {
        /// The option as typed, with its value when one is meant: `--stage dev`, `--gitea URL`.
        option: String,
        /// The environment variable read when the option is absent (`HOST`), if any; under
        /// Actions the hint names only it.
        variable: Option<String>,
    },
}

/// How the user starts `./local/run.sh`, as its own advice spells it.
const LOCAL_RUN: &str = "sudo ./local/run.sh";

impl Hint {
    /// A [`Hint::RunCommand`] of `argv`, run where proxmox-gitops runs.
    pub fn command<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Hint::RunCommand { argv: argv.into_iter().map(Into::into).collect(), node: None }
    }

    /// A [`Hint::RunCommand`] of `argv` on the PVE node `node`.
    pub fn on_node<S: Into<String>>(argv: impl IntoIterator<Item = S>, node: impl Into<String>) -> Self {
        Hint::RunCommand { argv: argv.into_iter().map(Into::into).collect(), node: Some(node.into()) }
    }

    /// The hint as one clause for `entry` (lower case, no final period), e.g. `re-run with
    /// --allow-recreate` for the binary, `` re-run with --allow-recreate: `sudo ./local/run.sh
    /// --allow-recreate broker` `` for `./local/run.sh`. The one place a remedy is spelled.
    pub fn render(&self, entry: EntryPoint) -> String {
        use EntryPoint::{Actions, Binary, LocalRun};
        match (self, entry) {
            (Hint::AllowRecreate { container }, LocalRun) => {
                format!("re-run with --allow-recreate: `{LOCAL_RUN} --allow-recreate {}`", shell_word(container))
            }
            (Hint::AllowRecreate { .. }, Actions) => {
                "set the repository variable PROXMOX_GITOPS_RECREATE to `when-needed` and re-run the workflow".into()
            }
            (Hint::AllowRecreate { .. }, Binary) => "re-run with --allow-recreate".into(),
            (Hint::NoSnapshot { container, then }, entry) => {
                let what = match then {
                    WithoutSnapshot::Destroy => "destroy",
                    WithoutSnapshot::Recreate => "recreate",
                    WithoutSnapshot::RollBack => "roll back",
                };
                let base = format!("re-run with --no-snapshot to {what} without a snapshot");
                let c = shell_word(container);
                match (entry, then) {
                    (LocalRun, WithoutSnapshot::Destroy) => {
                        format!("{base}: `{LOCAL_RUN} --destroy --no-snapshot {c}`")
                    }
                    (LocalRun, WithoutSnapshot::Recreate) => {
                        format!("{base}: `{LOCAL_RUN} --allow-recreate --no-snapshot {c}`")
                    }
                    (Actions, WithoutSnapshot::Destroy) => format!(
                        "{what} without a snapshot by hand (no workflow input skips it): \
                         `proxmox-gitops destroy -c {c} --no-snapshot`"
                    ),
                    (Actions, WithoutSnapshot::Recreate) => format!(
                        "{what} without a snapshot by hand (no workflow input skips it): \
                         `proxmox-gitops provision -c {c} --allow-recreate --no-snapshot`"
                    ),
                    _ => base,
                }
            }
            (Hint::Force, Actions) => "run the pipeline workflow again with its `force` input".into(),
            (Hint::Force, _) => "re-run with --force".into(),
            (Hint::Adopt, Actions) => "run the pipeline workflow with its `adopt` input".into(),
            (Hint::Adopt, _) => "re-run with --adopt".into(),
            (Hint::WaitForLocks, _) => "re-run with --wait-for-locks to wait for it".into(),
            (Hint::RaiseTimeout { option, now_secs }, entry) => {
                let now = now_secs.map(|s| format!(" (now {s} s)")).unwrap_or_default();
                let flag = option.flag();
                match entry {
                    LocalRun => format!(
                        "raise {flag}{now}, an option of `proxmox-gitops provision` that ./local/run.sh leaves at its default"
                    ),
                    _ => format!("raise {flag}{now}"),
                }
            }
            (Hint::RunCommand { argv, node }, _) => {
                let line: Vec<Cow<'_, str>> = argv.iter().map(|a| shell_word(a)).collect();
                match node {
                    Some(node) => format!("run `{}` on node {node}", line.join(" ")),
                    None => format!("run `{}`", line.join(" ")),
                }
            }
            (Hint::RunStep { step: Step::Provision, container }, entry) => match entry {
                Binary => format!("run `proxmox-gitops provision -c {}` first", shell_word(container)),
                LocalRun => format!("run `{LOCAL_RUN} {}` first", shell_word(container)),
                Actions => "run the pipeline workflow with its `step` input `provision` first".into(),
            },
            (Hint::RerunLater, Actions) => "re-run the workflow later".into(),
            (Hint::RerunLater, _) => "re-run later".into(),
            (Hint::RecreateWhenNeeded, Actions) => {
                "set the repository variable PROXMOX_GITOPS_RECREATE to `when-needed` and re-run the workflow".into()
            }
            (Hint::RecreateWhenNeeded, _) => "run with --recreate when-needed".into(),
            (Hint::PassOption { option, variable }, entry) => match (variable, entry) {
                (Some(var), Actions) => format!("set {var} in the workflow's environment"),
                (Some(var), _) => format!("pass {option} or set {var}"),
                (None, _) => format!("pass {option}"),
            },
        }
    }
}

/// Shown for the process's [`entry_point`].
impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(entry_point()))
    }
}

/// `word` as one word of a POSIX shell command line: unchanged when it holds only characters
/// no shell treats specially, else in single quotes.
fn shell_word(word: &str) -> Cow<'_, str> {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '=' | ',' | '@' | '+'));
    if plain { Cow::Borrowed(word) } else { Cow::Owned(format!("'{}'", word.replace('\'', "'\\''"))) }
}

/// An operational failure with its remedies: `message; hint, or hint` (each hint rendered for
/// the [`entry_point`]), and optionally the error it explains (shown after it, `: cause`, as a
/// context is). Used as an `anyhow` error: `anyhow::Error::new(Hinted::new(…).because(e))`;
/// [`hints`] finds it in a chain.
#[derive(Debug)]
pub struct Hinted {
    /// What failed (without the remedy).
    pub message: String,
    /// The remedies, in the order they are offered (never empty when built by [`Hinted::new`]).
    pub hints: Vec<Hint>,
    source: Option<anyhow::Error>,
}

impl Hinted {
    /// `message` with the remedy `hint`.
    pub fn new(message: impl Into<String>, hint: Hint) -> Self {
        Self { message: message.into(), hints: vec![hint], source: None }
    }

    /// Adds another remedy, offered after the ones before (`…, or hint`).
    pub fn or(mut self, hint: Hint) -> Self {
        self.hints.push(hint);
        self
    }

    /// The failure this one explains (its cause in the chain).
    pub fn because(mut self, cause: impl Into<anyhow::Error>) -> Self {
        self.source = Some(cause.into());
        self
    }

    /// The message with its hints rendered for `entry` (without the cause).
    pub fn render(&self, entry: EntryPoint) -> String {
        let hints: Vec<String> = self.hints.iter().map(|h| h.render(entry)).collect();
        if hints.is_empty() { self.message.clone() } else { format!("{}; {}", self.message, hints.join(", or ")) }
    }
}

impl fmt::Display for Hinted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(entry_point()))
    }
}

impl std::error::Error for Hinted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| {
            let e: &(dyn std::error::Error + Send + Sync + 'static) = e.as_ref();
            e as &(dyn std::error::Error + 'static)
        })
    }
}

impl From<Hinted> for Error {
    fn from(h: Hinted) -> Self {
        Error::Failed(anyhow::Error::new(h))
    }
}

/// Every hint in the chain of `e` (its [`Hinted`] errors, also below contexts), outermost first.
pub fn hints(e: &anyhow::Error) -> Vec<&Hint> {
    e.chain().filter_map(|c| c.downcast_ref::<Hinted>()).flat_map(|h| h.hints.iter()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Location, Problem};

    fn all(h: &Hint) -> [String; 3] {
        [h.render(EntryPoint::Binary), h.render(EntryPoint::LocalRun), h.render(EntryPoint::Actions)]
    }

    /// Every variant for every entry point, the exact text.
    #[test]
    fn every_hint_for_every_entry_point() {
        let recreate_var =
            "set the repository variable PROXMOX_GITOPS_RECREATE to `when-needed` and re-run the workflow";
        let no_snapshot = |then| Hint::NoSnapshot { container: "broker".into(), then };
        let timeout = |option, now_secs| Hint::RaiseTimeout { option, now_secs };
        let same = |t: &str| [t.to_string(), t.to_string(), t.to_string()];
        let table: Vec<(Hint, [String; 3])> = vec![
            (
                Hint::AllowRecreate { container: "broker".into() },
                [
                    "re-run with --allow-recreate".into(),
                    "re-run with --allow-recreate: `sudo ./local/run.sh --allow-recreate broker`".into(),
                    recreate_var.into(),
                ],
            ),
            (
                no_snapshot(WithoutSnapshot::Destroy),
                [
                    "re-run with --no-snapshot to destroy without a snapshot".into(),
                    "re-run with --no-snapshot to destroy without a snapshot: \
                     `sudo ./local/run.sh --destroy --no-snapshot broker`"
                        .into(),
                    "destroy without a snapshot by hand (no workflow input skips it): \
                     `proxmox-gitops destroy -c broker --no-snapshot`"
                        .into(),
                ],
            ),
            (
                no_snapshot(WithoutSnapshot::Recreate),
                [
                    "re-run with --no-snapshot to recreate without a snapshot".into(),
                    "re-run with --no-snapshot to recreate without a snapshot: \
                     `sudo ./local/run.sh --allow-recreate --no-snapshot broker`"
                        .into(),
                    "recreate without a snapshot by hand (no workflow input skips it): \
                     `proxmox-gitops provision -c broker --allow-recreate --no-snapshot`"
                        .into(),
                ],
            ),
            (no_snapshot(WithoutSnapshot::RollBack), same("re-run with --no-snapshot to roll back without a snapshot")),
            (
                Hint::Force,
                [
                    "re-run with --force".into(),
                    "re-run with --force".into(),
                    "run the pipeline workflow again with its `force` input".into(),
                ],
            ),
            (
                Hint::Adopt,
                [
                    "re-run with --adopt".into(),
                    "re-run with --adopt".into(),
                    "run the pipeline workflow with its `adopt` input".into(),
                ],
            ),
            (Hint::WaitForLocks, same("re-run with --wait-for-locks to wait for it")),
            (
                timeout(TimeoutOption::Lock, Some(30)),
                [
                    "raise --timeout-lock (now 30 s)".into(),
                    "raise --timeout-lock (now 30 s), an option of `proxmox-gitops provision` that ./local/run.sh \
                     leaves at its default"
                        .into(),
                    "raise --timeout-lock (now 30 s)".into(),
                ],
            ),
            (
                timeout(TimeoutOption::Create, None),
                [
                    "raise --timeout-create".into(),
                    "raise --timeout-create, an option of `proxmox-gitops provision` that ./local/run.sh leaves at \
                     its default"
                        .into(),
                    "raise --timeout-create".into(),
                ],
            ),
            (
                timeout(TimeoutOption::Lease, Some(600)),
                [
                    "raise --timeout-lease (now 600 s)".into(),
                    "raise --timeout-lease (now 600 s), an option of `proxmox-gitops provision` that ./local/run.sh \
                     leaves at its default"
                        .into(),
                    "raise --timeout-lease (now 600 s)".into(),
                ],
            ),
            (Hint::on_node(["pct", "unlock", "101"], "pve1"), same("run `pct unlock 101` on node pve1")),
            (Hint::command(["git", "submodule", "update"]), same("run `git submodule update`")),
            (
                Hint::RunStep { step: Step::Provision, container: "broker".into() },
                [
                    "run `proxmox-gitops provision -c broker` first".into(),
                    "run `sudo ./local/run.sh broker` first".into(),
                    "run the pipeline workflow with its `step` input `provision` first".into(),
                ],
            ),
            (Hint::RerunLater, ["re-run later".into(), "re-run later".into(), "re-run the workflow later".into()]),
            (
                Hint::RecreateWhenNeeded,
                [
                    "run with --recreate when-needed".into(),
                    "run with --recreate when-needed".into(),
                    recreate_var.into(),
                ],
            ),
            (
                Hint::PassOption { option: "--gitea URL".into(), variable: Some("HOST".into()) },
                [
                    "pass --gitea URL or set HOST".into(),
                    "pass --gitea URL or set HOST".into(),
                    "set HOST in the workflow's environment".into(),
                ],
            ),
            (Hint::PassOption { option: "--stage dev".into(), variable: None }, same("pass --stage dev")),
        ];
        // A new variant does not compile here until it has a row above.
        let variant = |h: &Hint| match h {
            Hint::AllowRecreate { .. } => 0,
            Hint::NoSnapshot { .. } => 1,
            Hint::Force => 2,
            Hint::Adopt => 3,
            Hint::WaitForLocks => 4,
            Hint::RaiseTimeout { .. } => 5,
            Hint::RunCommand { .. } => 6,
            Hint::RunStep { .. } => 7,
            Hint::RerunLater => 8,
            Hint::RecreateWhenNeeded => 9,
            Hint::PassOption { .. } => 10,
        };
        let covered: std::collections::BTreeSet<i32> = table.iter().map(|(h, _)| variant(h)).collect();
        assert_eq!(covered.len(), 11);
        for (hint, expected) in table {
            assert_eq!(all(&hint), expected, "{hint:?}");
        }
    }

    #[test]
    fn allow_recreate_per_entry_point() {
        let h = Hint::AllowRecreate { container: "broker".into() };
        assert_eq!(
            all(&h),
            [
                "re-run with --allow-recreate".to_string(),
                "re-run with --allow-recreate: `sudo ./local/run.sh --allow-recreate broker`".into(),
                "set the repository variable PROXMOX_GITOPS_RECREATE to `when-needed` and re-run the workflow".into(),
            ]
        );
    }

    #[test]
    fn no_snapshot_per_entry_point_and_step() {
        let h = |then| Hint::NoSnapshot { container: "my lib".into(), then };
        assert_eq!(
            all(&h(WithoutSnapshot::Destroy)),
            [
                "re-run with --no-snapshot to destroy without a snapshot".to_string(),
                "re-run with --no-snapshot to destroy without a snapshot: \
                 `sudo ./local/run.sh --destroy --no-snapshot 'my lib'`"
                    .into(),
                "destroy without a snapshot by hand (no workflow input skips it): \
                 `proxmox-gitops destroy -c 'my lib' --no-snapshot`"
                    .into(),
            ]
        );
        assert_eq!(
            h(WithoutSnapshot::Recreate).render(EntryPoint::LocalRun),
            "re-run with --no-snapshot to recreate without a snapshot: \
             `sudo ./local/run.sh --allow-recreate --no-snapshot 'my lib'`"
        );
        // ./local/run.sh never rolls back: the binary's spelling.
        assert_eq!(
            h(WithoutSnapshot::RollBack).render(EntryPoint::LocalRun),
            "re-run with --no-snapshot to roll back without a snapshot"
        );
    }

    #[test]
    fn workflow_inputs_and_options() {
        assert_eq!(
            all(&Hint::Force),
            [
                "re-run with --force".to_string(),
                "re-run with --force".into(),
                "run the pipeline workflow again with its `force` input".into()
            ]
        );
        assert_eq!(all(&Hint::Adopt)[2], "run the pipeline workflow with its `adopt` input");
        assert_eq!(all(&Hint::Adopt)[0], "re-run with --adopt");
        let t = Hint::RaiseTimeout { option: TimeoutOption::Lock, now_secs: Some(30) };
        assert_eq!(all(&t)[0], "raise --timeout-lock (now 30 s)");
        assert_eq!(all(&t)[2], "raise --timeout-lock (now 30 s)");
        assert_eq!(
            all(&t)[1],
            "raise --timeout-lock (now 30 s), an option of `proxmox-gitops provision` that ./local/run.sh leaves at its default"
        );
        let step = Hint::RunStep { step: Step::Provision, container: "alpha".into() };
        assert_eq!(
            all(&step),
            [
                "run `proxmox-gitops provision -c alpha` first".to_string(),
                "run `sudo ./local/run.sh alpha` first".into(),
                "run the pipeline workflow with its `step` input `provision` first".into(),
            ]
        );
        assert_eq!(
            all(&Hint::RerunLater),
            ["re-run later".to_string(), "re-run later".into(), "re-run the workflow later".into()]
        );
    }

    #[test]
    fn commands_are_the_same_everywhere_and_quoted() {
        let h = Hint::on_node(["pct", "unlock", "101"], "pve1");
        assert_eq!(
            all(&h),
            [
                "run `pct unlock 101` on node pve1".to_string(),
                "run `pct unlock 101` on node pve1".into(),
                "run `pct unlock 101` on node pve1".into()
            ]
        );
        assert_eq!(
            Hint::command(["chmod", "600", "/s/it's"]).render(EntryPoint::Binary),
            "run `chmod 600 '/s/it'\\''s'`"
        );
    }

    #[test]
    fn hinted_joins_its_hints_and_keeps_its_cause() {
        let h = Hinted::new("CT 101 is busy", Hint::RerunLater)
            .or(Hint::RaiseTimeout { option: TimeoutOption::Lease, now_secs: None });
        assert_eq!(h.render(EntryPoint::Binary), "CT 101 is busy; re-run later, or raise --timeout-lease");
        let e = anyhow::Error::new(h.because(anyhow::anyhow!("timeout"))).context("broker");
        assert_eq!(format!("{e:#}"), "broker: CT 101 is busy; re-run later, or raise --timeout-lease: timeout");
        assert_eq!(
            hints(&e),
            [&Hint::RerunLater, &Hint::RaiseTimeout { option: TimeoutOption::Lease, now_secs: None }]
        );
    }

    #[test]
    fn a_problem_shows_its_hint_and_serializes_without_it() {
        let p = Problem::new(Location::file("libs/a"), "not checked out").with_hint(Hint::command([
            "git",
            "submodule",
            "update",
        ]));
        assert_eq!(p.to_string(), "libs/a: not checked out; run `git submodule update`");
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"location": {"file": "libs/a"}, "message": "not checked out"})
        );
    }
}
