//! The GitOps loop end to end: a monorepo published to the Gitea double, then pushes, schedules
//! and dispatches run the published workflows through the tests' runner
//! ([`support::runner`], which plays Gitea's runner dispatch with act in host mode).
//!
//! * [`the_runner_runs_published_workflows_as_gitea_would`] proves the runner itself on a small
//!   published monorepo (no container): which pushes start which workflows, the event payload,
//!   variables and secrets, the checkout action with submodules, schedules and dispatches, and
//!   act's own local checkout.
//! * [`the_loop_publish_push_deploy`] is issue 13's scenario with real LXC containers (backend
//!   `lxc`, removed when the test ends, also on failure): publish, a `git push` of a lib change
//!   on `release` that the pipeline deploys in place, then (to be filled in after the merge of
//!   health, update and auto-merge) the health, deploy and update tasks. It needs root, LXC with
//!   lxcbr0 and Debian's mirror (the containers' base role installs packages).
//!
//! Run: `cargo test --test loop_e2e` (needs python3 with `jsonschema`, git, act: see
//! tests/run.sh).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::fs::{copy_dir, source_root, write_files};
use support::git::git;
use support::gitea::{Creds, Double, add_submodule, ok, run};
use support::runner::{Delivery, PushFilter, Runner, RunnerConfig, Triggers, api, api_get, git_as_user, runs};
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

