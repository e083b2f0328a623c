//! The Gitea side of the tasks (issue 13), against the stateful Gitea double: the double merges
//! pull requests as Gitea does (checked through the client), `env list` / `env delete`,
//! `auto-merge` planned on fakepve, and `deploy` setting a lib's configure outputs as variables of
//! its repository.
//!
//! Run: `cargo test --test suite gitea_tasks::` (needs python3 with `jsonschema` and `fakepve[crypto]`,
//! and git). Everything listens on loopback.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use proxmox_gitops::gitea::{
    CREATE_PULL_PATIENCE, CreateOrgOption, CreatePullRequestOption, CreateRepoOption, CreateVariableOption,
    EditRepoOption, MERGE_PATIENCE, MergePullRequestOption, MergeStyle, Patience, VariableScope,
};
use serde_json::{Value, json};
use support::fakepve::{self, FakePve};
use support::fs::write_files;
use support::git::git;
use support::gitea::{self, Creds, Double, ok, run};

/// `message` with the attempts and seconds of a wait replaced by `N` and `S`.
fn waited(message: &str) -> String {
    let re = regex::Regex::new(r"after \d+ attempts over \d+\.\d s").unwrap();
    re.replace_all(message, "after N attempts over S s").into_owned()
}

/// The answers of the double to merges of pull request `n` of main/web, as `status message`.
fn merge_answers(d: &Double, n: i64) -> Vec<String> {
    let path = format!("/repos/main/web/pulls/{n}/merge");
    d.exchanges()
        .iter()
        .filter(|e| e["kind"] == "api" && e["method"] == "POST" && e["path"] == path.as_str())
        .map(|e| format!("{} {}", e["status"], e["response"]["message"].as_str().unwrap_or("")))
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Organization `main` with repositories `names` on the double.
fn org_with_repos(d: &Double, names: &[&str]) {
    let c = d.client();
    let rt = runtime();
    rt.block_on(c.create_org(&CreateOrgOption { username: "main".into(), ..Default::default() })).unwrap();
    for n in names {
        let opt =
            CreateRepoOption { name: n.to_string(), description: Some(format!("the {n} lib")), ..Default::default() };
        rt.block_on(c.create_org_repo("main", &opt)).unwrap();
    }
}

/// Commits everything in the work tree `w`; returns the new HEAD.
fn commit(w: &Path, msg: &str) -> String {
    git(w, &["add", "-A"]);
    git(w, &["commit", "-q", "-m", msg]);
    git(w, &["rev-parse", "HEAD"])
}

/// `git log -1 --format=<format> <rev>` in the bare repository `owner/name` of the double.
fn show(d: &Double, name: &str, format: &str, rev: &str) -> String {
    git(&d.bare("main", name), &["log", "-1", &format!("--format={format}"), rev])
}

/// Gitea's background work on the double, long enough (3 s) that every first answer is "not
/// yet": the client opens a pull request right after the push and merges it right after opening
/// it, waiting both out; and it gives up within its patience, saying why.
#[test]
fn the_client_waits_for_gitea_background_work_within_bounds() {
    let d = Double::start_with_delay(Creds::basic("admin", "wait-pw-1"), Duration::from_secs(3));
    org_with_repos(&d, &["web"]);
    let c = d.client();
    let rt = runtime();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    git(&w, &["init", "-q"]);
    let remote = format!("{}/main/web.git", d.url());
    write_files(&w, &[("container.env", "ID=101\n")]);
    commit(&w, "one");
    d.git_authed(&w, &["push", "-q", &remote, "main:main", "main:release"]);
    let pull = |head: &str| CreatePullRequestOption {
        head: head.into(),
        base: "release".into(),
        title: "Release Pull Request".into(),
        body: None,
    };

    // A repository that does not exist: 404 at once, no waiting.
    let e = rt.block_on(c.create_pull("main", "nope", &pull("main"))).unwrap_err();
    assert_eq!(e.to_string(), "Gitea POST /repos/main/nope/pulls: HTTP 404: The target couldn't be found.");

    // A branch still being recorded: the client gives up after its patience, saying why.
    let impatient = c.clone().with_patience(Patience::within(Duration::from_millis(300)), MERGE_PATIENCE);
    let started = Instant::now();
    let e = rt.block_on(impatient.create_pull("main", "web", &pull("main"))).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "bounded: {:?}", started.elapsed());
    assert_eq!(
        (e.status(), waited(&e.to_string())),
        (
            Some(404),
            "Gitea POST /repos/main/web/pulls: HTTP 404: not found (Gitea still did not know branch `main` or \
             `release` of main/web after N attempts over S s: it records pushed branches in the background; check \
             that both were pushed)"
                .to_string()
        )
    );

    // With the default patience both succeed, with no wait in the test itself.
    write_files(&w, &[("container.env", "ID=101\nMEMORY=1024\n")]);
    let two = commit(&w, "two");
    d.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    let pr = rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    assert_eq!((pr.number, pr.mergeable, pr.head.sha.as_str()), (1, false, two.as_str()));
    let mut opt = MergePullRequestOption::new(MergeStyle::Merge);
    opt.head_commit_id = Some(two.clone());
    rt.block_on(c.merge_pull("main", "web", 1, &opt)).unwrap();
    assert!(rt.block_on(c.is_pull_merged("main", "web", 1)).unwrap());
    // What the double answered: "not yet" first, then success.
    let answers = |template: &str| -> Vec<String> {
        d.exchanges()
            .iter()
            .filter(|e| e["kind"] == "api" && e["method"] == "POST" && e["path"] == template)
            .map(|e| e["status"].to_string())
            .collect()
    };
    let creates = answers("/repos/main/web/pulls");
    assert!(creates.len() > 2 && creates.last().map(String::as_str) == Some("201"), "{creates:?}");
    assert!(creates[..creates.len() - 1].iter().all(|s| s == "404"), "{creates:?}");
    let merges = merge_answers(&d, 1);
    assert!(merges.len() > 1 && merges.last().map(String::as_str) == Some("200 "), "{merges:?}");
    assert!(merges[..merges.len() - 1].iter().all(|a| a == "405 Please try again later"), "{merges:?}");
    d.assert_spec_conformant();
}

