//! The GitOps loop end to end: a monorepo published to the Gitea double, then pushes, schedules
//! and dispatches run the published workflows through the tests' runner
//! ([`support::runner`], which plays Gitea's runner dispatch with act in host mode).
//!
//! * [`the_runner_runs_published_workflows_as_gitea_would`] proves the runner itself on a small
//!   published monorepo (no container): which pushes start which workflows, the event payload,
//!   variables and secrets, the checkout action with submodules, schedules and dispatches, and
//!   act's own local checkout.
//! * [`the_loop_publish_push_deploy`] is issue 13's scenario with real LXC containers (backend
//!   `lxc`, removed when the test ends, also on failure): publish (which installs the workflows
//!   and makes every task a repository of the org `tasks`), a `git push` of a lib change on
//!   `release` that the pipeline deploys in place, then this repository's shipped tasks as
//!   published: `health` on its schedule (healthy, then a stopped service), `deploy` on
//!   dispatch with `AUTO_DEPLOY` (merges the release pull requests, whose pushes deploy), and
//!   `update` on its schedule with an upgrade made to fail (rolled back to its snapshot). It
//!   needs root, LXC with lxcbr0 and Debian's mirror for the bootstrap (the containers' base
//!   role installs packages); the update step keeps apt away from the mirror.
//!
//! Run: `cargo test --test suite loop_e2e::` (needs python3 with `jsonschema`, git, act: see
//! tests/run.sh).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::fs::{copy_dir, source_root, write_files};
use support::git::git;
use support::gitea::{Creds, Double, add_submodule, ok, run};
use support::runner::{Delivery, PushFilter, Run, Runner, RunnerConfig, Triggers, api, api_get, git_as_user, runs};
use support::workflows::{LxcCleanup, attach, lxc_prefix, lxc_stage};

const LOGIN: &str = "loop-admin";
const PASSWORD: &str = "loop-pw-5d81c2";
const TOKEN: &str = "loop-token-93be07";

