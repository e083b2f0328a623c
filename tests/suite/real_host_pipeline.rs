//! The whole pipeline on the real host (issue 24): a monorepo published to a real Gitea, its
//! workflows run by Gitea's real runner (host mode, label `shell`), deploying into real LXC
//! containers on this machine (backend `lxc`).
//!
//! 1. `publish` (the installed workflows check out with git: this Gitea has no actions host,
//!    `DEFAULT_ACTIONS_URL=self`), then the first deploy as the README says: a workflow dispatch
//!    of `pipeline.yml` on `release` → resolve, plan, provision, configure; the broker takes an
//!    MQTT login;
//! 2. a push to `main` → resolve, configure and the release pull request only;
//! 3. a release pull request (`main` → `release`) raising the broker's `MEMORY`, merged through
//!    Gitea's API → the push to `release` updates the container in place.
//!
//! Needs root, LXC with lxcbr0, Debian's mirror (the broker installs mosquitto),
//! `mosquitto-clients`, and the real Gitea and runner (`PGO_GITEA_BINARY`, `PGO_GITEA_STATIC`,
//! `PGO_RUNNER_BINARY`: `./tests/run.sh` builds them). Containers are named
//! `pgotest-act-<pid>-…` and removed when the test ends, also on failure. Everything listens on
//! 127.0.0.1; the containers are on lxcbr0.

use crate::support;

use std::time::{Duration, Instant};

