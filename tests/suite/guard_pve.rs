//! One actor per vmid, PVE's own locks, and ownership, against fakepve (PyPI) on loopback:
//!
//! * two processes of the binary started together (separate artifacts directories) create and
//!   start the container exactly once; the other waits and then converges; a start another run
//!   did since the plan is not sent again;
//! * PVE's config file lock held by another task is waited for within `--timeout-lock`, then
//!   named with how to see who holds it (never retried without end as a changed config);
//! * a lease of another run is waited for (bounded, naming the holder); a dead run's lease is
//!   taken over; a `kill -9` during a create is converged by the first re-run, which waits for
//!   the create task PVE still runs;
//! * PVE locks: a running task is waited for; a lock without a task names `pct unlock`;
//! * a container without our mark is never stopped, changed or destroyed; `--adopt` takes it
//!   over in place.
//!
//! Waiting tests run fakepve with a time scale above 0, so the polling loops really loop. Only
//! 127.0.0.1 is contacted.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proxmox_gitops::artifact::{self, ArtifactDir};
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::backend::{self, Backend};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{Action, ApplyOptions, Outcome, PlanPolicy, Provision, RecreatePolicy};
use proxmox_gitops::steps::destroy::{self, DestroyOptions};
use proxmox_gitops::steps::provision as step;
use serde_json::Value;
use support::fakepve::{FakePve, TEMPLATE, TEMPLATE_FILE};

const BROKER_ENV: &str = "ID=101\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\n";

fn description(lib: &str) -> String {
    format!("managed by proxmox-gitops: lib `{lib}`\nostemplate: local:vztmpl/{TEMPLATE_FILE}\n")
}

/// A monorepo with the lib `broker` (vmid 101) and a share: (repo, share).
fn broker_repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = tempfile::tempdir().unwrap();
    let share = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("libs/broker")).unwrap();
    std::fs::write(repo.path().join("libs/broker/container.env"), BROKER_ENV).unwrap();
    (repo, share)
}