#[test]
fn the_double_merges_pull_requests_as_gitea_does() {
    let d = Double::start(Creds::basic("admin", "merge-pw-1"));
    org_with_repos(&d, &["web"]);
    let c = d.client();
    let rt = runtime();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("w");
    std::fs::create_dir_all(&w).unwrap();
    git(&w, &["init", "-q"]);
    let remote = format!("{}/main/web.git", d.url());
    write_files(&w, &[("container.env", "ID=101\n")]);
    let one = commit(&w, "one");
    d.git_authed(&w, &["push", "-q", &remote, "main:main", "main:release"]);
    write_files(&w, &[("container.env", "ID=101\nMEMORY=1024\n")]);
    let two = commit(&w, "two");
    d.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    let pull = |head: &str| CreatePullRequestOption {
        head: head.into(),
        base: "release".into(),
        title: "Release Pull Request".into(),
        body: None,
    };
    // Right after the push, as Gitea: the client waits until the double "recorded" the branch.
    let pr = rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    // As Gitea: not mergeable until the background check ran.
    assert_eq!((pr.number, pr.mergeable, pr.merged, pr.head.sha.as_str()), (1, false, false, two.as_str()));
    assert!(!rt.block_on(c.is_pull_merged("main", "web", 1)).unwrap());

    // A head that moved since it was checked is refused: what was checked is what is merged. (The
    // client waits out the check's 405 first; the refusal queues a new check, which the next
    // merge waits out in turn.)
    let mut opt = MergePullRequestOption::new(MergeStyle::Merge);
    opt.head_commit_id = Some(one.clone());
    let e = rt.block_on(c.merge_pull("main", "web", 1, &opt)).unwrap_err();
    assert_eq!(e.to_string(), "Gitea POST /repos/main/web/pulls/1/merge: HTTP 409: head out of date");
    assert_eq!(d.branch("main", "web", "release"), Some(one.clone()));

    // `merge` writes a merge commit even though release could fast-forward.
    opt.head_commit_id = Some(two.clone());
    opt.merge_title_field = Some("Merge the release".into());
    opt.merge_message_field = Some("Planned: web update in place.".into());
    rt.block_on(c.merge_pull("main", "web", 1, &opt)).unwrap();
    let merged = d.branch("main", "web", "release").unwrap();
    assert_eq!(show(&d, "web", "%P", &merged), format!("{one} {two}"));
    assert_eq!(show(&d, "web", "%B", &merged), "Merge the release\n\nPlanned: web update in place.");
    assert_eq!(show(&d, "web", "%an <%ae>", &merged), "admin <admin@example.invalid>");
    let pr = rt.block_on(c.get_pull("main", "web", 1)).unwrap().unwrap();
    // As Gitea: a merged pull request is `mergeable`.
    assert_eq!(
        (pr.state.as_str(), pr.merged, pr.mergeable, pr.merge_commit_sha.as_deref(), pr.head.sha.as_str()),
        ("closed", true, true, Some(merged.as_str()), two.as_str())
    );
    assert!(rt.block_on(c.is_pull_merged("main", "web", 1)).unwrap());
    assert!(rt.block_on(c.get_pull("main", "web", 9)).unwrap().is_none());
    // Merged already: 405, as Gitea, at once (not retried).
    let e = rt.block_on(c.merge_pull("main", "web", 1, &MergePullRequestOption::new(MergeStyle::Merge))).unwrap_err();
    assert_eq!(e.to_string(), "Gitea POST /repos/main/web/pulls/1/merge: HTTP 405: The PR is already merged");
    assert_eq!(merge_answers(&d, 1).last().map(String::as_str), Some("405 The PR is already merged"));

    // A conflict: as Gitea, 405 "Please try again later" (refused before trying, the answer of
    // a check still running), retried within the client's patience, then named a conflict.
    git(&w, &["checkout", "-q", "-b", "side", &one]);
    write_files(&w, &[("container.env", "ID=101\nMEMORY=2048\n")]);
    commit(&w, "side");
    d.git_authed(&w, &["push", "-q", &remote, "side:side"]);
    let pr = rt.block_on(c.create_pull("main", "web", &pull("side"))).unwrap();
    assert_eq!((pr.number, pr.mergeable), (2, false));
    let impatient = c.clone().with_patience(CREATE_PULL_PATIENCE, Patience::within(Duration::from_secs(1)));
    let started = Instant::now();
    let e = rt
        .block_on(impatient.merge_pull("main", "web", 2, &MergePullRequestOption::new(MergeStyle::Merge)))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "bounded: {:?}", started.elapsed());
    assert_eq!(
        (e.status(), waited(&e.to_string())),
        (
            Some(405),
            "Gitea POST /repos/main/web/pulls/2/merge: HTTP 405: Please try again later (pull request #2 (side → \
             release) is still not mergeable after N attempts over S s: Gitea's check finds a conflict between the \
             branches; merge `release` into `side` (or rebase it) and push)"
                .to_string()
        )
    );
    let tries = merge_answers(&d, 2);
    assert!(tries.len() > 1 && tries.iter().all(|a| a == "405 Please try again later"), "{tries:?}");
    let pr = rt.block_on(c.get_pull("main", "web", 2)).unwrap().unwrap();
    assert_eq!((pr.state.as_str(), pr.mergeable), ("open", false));
    assert_eq!(d.branch("main", "web", "release"), Some(merged.clone()));

    // fast-forward-only refuses a base that diverged; rebase replays main's new commit.
    git(&w, &["checkout", "-q", "main"]);
    write_files(&w, &[("README", "web\n")]);
    let three = commit(&w, "three");
    d.git_authed(&w, &["push", "-q", &remote, "main:main"]);
    let pr = rt.block_on(c.create_pull("main", "web", &pull("main"))).unwrap();
    assert_eq!(pr.number, 3);
    let e = rt
        .block_on(c.merge_pull("main", "web", 3, &MergePullRequestOption::new(MergeStyle::FastForwardOnly)))
        .unwrap_err();
    // As Gitea 1.27.3: 500 with git's message (ErrMergeDivergingFastForwardOnly is not mapped).
    assert_eq!(
        (e.status(), e.to_string()),
        (
            Some(500),
            "Gitea POST /repos/main/web/pulls/3/merge: HTTP 500: Merge DivergingFastForwardOnly Error: exit status \
             128: fatal: Not possible to fast-forward, aborting. (with fast-forward-only, Gitea answers 500 when the \
             base branch has diverged from the head)"
                .to_string()
        )
    );
    assert_eq!(d.branch("main", "web", "release"), Some(merged.clone()));
    rt.block_on(c.merge_pull("main", "web", 3, &MergePullRequestOption::new(MergeStyle::Rebase))).unwrap();
    let rebased = d.branch("main", "web", "release").unwrap();
    assert_eq!((show(&d, "web", "%P %s", &rebased)), format!("{merged} three"));
    assert_eq!(
        git(&d.bare("main", "web"), &["rev-parse", &format!("{rebased}^{{tree}}")]),
        git(&d.bare("main", "web"), &["rev-parse", &format!("{three}^{{tree}}")])
    );
    assert_eq!(d.branch("main", "web", "main"), Some(three.clone()), "the head branch stays");
    // fast-forward-only where release is an ancestor.
    git(&w, &["fetch", "-q", &remote, "release"]);
    git(&w, &["checkout", "-q", "-b", "hotfix", &rebased]);
    write_files(&w, &[("HOTFIX", "1\n")]);
    let hotfix = commit(&w, "hotfix");
    d.git_authed(&w, &["push", "-q", &remote, "hotfix:hotfix"]);
    rt.block_on(c.create_pull("main", "web", &pull("hotfix"))).unwrap();
    let opt = MergePullRequestOption {
        delete_branch_after_merge: Some(true),
        ..MergePullRequestOption::new(MergeStyle::FastForwardOnly)
    };
    rt.block_on(c.merge_pull("main", "web", 4, &opt)).unwrap();
    assert_eq!(d.branch("main", "web", "release"), Some(hotfix.clone()));
    assert_eq!(d.branch("main", "web", "hotfix"), None, "deleted after the merge");

    // Listing by state.
    let numbers = |state: &str| -> Vec<i64> {
        rt.block_on(c.list_pulls("main", "web", state, Some("release"))).unwrap().iter().map(|p| p.number).collect()
    };
    assert_eq!((numbers("open"), numbers("closed"), numbers("all")), (vec![2], vec![1, 3, 4], vec![1, 2, 3, 4]));

    // Every change of release, in order, as a runner dispatch sees it.
    let release: Vec<(String, String, String)> = d
        .pushes()
        .into_iter()
        .filter(|(_, _, r, _, _)| r == "refs/heads/release")
        .map(|(repo, via, _, before, after)| (format!("{repo} {via}"), before, after))
        .collect();
    let m = |before: &str, after: &str| ("main/web merge".to_string(), before.to_string(), after.to_string());
    assert_eq!(
        release,
        vec![
            ("main/web git".to_string(), String::new(), one.clone()),
            m(&one, &merged),
            m(&merged, &rebased),
            m(&rebased, &hotfix)
        ]
    );

    // The description round-trips through repoEdit.
    assert_eq!(rt.block_on(c.get_repo("main", "web")).unwrap().unwrap().description, "the web lib");
    let edit = EditRepoOption { description: Some("healthy: nginx.service active".into()), ..Default::default() };
    assert_eq!(rt.block_on(c.edit_repo("main", "web", &edit)).unwrap().description, "healthy: nginx.service active");
    assert_eq!(rt.block_on(c.get_repo("main", "web")).unwrap().unwrap().description, "healthy: nginx.service active");
    d.assert_spec_conformant();
}

