//! The real host (issue 24): our Gitea client and the workflows against a real Gitea and its real
//! Actions runner, built at the versions in `versions.env` by `tests/real_host/build.sh` (see
//! `tests/support/real_gitea.rs`). What the Gitea double (tests/gitea_double) claims is checked
//! here against the real server; where the two differ, the double's tests say so.
//!
//! Run: `./tests/run.sh --test suite real_host::` (as root: Gitea runs as the user `pgotest-gitea`), or
//! `cargo test --test suite real_host::` with `PGO_GITEA_BINARY`, `PGO_GITEA_STATIC` and
//! `PGO_RUNNER_BINARY` set. Everything listens on 127.0.0.1.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use proxmox_gitops::gitea::{
    CREATE_PULL_PATIENCE, Client, CreateOrgOption, CreatePullRequestOption, CreateRepoOption, CreateVariableOption,
    Created, EditRepoOption, GiteaError, MergePullRequestOption, MergeStyle, Patience, PullRequest,
    UpdateVariableOption, VariableScope,
};
use support::fs::write_files;
use support::git::git;
use support::real_gitea::{RealGitea, RealRunner, Run, RunnerOptions};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Commits everything in the work tree `w`; returns the new HEAD.
fn commit(w: &Path, msg: &str) -> String {
    git(w, &["add", "-A"]);
    git(w, &["commit", "-q", "-m", msg]);
    git(w, &["rev-parse", "HEAD"])
}

/// Organization `main` with the repository `name`, and an empty work tree (`git init`) in a
/// temporary directory to push to it from: `(the directory, the work tree)`.
fn repo_and_work_tree(rt: &tokio::runtime::Runtime, c: &Client, name: &str) -> (tempfile::TempDir, PathBuf) {
    org_with_repo(rt, c, name);
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    git(&w, &["init", "-q"]);
    (tmp, w)
}

/// Organization `main` with the repository `name`.
fn org_with_repo(rt: &tokio::runtime::Runtime, c: &Client, name: &str) {
    let org = CreateOrgOption { username: "main".into(), ..Default::default() };
    assert!(matches!(rt.block_on(c.create_org(&org)).unwrap(), Created::New(_)));
    let opt =
        CreateRepoOption { name: name.into(), description: Some(format!("the {name} lib")), ..Default::default() };
    assert!(matches!(rt.block_on(c.create_org_repo("main", &opt)).unwrap(), Created::New(_)));
}