/// The binary with `args`, `--repo`, `--artifacts` against `pve` (root@pam / secret), started,
/// its output piped.
fn spawn(pve: &FakePve, repo: &Path, share: &Path, artifacts: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(args)
        .arg("--repo")
        .arg(repo)
        .arg("--artifacts")
        .arg(artifacts)
        .arg("--pve-ca")
        .arg(&pve.ca)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PROXMOX_HOST", "127.0.0.1")
        .env("PROXMOX_PORT", pve.port.to_string())
        .env("PROXMOX_USER", "root@pam")
        .env("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
        .env("PROXMOX_TEMPLATE", TEMPLATE)
        .env("PROXMOX_STORAGE", "local")
        .env("PROXMOX_GATEWAY", "127.0.0.254")
        .env("PROXMOX_SHARE", share)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` (at most 180 s, then kills it and fails): (exit code, stdout + stderr).
fn finish(child: Child) -> (Option<i32>, String) {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(out) => {
            let out = out.unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            (out.status.code(), text)
        }
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("the run did not end within 180 s");
        }
    }
}

fn vzcreate_tasks(pve: &FakePve) -> usize {
    pve.exec("result = len([t for t in pve.tasklog if t['type'] == 'vzcreate' and t['id'] == '101'])").as_u64().unwrap()
        as usize
}

fn provision_artifact(dir: &Path) -> Provision {
    artifact::read(&dir.join("provision/broker.json")).unwrap()
}

#[test]
fn two_processes_started_together_create_the_container_once() {
    // Tasks take real time (a create of 20 PVE seconds is 1 s), so the two runs overlap.
    let pve = FakePve::start_scaled(0.05);
    pve.add_template();
    pve.exec("pve.ct_secs['create'] = 20");
    let (repo, share) = broker_repo();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let args = ["provision", "--container", "broker", "--no-wait-ssh"];
    let a = spawn(&pve, repo.path(), share.path(), a_dir.path(), &args);
    let b = spawn(&pve, repo.path(), share.path(), b_dir.path(), &args);
    let (a_code, a_out) = finish(a);
    let (b_code, b_out) = finish(b);
    assert_eq!(a_code, Some(0), "{a_out}");
    assert_eq!(b_code, Some(0), "{b_out}");

    // Exactly one create went through; PVE refused any second one; and one start: the
    // create's own (`start=1`), none besides.
    assert_eq!(vzcreate_tasks(&pve), 1);
    let starts: Vec<_> =
        pve.writes(false).into_iter().filter(|(m, p, _)| m == "POST" && p.ends_with("/status/start")).collect();
    assert_eq!(starts.len(), 0, "{starts:?}");
    let creates: Vec<_> =
        pve.writes(false).into_iter().filter(|(m, p, _)| m == "POST" && p == "/nodes/pve1/lxc").collect();
    assert!(!creates.is_empty() && creates.len() <= 2, "{creates:?}");
    let arts = [provision_artifact(a_dir.path()), provision_artifact(b_dir.path())];
    assert_eq!(arts.iter().filter(|p| p.created).count(), 1, "{arts:#?}");
    let other = arts.iter().find(|p| !p.created).unwrap();
    assert_eq!(other.outcome, Outcome::Ok, "{other:#?}");
    assert!(!other.actions.iter().any(|a| a.action == "create" || a.action == "destroy"), "{other:#?}");
    eprintln!("creates sent: {} (2: the second run lost the create race)", creates.len());
    if creates.len() == 2 {
        // It lost the create race: it waited for the winner's lease, then found nothing to do.
        assert!(other.warnings.iter().any(|w| w.contains("created by another run")), "{other:#?}");
        assert_eq!(other.plan.action, Action::Nothing, "{other:#?}");
    }
    // The container runs, carries our mark, and no lease is left behind.
    let cfg = pve.ct_config(101).unwrap();
    assert_eq!(cfg["status"], "running");
    assert_eq!(cfg["description"], Value::String(description("broker")), "{cfg}");
    assert_eq!(cfg["tags"], "proxmox-gitops");
}

/// The second of two runs for one new container, started while the first one's create runs,
/// waits for the create and for the first run's lease, then plans again under its own lease:
/// the container was created and started once, by the first run. Deterministic: the create
/// takes 10 s and the start 5 s, and the second run starts once PVE holds the container locked
/// `create`, so it plans (after the create) while the first run's start runs.
#[test]
fn a_run_started_during_another_runs_create_neither_creates_nor_starts_it_again() {
    let pve = FakePve::start_scaled(0.05);
    pve.add_template();
    pve.exec("pve.ct_secs['create'] = 200");
    let (repo, share) = broker_repo();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let args = ["provision", "--container", "broker", "--no-wait-ssh"];
    let a = spawn(&pve, repo.path(), share.path(), a_dir.path(), &args);
    let locked = (0..600).any(|_| {
        let create = pve.ct_config(101).is_some_and(|c| c["lock"] == "create");
        if !create {
            std::thread::sleep(Duration::from_millis(50));
        }
        create
    });
    assert!(locked, "the first run's create started");
    pve.exec("pve.ct(101).start_secs = 100");
    let b = spawn(&pve, repo.path(), share.path(), b_dir.path(), &args);
    let (a_code, a_out) = finish(a);
    let (b_code, b_out) = finish(b);
    assert_eq!(a_code, Some(0), "{a_out}");
    assert_eq!(b_code, Some(0), "{b_out}");
    assert_eq!(vzcreate_tasks(&pve), 1);
    let starts: Vec<_> =
        pve.writes(false).into_iter().filter(|(m, p, _)| m == "POST" && p.ends_with("/status/start")).collect();
    assert_eq!(starts.len(), 0, "one start, the create's own (`start=1`): {starts:?}\n{b_out}");
    let (first, second) = (provision_artifact(a_dir.path()), provision_artifact(b_dir.path()));
    assert!(first.created && first.actions.iter().any(|a| a.action == "start"), "{first:#?}");
    assert_eq!(second.outcome, Outcome::Ok, "{second:#?}");
    assert!(!second.created && second.actions.iter().all(|a| a.action != "start"), "{second:#?}");
    assert_eq!(second.plan.action, Action::Nothing, "{second:#?}");
    assert!(!second.plan.start, "{second:#?}");
    let cfg = pve.ct_config(101).unwrap();
    assert_eq!(cfg["status"], "running");
    assert_eq!(cfg["description"], Value::String(description("broker")), "{cfg}");
}

/// fakepve (time scale `scale`) with the template, a backend (lock wait `lock`, lease wait
/// `lease`, `adopt`) and the share/artifacts directories.
struct Env {
    pve: FakePve,
    share: tempfile::TempDir,
    artifacts: tempfile::TempDir,
}

impl Env {
    fn new(scale: f64) -> Env {
        let pve = FakePve::start_scaled(scale);
        pve.add_template();
        Env { pve, share: tempfile::tempdir().unwrap(), artifacts: tempfile::tempdir().unwrap() }
    }

    fn backend(&self, lock: u64, lease: u64) -> Backend {
        let mut settings = self.pve.settings(self.share.path());
        settings.pve.gateway = Some("127.0.0.254".into());
        let timeouts =
            Timeouts { lock: Duration::from_secs(lock), lease: Duration::from_secs(lease), ..Timeouts::default() };
        backend::open(proxmox_gitops::model::BackendKind::Pve, &settings, &self.pve.connect(timeouts)).unwrap()
    }

    async fn provision(&self, b: &Backend, s: ContainerSpec, policy: impl Into<PlanPolicy>) -> Provision {
        let planned = backend::plan_all(b, vec![s], policy, 1).await;
        self.apply(b, planned).await
    }

    /// Applies plans made before (by [`backend::plan_all`]); the first container's artifact.
    async fn apply(&self, b: &Backend, planned: Vec<backend::Planned>) -> Provision {
        let opts = ApplyOptions { share: self.share.path().to_path_buf(), wait_ssh: false, ..ApplyOptions::default() };
        let dir = ArtifactDir::new(self.artifacts.path());
        step::apply_all(b, planned, &opts, 1, &dir).await.unwrap().remove(0)
    }

    fn set_description(&self, vmid: u32, text: &str) {
        self.pve.exec(&format!("pve.ct({vmid}).config['description'] = {}", serde_json::to_string(text).unwrap()));
    }
}

fn spec(memory: u64) -> ContainerSpec {
    support::spec::spec("broker", 101).loopback().resources(1, memory, 512).build()
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test(flavor = "multi_thread")]
async fn another_runs_lease_is_waited_for_a_dead_one_taken_over_and_the_wait_is_bounded() {
    let env = Env::new(0.01);
    let b = env.backend(10, 60);
    let first = env.provision(&b, spec(512), RecreatePolicy::Never).await;
    assert_eq!(first.outcome, Outcome::Ok, "{first:#?}");
    assert!(first.created);

    // Another run (on another host) works on it for 2 more seconds: waited for, then applied.
    env.set_description(
        101,
        &format!("{}proxmox-gitops lease: runner9:77:run-5:beef until {}\n", description("broker"), now() + 2),
    );
    let started = Instant::now();
    let out = env.provision(&b, spec(1024), RecreatePolicy::Never).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited for the lease");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["memory"], 1024);
    assert_eq!(cfg["description"], Value::String(description("broker")), "our lease is released: {cfg}");

    // A lease that expired (its run died): taken over at once.
    env.set_description(
        101,
        &format!("{}proxmox-gitops lease: runner9:77:beef until {}\n", description("broker"), now() - 5),
    );
    let out = env.provision(&b, spec(2048), RecreatePolicy::Never).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], 2048);

    // A live lease that outlasts --timeout-lease: a clear failure naming the holder; nothing changed.
    let b = env.backend(10, 1);
    env.set_description(
        101,
        &format!("{}proxmox-gitops lease: runner9:77:beef until {}\n", description("broker"), now() + 600),
    );
    env.pve.requests(true);
    let out = env.provision(&b, spec(4096), RecreatePolicy::Never).await;
    let Outcome::Failed { error } = &out.outcome else { panic!("{out:#?}") };
    assert!(error.contains("proxmox-gitops run `runner9:77:beef` holds its lease until"), "{error}");
    assert!(error.contains("--timeout-lease"), "{error}");
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], 2048);
    assert!(env.pve.writes(false).iter().all(|(m, _, _)| m == "POST"), "no PUT: only a login");
    // The destroy step waits for the lease as well: bounded, then refused; the container stays.
    let opts = DestroyOptions { share: env.share.path().to_path_buf(), no_snapshot: true };
    let out = destroy::destroy_all(&b, &[spec(2048)], &opts, &ArtifactDir::new(env.artifacts.path())).await.unwrap();
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(error.contains("holds its lease until"), "{error}");
    assert_eq!(env.pve.ct_config(101).unwrap()["status"], "running");
    // The planner and the plan ignore lease lines: the container is ours and converged.
    let b = env.backend(10, 60);
    assert_eq!(b.plan(&spec(2048), RecreatePolicy::Never).await.unwrap().action, Action::Nothing);
}

/// Leases run on PVE's clock (the `Date` of its answers), not the runner's: with PVE's clock
/// 1000 s behind this machine's, another run's lease valid for 2 more seconds by PVE's time is
/// waited for (by this machine's clock it expired long ago), and our own lease is written in
/// PVE's time.
#[tokio::test(flavor = "multi_thread")]
async fn leases_go_by_pves_clock_not_the_runners() {
    let env = Env::new(0.01);
    let b = env.backend(10, 60);
    let first = env.provision(&b, spec(512), RecreatePolicy::Never).await;
    assert_eq!(first.outcome, Outcome::Ok, "{first:#?}");
    // fakepve's HTTP server (aiohttp) stamps each answer's Date from this function.
    env.pve.exec(
        "import aiohttp.web_response as wr, email.utils, time\n\
         wr.rfc822_formatted_time = lambda: email.utils.formatdate(time.time() - 1000, usegmt=True)",
    );
    let pve_now = now() - 1000;
    env.set_description(
        101,
        &format!("{}proxmox-gitops lease: runner9:77:run-5:beef until {}\n", description("broker"), pve_now + 2),
    );
    env.pve.requests(true);
    let started = Instant::now();
    let out = env.provision(&b, spec(1024), RecreatePolicy::Never).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited for the lease valid by PVE's clock");
    let ours = env
        .pve
        .writes(false)
        .into_iter()
        .find_map(|(m, _, body)| (m == "PUT").then_some(body).filter(|b| b.contains("lease")))
        .expect("our lease was written");
    let until: u64 = ours
        .split("until+")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no lease time in {ours}"));
    let expected = now() - 1000 + 300;
    assert!(until.abs_diff(expected) <= 10, "our lease is in PVE's time: until {until}, expected about {expected}");
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], 1024);
}

#[test]
fn kill_9_during_a_create_then_the_first_rerun_waits_for_the_task_and_converges() {
    let pve = FakePve::start_scaled(0.05);
    pve.add_template();
    // The create task runs 10 s: long enough to be killed in, whatever the machine's load.
    pve.exec("pve.ct_secs['create'] = 200");
    let (repo, share) = broker_repo();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let args = ["provision", "--container", "broker", "--no-wait-ssh"];
    let mut a = spawn(&pve, repo.path(), share.path(), a_dir.path(), &args);
    // Wait (bounded) until PVE holds CT 101 locked `create`, then kill the run.
    let mut locked = false;
    for _ in 0..600 {
        let cfg = pve.ct_config(101);
        if cfg.as_ref().is_some_and(|c| c["lock"] == "create") {
            locked = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(locked, "the create started");
    a.kill().unwrap();
    a.wait().unwrap();
    // The re-run sees the lock, finds the running vzcreate task, waits for it, and converges;
    // the dead run's lease (this host, PID gone) does not hold it up.
    let (code, out) = finish(spawn(&pve, repo.path(), share.path(), b_dir.path(), &args));
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("--allow-recreate"), "{out}");
    assert_eq!(vzcreate_tasks(&pve), 1, "no second create");
    let art = provision_artifact(b_dir.path());
    assert_eq!(art.outcome, Outcome::Ok, "{art:#?}");
    assert!(art.warnings.iter().any(|w| w.contains("locked (create) by the task UPID:pve1:")), "{art:#?}");
    let cfg = pve.ct_config(101).unwrap();
    assert_eq!(cfg["status"], "running");
    // The killed run's create started the container too (`start=1`), so the re-run found it
    // converged and wrote nothing: the dead run's lease line stays until the next write, which
    // takes it over (its holder's PID is gone); every comparison ignores it.
    let desc = cfg["description"].as_str().unwrap_or_default();
    let without_lease: String =
        desc.lines().filter(|l| !l.starts_with("proxmox-gitops lease: ")).map(|l| format!("{l}\n")).collect();
    assert_eq!(without_lease, description("broker"), "{cfg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pve_locks_a_running_task_is_waited_for_a_leftover_lock_names_pct_unlock() {
    let env = Env::new(0.02);
    let b = env.backend(60, 60);
    assert_eq!(env.provision(&b, spec(512), RecreatePolicy::Never).await.outcome, Outcome::Ok);

    // A backup runs for 60 PVE seconds (1.2 s): the plan waits for its task, then converges.
    env.pve.exec("await pve.backup(101, secs=60)");
    let out = env.provision(&b, spec(1024), RecreatePolicy::Never).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    assert!(
        out.warnings.iter().any(|w| w.contains("locked (backup) by the task UPID:pve1:") && w.contains(":vzdump:")),
        "{out:#?}"
    );
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], 1024);

    // A lock left over by an interrupted snapshot (no task): bounded wait, then the command to run.
    env.pve.exec("pve.snapshot_lock(101, 'snapshot')");
    let b = env.backend(1, 60);
    env.pve.requests(true);
    let planned = backend::plan_all(&b, vec![spec(2048)], RecreatePolicy::WhenNeeded, 1).await;
    let e = format!("{:#}", planned[0].plan.as_ref().unwrap_err());
    assert!(e.contains("CT is locked (snapshot)") && e.contains("no task of CT 101 runs on node pve1"), "{e}");
    assert!(e.contains("`pct unlock 101` on node pve1"), "{e}");
    assert!(!e.contains("--allow-recreate"), "{e}");
    assert!(env.pve.writes(false).iter().all(|(m, _, _)| m == "POST"), "nothing written");
    let tasks = env
        .pve
        .requests(false)
        .into_iter()
        .filter(|(_, p, _)| p == "/nodes/pve1/tasks" || p.starts_with("/nodes/pve1/tasks?"))
        .count();
    assert!(tasks >= 1, "the running task was looked for");

    // The interrupted create of someone else (config holding only the lock): same advice, plus how
    // to check and remove the unfinished container.
    env.pve.exec("pve.add_ct(102, defaults=False, config={'lock': 'create'})");
    let planned = backend::plan_all(
        &b,
        vec![support::spec::spec("cache", 102).loopback().build()],
        RecreatePolicy::WhenNeeded,
        1,
    )
    .await;
    let e = format!("{:#}", planned[0].plan.as_ref().unwrap_err());
    assert!(e.contains("`pct unlock 102` on node pve1") && e.contains("pct destroy 102"), "{e}");
    assert!(!e.contains("--allow-recreate"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_container_is_never_touched_and_adopt_takes_it_over_in_place() {
    let env = Env::new(0.0);
    // Someone's container at broker's vmid: same hostname, no mark, a bigger disk (a shrink
    // would need a recreate), stopped.
    env.pve.exec(
        "pve.add_ct(101, name='broker', config={'description': 'hand-made: keep me', 'tags': 'prod', \
         'rootfs': 'local-lvm:vm-101-disk-0,size=64G', 'cores': 1})",
    );
    let b = env.backend(5, 60);
    for policy in [RecreatePolicy::Never, RecreatePolicy::WhenNeeded, RecreatePolicy::Always] {
        env.pve.requests(true);
        let out = env.provision(&b, spec(512), policy).await;
        let Outcome::Failed { error } = &out.outcome else { panic!("{out:#?}") };
        assert!(matches!(out.plan.action, Action::Foreign { .. }), "{out:#?}");
        assert!(
            error.contains("was not created by proxmox-gitops for lib `broker`") && error.contains("--adopt"),
            "{error}"
        );
        assert!(!error.contains("--allow-recreate"), "{error}");
        assert!(
            env.pve.writes(false).iter().all(|(m, p, _)| m == "POST" && p == "/access/ticket"),
            "{policy:?}: nothing written"
        );
    }
    // The destroy step refuses it as well (it declares no SNAPSHOT paths, the old hole).
    let opts = DestroyOptions { share: env.share.path().to_path_buf(), no_snapshot: true };
    let dir = ArtifactDir::new(env.artifacts.path());
    let out = destroy::destroy_all(&b, &[spec(512)], &opts, &dir).await.unwrap();
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(
        error.contains("not created by proxmox-gitops for lib `broker`") && error.contains("not destroying it"),
        "{error}"
    );
    assert!(env.pve.ct_config(101).is_some());

    // --adopt with a change that needs a recreate (the rootfs on another storage): still never
    // destroyed.
    env.pve.exec("pve.ct(101).config['rootfs'] = 'other:vm-101-disk-0,size=8G'");
    let adopt = |recreate| PlanPolicy { recreate, adopt: true };
    let out = env.provision(&b, spec(512), adopt(RecreatePolicy::WhenNeeded)).await;
    let Action::Refused { reasons, .. } = &out.plan.action else { panic!("{out:#?}") };
    assert!(reasons.iter().any(|r| r.contains("adopting never destroys")), "{reasons:?}");
    assert_eq!(env.pve.ct_config(101).unwrap()["rootfs"], "other:vm-101-disk-0,size=8G");

    // --adopt where everything applies in place: the plan says `adopt`, then our mark is written.
    env.pve.exec("pve.ct(101).config['rootfs'] = 'local-lvm:vm-101-disk-0,size=8G'");
    let plan = b.plan(&spec(1024), adopt(RecreatePolicy::Never)).await.unwrap();
    let Action::Adopt { changes, .. } = &plan.action else { panic!("{plan:#?}") };
    let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
    for k in ["memory", "description", "tags"] {
        assert!(keys.contains(&k), "{keys:?}");
    }
    let out = env.provision(&b, spec(1024), adopt(RecreatePolicy::Never)).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    assert!(matches!(out.plan.action, Action::Adopt { .. }), "{out:#?}");
    let cfg = env.pve.ct_config(101).unwrap();
    // Our mark first; the container's own description is kept after it.
    assert_eq!(cfg["description"], Value::String(format!("{}\nhand-made: keep me\n", description("broker"))), "{cfg}");
    assert_eq!(cfg["tags"], "prod;proxmox-gitops");
    assert_eq!(cfg["memory"], 1024);
    assert_eq!(cfg["status"], "running");
    // From now on it is ours: without --adopt, nothing to do.
    assert_eq!(b.plan(&spec(1024), RecreatePolicy::Never).await.unwrap().action, Action::Nothing);
}

#[test]
fn cli_plan_shows_foreign_and_adopt() {
    let pve = FakePve::start();
    pve.add_template();
    pve.exec("pve.add_ct(101, name='broker', status='running', config={'cores': 1, 'memory': 512, 'swap': 512})");
    let (repo, share) = broker_repo();
    let artifacts = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| finish(spawn(&pve, repo.path(), share.path(), artifacts.path(), args));
    let (code, out) = run(&["plan", "--ref", "refs/heads/release"]);
    assert_eq!(code, Some(0), "{out}");
    let row = out.lines().find(|l| l.starts_with("broker")).unwrap_or_default();
    assert!(row.contains("foreign"), "{out}");
    assert!(out.contains("1 foreign (not ours; --adopt takes over)"), "{out}");
    let (code, out) = run(&["plan", "--ref", "refs/heads/release", "--adopt"]);
    assert_eq!(code, Some(0), "{out}");
    let row = out.lines().find(|l| l.starts_with("broker")).unwrap_or_default();
    assert!(row.trim_end().ends_with("adopt"), "{out}");
    assert!(out.contains("1 to adopt"), "{out}");
    // provision without --adopt fails and changes nothing; with it, adopts.
    let (code, out) = run(&["provision", "--container", "broker", "--no-wait-ssh"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(pve.ct_config(101).unwrap().get("description").is_none());
    let (code, out) = run(&["provision", "--container", "broker", "--no-wait-ssh", "--adopt"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(pve.ct_config(101).unwrap()["description"], Value::String(description("broker")));
}

/// PVE's config file lock held by another task answers the lease write with HTTP 500 `can't lock
/// file '/run/lock/lxc/pve-config-101.lock' - got timeout`: a lock, not a lost compare-and-set.
/// It is waited for within `--timeout-lock` (bounded in requests as well), then the run fails
/// naming the lock and how to see who holds it, having changed nothing; a lock that clears in
/// time is waited out and the change applied.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_config_file_lock_is_waited_for_within_the_lock_timeout_then_named() {
    // Each write waits PVE's 10 s for the lock: 0.1 s here.
    let env = Env::new(0.01);
    let b = env.backend(60, 60);
    assert_eq!(env.provision(&b, spec(512), RecreatePolicy::Never).await.outcome, Outcome::Ok);

    // Another task takes the config lock and never lets go.
    env.pve.exec("await pve.hold_config_lock(101, None)");
    let b = env.backend(2, 60);
    env.pve.requests(true);
    let out = tokio::time::timeout(Duration::from_secs(60), env.provision(&b, spec(1024), RecreatePolicy::Never))
        .await
        .expect("a held lock ends the run within --timeout-lock, not never");
    let Outcome::Failed { error } = &out.outcome else { panic!("{out:#?}") };
    assert!(error.contains("/run/lock/lxc/pve-config-101.lock"), "{error}");
    assert!(error.contains("--timeout-lock"), "{error}");
    assert!(error.contains("pvenode task list --vmid 101 --source active"), "{error}");
    assert!(!error.contains("config changed"), "a lock is not a changed config: {error}");
    let puts = env.pve.writes(false).into_iter().filter(|(m, _, _)| m == "PUT").count();
    assert!((1..=20).contains(&puts), "bounded in requests: {puts} PUTs");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["memory"], 512);
    assert_eq!(cfg["description"], Value::String(description("broker")), "{cfg}");

    // The lock is let go after 100 PVE seconds (1 s): waited for, then the change is applied.
    env.pve.exec("pve.release_config_lock(101)\nawait pve.hold_config_lock(101, 100)");
    let b = env.backend(60, 60);
    let out = env.provision(&b, spec(1024), RecreatePolicy::Never).await;
    assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["memory"], 1024);
    assert_eq!(cfg["description"], Value::String(description("broker")), "{cfg}");
}

