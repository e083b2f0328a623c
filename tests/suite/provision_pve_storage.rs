//! What `provision` does on PVE storage, against fakepve on loopback with a time scale above 0
//! (every task is really waited for; the container's address is 127.0.0.1, SSH is not waited
//! for):
//!
//! * mount points change in place: a new `mpN` is hotplugged into the running container, a
//!   grown volume is resized, a removed mount point is deleted (its volume kept as an unused
//!   disk), what PVE keeps pending is applied by a reboot only when the recreate policy allows a
//!   restart, and a shrink is refused;
//! * templates: downloaded over https with the checksum of the node's template index, once per
//!   node and template however many containers need it — also when the download fails — and
//!   an arm64 node gets its arm64 template, or an error naming the architecture.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::backend::{self, Backend};
use proxmox_gitops::inventory::{ContainerSpec, Mount};
use proxmox_gitops::model::{Action, ApplyOptions, BackendKind, Change, Outcome, Provision, RecreatePolicy};
use proxmox_gitops::steps::provision as step;
use serde_json::Value;
use support::fakepve::{FakePve, TEMPLATE_FILE, template_sha512};

/// Real seconds per PVE second of a task: tasks take a few tens of milliseconds and are polled.
const TIME_SCALE: f64 = 0.02;

struct Env {
    pve: FakePve,
    share: tempfile::TempDir,
    artifacts: tempfile::TempDir,
    backend: Backend,
}

impl Env {
    /// fakepve with the test template on storage `local`.
    fn new() -> Env {
        let env = Env::without_template();
        env.pve.add_template();
        env
    }

    /// fakepve whose template storage is empty.
    fn without_template() -> Env {
        let pve = FakePve::start_scaled(TIME_SCALE);
        let share = tempfile::tempdir().unwrap();
        let mut settings = pve.settings(share.path());
        settings.pve.gateway = Some("127.0.0.254".into());
        let connect = pve.connect(Timeouts { lock: Duration::from_secs(10), ..Timeouts::default() });
        let backend = backend::open(BackendKind::Pve, &settings, &connect).unwrap();
        Env { pve, share, artifacts: tempfile::tempdir().unwrap(), backend }
    }

    async fn provision(&self, s: ContainerSpec, policy: RecreatePolicy) -> Provision {
        self.provision_all(vec![s], policy).await.remove(0)
    }

    /// Provisions `specs` all at once (as many jobs as containers).
    async fn provision_all(&self, specs: Vec<ContainerSpec>, policy: RecreatePolicy) -> Vec<Provision> {
        let jobs = specs.len();
        let planned = backend::plan_all(&self.backend, specs, policy, jobs).await;
        let opts = ApplyOptions { share: self.share.path().to_path_buf(), wait_ssh: false, ..ApplyOptions::default() };
        let dir = ArtifactDir::new(self.artifacts.path());
        step::apply_all(&self.backend, planned, &opts, jobs, &dir).await.unwrap()
    }

    /// `GET …/pending` as fakepve holds it: key → `delete` or the pending value.
    fn pending(&self, vmid: u32) -> BTreeMap<String, String> {
        let v = self.pve.exec(&format!(
            "result = dict((k, 'delete' if v is None else v) for k, v in pve.ct({vmid}).pending.items())"
        ));
        serde_json::from_value(v).unwrap()
    }

    /// The volumes on `storage` as `GET …/storage/{storage}/content` lists them (allocated or
    /// referenced by a guest config, `unusedN` included).
    fn volumes(&self, storage: &str) -> Vec<String> {
        let v = self.pve.exec(&format!("result = sorted(pve._volumes('{storage}'))"));
        serde_json::from_value(v).unwrap()
    }
}

fn broker(mounts: Vec<Mount>) -> ContainerSpec {
    ContainerSpec { mounts, ..support::spec::spec("broker", 101).loopback().resources(2, 1024, 256).build() }
}

fn data(size_gib: u64) -> Mount {
    Mount::Volume { storage: "local-lvm".into(), size_gib, container_path: "/data".into() }
}

fn actions(p: &Provision) -> Vec<&str> {
    p.actions.iter().map(|a| a.action.as_str()).collect()
}

/// The writes since the last clear, without the lease's (a `PUT …/config` of the description
/// alone: taking and releasing the lease around every change, see docs/provision.md).
fn changes(pve: &FakePve, clear: bool) -> Vec<(String, String, String)> {
    let lease = |(m, p, b): &(String, String, String)| {
        m == "PUT" && p.ends_with("/config") && body(b).keys().all(|k| k == "description" || k == "digest")
    };
    pve.writes(clear).into_iter().filter(|w| !lease(w)).collect()
}

