//! `deploy --plan plan.json` and `provision --plan plan.json` against fakepve (loopback): a saved
//! plan is applied exactly when nothing moved; a container changed through fakepve's own model
//! between plan and apply (its PVE config digest changes), or changed inputs, make the run
//! refuse with nothing written, naming the container and the command that plans again.

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::deploy::monorepo;
use support::fakepve::{self, FakePve, run_cli as pgo};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn env(pve: &FakePve, share: &Path) -> Vec<(String, String)> {
    fakepve::cli_env(pve, share)
}

/// Sets alpha's MEMORY in its container.env.
fn set_memory(root: &Path, mb: u32) {
    std::fs::write(root.join("libs/alpha/container.env"), format!("ID=101\nIP=127.0.20.2/24\nMEMORY={mb}\n")).unwrap();
}

/// `plan --ref refs/heads/release` (writes plan.json); returns the plan.
fn plan(root: &Path, env: &[(String, String)]) -> Value {
    let out = pgo(root, &["--json", "plan", "--ref", "refs/heads/release"], env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_str(&text(&out.stdout)).unwrap()
}

fn memory(pve: &FakePve) -> Value {
    pve.ct_config(101).unwrap()["memory"].clone()
}

fn writes(pve: &FakePve) -> Vec<(String, String, String)> {
    pve.writes(true).into_iter().filter(|(_, p, _)| p != "/access/ticket").collect()
}

#[test]
fn a_saved_plan_applies_exactly_or_is_refused_when_something_moved() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    set_memory(root, 512);
    let out = pgo(
        root,
        &["deploy", "--ref", "refs/heads/release", "--step", "provision", "-c", "alpha", "--no-wait-ssh"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(memory(&pve), 512);
    let plan_file = root.join(".proxmox-gitops/plan.json");
    let plan_arg = plan_file.to_str().unwrap();

    // The plan records the config digest PVE reported, and the policy.
    set_memory(root, 1024);
    let p = plan(root, &env);
    assert_eq!(p["schema_version"], "1.2");
    assert_eq!(p["recreate"], "never");
    let alpha = p["containers"].as_array().unwrap().iter().find(|c| c["name"] == "alpha").unwrap().clone();
    let digest = pve.exec("result = pve.ct(101).digest()");
    assert_eq!(alpha["config_digest"], digest, "{alpha:#}");
    assert_eq!(alpha["provision"]["action"], "update", "{alpha:#}");

    // Someone changes the container (a key the planner does not manage): only the digest
    // shows it. Both deploy and provision refuse, change nothing, and say how to re-plan.
    pve.exec("pve.ct(101).config['startup'] = 'order=5'");
    writes(&pve);
    for args in [
        vec!["deploy", "--plan", plan_arg, "-c", "alpha", "--no-wait-ssh"],
        vec!["provision", "--plan", plan_arg, "-c", "alpha", "--no-wait-ssh"],
    ] {
        let out = pgo(root, &args, &env);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("refusing to apply"), "{err}");
        assert!(err.contains("alpha (vmid 101): its PVE config changed since the plan (digest"), "{err}");
        assert!(err.contains("proxmox-gitops plan --ref refs/heads/release -c alpha"), "{err}");
        assert_eq!(writes(&pve), vec![], "{args:?}: nothing written");
        assert_eq!(memory(&pve), 512);
    }

    // Changed inputs after the plan are refused as well.
    let p = plan(root, &env);
    assert_eq!(p["containers"][1]["provision"]["action"], "update", "{p:#}");
    set_memory(root, 2048);
    let out = pgo(root, &["provision", "--plan", plan_arg, "--no-wait-ssh"], &env);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("alpha (vmid 101): its inputs (container.env, lib or base files, globals, settings) changed"),
        "{err}"
    );
    assert_eq!(memory(&pve), 512);

    // Nothing moved: provision --plan applies it.
    set_memory(root, 1024);
    plan(root, &env);
    let out = pgo(root, &["provision", "--plan", plan_arg, "-c", "alpha", "--no-wait-ssh"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(memory(&pve), 1024);

    // Nothing moved: deploy --plan runs the plan's ref (provision applies; configure then
    // fails, as nothing answers SSH on the loopback address).
    set_memory(root, 768);
    plan(root, &env);
    let out = pgo(root, &["deploy", "--plan", plan_arg, "-c", "alpha", "--no-wait-ssh", "--connect-budget", "1"], &env);
    let d: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/deploy.json")).unwrap()).unwrap();
    let steps = &d["containers"][0]["steps"];
    assert_eq!(
        (&d["ref"], &steps[0]["step"], &steps[0]["state"]),
        (&"refs/heads/release".into(), &"provision".into(), &"ok".into()),
        "{d:#}\n{}",
        text(&out.stderr)
    );
    assert_eq!(memory(&pve), 768);

    // `--step` narrows the plan to some of its ref's steps (the pipeline provisions with the
    // plan, then configures in a step of its own): provision only, configure not run.
    set_memory(root, 640);
    plan(root, &env);
    let out = pgo(root, &["deploy", "--plan", plan_arg, "--step", "provision", "-c", "alpha", "--no-wait-ssh"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let d: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/deploy.json")).unwrap()).unwrap();
    assert_eq!(d["steps"], serde_json::json!(["provision"]), "{d:#}");
    assert_eq!(memory(&pve), 640);
    // A step the plan's ref does not run is refused, nothing written.
    writes(&pve);
    let out = pgo(root, &["deploy", "--plan", plan_arg, "--step", "snapshot"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--step snapshot: ")
            && text(&out.stderr).contains("plans ref refs/heads/release, whose steps are provision, configure"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(writes(&pve), vec![]);

    // A plan for another ref, or a container the plan does not hold, is invalid input.
    let out = pgo(root, &["deploy", "--plan", plan_arg, "--ref", "refs/heads/main"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("plans ref refs/heads/release, but this run is for refs/heads/main"));
    drop(pve);
}

/// A container removed behind the tool's back (by hand, or by a `destroy` that wrote its
/// artifacts elsewhere) after a successful deploy: the artifacts still show success for the same
/// inputs, but the live plan says `create`. The plan does not list it as skipped, and
/// `deploy --plan` creates it again instead of skipping it as already done.
#[test]
fn a_container_removed_since_its_success_is_created_again_not_skipped() {
    let pve = FakePve::start();
    pve.add_template();
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let env = env(&pve, share.path());
    set_memory(root, 512);
    let provision = ["deploy", "--ref", "refs/heads/release", "--step", "provision", "-c", "alpha", "--no-wait-ssh"];
    let out = pgo(root, &provision, &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(pve.ct_config(101).is_some());
    // Same inputs again: skipped, as before.
    let out = pgo(root, &provision, &env);
    assert!(text(&out.stderr).contains("alpha: provision skipped: already succeeded"), "{}", text(&out.stderr));

    pve.exec("pve.cts.remove(pve.ct(101))");
    assert!(pve.ct_config(101).is_none());
    let p = plan(root, &env);
    let alpha = p["containers"].as_array().unwrap().iter().find(|c| c["name"] == "alpha").unwrap().clone();
    assert_eq!(alpha["provision"]["action"], "create", "{alpha:#}");
    assert_eq!(alpha.get("skipped_steps"), None, "{alpha:#}");
    let plan_file = root.join(".proxmox-gitops/plan.json");
    let out = pgo(
        root,
        &["deploy", "--plan", plan_file.to_str().unwrap(), "--step", "provision", "-c", "alpha", "--no-wait-ssh"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("skipped"), "{}", text(&out.stderr));
    assert_eq!(memory(&pve), 512, "alpha was created again");
}
