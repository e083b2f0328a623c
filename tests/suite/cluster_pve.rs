//! Integration tests of the PVE backend on a two-node fakepve cluster (`add_node`): a container
//! is found on whatever node it is on (`GET /cluster/resources`), moved to the node its `NODE`
//! names with `POST …/migrate` (restart mode when it runs, offline when stopped) and never
//! recreated for it; `NODE=auto` places a new container on the online node with the most free
//! memory that has its rootfs storage. Migrations run with a time scale above 0, so waiting for
//! them really polls. Loopback only.

use crate::support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::backend::{self, Backend};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{
    Action, ApplyOptions, BackendKind, Change, ContainerPlan, Migration, Outcome, Provision, RecreatePolicy,
};
use proxmox_gitops::steps::provision as step;
use support::fakepve::FakePve;
use tokio::io::AsyncWriteExt;

async fn ssh_banner() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2 fake\r\n").await;
        }
    });
    port
}

struct Cluster {
    pve: FakePve,
    ssh_port: u16,
    share: tempfile::TempDir,
    artifacts: tempfile::TempDir,
}

impl Cluster {
    /// fakepve at time scale 0.01 (a migration of 20 PVE seconds takes 0.2 s) with nodes pve1
    /// and pve2 and the template.
    async fn new() -> Cluster {
        let pve = FakePve::start_scaled(0.01);
        pve.exec("pve.add_node('pve2')\npve.ct_secs['migrate'] = 20\npve.ct_secs['create'] = 5");
        pve.add_template();
        Cluster {
            pve,
            ssh_port: ssh_banner().await,
            share: tempfile::tempdir().unwrap(),
            artifacts: tempfile::tempdir().unwrap(),
        }
    }

    fn backend(&self) -> Backend {
        let settings = self.pve.settings(self.share.path());
        let connect = self.pve.connect(Timeouts { lock: Duration::from_secs(10), ..Timeouts::default() });
        backend::open(BackendKind::Pve, &settings, &connect).unwrap()
    }

    fn opts(&self) -> ApplyOptions {
        ApplyOptions {
            share: self.share.path().to_path_buf(),
            ssh_port: self.ssh_port,
            ssh_timeout: Duration::from_secs(10),
            ..ApplyOptions::default()
        }
    }

    async fn plan(&self, b: &Backend, s: &ContainerSpec) -> ContainerPlan {
        b.plan(s, RecreatePolicy::Never).await.unwrap()
    }

    async fn provision(&self, b: &Backend, specs: Vec<ContainerSpec>) -> Vec<Provision> {
        let planned = backend::plan_all(b, specs, RecreatePolicy::Never, 2).await;
        step::apply_all(b, planned, &self.opts(), 2, &ArtifactDir::new(self.artifacts.path())).await.unwrap()
    }

    fn node_of(&self, vmid: u32) -> String {
        self.pve.exec(&format!("result = pve.ct({vmid}).node")).as_str().unwrap().to_string()
    }

    /// Writes since the last call, as `METHOD PATH body`, without the login.
    fn writes(&self) -> Vec<String> {
        self.pve
            .writes(true)
            .into_iter()
            .filter(|(_, p, _)| p != "/access/ticket")
            .map(|(m, p, b)| if b.is_empty() { format!("{m} {p}") } else { format!("{m} {p} {b}") })
            .collect()
    }
}

fn spec(node: &str) -> ContainerSpec {
    support::spec::spec("broker", 101).loopback().resources(1, 512, 512).node(node).build()
}

fn ok(p: &Provision) {
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
}