/// Waits (bounded) until Gitea's conflict check of pull request `n` found it mergeable: Gitea
/// checks in the background after each change, and refuses merges while it checks.
fn wait_mergeable(rt: &tokio::runtime::Runtime, c: &Client, repo: &str, n: i64) -> PullRequest {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pr = rt.block_on(c.get_pull("main", repo, n)).unwrap().unwrap();
        if pr.mergeable {
            return pr;
        }
        assert!(Instant::now() < deadline, "pull request {n} not mergeable within 60 s: {pr:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn status_and_message(e: &GiteaError) -> (Option<u16>, String) {
    (e.status(), e.to_string())
}

#[test]
fn the_client_creates_orgs_repos_and_variables_on_real_gitea() {
    let _heavy = support::heavy::area("real_host");
    let g = RealGitea::start();
    let c = g.client();
    let rt = runtime();
    let me = rt.block_on(c.current_user()).unwrap();
    assert_eq!((me.login.as_str(), me.is_admin), (g.login(), true));

    // Organizations: created, then found (Gitea answers 422 "user already exists").
    let org = CreateOrgOption { username: "main".into(), ..Default::default() };
    assert!(matches!(rt.block_on(c.create_org(&org)).unwrap(), Created::New(o) if o.name == "main"));
    assert_eq!(rt.block_on(c.create_org(&org)).unwrap(), Created::Exists);
    assert_eq!(rt.block_on(c.get_org("main")).unwrap().unwrap().name, "main");
    assert!(rt.block_on(c.get_org("nope")).unwrap().is_none());

    // Repositories: created, 409 when there, edited.
    let opt = CreateRepoOption { name: "web".into(), description: Some("the web lib".into()), ..Default::default() };
    let Created::New(repo) = rt.block_on(c.create_org_repo("main", &opt)).unwrap() else { panic!("web existed") };
    assert_eq!((repo.full_name.as_str(), repo.empty, repo.fork), ("main/web", true, false));
    assert_eq!(repo.clone_url, g.clone_url("main", "web"));
    assert!(matches!(rt.block_on(c.create_org_repo("main", &opt)).unwrap(), Created::Exists));
    let edit = EditRepoOption {
        has_wiki: Some(false),
        has_projects: Some(false),
        description: Some("healthy: nginx.service active".into()),
        ..Default::default()
    };
    let edited = rt.block_on(c.edit_repo("main", "web", &edit)).unwrap();
    assert_eq!(
        (edited.has_wiki, edited.has_projects, edited.has_issues, edited.description.as_str()),
        (false, false, true, "healthy: nginx.service active")
    );
    assert_eq!(rt.block_on(c.get_repo("main", "web")).unwrap().unwrap().description, "healthy: nginx.service active");
    assert!(rt.block_on(c.get_repo("main", "nope")).unwrap().is_none());

    // Variables, org and repository: create (409 when there), list, get, update, delete.
    for scope in
        [VariableScope::Org { org: "main".into() }, VariableScope::Repo { owner: "main".into(), repo: "web".into() }]
    {
        let create = |v: &str| CreateVariableOption { value: v.into(), description: Some("d".into()) };
        assert_eq!(rt.block_on(c.create_variable(&scope, "IP", &create("10.0.3.5"))).unwrap(), Created::New(()));
        assert_eq!(rt.block_on(c.create_variable(&scope, "IP", &create("x"))).unwrap(), Created::Exists, "{scope}");
        assert_eq!(rt.block_on(c.create_variable(&scope, "SHARE", &create("/share"))).unwrap(), Created::New(()));
        let listed: Vec<(String, String, String)> = rt
            .block_on(c.list_variables(&scope))
            .unwrap()
            .into_iter()
            .map(|v| (v.name, v.data, v.description))
            .collect();
        let row = |n: &str, v: &str| (n.to_string(), v.to_string(), "d".to_string());
        assert_eq!(listed, vec![row("IP", "10.0.3.5"), row("SHARE", "/share")], "{scope}");
        let got = rt.block_on(c.get_variable(&scope, "IP")).unwrap().unwrap();
        assert_eq!((got.name.as_str(), got.data.as_str()), ("IP", "10.0.3.5"));
        assert!(rt.block_on(c.get_variable(&scope, "NOPE")).unwrap().is_none());
        let update = UpdateVariableOption { value: "10.0.3.6".into(), name: None, description: Some("e".into()) };
        rt.block_on(c.update_variable(&scope, "IP", &update)).unwrap();
        let got = rt.block_on(c.get_variable(&scope, "IP")).unwrap().unwrap();
        assert_eq!((got.data.as_str(), got.description.as_str()), ("10.0.3.6", "e"));
        assert!(rt.block_on(c.delete_variable(&scope, "IP")).unwrap());
        assert!(!rt.block_on(c.delete_variable(&scope, "IP")).unwrap());
        assert!(rt.block_on(c.get_variable(&scope, "IP")).unwrap().is_none());
    }
    let missing = VariableScope::Repo { owner: "main".into(), repo: "nope".into() };
    assert_eq!(rt.block_on(c.list_variables(&missing)).unwrap_err().status(), Some(404));
}

#[test]
fn the_client_merges_pull_requests_on_real_gitea() {
    let _heavy = support::heavy::area("real_host");
    let g = RealGitea::start();
    let c = g.client();
    let rt = runtime();
    let (_tmp, w) = repo_and_work_tree(&rt, &c, "web");
    let remote = g.clone_url("main", "web");
    let branch = |name: &str| -> String {
        let out = g.git_authed(&w, &["ls-remote", &remote, &format!("refs/heads/{name}")]);
        out.split_whitespace().next().unwrap_or_default().to_string()
    };
    write_files(&w, &[("container.env", "ID=101\n")]);
    let one = commit(&w, "one");
    g.git_authed(&w, &["push", "-q", &remote, "main:main", "main:release"]);
    g.wait_branch("main", "web", "release", &one);
    write_files(&w, &[("container.env", "ID=101\nMEMORY=1024\n")]);
    let two = commit(&w, "two");
    g.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    g.wait_branch("main", "web", "main", &two);
    let pull = |head: &str| CreatePullRequestOption {
        head: head.into(),
        base: "release".into(),
        title: "Release Pull Request".into(),
        body: None,
    };
    let pr = rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    assert_eq!((pr.number, pr.merged, pr.head.sha.as_str()), (1, false, two.as_str()));
    // `mergeable` is false until Gitea's background check ran (the double does the same).
    let pr = wait_mergeable(&rt, &c, "web", 1);
    assert_eq!((pr.mergeable, pr.head.sha.as_str(), pr.base.sha.as_str()), (true, two.as_str(), one.as_str()));
    assert!(!rt.block_on(c.is_pull_merged("main", "web", 1)).unwrap());

    // A head that moved since it was checked is refused.
    let mut opt = MergePullRequestOption::new(MergeStyle::Merge);
    opt.head_commit_id = Some(one.clone());
    let e = rt.block_on(c.merge_pull("main", "web", 1, &opt)).unwrap_err();
    assert_eq!(
        status_and_message(&e),
        (Some(409), "Gitea POST /repos/main/web/pulls/1/merge: HTTP 409: head out of date".into())
    );
    assert_eq!(branch("release"), one);
    // The refused merge leaves the pull request being checked again: merging at once answers
    // 405 "Please try again later" (which merge_pull waits out; waited here to test the state).
    wait_mergeable(&rt, &c, "web", 1);

    // `merge` writes a merge commit even though release could fast-forward.
    opt.head_commit_id = Some(two.clone());
    opt.merge_title_field = Some("Merge the release".into());
    opt.merge_message_field = Some("Planned: web update in place.".into());
    rt.block_on(c.merge_pull("main", "web", 1, &opt)).unwrap();
    let merged = branch("release");
    g.git_authed(&w, &["fetch", "-q", &remote, "release"]);
    assert_eq!(git(&w, &["log", "-1", "--format=%P", &merged]), format!("{one} {two}"));
    assert_eq!(git(&w, &["log", "-1", "--format=%B", &merged]), "Merge the release\n\nPlanned: web update in place.");
    let pr = rt.block_on(c.get_pull("main", "web", 1)).unwrap().unwrap();
    assert_eq!(
        (pr.state.as_str(), pr.merged, pr.merge_commit_sha.as_deref(), pr.head.sha.as_str()),
        ("closed", true, Some(merged.as_str()), two.as_str())
    );
    // Gitea keeps `mergeable` true on a merged pull request (the double does the same).
    assert!(pr.mergeable);
    assert!(rt.block_on(c.is_pull_merged("main", "web", 1)).unwrap());
    assert!(rt.block_on(c.get_pull("main", "web", 9)).unwrap().is_none());
    let e = rt.block_on(c.merge_pull("main", "web", 1, &MergePullRequestOption::new(MergeStyle::Merge))).unwrap_err();
    assert_eq!(
        status_and_message(&e),
        (Some(405), "Gitea POST /repos/main/web/pulls/1/merge: HTTP 405: The PR is already merged".into())
    );

    // A conflict: Gitea's check marks it conflicting, and a merge is refused before it is tried.
    git(&w, &["checkout", "-q", "-b", "side", &one]);
    write_files(&w, &[("container.env", "ID=101\nMEMORY=2048\n")]);
    let side = commit(&w, "side");
    g.git_authed(&w, &["push", "-q", &remote, "side:side"]);
    g.wait_branch("main", "web", "side", &side);
    let pr = rt.block_on(c.create_pull("main", "web", &pull("side"))).unwrap();
    assert_eq!((pr.number, pr.mergeable), (2, false));
    // Gitea answers 405 "Please try again later" for a pull request its check found conflicting
    // (the same answer as while it checks): the client waits within its patience, then says
    // "conflict".
    let impatient = c.clone().with_patience(CREATE_PULL_PATIENCE, Patience::within(Duration::from_secs(2)));
    let e = rt
        .block_on(impatient.merge_pull("main", "web", 2, &MergePullRequestOption::new(MergeStyle::Merge)))
        .unwrap_err();
    let (status, message) = status_and_message(&e);
    assert_eq!(status, Some(405), "{message}");
    assert!(
        message.starts_with("Gitea POST /repos/main/web/pulls/2/merge: HTTP 405: Please try again later (pull request #2 (side → release) is still not mergeable after ")
            && message.contains("Gitea's check finds a conflict between the branches"),
        "{message}"
    );
    assert_eq!(branch("release"), merged);

    // fast-forward-only refuses a base that diverged; rebase replays main's new commit.
    git(&w, &["checkout", "-q", "main"]);
    write_files(&w, &[("README", "web\n")]);
    let three = commit(&w, "three");
    g.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    g.wait_branch("main", "web", "main", &three);
    let pr = rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    assert_eq!(pr.number, 3);
    wait_mergeable(&rt, &c, "web", 3);
    let e = rt
        .block_on(c.merge_pull("main", "web", 3, &MergePullRequestOption::new(MergeStyle::FastForwardOnly)))
        .unwrap_err();
    // Gitea 1.27.3 answers 500 with git's message (the double does the same): its API handler
    // does not map ErrMergeDivergingFastForwardOnly.
    assert_eq!(e.status(), Some(500), "{e}");
    assert!(e.to_string().contains("Not possible to fast-forward"), "{e}");
    assert_eq!(branch("release"), merged);
    wait_mergeable(&rt, &c, "web", 3);
    rt.block_on(c.merge_pull("main", "web", 3, &MergePullRequestOption::new(MergeStyle::Rebase))).unwrap();
    let rebased = branch("release");
    g.git_authed(&w, &["fetch", "-q", &remote, "release"]);
    assert_eq!(git(&w, &["log", "-1", "--format=%P %s", &rebased]), format!("{merged} three"));
    assert_eq!(
        git(&w, &["rev-parse", &format!("{rebased}^{{tree}}")]),
        git(&w, &["rev-parse", &format!("{three}^{{tree}}")])
    );
    assert_eq!(branch("main"), three, "the head branch stays");

    // squash: one commit on release with the head's tree.
    write_files(&w, &[("NOTES", "n\n")]);
    let four = commit(&w, "four");
    g.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    g.wait_branch("main", "web", "main", &four);
    rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    wait_mergeable(&rt, &c, "web", 4);
    rt.block_on(c.merge_pull("main", "web", 4, &MergePullRequestOption::new(MergeStyle::Squash))).unwrap();
    let squashed = branch("release");
    g.git_authed(&w, &["fetch", "-q", &remote, "release"]);
    assert_eq!(git(&w, &["log", "-1", "--format=%P", &squashed]), rebased);
    assert_eq!(
        git(&w, &["rev-parse", &format!("{squashed}^{{tree}}")]),
        git(&w, &["rev-parse", &format!("{four}^{{tree}}")])
    );

    // fast-forward-only where release is an ancestor; the head branch deleted after the merge.
    git(&w, &["checkout", "-q", "-b", "hotfix", &squashed]);
    write_files(&w, &[("HOTFIX", "1\n")]);
    let hotfix = commit(&w, "hotfix");
    g.git_authed(&w, &["push", "-q", &remote, "hotfix:hotfix"]);
    g.wait_branch("main", "web", "hotfix", &hotfix);
    rt.block_on(c.create_pull("main", "web", &pull("hotfix"))).unwrap();
    wait_mergeable(&rt, &c, "web", 5);
    let opt = MergePullRequestOption {
        delete_branch_after_merge: Some(true),
        ..MergePullRequestOption::new(MergeStyle::FastForwardOnly)
    };
    rt.block_on(c.merge_pull("main", "web", 5, &opt)).unwrap();
    assert_eq!(branch("release"), hotfix);
    assert_eq!(branch("hotfix"), "", "deleted after the merge");

    // Listing by state.
    let numbers = |state: &str| -> Vec<i64> {
        let mut n: Vec<i64> = rt
            .block_on(c.list_pulls("main", "web", state, Some("release")))
            .unwrap()
            .iter()
            .map(|p| p.number)
            .collect();
        n.sort();
        n
    };
    assert_eq!((numbers("open"), numbers("closed"), numbers("all")), (vec![2], vec![1, 3, 4, 5], vec![1, 2, 3, 4, 5]));
}

/// What publish and auto-merge do, on real Gitea: push, open the release pull request at once,
/// merge it at once. Gitea records the pushed branch and checks the pull request in the
/// background; the client waits both out (bounded), the test never waits itself.
#[test]
fn publish_like_push_open_and_merge_at_once_on_real_gitea() {
    let _heavy = support::heavy::area("real_host");
    let g = RealGitea::start();
    let c = g.client();
    let rt = runtime();
    let (_tmp, w) = repo_and_work_tree(&rt, &c, "web");
    let remote = g.clone_url("main", "web");
    write_files(&w, &[("container.env", "ID=101\n")]);
    let one = commit(&w, "one");
    g.git_authed(&w, &["push", "-q", &remote, "main:main", "main:release"]);
    write_files(&w, &[("container.env", "ID=101\nMEMORY=1024\n")]);
    let two = commit(&w, "two");
    g.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    let opt = CreatePullRequestOption {
        head: "main".into(),
        base: "release".into(),
        title: "Release Pull Request".into(),
        body: Some("Created automatically for deployment by proxmox-gitops publish.".into()),
    };
    let pr = rt.block_on(c.create_pull("main", "web", &opt)).unwrap();
    assert_eq!((pr.number, pr.merged, pr.head.sha.as_str()), (1, false, two.as_str()));
    let merge =
        MergePullRequestOption { head_commit_id: Some(two.clone()), ..MergePullRequestOption::new(MergeStyle::Merge) };
    rt.block_on(c.merge_pull("main", "web", 1, &merge)).unwrap();
    let pr = rt.block_on(c.get_pull("main", "web", 1)).unwrap().unwrap();
    // Not `mergeable`: the merge went through while Gitea's check was still running (the client
    // waited out its 405s), and a merged pull request reads `mergeable: true` only once Gitea
    // recorded the check's result (seen false right after the merge in one run of the suite).
    assert_eq!((pr.state.as_str(), pr.merged), ("closed", true));
    let merged = pr.merge_commit_sha.clone().unwrap();
    g.git_authed(&w, &["fetch", "-q", &remote, "release"]);
    assert_eq!(git(&w, &["rev-parse", "FETCH_HEAD"]), merged);
    assert_eq!(git(&w, &["log", "-1", "--format=%P", &merged]), format!("{one} {two}"));
}

/// The probe workflow: one job on `runs-on: shell` that echoes, writes a step summary and sets an
/// output; a second job reads that output.
const PROBE: &str = r####"name: probe
on: [push, workflow_dispatch]
jobs:
  probe:
    runs-on: shell
    outputs:
      word: ${{ steps.say.outputs.word }}
    steps:
      - id: say
        run: |
          echo "probe says hello from ${{ gitea.event_name }} as $(id -un)"
          echo "### probe summary" >> "$GITHUB_STEP_SUMMARY"
          echo "word=bonjour" >> "$GITHUB_OUTPUT"
  after:
    runs-on: shell
    needs: probe
    steps:
      - run: echo "the probe said ${{ needs.probe.outputs.word }}"
"####;

/// Asserts that `run` succeeded with both jobs, each log holding its line; prints the run when not.
fn assert_probe_run(run: &Run, event: &str) {
    let shown = run.to_string();
    assert_eq!((run.event.as_str(), run.conclusion.as_str()), (event, "success"), "{shown}");
    let log = |name: &str| run.jobs.iter().find(|j| j.name == name).map(|j| j.log.clone()).unwrap_or_default();
    assert!(log("probe").contains(&format!("probe says hello from {event} as root")), "{shown}");
    assert!(log("after").contains("the probe said bonjour"), "{shown}");
}

#[test]
fn a_probe_workflow_runs_on_the_real_runner_on_push_and_dispatch() {
    let _heavy = support::heavy::area("real_host");
    let started = Instant::now();
    let g = RealGitea::start();
    let up = started.elapsed();
    let runner = RealRunner::start(&g, &RunnerOptions::default());
    let registered = started.elapsed();
    let c = g.client();
    let rt = runtime();
    let (_tmp, w) = repo_and_work_tree(&rt, &c, "probe");
    write_files(&w, &[(".gitea/workflows/probe.yml", PROBE)]);
    let sha = commit(&w, "probe");
    // A push with the admin's personal access token (basic auth, token as password): it starts
    // the workflow.
    g.git_authed(&w, &["push", "-q", &g.clone_url("main", "probe"), "main:main"]);
    let runs = g.wait_for_runs("main", "probe", 1, Duration::from_secs(60));
    let push_done = started.elapsed();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].head_sha, sha);
    assert_probe_run(&runs[0], "push");
    assert!(runs[0].jobs.iter().all(|j| j.runner_name == runner.name), "{}", runs[0]);

    g.dispatch_workflow("main", "probe", "probe.yml", "main", &serde_json::json!({}));
    let runs = g.wait_for_runs("main", "probe", 2, Duration::from_secs(60));
    let dispatch_done = started.elapsed();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_probe_run(&runs[0], "workflow_dispatch");
    println!(
        "real host timings: Gitea up {up:?}, runner registered {registered:?}, push run done {push_done:?}, dispatch \
         run done {dispatch_done:?}"
    );
    println!("probe job log:\n{}", runs[0].jobs[0].log);
}