use proxmox_gitops::gitea::{MergePullRequestOption, MergeStyle};
use serde_json::json;
use support::fs::write_files;
use support::git::git;
use support::real_gitea::{RealGitea, Run};
use support::real_pipeline::{
    self as real_pipeline, LOGIN, PASSWORD, lxc_memory, publish, read_json, runs_done, timeline, with_memory,
};
use support::workflows::LxcCleanup;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Asserts that `run` succeeded and ran exactly the pipeline steps `ran` (every other one
/// skipped), and that no job log holds the password.
fn assert_run(run: &Run, ran: &[&str]) {
    real_pipeline::assert_run(run, ran, PASSWORD);
}

/// Waits for the `n`-th run of `owner/repo` (counting every run so far) and returns it, after
/// printing its timeline (see [`timeline`]).
fn nth_run(g: &RealGitea, owner: &str, repo: &str, n: usize) -> Run {
    let run = runs_done(g, owner, repo, n).remove(0);
    eprint!("{}", timeline(&run));
    run
}

/// `mosquitto_pub` to the broker at `addr` with the login; true when it was accepted.
fn mqtt_pub(addr: &str) -> bool {
    std::process::Command::new("mosquitto_pub")
        .args(["-h", addr, "-p", "1883", "-u", LOGIN, "-P", PASSWORD, "-t", "pgo/real", "-m", "hi", "-q", "1"])
        .output()
        .unwrap()
        .status
        .success()
}

fn assert_broker_answers(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mqtt_pub(addr) {
        assert!(Instant::now() < deadline, "the broker at {addr} never accepted {LOGIN}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn publish_dispatch_push_and_a_merged_release_deploy_on_the_real_runner() {
    let _heavy = support::heavy::area("real_host_pipeline");
    let _cleanup = LxcCleanup::new();
    // 1. publish (checked to set every setting on Gitea), then the first deploy: a dispatch on
    // release.
    let p = publish(1);
    let (g, name, runner) = (&p.g, p.name.clone(), &p.runners[0]);
    let (ct, artifacts) = (p.ct(), p.artifacts());
    let t = Instant::now();
    g.dispatch_workflow("main", &name, "pipeline.yml", "release", &json!({"step": "deploy"}));
    let first = nth_run(g, "main", &name, 1);
    eprintln!("first deploy (dispatch on release): {:.1}s", t.elapsed().as_secs_f64());
    assert_run(&first, &["resolve", "plan", "provision", "configure"]);
    assert!(first.jobs.iter().all(|j| j.runner_name == runner.name), "{first}");
    let prov = read_json(&artifacts.join("provision/broker.json"));
    assert_eq!((prov["result"].as_str(), prov["backend"].as_str()), (Some("ok"), Some("lxc")), "{prov:#}");
    assert_eq!(prov["hostname"], ct.as_str());
    let addr = prov["address"].as_str().unwrap().to_string();
    assert_broker_answers(&addr);
    let memory = lxc_memory(&ct);

    // 2. A push to main (a change outside every lib): resolve and configure, nothing provisioned.
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("mono");
    g.git_authed(tmp.path(), &["clone", "-q", "--recurse-submodules", &g.clone_url("main", &name), "mono"]);
    for d in [&w, &w.join("libs/broker")] {
        git(d, &["config", "user.name", "pgo test"]);
        git(d, &["config", "user.email", "pgo@example.invalid"]);
    }
    write_files(&w, &[("README.md", "The home lab.\n")]);
    git(&w, &["add", "-A"]);
    git(&w, &["commit", "-q", "-m", "readme"]);
    let t = Instant::now();
    g.git_authed(&w, &["push", "-q", "origin", "HEAD:main"]);
    let second = nth_run(g, "main", &name, 2);
    eprintln!("push to main: {:.1}s", t.elapsed().as_secs_f64());
    assert_eq!(second.event, "push", "{second}");
    assert_run(&second, &["resolve", "configure", "release-pr"]);

    // 3. The lib's MEMORY raised on main, through a release pull request merged with the API.
    let lib = w.join("libs/broker");
    git(&lib, &["checkout", "-q", "-B", "main", "origin/main"]);
    let env_path = lib.join("container.env");
    let env = std::fs::read_to_string(&env_path).unwrap();
    let new_memory = memory + 128;
    std::fs::write(&env_path, with_memory(&env, new_memory)).unwrap();
    git(&lib, &["commit", "-q", "-am", "broker: more memory"]);
    g.git_authed(&lib, &["push", "-q", "origin", "HEAD:main"]);
    git(&w, &["add", "libs/broker"]);
    git(&w, &["commit", "-q", "-m", "broker: more memory"]);
    let head = git(&w, &["rev-parse", "HEAD"]);
    g.git_authed(&w, &["push", "-q", "origin", "HEAD:main"]);
    // The push to main runs the pipeline (configure with the old memory: provision is release's).
    let third = nth_run(g, "main", &name, 3);
    assert_eq!(third.conclusion, "success", "{third}");
    g.wait_branch("main", &name, "main", &head);
    let c = g.client();
    let rt = runtime();
    // The pipeline on main opened (or updated) the release pull request, the plan its body.
    assert_run(&third, &["resolve", "configure", "release-pr"]);
    let open = rt.block_on(c.list_pulls("main", &name, "open", Some("release"))).unwrap();
    let pull =
        open.iter().find(|p| p.head.ref_ == "main").unwrap_or_else(|| panic!("no release pull request:\n{third}"));
    assert_eq!(pull.title, "Release Pull Request");
    let change = format!("MEMORY {memory} → {new_memory}");
    let body = pull.body.as_deref().unwrap_or_default();
    assert!(body.contains(&change), "the body shows {change}:\n{body}");
    assert!(body.contains(&head), "the body names the planned commit {head}:\n{body}");
    let number = pull.number;
    let t = Instant::now();
    let mut merge = MergePullRequestOption::new(MergeStyle::Merge);
    merge.head_commit_id = Some(head.clone());
    rt.block_on(c.merge_pull("main", &name, number, &merge)).unwrap();
    let fourth = nth_run(g, "main", &name, 4);
    eprintln!("merged release pull request → deployed: {:.1}s", t.elapsed().as_secs_f64());
    assert_run(&fourth, &["resolve", "plan", "provision", "configure"]);
    assert_eq!(lxc_memory(&ct), new_memory, "MEMORY {memory} → {new_memory} in place:\n{fourth}");
    let prov = read_json(&artifacts.join("provision/broker.json"));
    assert_eq!(prov["created"], false, "updated in place, not created again: {prov:#}");
    assert_eq!(prov["address"].as_str(), Some(addr.as_str()));
    assert_broker_answers(&addr);
}