#[test]
fn variables_are_listed_over_every_page_and_deleted() {
    let d = Double::start(Creds::basic("admin", "vars-pw-1"));
    org_with_repos(&d, &["web"]);
    let c = d.client();
    let rt = runtime();
    let org = VariableScope::Org { org: "main".into() };
    for i in 0..57 {
        let opt = CreateVariableOption { value: format!("v{i}"), description: None };
        rt.block_on(c.create_variable(&org, &format!("V{i:02}"), &opt)).unwrap();
    }
    let all = rt.block_on(c.list_variables(&org)).unwrap();
    assert_eq!(all.len(), 57);
    assert_eq!((all[0].name.as_str(), all[56].name.as_str(), all[56].data.as_str()), ("V00", "V56", "v56"));
    let lists: Vec<String> =
        d.api_calls().into_iter().filter(|c| c.starts_with("GET /orgs/main/actions/variables ")).collect();
    assert_eq!(lists.len(), 2, "two pages of 50: {lists:?}");
    assert!(rt.block_on(c.delete_variable(&org, "V00")).unwrap());
    assert!(!rt.block_on(c.delete_variable(&org, "V00")).unwrap());
    assert_eq!(rt.block_on(c.list_variables(&org)).unwrap().len(), 56);
    let repo = VariableScope::Repo { owner: "main".into(), repo: "web".into() };
    assert!(rt.block_on(c.list_variables(&repo)).unwrap().is_empty());
    let missing = VariableScope::Repo { owner: "main".into(), repo: "nope".into() };
    assert_eq!(rt.block_on(c.list_variables(&missing)).unwrap_err().status(), Some(404));
    d.assert_spec_conformant();
}