/// The one-actor rule covers the start: a container another run started between this run's
/// plan and its lease is not started again. Both orders are covered without timing: the plan
/// made while the other run's lease was on the container (its digest changed since), and the
/// plan made before the other run took its lease (lease written and removed again: the same
/// digest as planned, only the status tells).
#[tokio::test(flavor = "multi_thread")]
async fn a_start_done_by_another_run_since_the_plan_is_not_sent_again() {
    let env = Env::new(0.0);
    let b = env.backend(10, 60);
    assert_eq!(env.provision(&b, spec(512), RecreatePolicy::Never).await.outcome, Outcome::Ok);
    let other = format!("{}proxmox-gitops lease: runner9:77:run-5:beef until {}\n", description("broker"), now() + 600);
    for lease_seen_by_the_plan in [true, false] {
        // Stopped, as right after the other run's create and before its start.
        env.pve.exec("pve.ct(101).status = 'stopped'");
        if lease_seen_by_the_plan {
            env.set_description(101, &other);
        }
        let planned = backend::plan_all(&b, vec![spec(512)], RecreatePolicy::Never, 1).await;
        let plan = planned[0].plan.as_ref().unwrap();
        assert!(plan.start && plan.action == Action::Nothing, "{plan:#?}");
        // The other run, under its lease, starts it and releases the lease.
        env.set_description(101, &other);
        env.pve.exec("pve.ct(101).status = 'running'");
        env.set_description(101, &description("broker"));
        env.pve.requests(true);
        let out = env.apply(&b, planned).await;
        assert_eq!(out.outcome, Outcome::Ok, "{out:#?}");
        let starts: Vec<_> =
            env.pve.writes(false).into_iter().filter(|(_, p, _)| p.ends_with("/status/start")).collect();
        assert!(starts.is_empty(), "lease seen by the plan: {lease_seen_by_the_plan}: {starts:?}");
        assert!(!out.actions.iter().any(|a| a.action == "start"), "{out:#?}");
        assert!(!out.plan.start, "the plan carried out is the one made under the lease: {out:#?}");
        let cfg = env.pve.ct_config(101).unwrap();
        assert_eq!(cfg["status"], "running");
        assert_eq!(cfg["description"], Value::String(description("broker")), "{cfg}");
    }
}