fn double() -> Double {
    Double::start(Creds { login: LOGIN.into(), password: Some(PASSWORD.into()), token: Some(TOKEN.into()) })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// A git repository at `dir` with `files`, committed as `message`.
fn repo_with(dir: &Path, files: &[(&str, &str)], message: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    write_files(dir, files);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
    dir.to_path_buf()
}

/// `proxmox-gitops publish` of `mono` to the double with `extra` arguments (login and password in
/// the environment, the artifacts in `artifacts`, the default checkout setting: the installed
/// workflows check out with git, no action); panics with the output on failure.
fn publish(double: &Double, mono: &Path, artifacts: &Path, extra: &[&str]) {
    let url = double.url();
    let mut args = vec!["--repo", s(mono), "--artifacts", s(artifacts), "publish", "--gitea", &url];
    args.extend_from_slice(extra);
    ok(&run(&args, &[("LOGIN", LOGIN), ("PASSWORD", PASSWORD), ("PROXMOX_GITOPS_CHECKOUT", "")]));
}

/// Clones `repo` of the double at `branch`, submodules included, into `dir` (as a user would).
fn clone(double: &Double, repo: &str, branch: &str, dir: &Path) {
    let url = format!("{}/{repo}.git", double.url());
    git_as_user(double, dir.parent().unwrap(), &["clone", "-q", "-b", branch, "--recurse-submodules", &url, s(dir)]);
}

/// Commits everything in `dir` as `message`; returns the commit id.
fn commit(dir: &Path, message: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

// ------------------------------------------------------------------------------------------------
// The runner itself
// ------------------------------------------------------------------------------------------------

/// A workflow that reports what a job sees. On push to `release` and `feature/**` unless only
/// `docs/` changed, on a schedule, on dispatch.
const SHOW: &str = r#"name: show
on:
  push:
    branches: [release, 'feature/**']
    paths-ignore: ['docs/**']
  schedule:
    - cron: '0 3 * * *'
  workflow_dispatch:
    inputs:
      note:
        required: true
      mode:
        type: choice
        options: [fast, slow]
        default: fast
      dry:
        type: boolean
        default: false
jobs:
  show:
    runs-on: shell
    steps:
      - uses: actions/checkout@v4
        with:
          submodules: recursive
          token: ${{ secrets.GITEA_TOKEN || github.token }}
      - name: report
        env:
          BEFORE: ${{ github.event.before }}
          HEAD_MESSAGE: ${{ github.event.head_commit.message }}
          FULL_NAME: ${{ github.event.repository.full_name }}
          NOTE: ${{ github.event.inputs.note }}
          MODE: ${{ inputs.mode }}
          DRY: ${{ inputs.dry }}
          LOOP_VAR: ${{ vars.LOOP_VAR }}
          ORG_ONLY: ${{ vars.ORG_ONLY }}
          INSTANCE_VAR: ${{ vars.INSTANCE_VAR }}
          TOKEN: ${{ secrets.GITEA_TOKEN }}
        run: |
          echo "event=$GITHUB_EVENT_NAME ref=$GITHUB_REF sha=$GITHUB_SHA head=$(git rev-parse HEAD) branch=$(git symbolic-ref -q HEAD || echo detached)"
          echo "payload before=$BEFORE repository=$FULL_NAME message=$HEAD_MESSAGE"
          echo "context repository=$GITHUB_REPOSITORY actor=$GITHUB_ACTOR server=$GITHUB_SERVER_URL gitea=$GITEA_ACTIONS"
          echo "lib=$(cat libs/lib1/README)"
          echo "vars=$LOOP_VAR,$ORG_ONLY,$INSTANCE_VAR"
          echo "token=$TOKEN"
          echo "inputs=$NOTE,$MODE,$DRY"
      - name: the lib at its default branch
        uses: tasks/checkout@main
        with:
          repository: main/lib1
          path: libs/lib1
      - run: echo "lib head=$(git -C libs/lib1 rev-parse HEAD)"
"#;

/// Pushes a commit to `release` with the job token, on dispatch (the push is an event of the
/// next step). The checkout action does not persist credentials: git gets the token from an
/// inline credential helper that reads it from the environment.
const BUMP: &str = r#"name: bump
on: workflow_dispatch
jobs:
  bump:
    runs-on: shell
    steps:
      - uses: actions/checkout@v4
        with:
          token: ${{ secrets.GITEA_TOKEN }}
      - name: push a commit
        env:
          TOKEN: ${{ secrets.GITEA_TOKEN }}
        run: |
          echo bumped > bumped.txt
          git add bumped.txt
          git -c user.name=bot -c user.email=bot@example.invalid commit -q -m "bump from a workflow"
          git -c credential.helper='!f() { echo username=x-access-token; echo "password=$TOKEN"; }; f' push -q origin HEAD:release
"#;

/// Never runs: `.gitea/workflows` exists, so Gitea does not read `.github/workflows`.
const IGNORED: &str = "name: ignored\non: [push, workflow_dispatch]\njobs:\n  never:\n    runs-on: shell\n    steps:\n      - run: echo never\n";

/// The workflows of a delivery whose `on.push` matched.
fn matched(d: &Delivery) -> Vec<&str> {
    d.workflows.iter().filter(|(_, m)| *m).map(|(p, _)| p.as_str()).collect()
}

/// The one delivery of `deliveries`.
fn only(deliveries: &[Delivery]) -> &Delivery {
    assert_eq!(deliveries.len(), 1, "{:?}", deliveries.iter().map(|d| d.event.to_string()).collect::<Vec<_>>());
    &deliveries[0]
}

#[test]
fn the_runner_runs_published_workflows_as_gitea_would() {
    let double = double();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let lib1 = repo_with(&root.join("sources/lib1"), &[("README", "lib1 v1\n")], "lib1: first");
    let mono = repo_with(
        &root.join("mono"),
        &[
            ("README.md", "monorepo\n"),
            ("docs/guide.md", "guide\n"),
            (".gitea/workflows/show.yml", SHOW),
            (".gitea/workflows/bump.yml", BUMP),
            (".github/workflows/ignored.yml", IGNORED),
        ],
        "monorepo",
    );
    add_submodule(&mono, &lib1, "libs/lib1", "https://git.example.invalid/homelab/lib1.git");

    let mut runner = Runner::new(
        &double,
        RunnerConfig::for_double(&double)
            .var("INSTANCE_VAR", "instance")
            .var("LOOP_VAR", "instance")
            .checkout("tasks/checkout@main"),
    );
    // The fixture brings its own workflows: publish installs none (its pipeline would run here).
    publish(&double, &mono, &root.join("artifacts"), &["--no-workflows"]);

    // Publish: every published ref is an event; the forks in `stage` are none. The lib has no
    // workflows, the monorepo's published commit is rewrite's "[skip ci]" commit.
    let published = runner.step();
    let mut events: Vec<String> = published.iter().map(|d| format!("{} {}", d.event.repo, d.event.git_ref)).collect();
    events.sort();
    let want: Vec<String> = ["main/lib1", "main/mono"]
        .iter()
        .flat_map(|r| ["main", "release", "snapshot"].map(|b| format!("{r} refs/heads/{b}")))
        .collect();
    assert_eq!(events, want);
    for d in &published {
        assert!(d.event.created(), "{}", d.event);
        assert!(d.runs.is_empty(), "{}", d.event);
        let why = d.skipped.as_deref().unwrap_or_default();
        match d.event.repo.as_str() {
            "main/lib1" => assert_eq!(why, "no workflow directory at the commit"),
            _ => assert_eq!(why, "the commit message contains [skip ci]"),
        }
    }
    assert!(runner.step().is_empty(), "a second step finds nothing new");

    // Variables: the repository's over the organization's over the instance's.
    api(&double, "POST", "/orgs/main/actions/variables/LOOP_VAR", Some(&json!({"value": "org"})));
    api(&double, "POST", "/orgs/main/actions/variables/ORG_ONLY", Some(&json!({"value": "from-org"})));
    api(&double, "POST", "/repos/main/mono/actions/variables/LOOP_VAR", Some(&json!({"value": "repo"})));

    // A plain push to release runs show.yml on the pushed commit, with the lib checked out.
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let clone_dir = work.join("mono");
    clone(&double, "main/mono", "release", &clone_dir);
    let before = git(&clone_dir, &["rev-parse", "HEAD"]);
    std::fs::write(clone_dir.join("README.md"), "monorepo, changed\n").unwrap();
    let sha = commit(&clone_dir, "readme");
    git_as_user(&double, &clone_dir, &["push", "-q", "origin", "release"]);
    let lib_main = double.branch("main", "lib1", "main").unwrap();
    let d = runner.step();
    let d = only(&d);
    assert_eq!((d.event.repo.as_str(), d.event.git_ref.as_str()), ("main/mono", "refs/heads/release"));
    assert_eq!((d.event.before.as_str(), d.event.after.as_str()), (before.as_str(), sha.as_str()));
    let files: Vec<&str> = d.workflows.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(files, vec![".gitea/workflows/bump.yml", ".gitea/workflows/show.yml"]);
    assert_eq!(matched(d), vec![".gitea/workflows/show.yml"]);
    assert_eq!(d.runs.len(), 1);
    let r = &d.runs[0];
    r.assert_ok();
    assert_eq!((r.event.as_str(), r.sha.as_str()), ("push", sha.as_str()));
    let job = |text: &str| assert!(r.act.job_has("show", "show", text), "no `{text}` in the log:\n{}", r.act.log);
    job(&format!("event=push ref=refs/heads/release sha={sha} head={sha} branch=refs/heads/release"));
    job(&format!("payload before={before} repository=main/mono message=readme"));
    job(&format!("context repository=main/mono actor={LOGIN} server={} gitea=true", double.url()));
    job("lib=lib1 v1");
    job("vars=repo,from-org,instance");
    job("token=***");
    job("inputs=,,");
    job("checking out main/mono refs/heads/release into the workspace");
    job("checking out main/lib1 refs/heads/main into libs/lib1");
    job(&format!("lib head={lib_main}"));
    assert!(!r.act.log.contains(TOKEN) && !r.act.log.contains(PASSWORD), "a secret leaked:\n{}", r.act.log);
    assert!(r.act.job("ignored", "never").is_empty(), "{}", r.act.log);

    // Not on a filtered branch, not with a skip string, not for docs only, not for a tag.
    let push = |runner: &mut Runner, refspec: &str| {
        git_as_user(&double, &clone_dir, &["push", "-q", "origin", refspec]);
        runner.step()
    };
    let d = push(&mut runner, "HEAD:main");
    let d = only(&d);
    assert_eq!(d.event.git_ref, "refs/heads/main");
    assert_eq!((d.skipped.as_deref(), d.runs.len()), (None, 0));
    assert!(matched(d).is_empty() && d.workflows.len() == 2);

    std::fs::write(clone_dir.join("README.md"), "monorepo, changed again\n").unwrap();
    commit(&clone_dir, "readme again\n\nNothing to build here [ci skip]");
    let d = push(&mut runner, "release");
    assert_eq!(only(&d).skipped.as_deref(), Some("the commit message contains [ci skip]"));

    std::fs::write(clone_dir.join("docs/guide.md"), "guide, changed\n").unwrap();
    commit(&clone_dir, "docs");
    let d = push(&mut runner, "release");
    assert!(matched(only(&d)).is_empty());

    git(&clone_dir, &["tag", "v1"]);
    let d = push(&mut runner, "v1");
    let d = only(&d);
    assert_eq!((d.event.git_ref.as_str(), d.runs.len()), ("refs/tags/v1", 0));

    // A new branch matching `feature/**` runs; deleting it runs nothing.
    std::fs::write(clone_dir.join("feature.txt"), "x\n").unwrap();
    let feature = commit(&clone_dir, "feature");
    let d = push(&mut runner, "HEAD:refs/heads/feature/a/b");
    let d = only(&d);
    assert!(d.event.created());
    d.assert_ok();
    assert!(
        d.runs[0].act.job_has(
            "show",
            "show",
            &format!(
                "event=push ref=refs/heads/feature/a/b sha={feature} head={feature} branch=refs/heads/feature/a/b"
            )
        ),
        "{}",
        d.runs[0].act.log
    );
    let d = push(&mut runner, ":refs/heads/feature/a/b");
    let d = only(&d);
    assert!(d.event.deleted() && d.runs.is_empty());

    // Dispatch with inputs (defaults filled in), and the schedule.
    let release = double.branch("main", "mono", "release").unwrap();
    let r = runner.dispatch("main/mono", "release", ".gitea/workflows/show.yml", &[("note", "hello"), ("dry", "true")]);
    r.assert_ok();
    assert!(r.act.job_has("show", "show", "inputs=hello,fast,true"), "{}", r.act.log);
    assert!(
        r.act.job_has("show", "show", &format!("event=workflow_dispatch ref=refs/heads/release sha={release}")),
        "{}",
        r.act.log
    );
    // A run's own push is an event of the next step: settle delivers it (and finds no more).
    runner.dispatch("main/mono", "release", ".gitea/workflows/bump.yml", &[]).assert_ok();
    let bumped = double.branch("main", "mono", "release").unwrap();
    let d = runner.settle(3);
    let d = only(&d);
    assert_eq!((d.event.before.as_str(), d.event.after.as_str()), (release.as_str(), bumped.as_str()));
    assert_eq!(matched(d), vec![".gitea/workflows/show.yml"]);
    d.assert_ok();
    assert!(d.runs[0].act.job_has("show", "show", "message=bump from a workflow"), "{}", d.runs[0].act.log);

    let scheduled = runner.schedule("main/mono", "main");
    assert_eq!(scheduled.iter().map(|r| r.workflow.as_str()).collect::<Vec<_>>(), vec![".gitea/workflows/show.yml"]);
    scheduled[0].assert_ok();
    let main = double.branch("main", "mono", "main").unwrap();
    assert!(
        scheduled[0].act.job_has("show", "show", &format!("event=schedule ref=refs/heads/main sha={main} head={main}")),
        "{}",
        scheduled[0].act.log
    );

    // act's own shortcut: the checkout of the run's repository copies act's working directory
    // (a clone at the commit with its submodules) instead of running the checkout action.
    runner.config_mut().skip_local_checkout = true;
    std::fs::write(clone_dir.join("README.md"), "monorepo, third\n").unwrap();
    let third = commit(&clone_dir, "readme, third");
    let d = push(&mut runner, "HEAD:refs/heads/feature/copy");
    let d = only(&d);
    d.assert_ok();
    let r = &d.runs[0];
    let job = |text: &str| r.act.job_has("show", "show", text);
    assert!(job(&format!("sha={third} head={third} branch=refs/heads/feature/copy")), "{}", r.act.log);
    assert!(job("lib=lib1 v1"), "{}", r.act.log);
    assert!(!job("checking out main/mono"), "{}", r.act.log);
    assert!(job("checking out main/lib1 refs/heads/main into libs/lib1"), "{}", r.act.log);

    assert!(runner.step().is_empty());
    double.assert_spec_conformant();
}

/// The filters of `on.push` as Gitea applies them (act's workflowpattern globs).
#[test]
fn push_filters_match_like_gitea() {
    let filter = |yaml: &str| Triggers::parse(yaml).unwrap().push.unwrap();
    let matches = |f: &PushFilter, r: &str, changed: &[&str]| {
        f.matches(r, &changed.iter().map(|c| c.to_string()).collect::<Vec<_>>())
    };
    let any = filter("on: push\n");
    assert!(matches(&any, "refs/heads/x", &["a"]) && matches(&any, "refs/tags/v1", &["a"]));

    let f = filter("on:\n  push:\n    branches: [release, main]\n");
    assert!(matches(&f, "refs/heads/release", &[]) && matches(&f, "refs/heads/main", &[]));
    assert!(!matches(&f, "refs/heads/snapshot", &[]));
    assert!(!matches(&f, "refs/tags/release", &[]), "a branch filter alone never matches a tag");

    let f = filter("on:\n  push:\n    branches: ['feature/*', '!feature/skip']\n");
    assert!(matches(&f, "refs/heads/feature/x", &[]));
    assert!(!matches(&f, "refs/heads/feature/x/y", &[]), "* stops at /");
    assert!(!matches(&f, "refs/heads/feature/skip", &[]), "a later ! pattern un-matches");
    let f = filter("on:\n  push:\n    branches: ['feature/**']\n");
    assert!(matches(&f, "refs/heads/feature/x/y", &[]));
    let f = filter("on:\n  push:\n    branches-ignore: ['wip/**']\n");
    assert!(!matches(&f, "refs/heads/wip/a", &[]) && matches(&f, "refs/heads/main", &[]));

    let f = filter("on:\n  push:\n    tags: ['v[0-9]+.*']\n");
    assert!(matches(&f, "refs/tags/v12.3", &[]) && !matches(&f, "refs/tags/x1", &[]));
    assert!(!matches(&f, "refs/heads/v1.0", &[]));
    let f = filter("on:\n  push:\n    branches: [main]\n    tags: ['v*']\n");
    assert!(matches(&f, "refs/heads/main", &[]) && matches(&f, "refs/tags/v1", &[]));

    let f = filter("on:\n  push:\n    paths: ['libs/**', '!libs/**.md']\n");
    assert!(matches(&f, "refs/heads/main", &["README", "libs/a/container.env"]));
    assert!(!matches(&f, "refs/heads/main", &["libs/a/README.md"]));
    let f = filter("on:\n  push:\n    paths-ignore: ['docs/**']\n");
    assert!(!matches(&f, "refs/heads/main", &["docs/a.md", "docs/b/c.md"]));
    assert!(matches(&f, "refs/heads/main", &["docs/a.md", "src/x.rs"]));

    // The other triggers.
    let t = Triggers::parse(SHOW).unwrap();
    assert_eq!(t.schedule, vec!["0 3 * * *".to_string()]);
    let inputs = t.dispatch.unwrap();
    assert_eq!(inputs.keys().collect::<Vec<_>>(), vec!["dry", "mode", "note"]);
    assert!(inputs["note"].required && inputs["note"].default.is_none());
    assert_eq!(
        (inputs["mode"].kind.as_str(), inputs["mode"].options.clone()),
        ("choice", vec!["fast".into(), "slow".into()])
    );
    assert_eq!(inputs["dry"].default.as_deref(), Some("false"));
    let t = Triggers::parse(IGNORED).unwrap();
    assert!(t.push.is_some() && t.dispatch.is_some() && t.schedule.is_empty());
    assert!(Triggers::parse("jobs: {}\n").is_err());
}

// ------------------------------------------------------------------------------------------------
// The loop with real containers
// ------------------------------------------------------------------------------------------------

/// The lib's configuration: a small HTTP service (`app-http`, python3's http.server, which the
/// base container has) serving its settings, and two outputs.
const APP_CONFIGURE: &str = r#"#!/usr/bin/env bash
# The loop test's lib (engine: shell, run as root): an HTTP service on port 8080 that serves
# /srv/app, and the outputs LIBS_APP_ENDPOINT and LIBS_APP_MEMORY.
set -euo pipefail
install -d /srv/app
printf 'memory=%s\n' "$MEMORY" > /srv/app/settings.txt
cat > /etc/systemd/system/app-http.service <<'UNIT'
[Unit]
Description=proxmox-gitops loop test: HTTP service of the lib app
After=network.target

[Service]
ExecStart=/usr/bin/python3 -m http.server 8080 --directory /srv/app
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now app-http.service
echo "LIBS_APP_ENDPOINT=http://$IP:8080" >> "$PGO_OUTPUT"
echo "LIBS_APP_MEMORY=$MEMORY" >> "$PGO_OUTPUT"
"#;

/// The lib's container before step 2.
const APP_ENV: &str = "ID=150\nIP=dhcp\nCORES=1\nMEMORY=256\nSWAP=128\nBOOT=yes\nSERVICES=app-http\n";

/// Everything the scenario's steps share.
struct Loop<'a> {
    double: &'a Double,
    runner: Runner<'a>,
    /// Holds the fixture's sources, the user's clones and the runner's state directories.
    tmp: tempfile::TempDir,
    /// The fixture monorepo (the user's checkout).
    mono: PathBuf,
    /// `PROXMOX_GITOPS_ARTIFACTS` of every run (kept between runs, as docs/workflows.md asks).
    artifacts: PathBuf,
    /// The lib's container (`<stage>-app`).
    ct: String,
}

/// The tasks this repository ships (`tasks/<name>/default.sh`, each calling the binary).
const SHIPPED_TASKS: [&str; 3] = ["health", "update", "deploy"];

/// The task workflow publish renders into each task repository.
const TASK_WORKFLOW: &str = ".gitea/workflows/task.yml";

/// The fixture monorepo under `root`: the shipped base role, the lib `app` as a submodule, this
/// repository's tasks `health`, `update` and `deploy` and the tasks `nightly` (cron line) and
/// `ondemand` (none) as plain directories, this repository's `action.yml` and `workflows/`.
fn loop_monorepo(root: &Path) -> PathBuf {
    let app = repo_with(
        &root.join("sources/app"),
        &[("container.env", APP_ENV), ("configure.sh", APP_CONFIGURE), ("README.md", "The loop test's lib.\n")],
        "app: first",
    );
    let mono = root.join("mono");
    let src = source_root();
    copy_dir(&src.join("base"), &mono.join("base"));
    std::fs::create_dir_all(mono.join("workflows")).unwrap();
    for f in ["pipeline.yml", "snapshot.yml"] {
        std::fs::copy(src.join("workflows").join(f), mono.join("workflows").join(f)).unwrap();
    }
    copy_dir(&src.join("workflows/templates"), &mono.join("workflows/templates"));
    std::fs::copy(src.join("action.yml"), mono.join("action.yml")).unwrap();
    for task in SHIPPED_TASKS {
        copy_dir(&src.join("tasks").join(task), &mono.join("tasks").join(task));
    }
    repo_with(
        &mono,
        &[
            (".gitignore", ".proxmox-gitops/\n*.local.*\n"),
            ("README.md", "The loop test's monorepo.\n"),
            ("tasks/nightly/default.sh", "#!/usr/bin/env bash\n# ! cron '0 3 * * *'\necho nightly\n"),
            ("tasks/ondemand/default.sh", "#!/usr/bin/env bash\necho on demand\n"),
        ],
        "monorepo",
    );
    add_submodule(&mono, &app, "libs/app", "https://git.example.invalid/homelab/app.git");
    mono
}

/// The lib container's memory limit in bytes: `(in its LXC config, live in its cgroup)`.
fn memory_limit(ct: &str) -> (u64, u64) {
    let lxcpath = String::from_utf8(Command::new("lxc-config").arg("lxc.lxcpath").output().unwrap().stdout).unwrap();
    let config = std::fs::read_to_string(Path::new(lxcpath.trim()).join(ct).join("config")).unwrap();
    for (key, cgroup) in
        [("lxc.cgroup2.memory.max", "memory.max"), ("lxc.cgroup.memory.limit_in_bytes", "memory.limit_in_bytes")]
    {
        let Some(value) = config.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        }) else {
            continue;
        };
        let live = Command::new("lxc-cgroup").args(["-n", ct, cgroup]).output().unwrap();
        assert!(live.status.success(), "lxc-cgroup {ct} {cgroup}: {}", String::from_utf8_lossy(&live.stderr));
        let live = String::from_utf8_lossy(&live.stdout).trim().parse().unwrap();
        return (value.parse().unwrap(), live);
    }
    panic!("{ct}: no memory limit in its LXC config:\n{config}");
}