/// `proxmox-gitops publish` of `mono` to the double (login and password in the environment, the
/// artifacts in `artifacts`); panics with the output on failure.
fn publish(double: &Double, mono: &Path, artifacts: &Path) {
    ok(&run(
        &["--repo", s(mono), "--artifacts", s(artifacts), "publish", "--gitea", &double.url()],
        &[("LOGIN", LOGIN), ("PASSWORD", PASSWORD), ("PROXMOX_GITOPS_CHECKOUT", support::runner::DEFAULT_CHECKOUT)],
    ));
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
    publish(&double, &mono, &root.join("artifacts"));

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

/// The fixture monorepo under `root`: the shipped base role, the lib `app` as a submodule, the
/// tasks `nightly` (cron line) and `ondemand` (none) as plain directories, this repository's
/// `action.yml` and `workflows/`.
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

/// TODO(integrator): drop this once `publish` installs the monorepo's workflows (i13-tasks):
/// commits this repository's `workflows/pipeline.yml` and `snapshot.yml` as
/// `.gitea/workflows/*.yml` of the fixture (docs/workflows.md, "Installing the workflows"), so
/// that the runner has a pipeline to run before that merge.
fn install_monorepo_workflows_until_publish_does(mono: &Path) {
    std::fs::create_dir_all(mono.join(".gitea/workflows")).unwrap();
    for f in ["pipeline.yml", "snapshot.yml"] {
        std::fs::copy(mono.join("workflows").join(f), mono.join(".gitea/workflows").join(f)).unwrap();
    }
    commit(mono, "Enable the proxmox-gitops pipeline");
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

/// Step 1: `publish` the fixture; the pushes of publish are delivered (the monorepo's published
/// commit is rewrite's `[skip ci]` commit, so its pipeline does not start by itself); the user
/// then runs the pipeline once on `release` (*Run workflow*: the bootstrap deploy), which
/// provisions and configures the lib's container.
fn step1_publish_and_bootstrap(l: &mut Loop) {
    install_monorepo_workflows_until_publish_does(&l.mono);
    publish(l.double, &l.mono, &l.tmp.path().join("publish-artifacts"));
    for r in runs(&l.runner.step()) {
        r.assert_ok();
    }
    for repo in ["mono", "app", "base", "nightly", "ondemand"] {
        let found = ["main", "tasks"].iter().any(|org| l.double.branch(org, repo, "release").is_some());
        assert!(found, "{repo} was not published");
    }

    let r = l.runner.dispatch("main/mono", "release", ".gitea/workflows/pipeline.yml", &[]);
    r.assert_ok();
    assert!(r.act.job_has("pipeline", "provision", "Job succeeded"), "{}", r.act.log);
    assert!(r.act.job_has("pipeline", "configure", "Job succeeded"), "{}", r.act.log);
    let prov = l.artifact("provision/app.json");
    assert_eq!((prov["result"].as_str(), prov["hostname"].as_str()), (Some("ok"), Some(l.ct.as_str())), "{prov:#}");
    assert_eq!(memory_limit(&l.ct), (256 << 20, 256 << 20));
    assert_eq!(http_get(&format!("http://{}:8080/settings.txt", l.address())), "memory=256\n");
    // A marker that survives only an in-place change.
    let (code, _) = attach(&l.ct, &["touch", "/root/pgo-loop-marker"]);
    assert_eq!(code, 0);
}

/// Step 2: a lib change on `release` with plain `git push`es (the lib's repository, then the
/// monorepo's submodule pointer) → the runner runs the pipeline → the container gets the new
/// memory limit in place, the lib's configuration ran again, and its outputs are repository
/// variables of the lib's repository on the double.
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
    // The lib's own pipeline, when its repository has one (publish renders it: i13-tasks).
    for r in runs(&l.runner.step()) {
        r.assert_ok();
    }
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
/// the double, set by the pipeline (deploy with Gitea settings: i13-gitea; until that merge this
/// assertion fails).
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

/// Step 3 (TODO(integrator), after merging i13-health and i13-tasks): the health task.
///
/// With the runner API:
/// 1. `let runs = l.runner.schedule("tasks/health", "main")` — or whichever repository publish
///    made for the monorepo's health task (`tasks/<name>`; find it with `api_get(l.double,
///    "/repos/tasks/health")`); its `task.yml` has `on.schedule`. Expect exactly one run of
///    `.gitea/workflows/task.yml`, `assert_ok()`.
/// 2. `api_get(l.double, "/repos/main/app")["description"]` says the lib is healthy (the text
///    health writes, e.g. naming `app-http` active), and the run's log has the Markdown table
///    of the job summary (or read `$GITHUB_STEP_SUMMARY` through the log lines health prints).
/// 3. Stop the service: `attach(&l.ct, &["systemctl", "stop", "app-http"])` (exit 0).
/// 4. `l.runner.schedule(…)` again: the run fails (`!run.ok()`), its log names `app-http` as
///    down, and the description of `main/app` on the double now says which service is down.
/// 5. Start it again (`systemctl start app-http`) so that later steps begin healthy.
#[allow(dead_code)]
fn step3_health(_l: &mut Loop) {}

/// Step 4 (TODO(integrator), after merging i13-gitea (pull request merge in the double) and
/// i13-tasks): the deploy task merges the release pull request, and the merge's push deploys.
///
/// With the runner API:
/// 1. Change the lib on `main` (clone `main/mono` at `main` with [`clone`], change
///    `libs/app/container.env`, e.g. `CORES=2`, push the lib's `main` and the monorepo's `main`
///    with [`git_as_user`]), `l.runner.step()` (main only configures: every run `assert_ok()`).
/// 2. Open the release pull request on the double if publish did not leave one open:
///    `api(l.double, "POST", "/repos/main/mono/pulls", Some(&json!({"title": "Release Pull
///    Request", "head": "main", "base": "release"})))` (and the same for `main/app`).
/// 3. `l.runner.config_mut().vars.insert("AUTO_DEPLOY".into(), "true".into())`, then
///    `l.runner.dispatch("<deploy task repo>", "main", ".gitea/workflows/task.yml", &[])` —
///    `assert_ok()`; the pull requests are merged (`api_get(l.double,
///    "/repos/main/mono/pulls?state=closed")` shows them `merged`).
/// 4. `let d = l.runner.settle(3)`: the merge's push of `release` is delivered and runs
///    `.gitea/workflows/pipeline.yml` (assert it is among `runs(&d)` and ok), and the
///    container now has the new `CORES` (`lxc.cgroup.cpu.cfs_quota_us` / `cpu.max` in its config).
///    (On a real Gitea a merge made with the job token starts no workflow: see the runner's
///    module docs; the task must merge with the user's credentials for this to work there.)
#[allow(dead_code)]
fn step4_auto_merge(_l: &mut Loop) {}

/// Step 5 (TODO(integrator), after merging i13-health): the update task rolls a container back.
///
/// With the runner API:
/// 1. Before the update: a marker, and an apt hook that makes the upgrade change the container
///    and then fail. Both through `attach(&l.ct, &["sh", "-c", "…"])` with constant scripts:
///    `echo before > /root/update-marker`, and `/etc/apt/apt.conf.d/99pgo-loop-fail` holding
///    `APT::Update::Post-Invoke { "rm -f /root/update-marker; touch /root/upgrade-ran; exit 1"; };`
///    (`apt-get update` runs the hook, which removes the marker, leaves its own trace, and fails).
/// 2. `let r = l.runner.schedule("<update task repo>", "main")` (or `dispatch` on `main`): one
///    run of `.gitea/workflows/task.yml`; its log (and job summary) names the container and says
///    it was rolled back; whether the run then fails is the task contract's choice
///    (docs/tasks.md): assert what it says.
/// 3. After the run: `attach(&l.ct, &["cat", "/root/update-marker"])` gives `before` (the
///    snapshot's state is back), `attach(&l.ct, &["test", "-e", "/root/upgrade-ran"])` fails (the
///    upgrade's change is gone), the container is running (`lxc-info -n <ct> -s`), and the lib's
///    service answers again (`http_get(…/settings.txt)`).
/// 4. Remove the hook (`rm /etc/apt/apt.conf.d/99pgo-loop-fail`: the rollback brought it back too).
#[allow(dead_code)]
fn step5_update_rolls_back(_l: &mut Loop) {}

/// Issue 13's scenario (see the module docs). Steps 3–5 are called once health, update and
/// auto-merge have landed (TODO(integrator) in their functions).
///
/// TODO(integrator): on the branch that wrote it (i13-loop) this test fails by design in two
/// places, each fixed by a merge: step 1's pipeline fails in resolve, which refuses
/// `tasks/ondemand` without a cron line (i13-tasks makes the line optional); step 2's
/// [`assert_lib_outputs_are_repository_variables`] fails until deploy sets lib outputs as
/// repository variables (i13-gitea). With a cron line in `tasks/ondemand` everything before that
/// assertion passed there (about 150 s).
#[test]
fn the_loop_publish_push_deploy() {
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
    // TODO(integrator): step3_health(&mut l); step4_auto_merge(&mut l); step5_update_rolls_back(&mut l);
    double.assert_spec_conformant();
}