/// `plan` reads only: a container PVE has locked (a backup of 600 PVE seconds, 12 s here) is
/// reported busy at once, naming its task — the task still runs when the plan is printed —
/// and `--wait-for-locks` waits for it as `provision` does.
#[test]
fn plan_reports_a_locked_container_busy_instead_of_waiting_unless_told_to_wait() {
    let pve = FakePve::start_scaled(0.02);
    pve.add_template();
    let (repo, share) = broker_repo();
    let artifacts = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| finish(spawn(&pve, repo.path(), share.path(), artifacts.path(), args));
    let (code, out) = run(&["provision", "--container", "broker", "--no-wait-ssh"]);
    assert_eq!(code, Some(0), "{out}");
    let backup_running = || {
        pve.exec("result = [t['status'] for t in pve.tasklog if t['type'] == 'vzdump']")
            == Value::Array(vec![Value::String("running".into())])
    };
    pve.exec("await pve.backup(101, secs=600)");
    let (code, out) = run(&["plan", "--ref", "refs/heads/release"]);
    assert!(backup_running(), "the plan did not wait for the backup");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("CT 101 is busy: PVE has it locked (backup) by the running task UPID:pve1:"), "{out}");
    assert!(out.contains("(vzdump)") && out.contains("--wait-for-locks"), "{out}");
    let (code, out) = run(&["plan", "--ref", "refs/heads/release", "--detailed-exitcode"]);
    assert_eq!(code, Some(1), "a container that cannot be planned: {out}");
    assert!(backup_running());
    // Told to wait: the backup's task is waited for, then the container is planned.
    let (code, out) = run(&["plan", "--ref", "refs/heads/release", "--wait-for-locks"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!backup_running(), "waited for the backup");
    assert!(!out.contains("is busy"), "{out}");
    let row = out.lines().find(|l| l.starts_with("broker")).unwrap_or_default();
    assert!(row.contains("nothing"), "{out}");
}