/// `GET url` from the host (the container on lxcbr0): the body once it answers 200, polling
/// while the service comes up (at most 30 attempts, one per second).
fn http_get(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut last = String::new();
    for _ in 0..30 {
        match rt.block_on(async { client.get(url).send().await?.error_for_status()?.text().await }) {
            Ok(body) => return body,
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("GET {url} never answered: {last}");
}

impl Loop<'_> {
    fn artifact(&self, rel: &str) -> Value {
        read_json(&self.artifacts.join(rel))
    }

    /// The lib's address, as the last provision recorded it.
    fn address(&self) -> String {
        self.artifact("provision/app.json")["address"].as_str().unwrap().to_string()
    }
}

/// Step 1: `publish` the fixture, which installs the workflows: every task is a repository
/// `tasks/<name>` with its `task.yml` (scheduled when the script has a cron line). The pushes of
/// publish are delivered (each published commit is a `[skip ci]` tool commit, so nothing starts
/// by itself); the user then runs the pipeline once on `release` (*Run workflow*: the bootstrap
/// deploy), which provisions and configures the lib's container.
fn step1_publish_and_bootstrap(l: &mut Loop) {
    publish(l.double, &l.mono, &l.tmp.path().join("publish-artifacts"), &[]);
    for r in runs(&l.runner.step()) {
        r.assert_ok();
    }
    for repo in ["mono", "app", "base"] {
        assert!(l.double.branch("main", repo, "release").is_some(), "main/{repo} was not published");
    }
    // Every task is a repository of the org `tasks` with its rendered workflow: on a push to
    // main, on dispatch, and scheduled when its script has a cron line.
    let scheduled = [("health", "0 */3 * * *"), ("update", "0 4 * * 0"), ("nightly", "0 3 * * *")];
    for task in SHIPPED_TASKS.into_iter().chain(["nightly", "ondemand"]) {
        let bare = l.double.bare("tasks", task);
        let text = git(&bare, &["show", &format!("main:{TASK_WORKFLOW}")]);
        let t = Triggers::parse(&text).unwrap_or_else(|e| panic!("tasks/{task}: {e}\n{text}"));
        assert!(t.push.as_ref().is_some_and(|p| p.matches("refs/heads/main", &[])), "tasks/{task}: {text}");
        assert!(t.dispatch.is_some(), "tasks/{task}: {text}");
        let cron: Vec<String> = scheduled.iter().filter(|(n, _)| *n == task).map(|(_, c)| c.to_string()).collect();
        assert_eq!(t.schedule, cron, "tasks/{task}");
        assert!(text.contains("PROXMOX_GITOPS_MONOREPO: \"main/mono\""), "tasks/{task}: {text}");
    }

    let r = l.runner.dispatch("main/mono", "release", ".gitea/workflows/pipeline.yml", &[]);
    r.assert_ok();
    assert!(r.act.step_ok("pipeline", "deploy", "Provision"), "{}", r.act.log);
    assert!(r.act.step_ok("pipeline", "deploy", "Configure"), "{}", r.act.log);
    let prov = l.artifact("provision/app.json");
    assert_eq!((prov["result"].as_str(), prov["hostname"].as_str()), (Some("ok"), Some(l.ct.as_str())), "{prov:#}");
    assert_eq!(memory_limit(&l.ct), (256 << 20, 256 << 20));
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", l.address())), "memory=256\n");
    // A marker that survives only an in-place change.
    let (code, _) = attach(&l.ct, &["touch", "/root/pgo-loop-marker"]);
    assert_eq!(code, 0);
}

/// Step 2: a lib change on `release` with plain `git push`es: the lib's repository (its own
/// pipeline, rendered by publish, deploys the lib), then the monorepo's submodule pointer (the
/// monorepo's pipeline deploys the stage) → the container gets the new memory limit in place,
/// the lib's configuration ran again, and its outputs are repository variables of the lib's
/// repository on the double.
fn step2_push_a_lib_change(l: &mut Loop) {
    let user = l.tmp.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    let mono = user.join("mono");
    clone(l.double, "main/mono", "release", &mono);
    let lib = mono.join("libs/app");
    git(&lib, &["checkout", "-q", "-B", "release"]);
    std::fs::write(lib.join("container.env"), APP_ENV.replace("MEMORY=256", "MEMORY=384")).unwrap();
    commit(&lib, "app: 384 MiB");
    git_as_user(l.double, &lib, &["push", "-q", "origin", "release"]);
    // The lib's own pipeline (publish rendered it into the lib's repository) deploys the lib.
    let delivered = l.runner.step();
    let d = only(&delivered);
    assert_eq!((d.event.repo.as_str(), d.event.git_ref.as_str()), ("main/app", "refs/heads/release"));
    assert_eq!(d.runs.iter().map(|r| r.workflow.as_str()).collect::<Vec<_>>(), [".gitea/workflows/pipeline.yml"]);
    d.assert_ok();
    assert_eq!(memory_limit(&l.ct), (384 << 20, 384 << 20));
    let sha = commit(&mono, "app: 384 MiB");
    git_as_user(l.double, &mono, &["push", "-q", "origin", "release"]);
    let delivered = l.runner.step();
    let d = only(&delivered);
    assert_eq!(
        (d.event.repo.as_str(), d.event.git_ref.as_str(), d.event.after.as_str()),
        ("main/mono", "refs/heads/release", sha.as_str())
    );
    let pipeline: Vec<_> = d.runs.iter().filter(|r| r.workflow == ".gitea/workflows/pipeline.yml").collect();
    assert_eq!(pipeline.len(), 1, "{:?}", d.workflows);
    d.assert_ok();

    assert_eq!(memory_limit(&l.ct), (384 << 20, 384 << 20));
    let (code, _) = attach(&l.ct, &["test", "-e", "/root/pgo-loop-marker"]);
    assert_eq!(code, 0, "the container was re-created instead of changed in place");
    let prov = l.artifact("provision/app.json");
    assert_eq!((prov["result"].as_str(), prov["created"].as_bool()), (Some("ok"), Some(false)), "{prov:#}");
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", l.address())), "memory=384\n");
    assert_lib_outputs_are_repository_variables(l);
}

/// The outputs of the lib's last configure run are variables of its repository `main/app` on
/// the double, set by the pipeline (deploy with Gitea settings).
fn assert_lib_outputs_are_repository_variables(l: &Loop) {
    let cfg = l.artifact("configure/app.json");
    let outputs = cfg["outputs"].as_object().unwrap_or_else(|| panic!("no outputs: {cfg:#}"));
    assert_eq!(outputs.get("LIBS_APP_MEMORY").and_then(Value::as_str), Some("384"), "{cfg:#}");
    for (name, value) in outputs {
        let var = api_get(l.double, &format!("/repos/main/app/actions/variables/{name}")).unwrap_or_else(|| {
            panic!("{name} is not a variable of main/app on the double (configure outputs: {cfg:#})")
        });
        assert_eq!(var["data"], *value, "{name}");
    }
}

/// The one run of the task workflow among `runs`.
fn task_run(runs: &[Run]) -> &Run {
    let names: Vec<String> = runs.iter().map(ToString::to_string).collect();
    assert_eq!(runs.len(), 1, "{names:?}");
    assert_eq!(runs[0].workflow, TASK_WORKFLOW, "{names:?}");
    &runs[0]
}

/// The words of the task job's output lines (act's `[task <name>/task]   | ` prefix removed).
fn task_lines(r: &Run, task: &str) -> Vec<Vec<String>> {
    r.act
        .job(&format!("task {task}"), "task")
        .iter()
        .filter_map(|l| l.split_once("| "))
        .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The description of `main/app` on the double.
fn app_description(l: &Loop) -> String {
    let repo = api_get(l.double, "/repos/main/app").expect("main/app is on the double");
    repo["description"].as_str().unwrap_or_default().to_string()
}

/// The entry of the lib's container in the artifact `kind` (`health.json`, `update.json`) the
/// last task run wrote.
fn app_entry(l: &Loop, kind: &str) -> Value {
    let report = l.artifact(kind);
    let list = report["containers"].as_array().unwrap_or_else(|| panic!("{kind}: {report:#}"));
    let app: Vec<&Value> = list.iter().filter(|c| c["name"] == "app").collect();
    assert_eq!(app.len(), 1, "{kind}: {report:#}");
    app[0].clone()
}

/// The container's live IPv4 address on lxcbr0 (`lxc-info -iH`), polling while it comes up (at
/// most 60 attempts, one per second).
fn live_address(ct: &str) -> String {
    for _ in 0..60 {
        let out = Command::new("lxc-info").args(["-n", ct, "-iH"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(ip) = text.split_whitespace().find(|a| a.parse::<std::net::Ipv4Addr>().is_ok()) {
            return ip.to_string();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("{ct}: no IPv4 address after 60 attempts");
}

/// Step 3: the health task, scheduled (`tasks/health`, cron `0 */3 * * *`): with the lib's
/// service running the run succeeds, `health.json` and the task's table say `app` is healthy
/// with `app-http` active, and the description of the lib's repository `main/app` on the double
/// says so; with the service stopped in the container the next run fails naming the unit, and
/// the description says which service is down. The service is started again afterwards.
fn step3_health(l: &mut Loop) {
    let runs = l.runner.schedule("tasks/health", "main");
    let r = task_run(&runs);
    assert_eq!((r.event.as_str(), r.git_ref.as_str()), ("schedule", "refs/heads/main"));
    r.assert_ok();
    let app = app_entry(l, "health.json");
    assert_eq!(
        (app["state"].as_str(), app["hostname"].as_str(), &app["services"]),
        (Some("healthy"), Some(l.ct.as_str()), &json!([{"unit": "app-http.service", "state": "active"}])),
        "{app:#}"
    );
    let health = l.artifact("health.json");
    assert_eq!((health["healthy"].as_bool(), health["backend"].as_str()), (Some(true), Some("lxc")), "{health:#}");
    let lines = task_lines(r, "health");
    assert!(lines.iter().any(|w| w == &["CONTAINER", "STATE", "SERVICES", "DETAIL"]), "{}", r.act.log);
    assert!(lines.iter().any(|w| w == &["app", "healthy", "app-http", "active"]), "{}", r.act.log);
    let description = app_description(l);
    assert!(description.starts_with("healthy · app-http active · checked "), "{description}");
    assert_eq!(health["descriptions"][0]["repository"], "main/app", "{health:#}");
    assert_eq!(health["descriptions"][0]["result"], "ok", "{health:#}");

    let (code, _) = attach(&l.ct, &["systemctl", "stop", "app-http"]);
    assert_eq!(code, 0);
    let runs = l.runner.schedule("tasks/health", "main");
    let r = task_run(&runs);
    assert!(!r.ok(), "the health task succeeded with app-http stopped:\n{}", r.act.log);
    let app = app_entry(l, "health.json");
    assert_eq!((app["state"].as_str(), app["detail"].as_str()), (Some("down"), Some("app-http inactive")), "{app:#}");
    assert!(r.act.job_has("task health", "task", "app: down — app-http inactive"), "{}", r.act.log);
    let description = app_description(l);
    assert!(description.starts_with("DOWN: app-http inactive · checked "), "{description}");

    let (code, _) = attach(&l.ct, &["systemctl", "start", "app-http"]);
    assert_eq!(code, 0);
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", l.address())), "memory=384\n");
}

/// The lib container's CPU limit in its LXC config and live in its cgroup:
/// `(quota, period)` in microseconds, both as the config and as the cgroup gives them.
fn cpu_limit(ct: &str) -> ((u64, u64), (u64, u64)) {
    let lxcpath = String::from_utf8(Command::new("lxc-config").arg("lxc.lxcpath").output().unwrap().stdout).unwrap();
    let config = std::fs::read_to_string(Path::new(lxcpath.trim()).join(ct).join("config")).unwrap();
    let value = |key: &str| {
        config.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let live = |cgroup: &str| {
        let out = Command::new("lxc-cgroup").args(["-n", ct, cgroup]).output().unwrap();
        assert!(out.status.success(), "lxc-cgroup {ct} {cgroup}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let pair = |text: &str| {
        let (q, p) = text.split_once(' ').unwrap_or_else(|| panic!("{ct}: cpu.max `{text}`"));
        (q.parse().unwrap(), p.parse().unwrap())
    };
    if let Some(v) = value("lxc.cgroup2.cpu.max") {
        return (pair(&v), pair(&live("cpu.max")));
    }
    match (value("lxc.cgroup.cpu.cfs_quota_us"), value("lxc.cgroup.cpu.cfs_period_us")) {
        (Some(q), Some(p)) => (
            (q.parse().unwrap(), p.parse().unwrap()),
            (live("cpu.cfs_quota_us").parse().unwrap(), live("cpu.cfs_period_us").parse().unwrap()),
        ),
        _ => panic!("{ct}: no CPU limit in its LXC config:\n{config}"),
    }
}

/// The open release pull request (head `main`, base `release`) of `repo` on the double: the one
/// publish left open, else a new one (as a user opens it on Gitea).
fn release_pull(l: &Loop, repo: &str) -> u64 {
    let open = api_get(l.double, &format!("/repos/{repo}/pulls?state=open")).unwrap();
    let found = open.as_array().unwrap().iter().find(|p| p["head"]["ref"] == "main" && p["base"]["ref"] == "release");
    let pull = match found {
        Some(p) => p.clone(),
        None => api(
            l.double,
            "POST",
            &format!("/repos/{repo}/pulls"),
            Some(&json!({"title": "Release Pull Request", "head": "main", "base": "release"})),
        )
        .unwrap(),
    };
    pull["number"].as_u64().unwrap_or_else(|| panic!("{repo}: {pull:#}"))
}

/// Step 4: the deploy task merges the release pull requests, and the merges deploy.
///
/// The user brings `main` up to date with step 2's change on `release` (a merge, in the lib and
/// in the monorepo), changes the lib on `main` (`CORES=2`) and pushes both `main`s (their
/// pipelines only configure); the release pull requests `main` → `release` of `main/app` and
/// `main/mono` are open; `AUTO_DEPLOY` is turned on for the tasks with `proxmox-gitops env set
/// AUTO_DEPLOY true --org tasks`. Dispatching the deploy task merges both (the plan of the new
/// cores is an in-place change: the recreate policy `never` allows it); the merges' pushes of
/// `release` are delivered and run the lib's pipeline and the monorepo's `pipeline.yml`, which
/// give the container its new CPU limit in place. The task merges with the tool's credentials
/// (`LOGIN`/`PASSWORD` here, the secret `PROXMOX_GITOPS_TOKEN` when set), not the job token, so
/// on Gitea too those merges start the pipelines (see the runner's module docs).
fn step4_auto_merge(l: &mut Loop) {
    let user = l.tmp.path().join("user-main");
    std::fs::create_dir_all(&user).unwrap();
    let mono = user.join("mono");
    clone(l.double, "main/mono", "main", &mono);
    git(&mono, &["merge", "-q", "--no-edit", "origin/release"]);
    git_as_user(l.double, &mono, &["submodule", "update", "-q", "--init", "--recursive"]);
    let lib = mono.join("libs/app");
    git_as_user(l.double, &lib, &["fetch", "-q", "origin"]);
    assert_eq!(git(&lib, &["rev-parse", "HEAD"]), git(&lib, &["rev-parse", "origin/release"]));
    git(&lib, &["checkout", "-q", "-B", "main"]);
    git(&lib, &["merge", "-q", "--no-edit", "origin/main"]);
    let env = std::fs::read_to_string(lib.join("container.env")).unwrap();
    assert!(env.contains("MEMORY=384\n") && env.contains("CORES=1\n"), "{env}");
    std::fs::write(lib.join("container.env"), env.replace("CORES=1", "CORES=2")).unwrap();
    let lib_main = commit(&lib, "app: 2 cores");
    git_as_user(l.double, &lib, &["push", "-q", "origin", "main"]);
    let mono_main = commit(&mono, "app: 2 cores");
    git_as_user(l.double, &mono, &["push", "-q", "origin", "main"]);
    let delivered = l.runner.step();
    let pushed: Vec<String> = delivered.iter().map(|d| format!("{} {}", d.event.repo, d.event.git_ref)).collect();
    assert_eq!(pushed, ["main/app refs/heads/main", "main/mono refs/heads/main"]);
    for r in runs(&delivered) {
        r.assert_ok();
    }
    assert_eq!(cpu_limit(&l.ct).0, (100_000, 100_000), "main only configures");

    let pulls: Vec<(&str, u64)> = ["main/app", "main/mono"].iter().map(|r| (*r, release_pull(l, r))).collect();
    ok(&run(
        &["--repo", s(&l.mono), "env", "set", "AUTO_DEPLOY", "true", "--org", "tasks", "--gitea", &l.double.url()],
        &[("LOGIN", LOGIN), ("PASSWORD", PASSWORD)],
    ));
    let r = l.runner.dispatch("tasks/deploy", "main", TASK_WORKFLOW, &[]);
    r.assert_ok();
    let report = l.artifact("auto-merge.json");
    assert_eq!(report["enabled"], true, "{report:#}");
    let mut verdicts: Vec<(String, u64, String, String)> = report["pulls"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"))
        .iter()
        .map(|p| {
            let (repo, verdict) = (p["repository"].as_str().unwrap(), p["verdict"].as_str().unwrap());
            (repo.to_string(), p["number"].as_u64().unwrap(), verdict.to_string(), p["head"].as_str().unwrap().into())
        })
        .collect();
    verdicts.sort();
    let want: Vec<(String, u64, String, String)> = pulls
        .iter()
        .zip([&lib_main, &mono_main])
        .map(|((repo, n), head)| (repo.to_string(), *n, "merged".to_string(), head.to_string()))
        .collect();
    assert_eq!(verdicts, want, "{report:#}");
    for (repo, number) in &pulls {
        let pull = api_get(l.double, &format!("/repos/{repo}/pulls/{number}")).unwrap();
        assert_eq!((pull["state"].as_str(), pull["merged"].as_bool()), (Some("closed"), Some(true)), "{pull:#}");
        let release = l.double.branch("main", repo.split_once('/').unwrap().1, "release").unwrap();
        assert_eq!(pull["merge_commit_sha"].as_str(), Some(release.as_str()), "{pull:#}");
    }

    // The merges' pushes of release: each runs its repository's pipeline.
    let delivered = l.runner.settle(3);
    let pushed: Vec<String> = delivered.iter().map(|d| format!("{} {}", d.event.repo, d.event.git_ref)).collect();
    assert_eq!(pushed, ["main/app refs/heads/release", "main/mono refs/heads/release"]);
    for d in &delivered {
        let ran: Vec<&str> = d.runs.iter().map(|r| r.workflow.as_str()).collect();
        assert_eq!(ran, [".gitea/workflows/pipeline.yml"], "{}", d.event);
        d.assert_ok();
    }
    assert_eq!(cpu_limit(&l.ct), ((200_000, 100_000), (200_000, 100_000)));
    let (code, _) = attach(&l.ct, &["test", "-e", "/root/pgo-loop-marker"]);
    assert_eq!(code, 0, "the container was re-created instead of changed in place");
    let prov = l.artifact("provision/app.json");
    assert_eq!((prov["result"].as_str(), prov["created"].as_bool()), (Some("ok"), Some(false)), "{prov:#}");
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", l.address())), "memory=384\n");
}

/// Step 5: the update task (`tasks/update`, scheduled) on a container whose upgrade fails after
/// changing it: rolled back to the snapshot it took, and the run fails naming it.
///
/// Before the run, in the container (constant scripts): a marker file; the package sources are
/// moved aside, so that apt fetches nothing (no mirror is contacted: apt runs a failing hook and
/// still fetches); an APT hook that `apt-get update` runs first removes the marker, leaves its
/// own trace and fails. After the run the marker is back, the trace is gone, the container runs
/// and its service answers; the hook (brought back by the rollback, as it was in the snapshot)
/// is removed and the package sources are put back.
fn step5_update_rolls_back(l: &mut Loop) {
    const PREPARE: &str = "set -e; echo before > /root/update-marker; rm -f /root/upgrade-ran; \
        mkdir -p /root/pgo-loop-apt; \
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do if [ -f \"$f\" ]; then mv \"$f\" /root/pgo-loop-apt/; fi; done; \
        printf '%s\\n' 'APT::Update::Pre-Invoke {\"rm -f /root/update-marker; touch /root/upgrade-ran; exit 1\";};' \
          > /etc/apt/apt.conf.d/99pgo-loop-fail";
    const RESTORE: &str = "set -e; rm /etc/apt/apt.conf.d/99pgo-loop-fail; \
        for f in /root/pgo-loop-apt/*; do case \"$f\" in */sources.list) mv \"$f\" /etc/apt/ ;; *) mv \"$f\" /etc/apt/sources.list.d/ ;; esac; done; \
        rmdir /root/pgo-loop-apt";
    let (code, _) = attach(&l.ct, &["sh", "-c", PREPARE]);
    assert_eq!(code, 0);
    let (code, listed) =
        attach(&l.ct, &["sh", "-c", "ls /etc/apt/sources.list.d; ls /etc/apt/sources.list 2>/dev/null || true"]);
    assert_eq!((code, listed.trim()), (0, ""), "no package source is left");

    let runs = l.runner.schedule("tasks/update", "main");
    let r = task_run(&runs);
    assert!(!r.ok(), "a rolled-back update must fail the task run:\n{}", r.act.log);
    let app = app_entry(l, "update.json");
    assert_eq!(app["result"], "rolled-back", "{app:#}");
    let snapshot = app["snapshot"].as_str().unwrap_or_else(|| panic!("{app:#}"));
    assert!(snapshot.starts_with("pgo-update-"), "{app:#}");
    assert_eq!(
        (app["rollback"]["snapshot"].as_str(), app["rollback"]["result"].as_str()),
        (Some(snapshot), Some("ok"))
    );
    assert_eq!(app["health"]["state"], "healthy", "{app:#}");
    let tail = app["commands"][0]["output_tail"].as_str().unwrap_or_default();
    assert!(!tail.contains("Get:") && !tail.contains("Hit:"), "apt fetched something: {app:#}");
    let lines = task_lines(r, "update");
    assert!(
        lines.iter().any(|w| w.len() >= 5 && w[..5] == ["app", "rolled-back", snapshot, "-", "healthy"]),
        "{}",
        r.act.log
    );
    let error = app["error"].as_str().unwrap();
    assert!(error.ends_with(&format!("; rolled back to {snapshot}")), "{error}");
    assert!(r.act.job_has("task update", "task", &format!("app: rolled-back — {error}")), "{}", r.act.log);

    let (code, marker) = attach(&l.ct, &["cat", "/root/update-marker"]);
    assert_eq!((code, marker.as_str()), (0, "before\n"), "the snapshot's state is back");
    let (code, _) = attach(&l.ct, &["test", "-e", "/root/upgrade-ran"]);
    assert_ne!(code, 0, "the upgrade's change is gone");
    let state = Command::new("lxc-info").args(["-n", &l.ct, "-sH"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&state.stdout).trim(), "RUNNING");
    let (code, _) = attach(&l.ct, &["test", "-e", "/root/pgo-loop-marker"]);
    assert_eq!(code, 0, "the rollback kept the container");
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", live_address(&l.ct))), "memory=384\n");
    let (code, _) = attach(&l.ct, &["sh", "-c", RESTORE]);
    assert_eq!(code, 0);
}

/// Issue 13's scenario (see the module docs), one step after the other on the same
/// container; each step's doc comment says what it does and proves.
#[test]
fn the_loop_publish_push_deploy() {
    let _heavy = support::heavy::area("loop_e2e");
    let _cleanup = LxcCleanup::new();
    let double = double();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("runner");
    let artifacts = state.join("artifacts");
    let share = state.join("share");
    std::fs::create_dir_all(&share).unwrap();
    let stage = lxc_stage();
    let config = RunnerConfig::for_double(&double)
        .var("PROXMOX_GITOPS_BACKEND", "lxc")
        .var("PROXMOX_GITOPS_STAGE", &stage)
        .var("PROXMOX_GITOPS_ARTIFACTS", s(&artifacts))
        .var("PROXMOX_SHARE", s(&share))
        .var("HOST", &double.url())
        .var("LOGIN", LOGIN)
        .secret("PASSWORD", PASSWORD)
        .env("PGO_LXC_BASE", &format!("{}base", lxc_prefix()));
    let runner = Runner::new(&double, config);
    let mono = loop_monorepo(tmp.path());
    let mut l = Loop { double: &double, runner, mono, artifacts, ct: format!("{stage}-app"), tmp };

    step1_publish_and_bootstrap(&mut l);
    step2_push_a_lib_change(&mut l);
    step3_health(&mut l);
    step4_auto_merge(&mut l);
    step5_update_rolls_back(&mut l);
    double.assert_spec_conformant();
}