fn actions(p: &Provision) -> Vec<&str> {
    p.actions.iter().map(|a| a.action.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_moved_by_hand_is_found_and_migrated_back_in_restart_mode_never_recreated() {
    let c = Cluster::new().await;
    let b = c.backend();
    ok(&c.provision(&b, vec![spec("pve1")]).await[0]);
    assert_eq!(c.node_of(101), "pve1");
    // Moved to pve2 by hand (or by HA) while running.
    c.pve.exec("pve.ct(101).node = 'pve2'");
    c.writes();

    let plan = c.plan(&b, &spec("pve1")).await;
    assert_eq!(plan.action, Action::Nothing);
    assert_eq!(plan.node.as_deref(), Some("pve1"));
    assert_eq!(plan.migrate, Some(Migration { from: "pve2".into(), to: "pve1".into(), restart: true }));
    assert!(!plan.start, "it runs");
    assert!(plan.changes_something());
    assert_eq!(c.writes(), Vec::<String>::new(), "planning writes nothing");

    let out = c.provision(&b, vec![spec("pve1")]).await;
    ok(&out[0]);
    assert_eq!(actions(&out[0]), vec!["migrate", "wait-ssh"]);
    let m = &out[0].actions[0];
    assert!(m.upid.as_deref().is_some_and(|u| u.starts_with("UPID:pve2:") && u.contains(":vzmigrate:101:")), "{m:?}");
    assert_eq!(m.detail.as_deref(), Some("pve2 → pve1 (restart mode)"));
    assert_eq!(out[0].node.as_deref(), Some("pve1"));
    // Under our lease (taken on the node it was on; the lease line moves with the config, and
    // is released on the node it is on now).
    let writes = c.writes();
    assert_eq!(
        paths(&writes),
        vec!["PUT /nodes/pve2/lxc/101/config", "POST /nodes/pve2/lxc/101/migrate", "PUT /nodes/pve1/lxc/101/config"]
    );
    assert!(writes[0].contains("proxmox-gitops+lease"), "{writes:?}");
    assert_eq!(writes[1], "POST /nodes/pve2/lxc/101/migrate target=pve1&restart=1&timeout=120");
    assert!(!writes[2].contains("lease"), "released: {writes:?}");
    assert_eq!(c.node_of(101), "pve1");
    assert_eq!(c.pve.ct_config(101).unwrap()["status"], "running");

    // Converged: nothing to do, nothing written.
    let again = c.provision(&b, vec![spec("pve1")]).await;
    assert_eq!((again[0].plan.action.clone(), again[0].plan.migrate.clone()), (Action::Nothing, None));
    assert_eq!(c.writes(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_change_with_a_memory_change_migrates_offline_then_updates_on_the_new_node() {
    let c = Cluster::new().await;
    let b = c.backend();
    ok(&c.provision(&b, vec![spec("pve1")]).await[0]);
    c.pve.exec("pve.ct(101).status = 'stopped'");
    c.writes();

    let mut moved = spec("pve2");
    moved.memory_mib = 1024;
    let plan = c.plan(&b, &moved).await;
    assert_eq!(plan.migrate, Some(Migration { from: "pve1".into(), to: "pve2".into(), restart: false }));
    let Action::Update { changes, .. } = &plan.action else { panic!("{plan:?}") };
    assert_eq!(changes, &vec![Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) }]);
    assert!(plan.start, "stopped: started after the move");

    let out = c.provision(&b, vec![moved]).await;
    ok(&out[0]);
    assert_eq!(actions(&out[0]), vec!["migrate", "config", "start", "wait-ssh"]);
    assert_eq!(out[0].actions[0].detail.as_deref(), Some("pve1 → pve2 (offline)"));
    let writes = c.writes();
    assert_eq!(
        paths(&writes),
        vec![
            "PUT /nodes/pve1/lxc/101/config",
            "POST /nodes/pve1/lxc/101/migrate",
            "PUT /nodes/pve2/lxc/101/config",
            "POST /nodes/pve2/lxc/101/status/start",
            "PUT /nodes/pve2/lxc/101/config"
        ],
        "lease, migrate, memory, start, release"
    );
    assert_eq!(writes[1], "POST /nodes/pve1/lxc/101/migrate target=pve2", "offline: no restart");
    assert_eq!(c.node_of(101), "pve2");
    let cfg = c.pve.ct_config(101).unwrap();
    assert_eq!((cfg["memory"].to_string(), cfg["status"].as_str()), ("1024".to_string(), Some("running")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_started_since_the_plan_is_migrated_in_restart_mode() {
    let c = Cluster::new().await;
    let b = c.backend();
    ok(&c.provision(&b, vec![spec("pve1")]).await[0]);
    c.pve.exec("pve.ct(101).status = 'stopped'");
    let plan = c.plan(&b, &spec("pve2")).await;
    assert_eq!(plan.migrate.as_ref().map(|m| m.restart), Some(false));
    c.pve.exec("pve.ct(101).status = 'running'");
    c.writes();
    let out = b.apply(&spec("pve2"), &plan, &c.opts(), &ArtifactDir::new(c.artifacts.path())).await;
    ok(&out);
    assert_eq!(out.actions[0].detail.as_deref(), Some("pve1 → pve2 (restart mode)"));
    // Planned again under the lease (it runs now): restart mode from the start, and no start of
    // its own (PVE starts it again on pve2).
    assert!(!out.plan.start && out.plan.migrate.as_ref().is_some_and(|m| m.restart), "{out:#?}");
    let writes = c.writes();
    assert_eq!(writes[1..2], ["POST /nodes/pve1/lxc/101/migrate target=pve2&restart=1&timeout=120"]);
    assert_eq!(
        (paths(&writes[..1]), paths(&writes[2..])),
        (vec!["PUT /nodes/pve1/lxc/101/config".to_string()], vec!["PUT /nodes/pve2/lxc/101/config".to_string()]),
        "the lease, taken and released: {writes:?}"
    );
    assert_eq!(c.node_of(101), "pve2");
}

#[tokio::test(flavor = "multi_thread")]
async fn node_auto_places_on_the_node_with_the_most_free_memory_that_has_the_storage() {
    let c = Cluster::new().await;
    // pve1 uses 6 of 8 GiB, pve2 1 of 8 GiB. fakepve reports the same usage for every node, so
    // its per-node stats are replaced: /cluster/resources asks once per node, in name order.
    c.pve.exec(
        "import itertools\n\
         GiB = 1024 ** 3\n\
         used = {'pve1': 6 * GiB, 'pve2': 1 * GiB}\n\
         order = itertools.cycle(sorted(pve.nodes))\n\
         orig = pve._node_stats\n\
         pve._node_stats = lambda online: dict(orig(online), mem=used[next(order)]) if online else {}",
    );
    let b = c.backend();
    let auto =
        |name: &str, vmid: u32| support::spec::spec(name, vmid).loopback().resources(1, 512, 512).node("auto").build();
    let plan = c.plan(&b, &auto("broker", 101)).await;
    assert_eq!(plan.action, Action::Create);
    assert_eq!(plan.node.as_deref(), Some("pve2"));
    assert_eq!(
        plan.placement.as_deref(),
        Some(
            "NODE=auto: most free memory (7.0 GiB) of the online nodes with storage local-lvm: pve1 2.0 GiB, pve2 7.0 GiB"
        )
    );
    let out = c.provision(&b, vec![auto("broker", 101)]).await;
    ok(&out[0]);
    assert_eq!(out[0].node.as_deref(), Some("pve2"));
    assert_eq!(out[0].plan.node.as_deref(), Some("pve2"), "the artifact's plan records the choice");
    assert!(out[0].plan.placement.is_some());
    assert_eq!(c.node_of(101), "pve2");

    // Re-run: found where it was placed, nothing moves.
    let plan = c.plan(&b, &auto("broker", 101)).await;
    assert_eq!((plan.node.as_deref(), &plan.migrate, &plan.placement), (Some("pve2"), &None, &None));

    // The rootfs storage only on pve1: pve1, despite less free memory.
    c.pve.exec("pve.storages['local-lvm']['nodes'] = 'pve1'");
    let plan = c.plan(&b, &auto("cache", 102)).await;
    assert_eq!(plan.node.as_deref(), Some("pve1"));
    // No online node has it: a clear refusal, nothing created.
    c.pve.exec("pve.storages['local-lvm']['nodes'] = 'pve3'");
    let e = b.plan(&auto("cache", 102), RecreatePolicy::Never).await.unwrap_err();
    assert!(
        format!("{e:#}")
            .contains("storage `local-lvm` (DISK) is available on no node and the online nodes are pve1, pve2"),
        "{e:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unset_node_on_two_online_nodes_places_and_on_one_keeps_todays_behaviour() {
    let c = Cluster::new().await;
    let b = c.backend();
    let unset = || support::spec::spec("broker", 101).loopback().resources(1, 512, 512).build();
    let plan = c.plan(&b, &unset()).await;
    // Same free memory on both (fakepve's defaults): the first by name, with the reason.
    assert_eq!(plan.node.as_deref(), Some("pve1"));
    assert!(plan.placement.as_deref().is_some_and(|p| p.starts_with("NODE=auto: most free memory")), "{plan:?}");
    c.pve.exec("pve.nodes['pve2']['online'] = False");
    let b = c.backend();
    let plan = c.plan(&b, &unset()).await;
    assert_eq!((plan.node.as_deref(), plan.placement), (Some("pve1"), None));
}

/// `METHOD PATH` of each write (the parameters dropped).
fn paths(writes: &[String]) -> Vec<String> {
    writes.iter().map(|w| w.split(' ').take(2).collect::<Vec<_>>().join(" ")).collect()
}
