//! `deploy` orchestration with fake step runners: ordering, failure isolation, resume,
//! parallelism bound, explicit steps, blocking, and the deploy.json artifact.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::inventory::Inventory;
use proxmox_gitops::model::BackendKind;
use proxmox_gitops::steps::deploy::{
    BuiltinRunner, Deploy, DeployOptions, RunResult, StepRunner, deploy as run_deploy, inputs_digest,
};
use proxmox_gitops::steps::plan::Step;
use support::deploy::{Fake, inventory, monorepo};
use support::fs::write_files;

fn opts(root: &Path, git_ref: &str) -> DeployOptions {
    DeployOptions {
        repo: root.to_path_buf(),
        artifacts: ArtifactDir::new(root.join(".proxmox-gitops")),
        git_ref: git_ref.into(),
        steps: vec![],
        containers: vec![],
        force: false,
        jobs: 4,
        backend: BackendKind::Pve,
        run_id: None,
    }
}

async fn go<R: StepRunner>(runner: &Arc<R>, root: &Path, o: &DeployOptions) -> Deploy {
    run_deploy(runner.clone(), inventory(root), o).await.unwrap()
}

/// deploy.json with the clock-dependent fields zeroed.
fn normalized(root: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(root.join(".proxmox-gitops/deploy.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["started_at"] = "T".into();
    v["duration_ms"] = 0.into();
    for c in v["containers"].as_array_mut().unwrap() {
        c["duration_ms"] = 0.into();
        for s in c["steps"].as_array_mut().unwrap() {
            s["duration_ms"] = 0.into();
        }
    }
    v
}

fn digest_of(root: &Path, name: &str) -> String {
    let inv = inventory(root);
    let spec = inv.container(name).unwrap().clone();
    let root = root.canonicalize().unwrap();
    inputs_digest(&root, &inv, &spec, &root.join(".proxmox-gitops")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_runs_provision_then_configure_and_writes_the_whole_summary() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let fake = Arc::new(Fake::default());
    let summary = go(&fake, root, &opts(root, "refs/heads/release")).await;
    assert_eq!(summary.result, RunResult::Ok);
    assert_eq!(fake.calls_of("config"), vec![Step::Provision, Step::Configure]);
    assert_eq!(fake.calls_of("alpha"), vec![Step::Provision, Step::Configure]);
    let (dc, da) = (digest_of(root, "config"), digest_of(root, "alpha"));
    assert_ne!(dc, da);
    let step = |step: &str, name: &str| {
        serde_json::json!({
            "step": step, "state": "ok", "duration_ms": 0,
            "artifact": format!("{step}/{name}.json"),
            "actions": [format!("{step}-action")],
            "reason": null, "error": null
        })
    };
    let container = |name: &str, vmid: u32, digest: &str| {
        serde_json::json!({
            "name": name, "hostname": name, "vmid": vmid, "inputs_digest": digest,
            "result": "ok", "duration_ms": 0,
            "steps": [step("provision", name), step("configure", name)],
            "skipped_steps": [], "error": null
        })
    };
    assert_eq!(
        normalized(root),
        serde_json::json!({
            "kind": "deploy", "schema_version": "1.0",
            "ref": "refs/heads/release", "stage": "main", "backend": "pve",
            "steps": ["provision", "configure"], "explicit_steps": false, "force": false, "jobs": 4,
            "started_at": "T", "duration_ms": 0, "result": "ok",
            "containers": [container("config", 100, &dc), container("alpha", 101, &da)]
        })
    );
    // Each step got the container's digest.
    assert_eq!(fake.digests.lock().unwrap()[&("alpha".to_string(), Step::Configure)], da);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn main_only_configures_and_snapshot_only_snapshots() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let fake = Arc::new(Fake::default());
    go(&fake, root, &opts(root, "refs/heads/main")).await;
    let mut calls = fake.calls();
    calls.sort();
    assert_eq!(
        calls,
        vec![("alpha".into(), Step::Configure), ("beta".into(), Step::Configure), ("config".into(), Step::Configure)]
    );
    let fake = Arc::new(Fake::default());
    let mut o = opts(root, "refs/heads/snapshot");
    o.containers = vec!["beta".into()];
    let s = go(&fake, root, &o).await;
    assert_eq!(fake.calls(), vec![("beta".into(), Step::Snapshot)]);
    assert_eq!(s.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["beta"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_container_does_not_stop_the_others() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    let fake = Arc::new(Fake::failing(&[("alpha", Step::Provision)]));
    let s = go(&fake, root, &opts(root, "refs/heads/release")).await;
    assert_eq!(s.result, RunResult::Failed);
    assert_eq!(s.failed(), vec!["alpha"]);
    assert_eq!(fake.calls_of("alpha"), vec![Step::Provision]);
    assert_eq!(fake.calls_of("beta"), vec![Step::Provision, Step::Configure]);
    assert_eq!(fake.calls_of("config"), vec![Step::Provision, Step::Configure]);
    let v = normalized(root);
    let alpha = &v["containers"][1];
    assert_eq!(alpha["result"], "failed");
    assert_eq!(alpha["error"], "provision: provision of alpha broke");
    assert_eq!(
        alpha["steps"],
        serde_json::json!([
            {"step": "provision", "state": "failed", "duration_ms": 0, "artifact": "provision/alpha.json",
             "actions": ["provision-action"], "reason": null, "error": "provision of alpha broke"},
            {"step": "configure", "state": "not-run", "duration_ms": 0, "artifact": null,
             "actions": [], "reason": "provision failed", "error": null}
        ])
    );
    assert_eq!(v["result"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rerun_resumes_skipping_what_succeeded_for_the_same_inputs() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    // First run: alpha's configure fails.
    let fake = Arc::new(Fake::failing(&[("alpha", Step::Configure)]));
    go(&fake, root, &opts(root, "refs/heads/release")).await;
    assert_eq!(fake.calls().len(), 6);

    // Second run: only alpha's configure runs again.
    let fake = Arc::new(Fake::default());
    let s = go(&fake, root, &opts(root, "refs/heads/release")).await;
    assert_eq!(s.result, RunResult::Ok);
    assert_eq!(fake.calls(), vec![("alpha".into(), Step::Configure)]);
    let alpha = s.containers.iter().find(|c| c.name == "alpha").unwrap();
    assert_eq!(alpha.skipped_steps, vec![Step::Provision]);
    let beta = s.containers.iter().find(|c| c.name == "beta").unwrap();
    assert_eq!(beta.skipped_steps, vec![Step::Provision, Step::Configure]);
    assert_eq!(beta.steps[0].reason.as_deref(), Some("already succeeded for the same inputs"));
    assert_eq!(beta.steps[0].actions, vec!["provision-action".to_string()]);

    // Third run: nothing to do.
    let fake = Arc::new(Fake::default());
    go(&fake, root, &opts(root, "refs/heads/release")).await;
    assert_eq!(fake.calls(), vec![]);

    // Provisioned again since its configure succeeded (a provision that made the container anew
    // rewrote its artifact, in another run): the configure of the old container says nothing
    // about the new one, so it runs again.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let prov = root.join(".proxmox-gitops/provision/alpha.json");
    std::fs::write(&prov, std::fs::read(&prov).unwrap()).unwrap();
    let fake = Arc::new(Fake::default());
    go(&fake, root, &opts(root, "refs/heads/main")).await;
    assert_eq!(fake.calls(), vec![("alpha".into(), Step::Configure)]);

    // A change in beta's lib tree re-runs beta only; a *.local.* file and .git do not count.
    write_files(root, &[("libs/beta/templates/app.conf", "x=1\n")]);
    write_files(root, &[("libs/alpha/secrets.local.json", "{}"), ("libs/alpha/.git/HEAD", "ref\n")]);
    let fake = Arc::new(Fake::default());
    go(&fake, root, &opts(root, "refs/heads/main")).await;
    assert_eq!(fake.calls(), vec![("beta".into(), Step::Configure)]);

    // A change in the base tree re-runs everyone; --force runs everything regardless.
    write_files(root, &[("base/tasks.yml", "- base\n- more\n")]);
    let fake = Arc::new(Fake::default());
    go(&fake, root, &opts(root, "refs/heads/main")).await;
    assert_eq!(fake.calls().len(), 3);
    let fake = Arc::new(Fake::default());
    let mut o = opts(root, "refs/heads/main");
    o.force = true;
    let s = go(&fake, root, &o).await;
    assert_eq!(fake.calls().len(), 3);
    assert!(s.force);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_digest_is_stamped_into_artifacts_that_lack_it() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    // A step that writes its artifact without a digest.
    struct NoDigest;
    impl StepRunner for NoDigest {
        async fn run(
            &self,
            step: Step,
            spec: &proxmox_gitops::inventory::ContainerSpec,
            ctx: &proxmox_gitops::steps::deploy::StepContext,
        ) -> proxmox_gitops::steps::deploy::StepResult {
            let path = proxmox_gitops::steps::deploy::step_artifact(&ctx.artifacts, step, &spec.name);
            proxmox_gitops::artifact::write_bytes(&path, br#"{"kind":"configure","result":"ok"}"#).unwrap();
            Ok(Default::default())
        }
    }
    let mut o = opts(root, "refs/heads/main");
    o.containers = vec!["alpha".into()];
    run_deploy(Arc::new(NoDigest), inventory(root), &o).await.unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/configure/alpha.json")).unwrap())
            .unwrap();
    assert_eq!(v, serde_json::json!({"kind": "configure", "result": "ok", "inputs_digest": digest_of(root, "alpha")}));
    let fake = Arc::new(Fake::default());
    go(&fake, root, &o).await;
    assert_eq!(fake.calls(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallelism_is_bounded_by_jobs() {
    let names = ["a1", "a2", "a3", "a4", "a5", "a6"];
    let repo = monorepo(&names);
    let root = repo.path();
    for jobs in [1usize, 3] {
        let fake = Arc::new(Fake { work: Duration::from_millis(40), ..Default::default() });
        let mut o = opts(root, "refs/heads/main");
        o.jobs = jobs;
        o.force = true;
        let s = go(&fake, root, &o).await;
        assert_eq!(s.containers.len(), 7);
        assert_eq!(fake.calls().len(), 7);
        assert_eq!(fake.max_running.load(Ordering::SeqCst), jobs, "jobs = {jobs}");
        // The summary keeps inventory order whatever the completion order.
        assert_eq!(
            s.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            vec!["config", "a1", "a2", "a3", "a4", "a5", "a6"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explicit_steps_override_the_ref_and_snapshots_resume_only_within_a_run() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let mut o = opts(root, "refs/heads/feature");
    o.containers = vec!["alpha".into()];
    o.steps = vec![Step::Snapshot, Step::Provision];
    let fake = Arc::new(Fake::default());
    let s = go(&fake, root, &o).await;
    assert!(s.explicit_steps);
    assert_eq!(fake.calls_of("alpha"), vec![Step::Provision, Step::Snapshot]);

    // Snapshot without a run id: never skipped.
    o.steps = vec![Step::Snapshot];
    let fake = Arc::new(Fake::default());
    go(&fake, root, &o).await;
    assert_eq!(fake.calls_of("alpha"), vec![Step::Snapshot]);
    // With a run id: skipped when re-run within the same run, taken again in another run.
    o.run_id = Some("41".into());
    let fake = Arc::new(Fake::default());
    go(&fake, root, &o).await;
    assert_eq!(fake.calls_of("alpha"), vec![Step::Snapshot]);
    let fake = Arc::new(Fake::default());
    let s = go(&fake, root, &o).await;
    assert_eq!(fake.calls_of("alpha"), vec![]);
    assert_eq!(s.containers[0].skipped_steps, vec![Step::Snapshot]);
    o.run_id = Some("42".into());
    let fake = Arc::new(Fake::default());
    go(&fake, root, &o).await;
    assert_eq!(fake.calls_of("alpha"), vec![Step::Snapshot]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configure_is_blocked_after_a_failed_provision_of_the_same_inputs() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    // The provision job: alpha fails (with an artifact), beta fails without writing one.
    let mut fake = Fake::failing(&[("alpha", Step::Provision), ("beta", Step::Provision)]);
    fake.no_artifact.insert(("beta".into(), Step::Provision));
    let mut o = opts(root, "refs/heads/release");
    o.steps = vec![Step::Provision];
    go(&Arc::new(fake), root, &o).await;

    // The configure job of the same run.
    o.steps = vec![Step::Configure];
    let fake = Arc::new(Fake::default());
    let s = go(&fake, root, &o).await;
    assert_eq!(fake.calls(), vec![("config".into(), Step::Configure)]);
    assert_eq!(s.failed(), vec!["alpha", "beta"]);
    let alpha = &s.containers[1];
    assert_eq!(
        alpha.error.as_deref(),
        Some(
            "configure: provision failed for the same inputs (see provision/alpha.json); fix it first, or re-run with --force"
        )
    );
    assert_eq!(
        s.containers[2].error.as_deref(),
        Some(
            "configure: provision failed for the same inputs (see deploy.json of the provision run); fix it first, or re-run with --force"
        )
    );
    // --force configures them anyway.
    o.force = true;
    let fake = Arc::new(Fake::default());
    let s = go(&fake, root, &o).await;
    assert_eq!(s.result, RunResult::Ok);
    assert_eq!(fake.calls().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_runs() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let fake = Arc::new(Fake::default());
    let mut o = opts(root, "refs/heads/release");
    o.containers = vec!["alpha".into(), "nope".into()];
    let e = run_deploy(fake.clone(), inventory(root), &o).await.unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  --container (nope): no container `nope` in stage `main`; known: config, alpha\n"
    );
    let e = run_deploy(fake.clone(), inventory(root), &opts(root, "refs/heads/feature")).await.unwrap_err();
    assert!(e.to_string().contains("--ref (refs/heads/feature): ref `refs/heads/feature` does not deploy"), "{e}");
    let mut o = opts(root, "refs/heads/main");
    o.jobs = 0;
    let e = run_deploy(fake.clone(), inventory(root), &o).await.unwrap_err();
    assert_eq!(e.to_string(), "1 problem in the input:\n  --jobs: expected at least 1 container at a time, found 0\n");
    assert_eq!(fake.calls(), vec![]);
    assert!(!root.join(".proxmox-gitops/deploy.json").exists());
}

/// The shipped runner calls the real steps: without PROXMOX_HOST the pve backend cannot be built,
/// so every provision fails with a message naming the setting, and each container's artifact
/// records the failure for its inputs digest (configure is then not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_runner_runs_the_real_provision_step_and_records_its_digest() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let runner = Arc::new(BuiltinRunner::new(proxmox_gitops::settings::Settings::default()));
    let s = run_deploy(runner, inventory(root), &opts(root, "refs/heads/release")).await.unwrap();
    assert_eq!(s.failed(), vec!["config", "alpha"]);
    let err = s.containers[1].error.as_deref().unwrap();
    assert_eq!(
        err,
        "provision: 1 problem in the input:\n  settings (PROXMOX_HOST or proxmox.host in local/config.json): not set: the \
         PVE API host (name or address)"
    );
    assert_eq!(s.containers[1].steps[1].state, proxmox_gitops::steps::deploy::StepState::NotRun);
    let prov: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/provision/alpha.json")).unwrap())
            .unwrap();
    assert_eq!(prov["result"], "failed");
    assert_eq!(prov["backend"], "pve");
    assert_eq!(prov["inputs_digest"].as_str(), Some(digest_of(root, "alpha").as_str()));
    assert_eq!(prov["plan"]["action"], "refused");
}

/// `REQUIRES` names what a lib's configuration needs: satisfied by the Gitea settings (LOGIN,
/// PASSWORD), the globals or the container's env; on `release` a lib that lacks something is
/// not provisioned at all (the message names what and where, not the backend's problem).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requires_is_checked_before_a_container_is_created() {
    use proxmox_gitops::steps::configure::{Contract, missing_requirements, requirements_error};
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    write_files(
        root,
        &[("libs/alpha/container.env", "ID=101\nIP=127.0.20.2/24\nREQUIRES=\"LOGIN, PASSWORD,API_KEY,IP\"\n")],
    );
    let inv = inventory(root);
    let alpha = inv.container("alpha").unwrap();
    assert_eq!(alpha.requires, vec!["LOGIN", "PASSWORD", "API_KEY", "IP"]);
    let none = Contract::default();
    assert_eq!(missing_requirements(&inv, alpha, &none), vec!["LOGIN", "PASSWORD", "API_KEY"]);
    let contract = Contract {
        host: None,
        login: Some("admin".into()),
        password: Some(secrecy::SecretString::from("pw".to_string())),
    };
    assert_eq!(missing_requirements(&inv, alpha, &contract), vec!["API_KEY"]);
    assert_eq!(
        requirements_error(alpha, &["PASSWORD".into(), "API_KEY".into()]),
        "alpha needs PASSWORD and API_KEY (REQUIRES in libs/alpha/container.env), which are not set: set PASSWORD in \
         the environment (Gitea Actions: the PASSWORD secret) or \"password\" in local/config.local.json; API_KEY in \
         globals.json (or globals.local.json) or in libs/alpha/container.env"
    );
    // A global (or a key of the container's own env) satisfies a name.
    write_files(root, &[("globals.json", "{\"API_KEY\": \"k-1\"}")]);
    let inv = inventory(root);
    assert_eq!(missing_requirements(&inv, inv.container("alpha").unwrap(), &contract), Vec::<String>::new());

    // release: provision refuses before the backend is even built (it would fail on
    // PROXMOX_HOST otherwise); config has no REQUIRES and meets the backend's error.
    let runner = Arc::new(BuiltinRunner::new(proxmox_gitops::settings::Settings::default()));
    let s = run_deploy(runner, inventory(root), &opts(root, "refs/heads/release")).await.unwrap();
    assert_eq!(s.failed(), vec!["config", "alpha"]);
    assert_eq!(
        s.containers[1].error.as_deref().unwrap(),
        "provision: alpha needs LOGIN and PASSWORD (REQUIRES in libs/alpha/container.env), which are not set: set \
         LOGIN in the environment (Gitea Actions: the LOGIN variable) or \"login\" in local/config.local.json; PASSWORD \
         in the environment (Gitea Actions: the PASSWORD secret) or \"password\" in local/config.local.json"
    );
    assert!(s.containers[0].error.as_deref().unwrap().contains("PROXMOX_HOST"));
    let prov: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/provision/alpha.json")).unwrap())
            .unwrap();
    assert_eq!(prov["result"], "failed");
    assert_eq!(prov["actions"], serde_json::json!([]));
}

/// On main the real configure step runs; without a provision artifact it fails saying so, and its
/// artifact carries the inputs digest too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_runner_runs_the_real_configure_step() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let runner = Arc::new(BuiltinRunner::new(proxmox_gitops::settings::Settings::default()));
    let mut o = opts(root, "refs/heads/main");
    o.containers = vec!["alpha".into()];
    let s = run_deploy(runner, inventory(root), &o).await.unwrap();
    assert_eq!(s.failed(), vec!["alpha"]);
    let err = s.containers[0].error.as_deref().unwrap();
    assert!(
        err.starts_with("configure: alpha: no provision artifact; run `proxmox-gitops provision -c alpha` first"),
        "{err}"
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/configure/alpha.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["result"], "failed");
    assert_eq!(cfg["inputs_digest"].as_str(), Some(digest_of(root, "alpha").as_str()));
}

/// The snapshot step of a container without SNAPSHOT paths succeeds without contacting it; one
/// with paths but no way in (not provisioned) fails naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_runner_runs_the_real_snapshot_step() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    write_files(root, &[("libs/alpha/container.env", "ID=101\nIP=127.0.30.2/24\nSNAPSHOT=/var/lib/alpha\n")]);
    let runner = Arc::new(BuiltinRunner::new(proxmox_gitops::settings::Settings::default()));
    let s = run_deploy(runner, inventory(root), &opts(root, "refs/heads/snapshot")).await.unwrap();
    assert_eq!(s.failed(), vec!["alpha"]);
    let err = s.containers[1].error.as_deref().unwrap();
    assert!(
        err.starts_with("snapshot: alpha (vmid 101): no provision artifact")
            && err.contains("run `proxmox-gitops provision -c alpha` first"),
        "{err}"
    );
    let ok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/snapshot/config.json")).unwrap())
            .unwrap();
    assert_eq!(ok["result"], "ok");
    assert_eq!(ok["warnings"], serde_json::json!(["config declares no SNAPSHOT paths: nothing to snapshot"]));
    assert_eq!(ok["inputs_digest"].as_str(), Some(digest_of(root, "config").as_str()));
}

#[test]
fn the_inputs_digest_covers_spec_lib_tree_and_base_tree() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path().canonicalize().unwrap();
    let d = |name: &str| digest_of(&root, name);
    let (a0, b0, c0) = (d("alpha"), d("beta"), d("config"));
    assert!(a0.starts_with("sha256:") && a0.len() == 71);

    // Mode counts.
    use std::os::unix::fs::PermissionsExt;
    let sh = root.join("libs/alpha/configure.sh");
    std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a1 = d("alpha");
    assert_ne!(a1, a0);
    assert_eq!(d("beta"), b0);
    // Path counts (same content, other name).
    std::fs::rename(&sh, root.join("libs/alpha/configure2.sh")).unwrap();
    assert_ne!(d("alpha"), a1);
    std::fs::rename(root.join("libs/alpha/configure2.sh"), &sh).unwrap();
    assert_eq!(d("alpha"), a1);
    // The spec counts (a container.local.env changes the layered spec, not the tree).
    write_files(&root, &[("libs/alpha/container.local.env", "CORES=4\n")]);
    assert_ne!(d("alpha"), a1);
    std::fs::remove_file(root.join("libs/alpha/container.local.env")).unwrap();
    // Git-ignored files do not count.
    write_files(&root, &[("libs/alpha/.gitignore", "build/\n")]);
    let a2 = d("alpha");
    write_files(&root, &[("libs/alpha/build/out.bin", "junk")]);
    assert_eq!(d("alpha"), a2);
    // The control plane's tree is the root without the libs and base; its own files count.
    assert_eq!(d("config"), c0);
    write_files(&root, &[("globals.json", "{}")]);
    assert_ne!(d("config"), c0);
    assert_eq!(d("beta"), b0);
}

#[test]
fn the_inputs_digest_covers_globals_and_the_settings_that_shape_containers() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path().canonicalize().unwrap();
    let artifacts = root.join(".proxmox-gitops");
    let digest = |inv: &Inventory| inputs_digest(&root, inv, inv.container("alpha").unwrap(), &artifacts).unwrap();
    let inv = inventory(&root);
    let a0 = digest(&inv);

    // A global value reaches every lib's configuration: every container's digest changes, also
    // through the git-ignored globals.local.json.
    write_files(&root, &[("globals.local.json", "{\"DOMAIN\": \"lan.example\"}")]);
    let with_global = inventory(&root);
    assert_eq!(with_global.globals.get("DOMAIN").map(String::as_str), Some("lan.example"));
    assert_ne!(digest(&with_global), a0);
    std::fs::remove_file(root.join("globals.local.json")).unwrap();
    assert_eq!(digest(&inventory(&root)), a0);

    // What is built from: the ostemplate, the node, the bridge, the login libs receive.
    let changed = |f: &dyn Fn(&mut Inventory)| {
        let mut inv = inventory(&root);
        f(&mut inv);
        digest(&inv)
    };
    assert_ne!(changed(&|i| i.settings.template = Some("debian-13-standard_13.1-2".into())), a0);
    assert_ne!(changed(&|i| i.settings.pve_node = Some("pve2".into())), a0);
    assert_ne!(changed(&|i| i.settings.bridge = "vmbr1".into()), a0);
    assert_ne!(changed(&|i| i.settings.gitea_login = Some("admin2".into())), a0);
    // How the tool connects does not count.
    assert_eq!(changed(&|i| i.settings.pve_port = 8443), a0);
    assert_eq!(changed(&|i| i.settings.pve_user = Some("automation@pve".into())), a0);
}