#[test]
fn env_list_and_delete_round_trip() {
    let d = Double::start(Creds { login: "admin".into(), password: None, token: Some("tok-env-list-1".into()) });
    org_with_repos(&d, &["web"]);
    let dir = tempfile::tempdir().unwrap();
    let repo = s(dir.path());
    let url = d.url();
    let env = [("HOST", url.as_str()), ("GITEA_TOKEN", "tok-env-list-1")];
    for (k, v) in [("A", "1"), ("B", "two words"), ("C", "esc\u{1b}[31mred")] {
        ok(&run(&["--repo", repo, "env", "set", k, v, "--org", "main"], &env));
    }
    let out = run(&["--repo", repo, "env", "list", "--org", "main"], &env);
    assert_eq!(ok(&out), "NAME  VALUE\nA     1\nB     two words\nC     esc\\u{1b}[31mred\n");
    assert_eq!(text(&out.stderr).trim(), "3 variable(s) on org main");
    let listed: Value = serde_json::from_str(&ok(&run(&["--repo", repo, "env", "list", "--json"], &env))).unwrap();
    assert_eq!(
        listed,
        json!([
            {"name": "A", "value": "1", "description": ""},
            {"name": "B", "value": "two words", "description": ""},
            {"name": "C", "value": "esc\u{1b}[31mred", "description": ""},
        ])
    );
    let out = run(&["--repo", repo, "env", "delete", "A"], &env);
    ok(&out);
    assert_eq!(text(&out.stderr).trim(), "A on org main: deleted");
    assert_eq!(
        ok(&run(&["--repo", repo, "env", "list"], &env)),
        "NAME  VALUE\nB     two words\nC     esc\\u{1b}[31mred\n"
    );
    let out = run(&["--repo", repo, "env", "delete", "A", "--org", "main"], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("variable A does not exist on org main (list them: proxmox-gitops env list --org main)"),
        "{}",
        text(&out.stderr)
    );

    // A repository's variables.
    ok(&run(&["--repo", repo, "env", "set", "IP", "10.0.3.5", "--gitea-repo", "main/web"], &env));
    let listed: Value =
        serde_json::from_str(&ok(&run(&["--repo", repo, "--json", "env", "list", "--gitea-repo", "main/web"], &env)))
            .unwrap();
    assert_eq!(listed, json!([{"name": "IP", "value": "10.0.3.5", "description": ""}]));
    ok(&run(&["--repo", repo, "env", "delete", "IP", "--gitea-repo", "main/web"], &env));
    assert_eq!(ok(&run(&["--repo", repo, "env", "list", "--gitea-repo", "main/web"], &env)), "NAME  VALUE\n");

    // Bad input: no credentials, a bad name, both scopes.
    let out = run(&["--repo", repo, "env", "list"], &[("HOST", url.as_str())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no Gitea credentials"), "{}", text(&out.stderr));
    let out = run(&["--repo", repo, "env", "delete", "lower"], &env);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--repo", repo, "env", "list", "--org", "main", "--gitea-repo", "main/web"], &env);
    assert_eq!(out.status.code(), Some(2));
    d.assert_spec_conformant();
}

// ------------------------------------------------------------------------------------ auto-merge

/// A monorepo with a control plane (vmid 100) and two submodule libs, `web` (101) and `db` (102),
/// published to the double; fakepve to plan on.
struct Loop {
    d: Double,
    pve: FakePve,
    tmp: tempfile::TempDir,
    mono: PathBuf,
}

const PASSWORD: &str = "loop-pw-1";

impl Loop {
    fn new() -> Loop {
        let d = Double::start(Creds::basic("admin", PASSWORD));
        let pve = FakePve::start();
        pve.add_template();
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        let mono = r.join("mono");
        std::fs::create_dir_all(&mono).unwrap();
        git(&mono, &["init", "-q"]);
        write_files(&mono, &[("container.env", "ID=100\nIP=127.0.20.1/24\n"), ("base/tasks.yml", "- base\n")]);
        commit(&mono, "monorepo");
        for (i, name) in ["db", "web"].iter().enumerate() {
            let src = r.join("upstream").join(name);
            std::fs::create_dir_all(&src).unwrap();
            git(&src, &["init", "-q"]);
            write_files(&src, &[("container.env", &format!("ID={}\nIP=127.0.20.{}/24\n", 102 - i, 3 - i))]);
            commit(&src, &format!("{name}: first"));
            gitea::add_submodule(
                &mono,
                &src,
                &format!("libs/{name}"),
                &format!("https://git.example.invalid/org/{name}.git"),
            );
        }
        let l = Loop { d, pve, tmp, mono };
        l.publish();
        l
    }

    fn art(&self) -> PathBuf {
        self.tmp.path().join("artifacts")
    }

    fn gitea_env(&self) -> Vec<(String, String)> {
        vec![("LOGIN".into(), "admin".into()), ("PASSWORD".into(), PASSWORD.into()), ("HOST".into(), self.d.url())]
    }

    fn pve_env(&self) -> Vec<(String, String)> {
        let share = self.tmp.path().join("share");
        vec![
            ("PROXMOX_HOST".into(), "127.0.0.1".into()),
            ("PROXMOX_PORT".into(), self.pve.port.to_string()),
            ("PROXMOX_USER".into(), "root@pam".into()),
            ("PROXMOX_PASSWORD".into(), fakepve::PASSWORD.into()),
            ("PROXMOX_TEMPLATE".into(), fakepve::TEMPLATE.into()),
            ("PROXMOX_STORAGE".into(), "local".into()),
            ("PROXMOX_GATEWAY".into(), "127.0.20.254".into()),
            ("PROXMOX_SHARE".into(), s(&share).into()),
            ("PROXMOX_CA".into(), s(&self.pve.ca).into()),
        ]
    }

    fn publish(&self) {
        let env = self.gitea_env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let art = self.tmp.path().join("publish-artifacts");
        ok(&run(&["--repo", s(&self.mono), "--artifacts", s(&art), "publish", "--gitea", &self.d.url()], &env));
    }

    /// Sets `container.env` of lib `name` in its submodule, records it in the monorepo.
    fn change(&self, name: &str, env: &str) {
        let sub = self.mono.join("libs").join(name);
        write_files(&sub, &[("container.env", env)]);
        commit(&sub, &format!("{name}: change"));
        git(&self.mono, &["add", &format!("libs/{name}")]);
        git(&self.mono, &["commit", "-q", "-m", &format!("update libs/{name}")]);
    }

    /// A fresh checkout of the published monorepo's main with its submodules.
    fn checkout(&self, name: &str) -> PathBuf {
        let dir = self.tmp.path().join(name);
        let url = format!("{}/main/mono.git", self.d.url());
        git(self.tmp.path(), &["clone", "-q", "--recurse-submodules", &url, s(&dir)]);
        dir
    }

    /// Runs the binary in `checkout` with the PVE and Gitea settings, the monorepo and `env`.
    fn pgo(&self, checkout: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let mut all = self.pve_env();
        all.extend(self.gitea_env());
        all.push(("PROXMOX_GITOPS_MONOREPO".into(), "main/mono".into()));
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let art = self.art();
        let mut argv = vec!["--repo", s(checkout), "--artifacts", s(&art)];
        argv.extend_from_slice(args);
        run(&argv, &all)
    }

    fn report(&self) -> Value {
        read_json(&self.art().join("auto-merge.json"))
    }
}

/// `(repository, number, verdict, reason)` of each pull request in `auto-merge.json`.
fn verdicts(report: &Value) -> Vec<(String, i64, String, String)> {
    report["pulls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["repository"].as_str().unwrap().to_string(),
                p["number"].as_i64().unwrap(),
                p["verdict"].as_str().unwrap().to_string(),
                p["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row(repo: &str, n: i64, verdict: &str, reason: &str) -> (String, i64, String, String) {
    (repo.to_string(), n, verdict.to_string(), reason.to_string())
}

#[test]
fn auto_merge_merges_when_auto_deploy_is_true_and_no_recreate_is_refused() {
    let l = Loop::new();
    // Provision the stage as the first release did.
    let first = l.checkout("first");
    let out =
        l.pgo(&first, &["deploy", "--ref", "refs/heads/release", "--step", "provision", "--all", "--no-wait-ssh"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // web grows its memory (in place), db mounts the share (a privileged container: a recreate).
    l.change("web", "ID=101\nIP=127.0.20.2/24\nMEMORY=1024\n");
    l.change("db", "ID=102\nIP=127.0.20.3/24\nMOUNT=share\n");
    l.publish();
    let checkout = l.checkout("checkout");
    let release = |repo: &str| l.d.branch("main", repo, "release").unwrap();
    let main = |repo: &str| l.d.branch("main", repo, "main").unwrap();
    let (web_release, db_release, mono_release) = (release("web"), release("db"), release("mono"));
    l.pve.writes(true);

    // AUTO_DEPLOY unset: it says so, how to turn it on, and merges nothing.
    let out = l.pgo(&checkout, &["auto-merge"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "AUTO_DEPLOY is not true, so no pull request was merged. For the deploy task, turn it on with \
                                    `proxmox-gitops env set AUTO_DEPLOY true --org tasks`"
        ),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(l.report()["enabled"], false);
    let out = l.pgo(&checkout, &["auto-merge"], &[("AUTO_DEPLOY", "no")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!l.d.api_calls().iter().any(|c| c.contains("/merge")), "nothing was merged");
    assert_eq!(
        (release("web"), release("db"), release("mono")),
        (web_release.clone(), db_release.clone(), mono_release.clone())
    );

    // AUTO_DEPLOY=true: web's change applies in place and is merged; db's needs a recreate the
    // default policy refuses, so db and the monorepo (which deploys db too) wait.
    let summary = l.tmp.path().join("summary.md");
    let outputs = l.tmp.path().join("outputs.txt");
    let out = l.pgo(
        &checkout,
        &["auto-merge"],
        &[("AUTO_DEPLOY", "TRUE"), ("GITHUB_STEP_SUMMARY", s(&summary)), ("GITHUB_OUTPUT", s(&outputs))],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let refused = "db needs a recreate (unprivileged changes from 1 to 0), which the recreate policy `never` refuses: \
                   merge it by hand after a snapshot, or run with --recreate when-needed";
    assert_eq!(
        verdicts(&l.report()),
        vec![
            row("main/db", 1, "blocked", refused),
            row("main/web", 1, "merged", "web: update in place (memory)"),
            row("main/mono", 1, "blocked", &format!("its release deploys every container of the stage: {refused}")),
        ]
    );
    let merged = release("web");
    assert_eq!(show(&l.d, "web", "%P", &merged), format!("{web_release} {}", main("web")), "a merge commit");
    assert!(show(&l.d, "web", "%s", &merged).contains("by proxmox-gitops auto-merge"));
    assert_eq!(l.report()["pulls"][1]["merge_commit"], merged.as_str());
    assert_eq!((release("db"), release("mono")), (db_release.clone(), mono_release.clone()));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("REPOSITORY  PR  VERDICT  REASON\n"), "{stdout}");
    assert!(stdout.contains("3 pull request(s): 1 merged, 2 blocked, 0 failed (recreate policy never)"), "{stdout}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("| main/web | [#1](") && md.contains(") | merged | web: update in place (memory) |"), "{md}");
    let outs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outs.contains("merged=main/web#1\n") && outs.contains("blocked=main/db#1,main/mono#1\n"), "{outs}");

    // With the recreate allowed, db and then the monorepo are merged.
    let out = l.pgo(&checkout, &["auto-merge", "--recreate", "when-needed", "--json"], &[("AUTO_DEPLOY", "1")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report, l.report(), "--json prints the artifact");
    assert_eq!(
        verdicts(&report),
        vec![
            row(
                "main/db",
                1,
                "merged",
                "db: recreate, allowed by the recreate policy `when-needed` (unprivileged changes from 1 to 0)"
            ),
            row(
                "main/mono",
                1,
                "merged",
                "no container of the stage is refused (1 to recreate, 1 to update in place, 1 unchanged)"
            ),
        ]
    );
    assert_eq!(report["recreate"], "when-needed");
    assert_eq!(show(&l.d, "db", "%P", &release("db")), format!("{db_release} {}", main("db")));
    assert_eq!(show(&l.d, "mono", "%P", &release("mono")), format!("{mono_release} {}", main("mono")));
    // Libs before the monorepo; the merges moved release as pushes do.
    let merges: Vec<String> =
        l.d.pushes()
            .into_iter()
            .filter(|(_, via, _, _, _)| via == "merge")
            .map(|(repo, _, r, _, _)| format!("{repo} {r}"))
            .collect();
    assert_eq!(merges, ["main/web refs/heads/release", "main/db refs/heads/release", "main/mono refs/heads/release"]);
    let writes: Vec<(String, String, String)> =
        l.pve.writes(true).into_iter().filter(|(_, path, _)| path != "/access/ticket").collect();
    assert_eq!(writes, vec![], "planning only reads (a login aside)");

    // Nothing left to merge.
    let out = l.pgo(&checkout, &["auto-merge"], &[("AUTO_DEPLOY", "yes")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout)
            .contains("no open release pull request (main → release) in main/mono or its 2 lib repositories"),
        "{}",
        text(&out.stdout)
    );
    l.d.assert_spec_conformant();
}

/// Commits the root `container.env` of `checkout` as `env` and pushes it to `main` on the double.
fn push_main(l: &Loop, checkout: &Path, env: &str) -> String {
    write_files(checkout, &[("container.env", env)]);
    let head = commit(checkout, "control plane: memory");
    l.d.git_authed(checkout, &["push", "-q", "origin", "HEAD:main"]);
    head
}

/// The description of pull request `n` of the monorepo.
fn pull_body(l: &Loop, n: i64) -> String {
    runtime().block_on(l.d.client().get_pull("main", "mono", n)).unwrap().unwrap().body.unwrap_or_default()
}

#[test]
fn release_pr_opens_the_release_pull_request_with_the_plan_and_follows_main() {
    use proxmox_gitops::steps::release_pr::{KEEP_MARKER, MARKER};
    let l = Loop::new();
    let first = l.checkout("first");
    let out =
        l.pgo(&first, &["deploy", "--ref", "refs/heads/release", "--step", "provision", "--all", "--no-wait-ssh"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    l.pve.writes(true);
    let report = || read_json(&l.art().join("release-pr.json"));
    let writes = |l: &Loop| -> Vec<String> {
        l.d.api_calls()
            .into_iter()
            .filter(|c| c.starts_with("POST /repos/main/mono/pulls") || c.starts_with("PATCH /repos/main/mono/pulls"))
            .collect()
    };

    // Published: main is release. Nothing to open, and it says so.
    let out = l.pgo(&first, &["release-pr"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "main/mono: no release pull request needed\nmain has no commit that release lacks: nothing to release\n\
             wrote {}\n",
            l.art().join("release-pr.json").display()
        )
    );
    assert_eq!(report()["action"], "none");
    assert_eq!(writes(&l), Vec::<String>::new());

    // main moves (the control plane gets more memory): the release pull request opens with the plan.
    let planned = push_main(&l, &first, "ID=100\nIP=127.0.20.1/24\nMEMORY=1024\n");
    let summary = l.tmp.path().join("summary.md");
    let outputs = l.tmp.path().join("outputs.txt");
    let out = l.pgo(&first, &["release-pr"], &[("GITHUB_STEP_SUMMARY", s(&summary)), ("GITHUB_OUTPUT", s(&outputs))]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let url = format!("{}/main/mono/pulls/1", l.d.url());
    let mut r = report();
    r.as_object_mut().unwrap().retain(|k, _| !["kind", "schema_version"].contains(&k.as_str()));
    assert_eq!(
        r,
        json!({
            "repository": "main/mono", "action": "opened", "number": 1, "url": url, "head": planned,
            "planned": planned, "ahead": 1, "note": null,
        })
    );
    let body = pull_body(&l, 1);
    assert!(body.starts_with(&format!("{MARKER}\n## Release plan\n")), "{body}");
    assert!(body.contains("### Plan: `refs/heads/release` (stage main)"), "{body}");
    assert!(body.contains("| MEMORY 512 → 1024 |"), "{body}");
    assert!(body.contains(&format!("Planned at commit `{planned}` of `main` against the live pve backend")), "{body}");
    assert!(body.ends_with(&format!("{KEEP_MARKER}\n")), "{body}");
    let pr = runtime().block_on(l.d.client().get_pull("main", "mono", 1)).unwrap().unwrap();
    assert_eq!(
        (pr.title.as_str(), pr.head.ref_.as_str(), pr.base.ref_.as_str()),
        ("Release Pull Request", "main", "release")
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains(&format!(
            "Release pull request [#1]({url}) opened with the plan of `main` at `{}`.",
            &planned[..12]
        )),
        "{md}"
    );
    let outs = std::fs::read_to_string(&outputs).unwrap();
    assert!(
        outs.contains(&format!("pull_url={url}\n"))
            && outs.contains("pull_number=1\n")
            && outs.contains("pull_action=opened\n"),
        "{outs}"
    );

    // Again: the same plan, nothing written.
    let before = writes(&l);
    let out = l.pgo(&first, &["release-pr"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("release pull request main/mono#1 ({url}): unchanged")),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(writes(&l), before, "a re-run changes nothing");

    // A reviewer's note below the keep line; main moves again: the plan is replaced, the note kept.
    let noted = format!("{body}Deploy after 18:00.\n");
    let opt = proxmox_gitops::gitea::EditPullRequestOption { body: Some(noted), ..Default::default() };
    runtime().block_on(l.d.client().edit_pull("main", "mono", 1, &opt)).unwrap();
    let planned = push_main(&l, &first, "ID=100\nIP=127.0.20.1/24\nMEMORY=2048\n");
    let out = l.pgo(&first, &["release-pr", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, report(), "--json prints the artifact");
    assert_eq!((printed["action"].as_str(), printed["ahead"].as_i64()), (Some("updated"), Some(2)));
    let body = pull_body(&l, 1);
    assert!(body.contains("| MEMORY 512 → 2048 |") && !body.contains("→ 1024"), "{body}");
    assert!(body.contains(&format!("Planned at commit `{planned}`")), "{body}");
    assert!(body.ends_with(&format!("{KEEP_MARKER}\nDeploy after 18:00.\n")), "{body}");

    // Merged: release holds main; nothing is opened again.
    let merge =
        MergePullRequestOption { head_commit_id: Some(planned), ..MergePullRequestOption::new(MergeStyle::Merge) };
    runtime().block_on(l.d.client().merge_pull("main", "mono", 1, &merge)).unwrap();
    let before = writes(&l);
    let out = l.pgo(&first, &["release-pr"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(report()["action"], "none");
    assert_eq!(writes(&l), before);
    let pve_writes: Vec<(String, String, String)> =
        l.pve.writes(true).into_iter().filter(|(_, path, _)| path != "/access/ticket").collect();
    assert_eq!(pve_writes, vec![], "planning only reads (a login aside)");
    l.d.assert_spec_conformant();
}

#[test]
fn release_pr_needs_the_monorepo_and_its_branches() {
    let l = Loop::new();
    let checkout = l.checkout("checkout");
    let out = l.pgo(&checkout, &["release-pr"], &[("PROXMOX_GITOPS_MONOREPO", ""), ("GITHUB_REPOSITORY", "")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("which monorepo? pass --monorepo OWNER/REPO"), "{}", text(&out.stderr));
    let out = l.pgo(&checkout, &["release-pr", "--monorepo", "main/nope"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("main/nope on Gitea has no branch `main` or `release` (or does not exist): run `proxmox-gitops publish` first"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
    l.d.assert_spec_conformant();
}

#[test]
fn auto_merge_blocks_a_stale_checkout_and_reports_a_failed_merge() {
    let l = Loop::new();
    let stale = l.checkout("stale");
    l.change("web", "ID=101\nIP=127.0.20.2/24\nMEMORY=1024\n");
    l.change("db", "ID=102\nIP=127.0.20.3/24\nCORES=2\n");
    l.publish();
    let release = |repo: &str| l.d.branch("main", repo, "release").unwrap();
    let before = (release("web"), release("db"), release("mono"));

    // A checkout older than the pull requests: its plan is not of what would be merged.
    let out = l.pgo(&stale, &["auto-merge", "--dry-run"], &[("AUTO_DEPLOY", "true")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = verdicts(&l.report());
    assert_eq!(v.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(), ["blocked", "blocked", "blocked"]);
    assert!(v[0].3.starts_with("the pull request's head is ") && v[0].3.contains("libs/db at"), "{v:?}");

    // Someone pushed to db's release what conflicts with its main.
    let w = l.tmp.path().join("db-release");
    git(l.tmp.path(), &["clone", "-q", "-b", "release", &format!("{}/main/db.git", l.d.url()), s(&w)]);
    write_files(&w, &[("container.env", "ID=102\nIP=127.0.20.3/24\nCORES=4\n")]);
    commit(&w, "hotfix on release");
    l.d.git_authed(&w, &["push", "-q", "origin", "release"]);
    let db_release = release("db");

    let checkout = l.checkout("checkout");
    let out = l.pgo(&checkout, &["auto-merge", "--dry-run"], &[("AUTO_DEPLOY", "true")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        verdicts(&l.report()),
        vec![
            row("main/db", 1, "would-merge", "db: create"),
            row("main/web", 1, "would-merge", "web: create"),
            row("main/mono", 1, "would-merge", "no container of the stage is refused (3 to create)"),
        ]
    );
    assert_eq!((release("web"), release("mono")), (before.0.clone(), before.2.clone()), "a dry run merges nothing");

    // db's merge fails (as Gitea: 405 for a conflict, waited out for PGO_MERGE_WAIT, then named
    // a conflict); web is merged; the monorepo waits for db; exit 1.
    let out = l.pgo(&checkout, &["auto-merge"], &[("AUTO_DEPLOY", "true"), ("PGO_MERGE_WAIT", "1")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let conflict = "Gitea POST /repos/main/db/pulls/1/merge: HTTP 405: Please try again later (pull request #1 (main → \
                    release) is still not mergeable after N attempts over S s: Gitea's check finds a conflict between \
                    the branches; merge `release` into `main` (or rebase it) and push)";
    let report: Vec<_> = verdicts(&l.report())
        .into_iter()
        .map(|(repo, n, verdict, reason)| (repo, n, verdict, waited(&reason)))
        .collect();
    assert_eq!(
        report,
        vec![
            row("main/db", 1, "failed", conflict),
            row("main/web", 1, "merged", "web: create"),
            row(
                "main/mono",
                1,
                "blocked",
                "the release pull request of main/db failed to merge in this run; the monorepo's release would deploy \
                 what that release branch lacks"
            ),
        ]
    );
    assert_eq!(l.report()["result"], "failed");
    assert!(
        waited(&text(&out.stderr)).contains(&format!("error: 1 merge(s) failed:\nmain/db#1: {conflict}")),
        "{}",
        text(&out.stderr)
    );
    assert_eq!((release("db"), release("mono")), (db_release, before.2.clone()));
    assert_ne!(release("web"), before.0);
    // No secret in the report or the output.
    for t in [text(&out.stdout), text(&out.stderr), std::fs::read_to_string(l.art().join("auto-merge.json")).unwrap()] {
        assert!(!t.contains(PASSWORD) && !t.contains(fakepve::PASSWORD), "{t}");
    }
    l.d.assert_spec_conformant();
}

#[test]
fn auto_merge_needs_to_know_the_monorepo_and_its_settings() {
    let l = Loop::new();
    let checkout = l.checkout("checkout");
    let all = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        let mut v = vec![("AUTO_DEPLOY", "true")];
        v.extend_from_slice(extra);
        v
    };
    let out = l.pgo(&checkout, &["auto-merge"], &all(&[("PROXMOX_GITOPS_MONOREPO", "")]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("which monorepo? (the task workflow sets PROXMOX_GITOPS_MONOREPO); "),
        "{}",
        text(&out.stderr)
    );
    let out = l.pgo(&checkout, &["auto-merge", "--monorepo", "a/b/c"], &all(&[]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected OWNER/REPO, found `a/b/c`"), "{}", text(&out.stderr));
    let out = l.pgo(&checkout, &["auto-merge"], &all(&[("PROXMOX_GITOPS_RECREATE", "sometimes")]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "environment (PROXMOX_GITOPS_RECREATE): expected one of never, when-needed, always, found `sometimes`"
        ),
        "{}",
        text(&out.stderr)
    );
    // An empty policy variable (an unset Actions variable) means the default; nothing is open.
    let out =
        l.pgo(&checkout, &["auto-merge"], &all(&[("PROXMOX_GITOPS_RECREATE", ""), ("PROXMOX_GITOPS_BACKEND", "")]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(l.report()["recreate"], "never");
}

// ------------------------------------------------------------------------ deploy: outputs → variables

mod outputs {
    use super::*;
    use pretty_assertions::assert_eq;
    use proxmox_gitops::artifact::ArtifactDir;
    use proxmox_gitops::inventory::ContainerSpec;
    use proxmox_gitops::model::BackendKind;
    use proxmox_gitops::steps::deploy::{
        DeployOptions, OutputVariables, StepContext, StepResult, StepRunner, StepSuccess, deploy, step_artifact,
    };
    use proxmox_gitops::steps::plan::Step;

    /// A configure that succeeds and writes `outputs` (per container) into its artifact, as the
    /// real one does with what the lib wrote to `$PGO_OUTPUT`.
    struct Configure {
        outputs: Value,
        target: OutputVariables,
    }

    impl StepRunner for Configure {
        async fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
            let path = step_artifact(&ctx.artifacts, step, &spec.name);
            let body = json!({
                "kind": "configure", "schema_version": "1.0", "name": spec.name, "inputs_digest": ctx.digest,
                "result": "ok", "actions": [], "outputs": self.outputs.get(&spec.name).cloned().unwrap_or(json!({})),
            });
            proxmox_gitops::artifact::write_bytes(&path, body.to_string().as_bytes()).unwrap();
            Ok(StepSuccess { artifact: Some(path) })
        }

        fn output_variables(&self) -> Option<&OutputVariables> {
            Some(&self.target)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deploy_sets_configure_outputs_as_variables_of_the_lib_repository() {
        let d = Double::start(Creds::basic("admin", "outputs-pw-1"));
        let c = d.client();
        c.create_org(&CreateOrgOption { username: "main".into(), ..Default::default() }).await.unwrap();
        c.create_org_repo("main", &CreateRepoOption { name: "web".into(), ..Default::default() }).await.unwrap();
        // A monorepo whose libs are submodules published on the double (`db` is not there).
        let tmp = tempfile::tempdir().unwrap();
        let mono = tmp.path().join("mono");
        std::fs::create_dir_all(&mono).unwrap();
        git(&mono, &["init", "-q"]);
        write_files(&mono, &[("container.env", "ID=100\nIP=127.0.20.1/24\n")]);
        commit(&mono, "monorepo");
        for (name, id) in [("web", 101), ("db", 102)] {
            let src = tmp.path().join(name);
            std::fs::create_dir_all(&src).unwrap();
            git(&src, &["init", "-q"]);
            write_files(&src, &[("container.env", &format!("ID={id}\nIP=127.0.20.{}/24\n", id - 99))]);
            commit(&src, "first");
            gitea::add_submodule(&mono, &src, &format!("libs/{name}"), &format!("{}/main/{name}.git", d.url()));
        }
        let runner = Arc::new(Configure {
            outputs: json!({"web": {"WEB_PORT": "8080", "WEB_URL": "http://web:8080"}, "db": {"DB_PORT": 5432},
                            "config": {"CP": "x"}}),
            target: OutputVariables { client: c.clone(), org: "main".into() },
        });
        let opts = DeployOptions {
            repo: mono.clone(),
            artifacts: ArtifactDir::new(tmp.path().join("artifacts")),
            git_ref: "refs/heads/main".into(),
            steps: vec![],
            containers: vec![],
            force: false,
            jobs: 2,
            backend: BackendKind::Lxc,
            run_id: None,
        };
        let inv = support::deploy::inventory(&mono);
        let summary = deploy(runner.clone(), inv.clone(), &opts).await.unwrap();
        assert_eq!(summary.failed(), Vec::<&str>::new(), "a variable that cannot be set does not fail the deploy");
        let web = VariableScope::Repo { owner: "main".into(), repo: "web".into() };
        let vars: Vec<(String, String)> =
            c.list_variables(&web).await.unwrap().into_iter().map(|v| (v.name, v.data)).collect();
        assert_eq!(vars, [("WEB_PORT".to_string(), "8080".to_string()), ("WEB_URL".into(), "http://web:8080".into())]);
        let record = read_json(&tmp.path().join("artifacts/deploy.json"));
        let variables = |name: &str| {
            record["containers"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["variables"].clone()
        };
        assert_eq!(
            variables("web"),
            json!({"repository": "main/web", "variables": [{"name": "WEB_PORT", "action": "created"},
                   {"name": "WEB_URL", "action": "created"}], "warning": null})
        );
        let db = variables("db");
        assert_eq!((db["repository"].clone(), db["variables"].clone()), (json!("main/db"), json!([])));
        let warning = db["warning"].as_str().unwrap();
        assert!(
            warning.starts_with("outputs not set as variables of repo main/db: DB_PORT: Gitea POST /repos/main/db/actions/variables/DB_PORT: HTTP 404"),
            "{warning}"
        );
        assert_eq!(variables("config"), Value::Null, "the control plane has no repository of its own");

        // Run again: configure is skipped (same inputs) and the variables are checked, not rewritten.
        let writes = d.api_calls().iter().filter(|c| !c.starts_with("GET ")).count();
        deploy(runner, inv, &opts).await.unwrap();
        let record = read_json(&tmp.path().join("artifacts/deploy.json"));
        let web = record["containers"].as_array().unwrap().iter().find(|c| c["name"] == "web").unwrap().clone();
        assert_eq!(web["skipped_steps"], json!(["configure"]));
        assert_eq!(
            web["variables"]["variables"],
            json!([{"name": "WEB_PORT", "action": "unchanged"}, {"name": "WEB_URL", "action": "unchanged"}])
        );
        let writes_after = d.api_calls().iter().filter(|c| !c.starts_with("GET ")).count();
        assert_eq!(writes_after - writes, 1, "only db's (failing) create is tried again");
        d.assert_spec_conformant();
    }
}
