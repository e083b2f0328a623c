//! `rewrite`, `publish` and `env` against the stateful Gitea double (real git over smart HTTP).
//!
//! Run: `cargo test --test suite gitea_publish::` (needs python3 with `jsonschema`, and git).

use crate::support;

use std::path::Path;

use pretty_assertions::assert_eq;
use proxmox_gitops::settings::CheckoutAction;
use proxmox_gitops::workflows;
use serde_json::{Value, json};
use support::git::git;
use support::gitea::{self, Creds, Double, FIXTURE_URLS, fixture, ok, run};

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn spec_covers_every_route_the_double_serves() {
    let out = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gitea_double/check_spec.py"))
        .arg(gitea::spec_path())
        .arg("routes")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "31 routes checked");
}

#[test]
fn rewrite_every_url_form_recursively() {
    let fx = fixture();
    let art = fx.artifacts();
    let before_status = git(&fx.mono, &["status", "--porcelain", "--ignore-submodules=none"]);
    let before_head = git(&fx.mono, &["rev-parse", "HEAD"]);
    let before_gitmodules = std::fs::read_to_string(fx.mono.join(".gitmodules")).unwrap();

    let args = [
        "--repo",
        s(&fx.mono),
        "--artifacts",
        s(&art),
        "rewrite",
        "--gitea",
        "http://127.0.0.1:9/gitea/",
        "--org",
        "main",
    ];
    ok(&run(&args, &[]));
    let remotes = read_json(&art.join("remotes.json"));
    let workdir = art.join("worktree");
    assert_eq!(remotes["kind"], "remotes");
    assert_eq!(remotes["gitea"], "http://127.0.0.1:9/gitea");
    assert_eq!(remotes["workdir"], s(&workdir));

    // Every module, parents before children, with the rewritten URL.
    let new = |n: &str| format!("http://127.0.0.1:9/gitea/main/{n}.git");
    let got: Vec<Value> = remotes["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["path"], m["name"], m["repo"], m["old_url"], m["new_url"], m["converted"], m["parent"]]))
        .collect();
    let mut want = vec![
        json!(["config/libraries", "config/libraries", "libraries", null, new("libraries"), true, null]),
        json!(["libs/plain", "libs/plain", "plain", null, new("plain"), true, null]),
        // a task lives in the org `tasks`, as in the seed
        json!([
            "tasks/nightly",
            "tasks/nightly",
            "nightly",
            null,
            "http://127.0.0.1:9/gitea/tasks/nightly.git",
            true,
            null
        ]),
    ];
    for (path, url) in FIXTURE_URLS {
        let name = path.rsplit('/').next().unwrap();
        want.push(json!([path, path, name, url, new(name), false, null]));
        if *path == "libs/e" {
            want.push(json!(["libs/e/vendor/f", "vendor/f", "f", "../../f.git//", new("f"), false, "libs/e"]));
            want.push(json!([
                "libs/e/vendor/f/deep/g",
                "deep/g",
                "g",
                "http://git.example.invalid:3000/x/g",
                new("g"),
                false,
                "libs/e/vendor/f"
            ]));
        }
    }
    assert_eq!(got, want);

    // Commits: what the working copy has checked out, recorded by each parent.
    for m in remotes["modules"].as_array().unwrap() {
        let path = m["path"].as_str().unwrap();
        assert_eq!(m["commit"].as_str().unwrap(), git(&workdir.join(path), &["rev-parse", "HEAD"]), "{path}");
        let (parent_dir, rel) = match m["parent"].as_str() {
            Some(p) => (workdir.join(p), path.strip_prefix(&format!("{p}/")).unwrap().to_string()),
            None => (workdir.clone(), path.to_string()),
        };
        let ls = git(&parent_dir, &["ls-tree", "HEAD", "--", &rel]);
        assert!(ls.starts_with(&format!("160000 commit {}", m["commit"].as_str().unwrap())), "{path}: {ls}");
        let url = git(
            &parent_dir,
            &["config", "-f", ".gitmodules", &format!("submodule.{}.url", m["name"].as_str().unwrap())],
        );
        assert_eq!(url, m["new_url"].as_str().unwrap());
        if !m["converted"].as_bool().unwrap() {
            // Leaves that are no top-level lib (base, g) keep their commit; e and f get a
            // [skip ci] rewrite commit; each top-level lib (a–e) gets its pipeline installed.
            let src = git(&fx.mono.join(path), &["rev-parse", "HEAD"]);
            assert_eq!(m["source_commit"].as_str().unwrap(), src, "{path}");
            let point = "Point submodules at http://127.0.0.1:9/gitea/main [skip ci]";
            let install = "Install .gitea/workflows/pipeline.yml [skip ci]";
            let want: Vec<&str> = match path {
                "libs/e" => vec![install, point],
                "libs/e/vendor/f" => vec![point],
                "base" | "libs/e/vendor/f/deep/g" => vec![],
                _ => vec![install],
            };
            let log = git(&workdir.join(path), &["log", "--format=%s", &format!("{src}..HEAD")]);
            assert_eq!(log.lines().collect::<Vec<_>>(), want, "{path}");
        }
        // The workflows installed per repository: libs their pipeline, tasks their task.yml.
        let want_workflows = if path.starts_with("libs/") && m["parent"].is_null() {
            json!([".gitea/workflows/pipeline.yml"])
        } else if path.starts_with("tasks/") {
            json!([".gitea/workflows/task.yml"])
        } else {
            Value::Null
        };
        assert_eq!(m["workflows"], want_workflows, "{path}");
    }
    // The plain directory became its own repository with the directory's content, and its
    // pipeline on top.
    let plain = workdir.join("libs/plain");
    assert_eq!(git(&plain, &["ls-tree", "-r", "--name-only", "HEAD"]), ".gitea/workflows/pipeline.yml\ncontainer.env");
    assert_eq!(
        git(&plain, &["log", "--format=%s"]),
        "Install .gitea/workflows/pipeline.yml [skip ci]\nImport libs/plain from mono [skip ci]"
    );
    let pipeline = std::fs::read_to_string(plain.join(".gitea/workflows/pipeline.yml")).unwrap();
    assert!(
        pipeline.contains("container: \"plain\"") && pipeline.contains("PGO_CHECKOUT_REPOSITORY: \"main/mono\""),
        "{pipeline}"
    );
    let task = workdir.join("tasks/nightly");
    assert_eq!(git(&task, &["ls-tree", "-r", "--name-only", "HEAD"]), ".gitea/workflows/task.yml\nrun.sh");
    assert_eq!(
        git(&task, &["log", "--format=%s"]),
        "Install .gitea/workflows/task.yml [skip ci]\nImport tasks/nightly from mono [skip ci]"
    );
    let task_yml = std::fs::read_to_string(task.join(".gitea/workflows/task.yml")).unwrap();
    assert!(
        task_yml.contains("- cron: \"0 3 * * *\"") && task_yml.contains("PGO_TASK_SCRIPT: \"tasks/nightly/run.sh\"")
    );
    assert_eq!(git(&workdir.join("config/libraries"), &["ls-tree", "--name-only", "HEAD"]), "common.sh");
    assert_eq!(remotes["monorepo"]["repo"], "mono");
    assert_eq!(remotes["monorepo"]["source_commit"].as_str().unwrap(), before_head);
    assert_eq!(remotes["monorepo"]["commit"].as_str().unwrap(), git(&workdir, &["rev-parse", "HEAD"]));
    assert_eq!(
        git(&workdir, &["log", "-2", "--format=%s"]),
        "Install the proxmox-gitops workflows [skip ci]\nPoint submodules at http://127.0.0.1:9/gitea/main [skip ci]"
    );
    // The monorepo's workflows: this repository's (the fixture has no workflows/ of its own).
    assert_eq!(
        remotes["monorepo"]["workflows"],
        json!([".gitea/workflows/pipeline.yml", ".gitea/workflows/snapshot.yml", ".gitea/workflows/drift.yml"])
    );
    for f in ["pipeline.yml", "snapshot.yml", "drift.yml"] {
        assert_eq!(
            std::fs::read_to_string(workdir.join(".gitea/workflows").join(f)).unwrap(),
            installed_workflow(f),
            "{f}"
        );
    }

    // The user's checkout is untouched.
    assert_eq!(git(&fx.mono, &["status", "--porcelain", "--ignore-submodules=none"]), before_status);
    assert_eq!(git(&fx.mono, &["rev-parse", "HEAD"]), before_head);
    assert_eq!(std::fs::read_to_string(fx.mono.join(".gitmodules")).unwrap(), before_gitmodules);

    // Deterministic: the same input gives the same commits (and replaces the working copy).
    ok(&run(&args, &[]));
    assert_eq!(read_json(&art.join("remotes.json")), remotes);
}

#[test]
fn rewrite_refuses_collisions_missing_checkouts_and_the_checkout_as_workdir() {
    let fx = fixture();
    let art = fx.artifacts();
    // A second repository named `a` with other content.
    let other = gitea::upstream(fx.root.path(), "other-a");
    gitea::add_submodule(&fx.mono, &other, "tools/a", "https://git.example.invalid/tools/a.git");
    let out = run(&["--repo", s(&fx.mono), "--artifacts", s(&art), "rewrite", "--gitea", "http://127.0.0.1:9"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tools/a: repository name `a` collides with `libs/a` (http://192.0.2.10/org/a.git)"), "{err}");
    assert!(!art.join("remotes.json").exists());
    assert!(!art.join("worktree").exists(), "nothing half-written");

    // A submodule that is not checked out is named, with the fix.
    let fx = fixture();
    std::fs::remove_dir_all(fx.mono.join("libs/e/vendor/f")).unwrap();
    std::fs::create_dir(fx.mono.join("libs/e/vendor/f")).unwrap();
    let out = run(&["--repo", s(&fx.mono), "--artifacts", s(&art), "rewrite", "--gitea", "http://127.0.0.1:9"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("libs/e/vendor/f: submodule is not checked out"), "{err}");
    assert!(err.contains("git submodule update --init --recursive"), "{err}");

    // The checkout itself is never the working copy.
    let out = run(&["--repo", s(&fx.mono), "rewrite", "--gitea", "http://127.0.0.1:9", "--workdir", s(&fx.mono)], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must not be the checkout"));
    // Nor a foreign non-empty directory.
    let foreign = fx.root.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("keep"), "x").unwrap();
    let out = run(&["--repo", s(&fx.mono), "rewrite", "--gitea", "http://127.0.0.1:9", "--workdir", s(&foreign)], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(foreign.join("keep").exists());
}

fn publish(fx: &gitea::Fixture, d: &Double, extra: &[&str]) -> Value {
    let pw = d.creds.password.clone().unwrap();
    ok(&run_publish(fx, &d.url(), extra, &[("LOGIN", d.creds.login.as_str()), ("PASSWORD", pw.as_str())]));
    read_json(&fx.artifacts().join("publish.json"))
}

/// Runs `publish` of `fx` (its artifacts in [`gitea::Fixture::artifacts`]) to the Gitea at `url`,
/// with `extra` arguments and `env` (the credentials); returns the output, whatever the exit
/// status.
fn run_publish(fx: &gitea::Fixture, url: &str, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let art = fx.artifacts();
    let mut args = vec!["--repo", s(&fx.mono), "--artifacts", s(&art), "publish", "--gitea", url];
    args.extend_from_slice(extra);
    // The record of written secrets in the fixture (publish keeps it beside its other local state).
    let cache = cache_home(fx);
    let mut env = env.to_vec();
    if env.iter().all(|(k, _)| *k != "XDG_CACHE_HOME") {
        env.push(("XDG_CACHE_HOME", s(&cache)));
    }
    run(&args, &env)
}

/// The `XDG_CACHE_HOME` publish runs with in the tests (under the fixture's root).
fn cache_home(fx: &gitea::Fixture) -> std::path::PathBuf {
    fx.root.path().join("cache")
}

/// How many pushes (`git-receive-pack` requests) the double received.
fn pushes(d: &Double) -> usize {
    d.exchanges()
        .iter()
        .filter(|e| {
            e["kind"] == "git" && e["method"] == "POST" && e["path"].as_str().unwrap().ends_with("/git-receive-pack")
        })
        .count()
}

/// The commit `remotes.json` of the last rewrite of `fx` records for the module at `path`.
fn module_commit(fx: &gitea::Fixture, path: &str) -> String {
    let remotes = read_json(&fx.artifacts().join("remotes.json"));
    let m = remotes["modules"].as_array().unwrap().iter().find(|m| m["path"] == path).unwrap().clone();
    m["commit"].as_str().unwrap().to_string()
}

/// `(full_name, repo action, [(branch, action)], fork action, pull)` per repository.
fn shape(report: &Value) -> Vec<Value> {
    report["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let refs: Vec<Value> =
                r["refs"].as_array().unwrap().iter().map(|x| json!([x["branch"], x["action"]])).collect();
            json!([r["full_name"], r["action"], refs, r["fork"]["action"], r["pull"]])
        })
        .collect()
}

#[test]
fn publish_from_scratch_again_and_after_a_change() {
    let fx = fixture();
    let d = Double::start(Creds::basic("admin", "double-pw-1"));

    // 1. From scratch.
    let r1 = publish(&fx, &d, &[]);
    let created = |fork: bool| {
        let refs = json!([["main", "created"], ["release", "created"], ["snapshot", "created"]]);
        (refs, if fork { json!("created") } else { Value::Null })
    };
    let mut want = Vec::new();
    // deepest first, the monorepo last
    for (name, fork) in [
        ("g", false),
        ("f", false),
        ("libraries", false),
        ("plain", true),
        ("nightly", false),
        ("a", true),
        ("b", true),
        ("c", true),
        ("d", true),
        ("e", true),
        ("base", false),
        ("mono", true),
    ] {
        let (refs, f) = created(fork);
        let pull = if fork { json!({"number": null, "action": "unchanged"}) } else { Value::Null };
        let org = if name == "nightly" { "tasks" } else { "main" };
        want.push(json!([format!("{org}/{name}"), "created", refs, f, pull]));
    }
    assert_eq!(shape(&r1), want);
    assert_eq!(
        r1["orgs"],
        json!([{"name": "main", "action": "created"}, {"name": "stage", "action": "created"}, {"name": "tasks", "action": "created"}])
    );
    // orgs, repos, refs, forks; the settings: HOST and LOGIN in three orgs, the secret PASSWORD
    // in three orgs.
    assert_eq!(r1["summary"], json!({"created": 3 + 12 + 36 + 7 + 6 + 3, "updated": 12, "unchanged": 7}));
    let remotes = read_json(&fx.artifacts().join("remotes.json"));
    let mono_commit = remotes["monorepo"]["commit"].as_str().unwrap().to_string();
    for b in ["main", "release", "snapshot"] {
        assert_eq!(d.branch("main", "mono", b).as_deref(), Some(mono_commit.as_str()), "{b}");
    }
    assert_eq!(d.branch("main", "mono", "rollback"), None);
    assert_eq!(d.branch("stage", "mono", "main").as_deref(), Some(mono_commit.as_str()), "the fork holds main");
    assert!(!d.bare("stage", "g").exists(), "nested non-lib repos are not forked");
    assert!(!d.bare("stage", "nightly").exists(), "tasks are not forked");
    // A clone of the published monorepo resolves every submodule from the double.
    let clone = fx.root.path().join("clone");
    git(fx.root.path(), &["clone", "-q", "--recurse-submodules", &format!("{}/main/mono.git", d.url()), s(&clone)]);
    assert_eq!(std::fs::read_to_string(clone.join("libs/e/vendor/f/deep/g/README")).unwrap(), "g\n");
    assert_eq!(std::fs::read_to_string(clone.join("libs/plain/container.env")).unwrap(), "ID=150\nIP=dhcp\n");
    assert!(std::fs::read_to_string(clone.join("tasks/nightly/run.sh")).unwrap().contains("echo nightly"));
    assert_eq!(git(&clone, &["ls-tree", "HEAD", "--", "tasks/nightly"]).split_whitespace().nth(1), Some("commit"));

    // 2. Again: nothing changes, no write call is made.
    let calls_before = d.api_calls().len();
    let r2 = publish(&fx, &d, &[]);
    assert_eq!(r2["summary"]["created"], 0);
    assert_eq!(r2["summary"]["updated"], 0);
    let writes: Vec<String> =
        d.api_calls()[calls_before..].iter().filter(|c| !c.starts_with("GET ")).cloned().collect();
    assert_eq!(writes, Vec::<String>::new());
    assert_eq!(pushes(&d), 12, "one push per repository, all in the first publish");

    // 3. After a change in lib a: rollback holds the old head, a release PR opens.
    let old_a = d.branch("main", "a", "main").unwrap();
    let old_mono = d.branch("main", "mono", "main").unwrap();
    let new_a_source = fx.change_lib("libs/a", "v2");
    let r3 = publish(&fx, &d, &[]);
    // What is published is the lib's commit with its pipeline installed on top.
    let new_a = module_commit(&fx, "libs/a");
    assert_eq!(git(&d.bare("main", "a"), &["rev-parse", &format!("{new_a}^")]), new_a_source);
    // main is that commit over the previous main (rewrite made it anew, so it does not contain
    // the old one): same tree, parents old main and the new commit, so that the release pull
    // request (release is at the old main) merges without conflicts.
    let main_a = d.branch("main", "a", "main").unwrap();
    let bare_a = d.bare("main", "a");
    assert_eq!(
        git(&bare_a, &["rev-parse", &format!("{main_a}^{{tree}}")]),
        git(&bare_a, &["rev-parse", &format!("{new_a}^{{tree}}")])
    );
    assert_eq!(
        git(&bare_a, &["rev-parse", &format!("{main_a}^1"), &format!("{main_a}^2")]),
        format!("{old_a}\n{new_a}")
    );
    let main_mono = d.branch("main", "mono", "main").unwrap();
    assert_eq!(git(&d.bare("main", "mono"), &["rev-parse", &format!("{main_mono}^1")]), old_mono);
    assert_eq!(d.branch("main", "a", "rollback").as_deref(), Some(old_a.as_str()));
    assert_eq!(d.branch("main", "a", "release").as_deref(), Some(old_a.as_str()), "release moves only by the PR");
    assert_eq!(d.branch("main", "mono", "rollback").as_deref(), Some(old_mono.as_str()));
    let changed: Vec<Value> = shape(&r3)
        .into_iter()
        .filter(|r| r[1] != "unchanged" || r[2].as_array().unwrap().iter().any(|x| x[1] != "unchanged"))
        .collect();
    let upd = json!([["rollback", "created"], ["main", "updated"], ["release", "unchanged"], ["snapshot", "updated"]]);
    assert_eq!(
        changed,
        vec![
            json!(["main/a", "unchanged", upd, "updated", {"number": 1, "action": "created"}]),
            json!(["main/mono", "unchanged", upd, "updated", {"number": 1, "action": "created"}]),
        ]
    );
    // The stage forks followed main, though the rewritten monorepo's history is not a
    // fast-forward (its tool commit is made anew on the new HEAD).
    assert_eq!(d.branch("stage", "a", "main").as_deref(), Some(main_a.as_str()));
    assert_eq!(d.branch("stage", "mono", "main"), d.branch("main", "mono", "main"));
    let pulls: Vec<Value> = d
        .exchanges()
        .into_iter()
        .filter(|e| e["method"] == "POST" && e["template"] == "/repos/{owner}/{repo}/pulls")
        .map(|e| json!([e["path"], e["status"], e["request"]]))
        .collect();
    let body = json!({"head": "main", "base": "release", "title": "Release Pull Request", "body": "Created automatically for deployment by proxmox-gitops publish."});
    // Opened right after the push: as Gitea, the double may answer 404 until it has recorded the
    // pushed branch, and publish tries again.
    let (opened, not_yet): (Vec<Value>, Vec<Value>) = pulls.into_iter().partition(|p| p[1] == 201);
    assert_eq!(opened, vec![json!(["/repos/main/a/pulls", 201, body]), json!(["/repos/main/mono/pulls", 201, body])]);
    assert!(not_yet.iter().all(|p| p[1] == 404 && p[2] == body), "{not_yet:?}");

    // 4. Another change while the PR is open: the PR is not opened twice; rollback moves. The
    //    stage fork of `a` got a commit of its own meanwhile: it is left alone, with a note.
    let a2 = d.branch("main", "a", "main").unwrap();
    let stage_clone = fx.root.path().join("stage-a");
    git(fx.root.path(), &["clone", "-q", d.bare("stage", "a").to_str().unwrap(), s(&stage_clone)]);
    std::fs::write(stage_clone.join("STAGE"), "stage only\n").unwrap();
    git(&stage_clone, &["add", "STAGE"]);
    git(&stage_clone, &["commit", "-q", "-m", "stage only"]);
    git(&stage_clone, &["push", "-q", "origin", "HEAD:main"]);
    let stage_head = git(&stage_clone, &["rev-parse", "HEAD"]);
    fx.change_lib("libs/a", "v3");
    let r4 = publish(&fx, &d, &[]);
    let a = &r4["repos"].as_array().unwrap().iter().find(|r| r["full_name"] == "main/a").unwrap().clone();
    assert_eq!(a["pull"], json!({"number": 1, "action": "unchanged"}));
    assert_eq!(a["refs"][0], json!({"branch": "rollback", "old": old_a, "new": a2, "action": "updated"}));
    assert_eq!(a["fork"]["action"], "unchanged");
    assert_eq!(
        a["fork"]["note"].as_str().unwrap(),
        format!(
            "main ({}) has commits of its own: not synced with {} (merge them upstream, or reset the fork's main, \
             to have publish move it again)",
            &stage_head[..10],
            &d.branch("main", "a", "main").unwrap()[..10]
        )
    );
    assert_eq!(d.branch("stage", "a", "main"), Some(stage_head), "the fork's own commit is kept");
    let creates = d
        .exchanges()
        .iter()
        .filter(|e| e["method"] == "POST" && e["template"] == "/repos/{owner}/{repo}/pulls" && e["status"] == 201)
        .count();
    assert_eq!(creates, 2);
    // 5. Stable again (the diverged fork keeps its note).
    let r5 = publish(&fx, &d, &[]);
    assert_eq!((r5["summary"]["created"].clone(), r5["summary"]["updated"].clone()), (json!(0), json!(0)));
    let a = &r5["repos"].as_array().unwrap().iter().find(|r| r["full_name"] == "main/a").unwrap().clone();
    assert!(a["fork"]["note"].as_str().unwrap().contains("has commits of its own"), "{a:#}");

    d.assert_spec_conformant();
}

/// `--release-from-root` (what `local/run.sh config` publishes with): the monorepo's new
/// `release` starts at its first commit, so the release pull request opens at once and holds the
/// whole monorepo; the libs are untouched by it, and an existing `release` is never moved.
#[test]
fn release_from_root_opens_the_first_release_pull_request() {
    let fx = fixture();
    let d = Double::start(Creds::basic("admin", "double-pw-r"));
    let r1 = publish(&fx, &d, &["--release-from-root"]);
    let mono = d.bare("main", "mono");
    let main = d.branch("main", "mono", "main").unwrap();
    let release = d.branch("main", "mono", "release").unwrap();
    let root = git(&mono, &["rev-list", "--first-parent", "--max-parents=0", &main]);
    assert_eq!(release, root.trim());
    assert_ne!(release, main);
    let report =
        |r: &Value, name: &str| r["repos"].as_array().unwrap().iter().find(|x| x["full_name"] == name).cloned();
    let pull = report(&r1, "main/mono").unwrap()["pull"].clone();
    assert_eq!(pull["action"], "created", "{pull}");
    let number = pull["number"].as_i64().unwrap();
    // A lib's release is its main, as without the option.
    assert_eq!(d.branch("main", "a", "release"), d.branch("main", "a", "main"));
    assert_eq!(report(&r1, "main/a").unwrap()["pull"]["number"], Value::Null);

    // Again: release stays where it is, the same pull request is kept.
    let r2 = publish(&fx, &d, &["--release-from-root"]);
    assert_eq!(d.branch("main", "mono", "release").unwrap(), release);
    assert_eq!(report(&r2, "main/mono").unwrap()["pull"], json!({"number": number, "action": "unchanged"}));
    assert_eq!(r2["summary"]["created"], 0);
    assert_eq!(r2["summary"]["updated"], 0);

    // Accepted (a merge commit: release is now ahead of main): nothing to release, no new
    // pull request is opened.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opt = proxmox_gitops::gitea::types::MergePullRequestOption {
        style: proxmox_gitops::gitea::types::MergeStyle::Merge,
        merge_title_field: None,
        merge_message_field: None,
        head_commit_id: None,
        delete_branch_after_merge: None,
    };
    rt.block_on(d.client().merge_pull("main", "mono", number, &opt)).unwrap();
    assert_ne!(d.branch("main", "mono", "release").unwrap(), main);
    let r3 = publish(&fx, &d, &["--release-from-root"]);
    assert_eq!(report(&r3, "main/mono").unwrap()["pull"], json!({"number": null, "action": "unchanged"}));
    assert_eq!(r3["summary"]["created"], 0);
}

#[test]
fn variables_from_globals_and_configure_outputs() {
    let fx = fixture();
    let d = Double::start(Creds::basic("admin", "double-pw-2"));
    std::fs::write(fx.mono.join("globals.json"), r#"{"TZ": "UTC", "DOMAIN": "lan", "EMPTY": ""}"#).unwrap();
    std::fs::write(fx.mono.join("globals.local.json"), r#"{"DOMAIN": "home.lan"}"#).unwrap();
    let art = fx.artifacts();
    std::fs::create_dir_all(art.join("configure")).unwrap();
    std::fs::write(
        art.join("configure/a.json"),
        r#"{"kind": "configure", "outputs": {"PORT": 8080, "URL": "http://a"}}"#,
    )
    .unwrap();
    std::fs::write(art.join("configure/b.json"), r#"{"kind": "configure"}"#).unwrap();

    let r1 = publish(&fx, &d, &[]);
    let vars: Vec<Value> = r1["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| json!([v["scope"], v["org"].clone().or_repo(v), v["name"], v["action"]]))
        .collect();
    let mut want = Vec::new();
    // HOST and LOGIN come from the settings publish runs with.
    for name in ["DOMAIN", "TZ", "HOST", "LOGIN"] {
        for org in ["main", "stage", "tasks"] {
            want.push(json!(["org", org, name, "created"]));
        }
    }
    want.push(json!(["repo", "main/a", "PORT", "created"]));
    want.push(json!(["repo", "main/a", "URL", "created"]));
    // globals are iterated by name (BTreeMap), then orgs; sort both sides for the comparison
    let mut got = vars.clone();
    got.sort_by_key(|v| v.to_string());
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want);
    let bodies: Vec<Value> = d
        .exchanges()
        .into_iter()
        .filter(|e| e["method"] == "POST" && e["path"].as_str().unwrap().contains("/actions/variables/"))
        .map(|e| json!([e["path"], e["request"], e["status"]]))
        .filter(|v| v[0].as_str().unwrap().starts_with("/orgs/main/") || v[0].as_str().unwrap().starts_with("/repos/"))
        .collect();
    assert_eq!(
        bodies,
        vec![
            json!(["/orgs/main/actions/variables/DOMAIN", {"value": "home.lan"}, 201]),
            json!(["/orgs/main/actions/variables/TZ", {"value": "UTC"}, 201]),
            json!(["/repos/main/a/actions/variables/PORT", {"value": "8080"}, 201]),
            json!(["/repos/main/a/actions/variables/URL", {"value": "http://a"}, 201]),
            json!(["/orgs/main/actions/variables/HOST", {"value": d.url()}, 201]),
            json!(["/orgs/main/actions/variables/LOGIN", {"value": "admin"}, 201]),
        ]
    );

    // Update one value: PUT, the rest unchanged.
    std::fs::write(art.join("configure/a.json"), r#"{"outputs": {"PORT": "9090", "URL": "http://a"}}"#).unwrap();
    let r2 = publish(&fx, &d, &[]);
    let changed: Vec<Value> =
        r2["variables"].as_array().unwrap().iter().filter(|v| v["action"] != "unchanged").cloned().collect();
    assert_eq!(
        changed,
        vec![json!({"scope": "repo", "owner": "main", "repo": "a", "name": "PORT", "action": "updated"})]
    );
    let puts: Vec<Value> = d
        .exchanges()
        .into_iter()
        .filter(|e| e["method"] == "PUT" && e["path"].as_str().unwrap().contains("/actions/variables/"))
        .map(|e| json!([e["path"], e["request"], e["status"]]))
        .collect();
    assert_eq!(puts, vec![json!(["/repos/main/a/actions/variables/PORT", {"value": "9090"}, 204])]);

    // Changed elsewhere (here with `env set`): publish puts the file's value back.
    let url = d.url();
    ok(&run(
        &["--repo", s(&fx.mono), "env", "set", "TZ", "Europe/Berlin", "--org", "stage", "--gitea", &url],
        &[("LOGIN", "admin"), ("PASSWORD", "double-pw-2")],
    ));
    let r3 = publish(&fx, &d, &[]);
    let changed: Vec<Value> =
        r3["variables"].as_array().unwrap().iter().filter(|v| v["action"] != "unchanged").cloned().collect();
    assert_eq!(changed, vec![json!({"scope": "org", "org": "stage", "name": "TZ", "action": "updated"})]);

    // Invalid names are refused before anything is sent, naming file and key.
    std::fs::write(fx.mono.join("globals.json"), r#"{"TZ": "UTC", "bad-name": "x", "GITEA_URL": "y"}"#).unwrap();
    std::fs::write(art.join("configure/a.json"), r#"{"outputs": {"1PORT": "1", "OK": {"nested": true}}}"#).unwrap();
    let before = d.api_calls().len();
    let out = run_publish(&fx, &url, &[], &[("LOGIN", "admin"), ("PASSWORD", "double-pw-2")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let cfg = art.join("configure/a.json");
    for needle in [
        "4 problems in the input".to_string(),
        "globals.json (bad-name): `bad-name` is not a valid variable name".to_string(),
        "globals.json (GITEA_URL): `GITEA_URL`: Gitea reserves variable names starting with `GITEA_`".to_string(),
        format!("{} (outputs.1PORT): `1PORT` is not a valid variable name", cfg.display()),
        format!("{} (outputs.OK): expected a string, number or boolean", cfg.display()),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
    assert_eq!(d.api_calls().len(), before, "nothing was sent");

    d.assert_spec_conformant();
}

trait OrRepo {
    fn or_repo(self, v: &Value) -> Value;
}
impl OrRepo for Value {
    fn or_repo(self, v: &Value) -> Value {
        if self.is_null() {
            json!(format!("{}/{}", v["owner"].as_str().unwrap(), v["repo"].as_str().unwrap()))
        } else {
            self
        }
    }
}

#[test]
fn publish_sets_the_settings_as_variables_and_secrets_once_and_never_shows_a_value() {
    let fx = fixture();
    let gitea_pw = "double-pw-secrets-7";
    let d = Double::start(Creds::basic("admin", gitea_pw));
    let pve_pw = "pve-pw-value-8-for-the-test";
    let env = |pve: &'static str| {
        vec![
            ("LOGIN", "admin"),
            ("PASSWORD", gitea_pw),
            ("PROXMOX_PASSWORD", pve),
            ("PROXMOX_GITOPS_BACKEND", "lxc"),
            ("PROXMOX_GITOPS_BINARY", "/usr/local/bin/proxmox-gitops"),
            ("PROXMOX_SHARE", "/srv/share"),
        ]
    };
    let values = [gitea_pw, pve_pw, "pve-pw-value-9-changed"];
    let publish_with = |pve: &'static str, extra: &[&str]| {
        let out = run_publish(&fx, &d.url(), extra, &env(pve));
        let stdout = ok(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let text = std::fs::read_to_string(fx.artifacts().join("publish.json")).unwrap();
        for v in values {
            for (what, t) in [("stdout", &stdout), ("stderr", &stderr), ("publish.json", &text)] {
                assert!(!t.contains(v), "a secret value in {what}:\n{t}");
            }
        }
        (serde_json::from_str::<Value>(&text).unwrap(), stdout)
    };
    let settings = |r: &Value| -> Vec<Value> {
        let mut v: Vec<Value> = r["variables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| json!(["variable", v["org"], v["name"], v["action"]]))
            .chain(r["secrets"].as_array().unwrap().iter().map(|v| json!(["secret", v["org"], v["name"], v["action"]])))
            .collect();
        v.sort_by_key(Value::to_string);
        v
    };
    let want = |action_of: &dyn Fn(&str, &str) -> &'static str| -> Vec<Value> {
        let mut v = Vec::new();
        for org in ["main", "stage", "tasks"] {
            for name in ["HOST", "LOGIN", "PROXMOX_GITOPS_BACKEND", "PROXMOX_GITOPS_BINARY", "PROXMOX_SHARE"] {
                v.push(json!(["variable", org, name, action_of(org, name)]));
            }
            for name in ["PASSWORD", "PROXMOX_PASSWORD"] {
                v.push(json!(["secret", org, name, action_of(org, name)]));
            }
        }
        v.sort_by_key(Value::to_string);
        v
    };

    // 1. First publish: every variable and secret created, with the settings' values.
    let (r1, out1) = publish_with(pve_pw, &[]);
    assert_eq!(settings(&r1), want(&|_, _| "created"));
    let mut secrets = d.secrets();
    for org in ["main", "stage", "tasks"] {
        for scope in secrets.as_object_mut().unwrap().values_mut() {
            for s in scope.as_object_mut().unwrap().values_mut() {
                s.as_object_mut().unwrap().remove("created_at");
            }
        }
        assert_eq!(
            secrets[format!("org/{org}")],
            json!({"PASSWORD": {"data": gitea_pw, "description": ""},
                   "PROXMOX_PASSWORD": {"data": pve_pw, "description": ""}}),
            "{org}"
        );
    }
    let url = d.url();
    let var_bodies: Vec<Value> = d
        .exchanges()
        .into_iter()
        .filter(|e| e["method"] == "POST" && e["path"].as_str().unwrap().starts_with("/orgs/tasks/actions/variables/"))
        .map(|e| json!([e["path"].as_str().unwrap().rsplit('/').next(), e["request"]["value"], e["status"]]))
        .collect();
    assert_eq!(
        var_bodies,
        vec![
            json!(["HOST", url, 201]),
            json!(["LOGIN", "admin", 201]),
            json!(["PROXMOX_GITOPS_BACKEND", "lxc", 201]),
            json!(["PROXMOX_GITOPS_BINARY", "/usr/local/bin/proxmox-gitops", 201]),
            json!(["PROXMOX_SHARE", "/srv/share", 201]),
        ]
    );
    // The table shows them; the exchange log never holds a value (only its digest).
    assert!(out1.contains("KIND") && out1.contains("PROXMOX_PASSWORD"), "{out1}");
    assert!(
        out1.lines().any(|l| l.starts_with("secret")
            && l.contains("org main")
            && l.contains("PASSWORD")
            && l.contains("created")),
        "{out1}"
    );
    let log = std::fs::read_to_string(d.dir.path().join("exchanges.jsonl")).unwrap();
    assert!(!log.contains(pve_pw) && log.contains("<redacted sha256:"), "the double logs secrets redacted");
    // The record: keyed digests beside the other local state, mode 0600, no value.
    let dir = cache_home(&fx).join("proxmox-gitops");
    for f in ["publish-secrets.json", "publish-secrets.key"] {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
    }
    let record = read_json(&dir.join("publish-secrets.json"));
    assert_eq!(record["secrets"].as_object().unwrap().len(), 6);
    assert!(record["secrets"][format!("{url} org main PROXMOX_PASSWORD")].as_str().unwrap().len() == 64);
    assert!(!record.to_string().contains(pve_pw));

    // 2. Again: everything unchanged, and nothing written.
    let before = d.api_calls().len();
    let (r2, out2) = publish_with(pve_pw, &[]);
    assert_eq!(settings(&r2), want(&|_, _| "unchanged"));
    assert_eq!((r2["summary"]["created"].clone(), r2["summary"]["updated"].clone()), (json!(0), json!(0)));
    let writes: Vec<String> = d.api_calls()[before..].iter().filter(|c| !c.starts_with("GET ")).cloned().collect();
    assert_eq!(writes, Vec::<String>::new());
    assert!(out2.contains("(15 variables, 6 secrets)"), "{out2}");

    // 3. The PVE password changed: that secret is updated in every org, nothing else.
    let before = d.api_calls().len();
    let (r3, _) = publish_with("pve-pw-value-9-changed", &[]);
    assert_eq!(settings(&r3), want(&|_, n| if n == "PROXMOX_PASSWORD" { "updated" } else { "unchanged" }));
    let writes: Vec<String> = d.api_calls()[before..].iter().filter(|c| !c.starts_with("GET ")).cloned().collect();
    assert_eq!(
        writes,
        ["main", "stage", "tasks"].map(|o| format!("PUT /orgs/{o}/actions/secrets/PROXMOX_PASSWORD 204")).to_vec()
    );
    assert_eq!(d.secrets()["org/stage"]["PROXMOX_PASSWORD"]["data"], "pve-pw-value-9-changed");

    // 4. --rewrite-secrets writes every secret again (the values are the same).
    let (r4, _) = publish_with("pve-pw-value-9-changed", &["--rewrite-secrets"]);
    assert_eq!(settings(&r4), want(&|_, n| if n.contains("PASSWORD") { "updated" } else { "unchanged" }));
    // 5. Without the record (deleted, or a new machine) every secret is written once, then
    //    unchanged again.
    std::fs::remove_file(dir.join("publish-secrets.json")).unwrap();
    let (r5, _) = publish_with("pve-pw-value-9-changed", &[]);
    assert!(r5["secrets"].as_array().unwrap().iter().all(|s| s["action"] == "updated"), "{r5:#}");
    let (r6, _) = publish_with("pve-pw-value-9-changed", &[]);
    assert_eq!(settings(&r6), want(&|_, _| "unchanged"));

    d.assert_spec_conformant();
}

#[test]
fn a_server_error_once_is_retried_and_a_persistent_one_is_a_clear_error() {
    let fx = fixture();
    let d = Double::start(Creds::basic("admin", "double-pw-3"));
    d.faults(&[("GET", "/api/v1/orgs/main", 500, 1), ("PATCH", "/api/v1/repos/main/g", 503, 2)]);
    let r = publish(&fx, &d, &[]);
    assert_eq!(r["repos"][0]["full_name"], "main/g");
    assert_eq!(r["repos"][0]["settings"], "updated");
    let calls = d.api_calls();
    assert_eq!(&calls[..2], &["GET /orgs/main 500".to_string(), "GET /orgs/main 404".to_string()]);
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("PATCH /repos/main/g ")).cloned().collect::<Vec<_>>(),
        vec!["PATCH /repos/main/g 503", "PATCH /repos/main/g 503", "PATCH /repos/main/g 200"]
    );

    // A POST is not retried on a 5xx: it may have had an effect. The error names it all.
    let fx2 = fixture();
    std::fs::write(fx2.mono.join("globals.json"), r#"{"TZ": "UTC"}"#).unwrap();
    d.faults(&[("POST", "/api/v1/orgs/main/actions/variables/TZ", 500, 5)]);
    let out = run_publish(&fx2, &d.url(), &["--name", "mono2"], &[("LOGIN", "admin"), ("PASSWORD", "double-pw-3")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error: variable TZ of org main: Gitea POST /orgs/main/actions/variables/TZ: HTTP 500: injected fault"
        ),
        "{err}"
    );
    let posts = d.api_calls().iter().filter(|c| c.starts_with("POST /orgs/main/actions/variables/TZ")).count();
    assert_eq!(posts, 1);
    // A GET that keeps failing gives up after the bounded attempts.
    d.faults(&[("GET", "/api/v1/orgs/main", 502, 100)]);
    let out = run_publish(&fx2, &d.url(), &["--name", "mono2"], &[("LOGIN", "admin"), ("PASSWORD", "double-pw-3")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Gitea GET /orgs/main: HTTP 502: injected fault"));
    let gets = d.api_calls().iter().filter(|c| *c == "GET /orgs/main 502").count();
    assert_eq!(gets, 4, "MAX_ATTEMPTS");

    // Wrong credentials: a clear 401.
    d.faults(&[]);
    let out = run_publish(&fx2, &d.url(), &[], &[("LOGIN", "admin"), ("PASSWORD", "not-the-password")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 401: user does not exist or wrong credentials"), "{err}");
    d.assert_spec_conformant();
}

/// Every file under `dir`, recursively (for secret scans).
fn all_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            all_files(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

#[test]
fn secrets_never_in_logs_artifacts_or_process_args() {
    for token_auth in [false, true] {
        let fx = fixture();
        let secret = if token_auth { "tok-7f3a9c1e5b2d8a4f" } else { "pw-S3cr3t-4f1d9e" };
        let creds = if token_auth {
            Creds { login: "admin".into(), password: None, token: Some(secret.into()) }
        } else {
            Creds::basic("admin", secret)
        };
        let d = Double::start(creds);
        std::fs::write(fx.mono.join("globals.json"), r#"{"TZ": "UTC"}"#).unwrap();
        let art = fx.artifacts();

        // Sample `ps -eo args` while publish runs.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut samples = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || samples == 0 {
                    let out = std::process::Command::new("ps").args(["-eo", "args"]).output().unwrap();
                    seen.push(String::from_utf8_lossy(&out.stdout).into_owned());
                    samples += 1;
                }
                seen
            })
        };
        let url = d.url();
        let args = ["-v", "--repo", s(&fx.mono), "--artifacts", s(&art), "publish", "--gitea", &url];
        let env: Vec<(&str, &str)> =
            if token_auth { vec![("GITEA_TOKEN", secret)] } else { vec![("LOGIN", "admin"), ("PASSWORD", secret)] };
        let out = run(&args, &env);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = sampler.join().unwrap();
        ok(&out);
        let all_ps = samples.join("\n");
        assert!(all_ps.contains("--gitea"), "the sampler saw the publish process");
        assert!(!all_ps.contains(secret), "secret in process arguments");
        let logs = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(logs.contains("Gitea GET /orgs/main"), "debug log is on: {logs}");
        assert!(!logs.contains(secret), "secret in the logs");
        // Failure output too (git error text, API errors).
        d.faults(&[("POST", "/api/v1/orgs/main/actions/variables/NEW", 500, 1)]);
        std::fs::write(fx.mono.join("globals.json"), r#"{"NEW": "x"}"#).unwrap();
        let out = run(&args, &env);
        assert_eq!(out.status.code(), Some(1));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
        // Artifacts, the working copy and its git config.
        let mut files = Vec::new();
        all_files(&art, &mut files);
        assert!(files.iter().any(|f| f.ends_with("publish.json")));
        assert!(files.iter().any(|f| f.ends_with("worktree/.git/config")));
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains(secret), "secret in {}", f.display());
        }
        // The git traffic authenticated (push needs auth on the double).
        assert!(d.branch("main", "mono", "main").is_some());
        d.assert_spec_conformant();
    }
}

#[test]
fn env_get_and_set() {
    let fx = fixture();
    let d = Double::start(Creds { login: "admin".into(), password: None, token: Some("tok-env-1".into()) });
    let url = d.url();
    let env = [("GITEA_TOKEN", "tok-env-1")];
    let repo = s(&fx.mono);
    // Orgs/repos come from a publish.
    ok(&run_publish(&fx, &url, &[], &env));

    let out = run(&["--repo", repo, "env", "set", "SHARE", "/srv/share", "--gitea", &url], &env);
    ok(&out);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "SHARE on org main: created");
    let out = run(&["--repo", repo, "env", "get", "SHARE", "--remote", "--gitea", &url], &env);
    assert_eq!(ok(&out), "/srv/share\n");
    let out = run(&["--repo", repo, "env", "set", "SHARE", "/mnt", "--gitea", &url], &env);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "SHARE on org main: updated");
    let out = run(&["--repo", repo, "env", "set", "SHARE", "/mnt", "--gitea", &url], &env);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "SHARE on org main: unchanged");
    // --json: one JSON value on stdout for get, set, list and delete.
    let json = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["--json", "--repo", repo, "env"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--gitea", &url]);
        let out = run(&all, &env);
        serde_json::from_str(&ok(&out)).unwrap_or_else(|e| panic!("{all:?}: {e}"))
    };
    assert_eq!(
        json(&["set", "JSONVAR", "one"]),
        serde_json::json!({"name": "JSONVAR", "scope": {"org": "main"}, "action": "created"})
    );
    assert_eq!(
        json(&["get", "JSONVAR", "--remote"]),
        serde_json::json!({"name": "JSONVAR", "value": "one", "source": "gitea", "scope": {"org": "main"}})
    );
    assert!(json(&["list"]).as_array().unwrap().iter().any(|v| v["name"] == "JSONVAR" && v["value"] == "one"));
    assert_eq!(
        json(&["delete", "JSONVAR"]),
        serde_json::json!({"name": "JSONVAR", "scope": {"org": "main"}, "action": "deleted"})
    );
    // Repo scope; the environment wins without --remote (the seed's Env.get).
    let out = run(&["env", "set", "IP", "10.0.3.5", "--gitea-repo", "main/a", "--gitea", &url], &env);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "IP on repo main/a: created");
    let out = run(&["env", "get", "IP", "--repo", "main/a", "--gitea", &url], &env);
    assert_eq!(ok(&out), "10.0.3.5\n");
    let mut env2 = env.to_vec();
    env2.push(("IP", "from-env"));
    assert_eq!(ok(&run(&["env", "get", "IP", "--gitea-repo", "main/a", "--gitea", &url], &env2)), "from-env\n");
    let out = run(&["env", "get", "IP", "--gitea-repo", "main/a", "--org", "main", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["env", "get", "IP", "--repo", "main/a", "--org", "main", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--org and --repo OWNER/REPO exclude each other"));
    // With the monorepo's directory and the repository both given.
    let out = run(&["--repo", repo, "env", "get", "IP", "--remote", "--gitea-repo", "main/a", "--gitea", &url], &env);
    assert_eq!(ok(&out), "10.0.3.5\n");
    // Missing, invalid.
    let out = run(&["--repo", repo, "env", "get", "NOPE", "--remote", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("variable NOPE is not set in the environment nor on org main")
    );
    let out = run(&["--repo", repo, "env", "set", "GITHUB_X", "1", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("KEY: `GITHUB_X`: variable names must not start with GITEA_ or GITHUB_")
    );
    let out = run(&["env", "set", "X", "1", "--gitea-repo", "a/b/c", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--gitea-repo: expected OWNER/REPO, found `a/b/c`"));
    let out = run(&["env", "set", "X", "1", "--repo", "a/b/c", "--gitea", &url], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--repo: expected OWNER/REPO, found `a/b/c`"));
    d.assert_spec_conformant();
}

/// Issue 12: a submodule URL with a password and one with a token as the user part. Neither
/// secret reaches an artifact, stdout, stderr or a process argument in `resolve`, `plan` (on
/// resolve's standard monorepo), `rewrite` or `publish` (on this file's fixture, against the
/// double); under Actions each part is registered with `::add-mask::` (the only line that may
/// carry it).
#[test]
fn submodule_url_credentials_never_in_logs_artifacts_or_process_args() {
    const PASSWORD: &str = "pw-Url-9c2e7b31";
    const TOKEN: &str = "tok-url-4d8e1f2a";
    let with_password = |host_path: &str| format!("https://alice-url:{PASSWORD}@{host_path}");
    let with_token = |host_path: &str| format!("https://{TOKEN}@{host_path}");
    // resolve/plan: the standard monorepo, two submodules with credentials.
    let std_fx = support::fixture::standard();
    let std_repo = support::fixture::Repo { dir: std_fx.root.clone() };
    std_repo.set_submodule_url("libs/broker", &with_password("git.example.com/homelab/broker.git"));
    std_repo.set_submodule_url("libs/web", &with_token("git.example.com/homelab/web.git"));
    std_repo.commit("credentials in submodule URLs");
    // rewrite/publish: this file's fixture.
    let fx = fixture();
    for (path, url) in [
        ("libs/a", with_password("git.example.invalid/org/a.git")),
        ("libs/b", with_token("git.example.invalid:8443/org/b/")),
    ] {
        git(&fx.mono, &["config", "-f", ".gitmodules", &format!("submodule.{path}.url"), &url]);
    }
    git(&fx.mono, &["commit", "-q", "-am", "credentials in submodule URLs"]);
    let d = Double::start(Creds::basic("admin", "double-pw-u"));
    let url = d.url();
    let env = [("LOGIN", "admin"), ("PASSWORD", "double-pw-u")];
    let (std_art, art) = (std_fx.tmp.path().join("artifacts"), fx.artifacts());

    // Sample `ps -eo args` while the commands run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || seen.is_empty() {
                let out = std::process::Command::new("ps").args(["-eo", "args"]).output().unwrap();
                seen.push(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            seen
        })
    };
    let (std_repo_arg, std_art_arg) = (s(&std_fx.root), s(&std_art));
    let commands: [&[&str]; 4] = [
        &["-v", "--repo", std_repo_arg, "--artifacts", std_art_arg, "resolve"],
        &["-v", "--repo", std_repo_arg, "--artifacts", std_art_arg, "plan", "--ref", "refs/heads/main"],
        &["-v", "--repo", s(&fx.mono), "--artifacts", s(&art), "rewrite", "--gitea", &url],
        &["-v", "--repo", s(&fx.mono), "--artifacts", s(&art), "publish", "--gitea", &url],
    ];
    let mut logs = String::new();
    for actions in [false, true] {
        for args in commands {
            let mut env = env.to_vec();
            if actions {
                env.push(("GITEA_ACTIONS", "true"));
            }
            let out = run(args, &env);
            ok(&out);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            for secret in [PASSWORD, TOKEN] {
                assert!(!stdout.contains(secret), "{args:?}: secret on stdout:\n{stdout}");
                for line in stderr.lines().filter(|l| l.contains(secret)) {
                    assert!(actions && line == format!("::add-mask::{secret}"), "{args:?}: secret on stderr: {line}");
                }
                if actions {
                    assert!(
                        stderr.contains(&format!("::add-mask::{secret}")),
                        "{args:?}: {secret} not masked:\n{stderr}"
                    );
                }
            }
            logs.push_str(&stdout);
            logs.push_str(&stderr);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let all_ps = sampler.join().unwrap().join("\n");
    assert!(all_ps.contains("--gitea"), "the sampler saw the commands");
    for secret in [PASSWORD, TOKEN] {
        assert!(!all_ps.contains(secret), "secret in process arguments");
    }
    assert!(logs.contains("git -C"), "debug log is on");

    // The redacted form is what the artifacts record.
    let inventory = read_json(&std_art.join("inventory.json"));
    let urls = |v: &Value, list: &str, key: &str| -> Vec<String> {
        let mut out = Vec::new();
        fn go(v: &Value, key: &str, out: &mut Vec<String>) {
            for m in v.as_array().into_iter().flatten() {
                out.extend(m[key].as_str().map(String::from));
                go(&m["children"], key, out);
            }
        }
        go(&v[list], key, &mut out);
        out
    };
    let recorded = urls(&inventory, "submodules", "url");
    assert!(recorded.contains(&"https://***@git.example.com/homelab/broker.git".into()), "{recorded:?}");
    assert!(recorded.contains(&"https://***@git.example.com/homelab/web.git".into()), "{recorded:?}");
    let old = urls(&read_json(&art.join("remotes.json")), "modules", "old_url");
    assert!(old.contains(&"https://***@git.example.invalid/org/a.git".into()), "{old:?}");
    assert!(old.contains(&"https://***@git.example.invalid:8443/org/b/".into()), "{old:?}");
    assert!(old.contains(&"ssh://git@git.example.invalid:2222/org/c.git".into()), "unchanged: {old:?}");
    // No artifact, and no file of the working copy, holds either secret.
    let mut files = Vec::new();
    all_files(&art, &mut files);
    all_files(&std_art, &mut files);
    assert!(files.iter().any(|f| f.ends_with("publish.json")));
    assert!(files.iter().any(|f| f.ends_with("plan.json")));
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        for secret in [PASSWORD, TOKEN] {
            assert!(!text.contains(secret), "secret in {}", f.display());
        }
    }
    assert!(d.branch("main", "mono", "main").is_some());
}

/// `path` on `branch` of `owner/repo` on the double, as bytes turned text; `None` when absent.
fn file_on(d: &Double, owner: &str, repo: &str, branch: &str, path: &str) -> Option<String> {
    let out = support::git::git_output(&d.bare(owner, repo), &["show", &format!("{branch}:{path}")]);
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap())
}

/// This repository's `workflows/<f>` as publish installs it by default: with the git checkout
/// step (`PROXMOX_GITOPS_CHECKOUT=git`) in place of actions/checkout.
fn installed_workflow(f: &str) -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = workflows::checkout_script(manifest).unwrap();
    let text = std::fs::read_to_string(manifest.join("workflows").join(f)).unwrap();
    let source = workflows::Source { path: "workflows/x.yml", text, builtin: false };
    let out = workflows::install_static(&source, &CheckoutAction::default(), &script).unwrap();
    assert!(!out.contains("uses: actions/checkout"), "{f}");
    out
}

fn yaml(text: &str) -> yaml_rust2::Yaml {
    let mut docs = yaml_rust2::YamlLoader::load_from_str(text).unwrap();
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

/// Issue 13: publish leaves a working setup. The monorepo gets pipeline.yml, snapshot.yml and drift.yml,
/// each lib repository (a submodule lib, a converted directory) its pipeline, each task
/// repository (a converted task with a cron line, a submodule task without one) its task.yml,
/// all on `main` on the double; publishing again pushes nothing; a new checkout setting
/// re-renders every workflow once.
#[test]
fn publish_installs_the_workflows_and_republishing_pushes_nothing() {
    let fx = fixture();
    // A task without a cron line, as a submodule: the original project's tasks/deploy/default.rb.
    let manual = gitea::upstream(fx.root.path(), "manual");
    std::fs::write(manual.join("default.rb"), "# dispatched, not scheduled\nputs 'deploy'\n").unwrap();
    git(&manual, &["add", "default.rb"]);
    git(&manual, &["commit", "-q", "-m", "script"]);
    gitea::add_submodule(&fx.mono, &manual, "tasks/manual", "https://git.example.invalid/org/manual.git");
    let d = Double::start(Creds::basic("admin", "double-pw-w"));
    let env = [("LOGIN", "admin"), ("PASSWORD", "double-pw-w")];

    let out = run_publish(&fx, &d.url(), &["--runs-on", "shell"], &env);
    let table = ok(&out);
    let report = read_json(&fx.artifacts().join("publish.json"));
    assert_eq!(report["schema_version"], "1.2");
    let workflows: Vec<Value> = report["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!([r["full_name"], r["workflows"]]))
        .filter(|v| !v[1].is_null())
        .collect();
    let pipeline = json!([".gitea/workflows/pipeline.yml"]);
    let task = json!([".gitea/workflows/task.yml"]);
    assert_eq!(
        workflows,
        vec![
            json!(["main/plain", pipeline]),
            json!(["tasks/nightly", task]),
            json!(["main/a", pipeline]),
            json!(["main/b", pipeline]),
            json!(["main/c", pipeline]),
            json!(["main/d", pipeline]),
            json!(["main/e", pipeline]),
            json!(["tasks/manual", task]),
            json!([
                "main/mono",
                [".gitea/workflows/pipeline.yml", ".gitea/workflows/snapshot.yml", ".gitea/workflows/drift.yml"]
            ]),
        ]
    );
    let row = |name: &str| table.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{table}")).to_string();
    assert!(row("tasks/nightly ").trim_end().ends_with("task.yml"), "{table}");
    assert!(row("main/mono ").trim_end().ends_with("pipeline.yml,snapshot.yml,drift.yml"), "{table}");
    assert!(row("main/base ").trim_end().ends_with('-'), "{table}");

    // On the double: the monorepo's workflows are this repository's, as installed.
    for f in ["pipeline.yml", "snapshot.yml", "drift.yml"] {
        let want = installed_workflow(f);
        assert_eq!(file_on(&d, "main", "mono", "main", &format!(".gitea/workflows/{f}")), Some(want), "{f}");
    }
    // Each lib's pipeline deploys that lib from the monorepo main/mono.
    for lib in ["a", "plain"] {
        let text = file_on(&d, "main", lib, "main", ".gitea/workflows/pipeline.yml").expect(lib);
        let wf = yaml(&text);
        let steps = &wf["jobs"]["deploy"]["steps"];
        assert_eq!(steps[0]["env"]["PGO_CHECKOUT_REPOSITORY"].as_str(), Some("main/mono"), "{lib}");
        assert_eq!(steps[1]["env"]["PGO_CHECKOUT_PATH"].as_str(), Some(format!("libs/{lib}").as_str()), "{lib}");
        assert_eq!(steps[2]["with"]["container"].as_str(), Some(lib), "{lib}");
        assert_eq!(wf["jobs"]["deploy"]["runs-on"].as_str(), Some("shell"));
    }
    // The scheduled task has `schedule`, the other one does not.
    let nightly = yaml(&file_on(&d, "tasks", "nightly", "main", ".gitea/workflows/task.yml").unwrap());
    assert_eq!(nightly["on"]["schedule"][0]["cron"].as_str(), Some("0 3 * * *"));
    assert_eq!(nightly["jobs"]["task"]["steps"][3]["env"]["PGO_TASK_SCRIPT"].as_str(), Some("tasks/nightly/run.sh"));
    let manual_wf = yaml(&file_on(&d, "tasks", "manual", "main", ".gitea/workflows/task.yml").unwrap());
    assert!(manual_wf["on"]["schedule"].is_badvalue(), "no cron line, no schedule");
    assert!(!manual_wf["on"]["workflow_dispatch"].is_badvalue());
    assert_eq!(manual_wf["on"]["push"]["branches"][0].as_str(), Some("main"));
    assert_eq!(
        manual_wf["jobs"]["task"]["steps"][3]["env"]["PGO_TASK_SCRIPT"].as_str(),
        Some("tasks/manual/default.rb")
    );
    assert_eq!(manual_wf["env"]["PROXMOX_GITOPS_MONOREPO"].as_str(), Some("main/mono"));
    // The task repository keeps the user's script; the workflow came in a [skip ci] commit.
    assert_eq!(
        file_on(&d, "tasks", "manual", "main", "default.rb").as_deref(),
        Some("# dispatched, not scheduled\nputs 'deploy'\n")
    );
    assert_eq!(
        git(&d.bare("tasks", "manual"), &["log", "-1", "--format=%s", "main"]),
        "Install .gitea/workflows/task.yml [skip ci]"
    );
    // Repositories that are neither libs nor tasks get none.
    for repo in ["base", "libraries", "f", "g"] {
        assert_eq!(file_on(&d, "main", repo, "main", ".gitea/workflows/pipeline.yml"), None, "{repo}");
    }

    // 2. Again: everything unchanged, nothing pushed.
    let before = pushes(&d);
    let r2 = publish(&fx, &d, &[]);
    assert_eq!((r2["summary"]["created"].clone(), r2["summary"]["updated"].clone()), (json!(0), json!(0)));
    assert_eq!(pushes(&d), before, "re-publishing pushes nothing");

    // 3. Another checkout action: every workflow is rendered anew, once.
    let mut env2 = env.to_vec();
    env2.push(("PROXMOX_GITOPS_CHECKOUT", "tasks/checkout@main"));
    ok(&run_publish(&fx, &d.url(), &[], &env2));
    let mono = file_on(&d, "main", "mono", "main", ".gitea/workflows/pipeline.yml").unwrap();
    assert!(!mono.contains("actions/checkout@v4"), "{mono}");
    // pipeline.yml's one job checks out once
    assert_eq!(mono.matches("uses: \"tasks/checkout@main\"").count(), 1);
    let nightly = yaml(&file_on(&d, "tasks", "nightly", "main", ".gitea/workflows/task.yml").unwrap());
    assert_eq!(nightly["jobs"]["task"]["steps"][0]["uses"].as_str(), Some("tasks/checkout@main"));
    let a = yaml(&file_on(&d, "main", "a", "main", ".gitea/workflows/pipeline.yml").unwrap());
    assert_eq!(a["jobs"]["deploy"]["steps"][1]["uses"].as_str(), Some("tasks/checkout@main"));
    let before = pushes(&d);
    ok(&run_publish(&fx, &d.url(), &[], &env2));
    assert_eq!(pushes(&d), before, "re-publishing with the same setting pushes nothing");

    // A bad setting is refused before anything is written or sent.
    let calls = d.api_calls().len();
    let mut env3 = env.to_vec();
    env3.push(("PROXMOX_GITOPS_CHECKOUT", "actions/checkout"));
    let out = run_publish(&fx, &d.url(), &[], &env3);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("environment (PROXMOX_GITOPS_CHECKOUT): expected `git` (the default"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pushes(&d), before);
    assert_eq!(d.api_calls().len(), calls, "nothing sent");

    // `rewrite --no-workflows` leaves the repositories' workflows alone.
    let art = fx.artifacts();
    ok(&run(&["--repo", s(&fx.mono), "--artifacts", s(&art), "rewrite", "--gitea", &d.url(), "--no-workflows"], &[]));
    let remotes = read_json(&art.join("remotes.json"));
    assert!(remotes["monorepo"]["workflows"].is_null());
    assert!(remotes["modules"].as_array().unwrap().iter().all(|m| m["workflows"].is_null()));
    assert_eq!(module_commit(&fx, "libs/a"), git(&fx.mono.join("libs/a"), &["rev-parse", "HEAD"]));
    d.assert_spec_conformant();
}