fn write_paths(pve: &FakePve) -> Vec<String> {
    changes(pve, true).into_iter().map(|(m, p, _)| format!("{m} {p}")).collect()
}

fn body(b: &str) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(b.as_bytes()).into_owned().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mount_point_is_added_grown_and_never_shrunk_without_a_recreate() {
    let env = Env::new();
    let first = env.provision(broker(vec![]), RecreatePolicy::Never).await;
    assert_eq!(first.outcome, Outcome::Ok, "{first:#?}");
    env.pve.requests(true);

    // Added: one PUT …/config, hotplugged into the running container.
    let p = env.provision(broker(vec![data(4)]), RecreatePolicy::Never).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(
        p.plan.action,
        Action::Update {
            changes: vec![Change { key: "mp0".into(), from: None, to: Some("local-lvm:4,mp=/data".into()) }],
            resizes: vec![],
            reboot_needed: false
        }
    );
    assert_eq!(actions(&p), vec!["config"]);
    let writes = changes(&env.pve, false);
    assert_eq!(write_paths(&env.pve), vec!["PUT /nodes/pve1/lxc/101/config"]);
    let sent = body(&writes[0].2);
    assert_eq!(sent["mp0"], "local-lvm:4,mp=/data");
    assert!(sent.contains_key("digest"), "{sent:?}");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["mp0"], "local-lvm:vm-101-disk-1,mp=/data,size=4G");
    assert_eq!(cfg["status"], "running", "never stopped");
    assert_eq!(env.pending(101), BTreeMap::new());

    // Grown: PUT …/resize, online.
    let p = env.provision(broker(vec![data(6)]), RecreatePolicy::Never).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(actions(&p), vec!["resize"]);
    let writes = changes(&env.pve, false);
    assert_eq!(write_paths(&env.pve), vec!["PUT /nodes/pve1/lxc/101/resize"]);
    assert_eq!(writes[0].2, "disk=mp0&size=6G");
    assert_eq!(env.pve.ct_config(101).unwrap()["mp0"], "local-lvm:vm-101-disk-1,mp=/data,size=6G");

    // Shrunk: refused whatever the policy, naming the key and both sizes; nothing written.
    for policy in [RecreatePolicy::Never, RecreatePolicy::WhenNeeded] {
        let p = env.provision(broker(vec![data(2)]), policy).await;
        let reason = "MOUNT in libs/broker/container.env: mp0 (local-lvm:2:/data) is 6 GiB on PVE, the spec asks \
                      for 2 GiB, and PVE cannot shrink a volume; write local-lvm:6:/data (or more)";
        assert_eq!(p.plan.action, Action::refused_blocked(vec![reason.into()]));
        assert_eq!(p.outcome, Outcome::Failed { error: format!("broker (vmid 101): {reason}; nothing was changed") });
        assert_eq!(write_paths(&env.pve), Vec::<String>::new());
    }
    assert_eq!(env.pve.ct_config(101).unwrap()["mp0"], "local-lvm:vm-101-disk-1,mp=/data,size=6G");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_mount_point_is_pending_under_never_and_applied_by_a_reboot_when_allowed() {
    let env = Env::new();
    let first = env.provision(broker(vec![data(4)]), RecreatePolicy::Never).await;
    assert_eq!(first.outcome, Outcome::Ok, "{first:#?}");
    assert_eq!(env.pve.ct_config(101).unwrap()["mp0"], "local-lvm:vm-101-disk-1,mp=/data,size=4G");
    env.pve.requests(true);

    // Under `never`: deleted in place, PVE keeps the delete pending on the running container.
    let p = env.provision(broker(vec![]), RecreatePolicy::Never).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(
        p.plan.action,
        Action::Update {
            changes: vec![Change {
                key: "mp0".into(),
                from: Some("local-lvm:vm-101-disk-1,mp=/data,size=4G".into()),
                to: None
            }],
            resizes: vec![],
            reboot_needed: true
        }
    );
    assert_eq!(actions(&p), vec!["config"]);
    let writes = changes(&env.pve, false);
    assert_eq!(write_paths(&env.pve), vec!["PUT /nodes/pve1/lxc/101/config"]);
    assert_eq!(body(&writes[0].2)["delete"], "mp0");
    assert_eq!(env.pending(101), BTreeMap::from([("mp0".to_string(), "delete".to_string())]));
    assert_eq!(
        p.warnings,
        vec![
            "mp0 (local-lvm:vm-101-disk-1) leaves CT 101: PVE keeps the volume as an unused disk (`unusedN` in \
             `pct config 101`) and does not destroy its data; remove it with `pct set 101 --delete unusedN` when \
             no longer needed"
                .to_string(),
            "pending until the next restart: CT 101 applies mp0 (delete) when it starts again; the recreate policy \
             `never` allows no restart; re-run with --allow-recreate, or run `pct reboot 101` on node pve1"
                .to_string(),
        ]
    );

    // A re-run under `never` changes nothing and says so again.
    let p = env.provision(broker(vec![]), RecreatePolicy::Never).await;
    assert_eq!(p.plan.action, Action::Nothing);
    assert_eq!(p.warnings, vec!["pending changes (mp0) apply at the next reboot of CT 101".to_string()]);
    assert_eq!(write_paths(&env.pve), Vec::<String>::new());

    // With --allow-recreate: a reboot applies it — no shutdown, destroy or create.
    let p = env.provision(broker(vec![]), RecreatePolicy::WhenNeeded).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(p.plan.action, Action::Update { changes: vec![], resizes: vec![], reboot_needed: true });
    assert_eq!(actions(&p), vec!["reboot"]);
    assert_eq!(p.actions[0].detail.as_deref(), Some("applies mp0 (delete)"));
    assert_eq!(p.actions[0].exit_status.as_deref(), Some("OK"));
    assert_eq!(write_paths(&env.pve), vec!["POST /nodes/pve1/lxc/101/status/reboot"]);
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg.get("mp0"), None);
    assert_eq!(cfg["unused0"], Value::from("local-lvm:vm-101-disk-1"), "the volume is kept as an unused disk");
    assert_eq!(cfg["status"], "running");
    assert!(env.volumes("local-lvm").contains(&"vm-101-disk-1".to_string()), "{:?}", env.volumes("local-lvm"));
    assert_eq!(env.pending(101), BTreeMap::new());
    assert!(!p.created);
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_first_mount_entry_keeps_the_second_on_its_volume() {
    let env = Env::new();
    let b = Mount::Volume { storage: "local-lvm".into(), size_gib: 2, container_path: "/b".into() };
    let first = env.provision(broker(vec![data(4), b.clone()]), RecreatePolicy::Never).await;
    assert_eq!(first.outcome, Outcome::Ok, "{first:#?}");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["mp1"], "local-lvm:vm-101-disk-2,mp=/b,size=2G");
    env.pve.requests(true);
    let p = env.provision(broker(vec![b]), RecreatePolicy::WhenNeeded).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(actions(&p), vec!["config", "reboot"]);
    assert_eq!(write_paths(&env.pve), vec!["PUT /nodes/pve1/lxc/101/config", "POST /nodes/pve1/lxc/101/status/reboot"]);
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["mp1"], "local-lvm:vm-101-disk-2,mp=/b,size=2G", "/b stays on its own volume");
    assert_eq!(cfg.get("mp0"), None);
    assert_eq!(cfg["unused0"], Value::from("local-lvm:vm-101-disk-1"));
    // Converged: nothing more to do.
    let p = env
        .provision(
            broker(vec![Mount::Volume { storage: "local-lvm".into(), size_gib: 2, container_path: "/b".into() }]),
            RecreatePolicy::Never,
        )
        .await;
    assert_eq!(p.plan.action, Action::Nothing);
    assert_eq!(write_paths(&env.pve), Vec::<String>::new());
}

fn ct(name: &str, vmid: u32) -> ContainerSpec {
    support::spec::spec(name, vmid).loopback().resources(1, 512, 0).build()
}

fn download_requests(pve: &FakePve) -> Vec<BTreeMap<String, String>> {
    pve.requests(false)
        .into_iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/download-url"))
        .map(|(_, _, b)| body(&b))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_template_is_downloaded_once_over_https_with_the_index_checksum() {
    let env = Env::without_template();
    let out = env.provision_all(vec![ct("a", 201), ct("b", 202), ct("c", 203)], RecreatePolicy::Never).await;
    assert!(out.iter().all(|p| p.outcome == Outcome::Ok), "{out:#?}");
    let downloads = download_requests(&env.pve);
    assert_eq!(
        downloads,
        vec![BTreeMap::from([
            ("url".to_string(), format!("https://download.proxmox.com/images/system/{TEMPLATE_FILE}")),
            ("content".to_string(), "vztmpl".to_string()),
            ("filename".to_string(), TEMPLATE_FILE.to_string()),
            ("checksum".to_string(), template_sha512(TEMPLATE_FILE)),
            ("checksum-algorithm".to_string(), "sha512".to_string()),
        ])]
    );
    let recorded: Vec<&str> = out
        .iter()
        .flat_map(|p| p.actions.iter())
        .filter(|a| a.action == "download")
        .map(|a| a.exit_status.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(recorded, vec!["OK"], "one container records the download");
    // The index was read once too.
    let index_reads = env.pve.requests(false).iter().filter(|(m, p, _)| m == "GET" && p.ends_with("/aplinfo")).count();
    assert_eq!(index_reads, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn five_containers_with_a_failing_download_send_one_request_and_share_its_error() {
    let env = Env::without_template();
    // The template storage is full: the download task fails.
    env.pve.exec("pve.storages['local']['avail'] = 0");
    let specs = (1..=5).map(|i| ct(&format!("c{i}"), 300 + i)).collect();
    let out = env.provision_all(specs, RecreatePolicy::Never).await;
    assert_eq!(download_requests(&env.pve).len(), 1, "one download request, not five");
    let errors: Vec<String> = out
        .iter()
        .map(|p| match &p.outcome {
            Outcome::Failed { error } => error.clone(),
            Outcome::Ok => panic!("{} succeeded without its template: {p:#?}", p.name),
        })
        .collect();
    assert!(errors.iter().all(|e| e == &errors[0]), "the same error for all: {errors:#?}");
    assert!(
        errors[0].starts_with(&format!("cannot provide the template local:vztmpl/{TEMPLATE_FILE} on node pve1: ")),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("No space left on device"), "{}", errors[0]);
    // Nothing was created.
    let creates = env.pve.requests(false).iter().filter(|(m, p, _)| m == "POST" && p == "/nodes/pve1/lxc").count();
    assert_eq!(creates, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_arm64_node_gets_the_arm64_template_or_an_error_naming_the_architecture() {
    const ARM_FILE: &str = "debian-13-standard_13.1-2_arm64.tar.zst";
    let env = Env::without_template();
    env.pve.set_machine("pve1", "aarch64");
    // The index lists the template for amd64 only (as Proxmox's does).
    let p = env.provision(ct("edge", 401), RecreatePolicy::Never).await;
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert_eq!(
        error,
        &format!(
            "cannot provide the template local:vztmpl/{ARM_FILE} on node pve1: no arm64 template {ARM_FILE} for node \
             pve1 (arm64): it is not on the template storage and its template index (GET /nodes/pve1/aplinfo) has \
             `debian-13-standard_13.1-2` only for amd64; Proxmox publishes its templates for amd64 only. Put an arm64 \
             build named {ARM_FILE} on the template storage (PVE UI: Storage → CT Templates → Upload), or set \
             PROXMOX_TEMPLATE to a template that exists for arm64"
        )
    );
    assert_eq!(download_requests(&env.pve).len(), 0, "nothing unverified is downloaded");
    assert!(env.pve.ct_config(401).is_none());

    // An index with an arm64 build (a third-party channel): downloaded with its checksum, and the
    // container is created from it with arch arm64.
    let env = Env::without_template();
    env.pve.set_machine("pve1", "aarch64");
    env.pve.set_template_index(None, &[TEMPLATE_FILE, ARM_FILE]);
    let p = env.provision(ct("edge", 401), RecreatePolicy::Never).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    let downloads = download_requests(&env.pve);
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0]["url"], format!("https://download.proxmox.com/images/system/{ARM_FILE}"));
    assert_eq!(downloads[0]["checksum"], template_sha512(ARM_FILE));
    let create = env.pve.requests(false).into_iter().find(|(m, p, _)| m == "POST" && p == "/nodes/pve1/lxc").unwrap();
    assert_eq!(body(&create.2)["ostemplate"], format!("local:vztmpl/{ARM_FILE}"));
    // With the arm64 file on the storage, a second container needs no download.
    env.pve.requests(true);
    let p = env.provision(ct("edge2", 402), RecreatePolicy::Never).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(download_requests(&env.pve).len(), 0);
}
