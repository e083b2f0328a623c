//! PVE container snapshots (`…/lxc/{vmid}/snapshot`) against fakepve (PyPI), started on loopback
//! per test with its own certificate: create, list, rollback, delete, retention of our own
//! `pgo-` names only, and the error cases (name already used, locked CT, storage that cannot
//! snapshot). Nothing but 127.0.0.1 is contacted.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::{self, ArtifactDir};
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::backend::{self, Backend};
use proxmox_gitops::exec::LocalExec;
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{ApplyOptions, BackendKind, Outcome, Provision, RecreatePolicy};
use proxmox_gitops::pve::PveClient;
use proxmox_gitops::snapshot::ct::{self, CtSnapshotError, CtSnapshots};
use proxmox_gitops::snapshot::pve::PveSnapshots;
use proxmox_gitops::steps::provision as prov;
use proxmox_gitops::steps::snapshot::{self as step, PveCtAccess, SnapshotOptions};
use serde_json::{Value, json};
use support::fakepve::FakePve;

struct Env {
    pve: FakePve,
    share: tempfile::TempDir,
    artifacts: tempfile::TempDir,
    client: Arc<PveClient>,
}

fn spec(name: &str, vmid: u32) -> ContainerSpec {
    support::spec::spec(name, vmid).loopback().no_swap().rootfs("local-lvm", 4).no_onboot().build()
}

impl Env {
    /// fakepve with CT 101 (`app`, rootfs on lvmthin `local-lvm`) created and started through
    /// the provision step; its `provision/app.json` is written.
    async fn new() -> Env {
        let pve = FakePve::start();
        pve.add_template();
        let share = tempfile::tempdir().unwrap();
        let artifacts = tempfile::tempdir().unwrap();
        let settings = pve.settings(share.path());
        let connect = pve.connect(Timeouts::default());
        let backend = backend::open(BackendKind::Pve, &settings, &connect).unwrap();
        let opts = ApplyOptions { share: share.path().to_path_buf(), wait_ssh: false, ..ApplyOptions::default() };
        let planned = backend::plan_all(&backend, vec![spec("app", 101)], RecreatePolicy::Never, 1).await;
        let out = prov::apply_all(&backend, planned, &opts, 1, &ArtifactDir::new(artifacts.path())).await.unwrap();
        assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
        let Backend::Pve(b) = backend else { unreachable!() };
        let client = b.client().clone();
        Env { pve, share, artifacts, client }
    }

    fn snaps(&self) -> PveSnapshots {
        PveSnapshots::new(self.client.clone(), "pve1", 101).with_timeout(Duration::from_secs(30))
    }

    /// The snapshot names fakepve holds for CT 101.
    fn held(&self) -> Vec<String> {
        let v = self.pve.exec("result = sorted(pve.ct(101).snapshots)");
        v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
    }
}

/// `UPID:pve1:…:vzsnapshot:101:root@pam:` → `UPID:pve1:vzsnapshot:101:root@pam`.
fn short_upid(u: &str) -> String {
    let p: Vec<&str> = u.split(':').collect();
    assert!(p.len() >= 9 && p[0] == "UPID", "not a UPID: {u}");
    format!("UPID:{}:{}:{}:{}", p[1], p[5], p[6], p[7])
}

#[tokio::test(flavor = "multi_thread")]
async fn create_list_rollback_delete() {
    let env = Env::new().await;
    let s = env.snaps();
    assert_eq!(s.target(), "CT 101 on pve1");
    assert_eq!(s.list().await.unwrap(), vec![], "PVE's `current` entry is not a snapshot");

    env.pve.requests(true);
    let now = time::macros::datetime!(2026-11-30 16:01:02 UTC);
    let rec = ct::take(&s, now, "proxmox-gitops snapshot of app").await.unwrap();
    assert_eq!(rec.name, "pgo-20261130-160102");
    assert_eq!(short_upid(rec.upid.as_deref().unwrap()), "UPID:pve1:vzsnapshot:101:root@pam");
    let writes: Vec<(String, String, String)> = env.pve.writes(false);
    assert_eq!(
        writes,
        vec![(
            "POST".to_string(),
            "/nodes/pve1/lxc/101/snapshot".to_string(),
            "snapname=pgo-20261130-160102&description=proxmox-gitops+snapshot+of+app".to_string()
        )]
    );
    let listed = s.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].description.as_str()),
        ("pgo-20261130-160102", "proxmox-gitops snapshot of app")
    );
    assert!(listed[0].snaptime.is_some_and(|t| t > 1_600_000_000), "{listed:?}");
    // A second one within the same second gets -2.
    assert_eq!(ct::take(&s, now, "again").await.unwrap().name, "pgo-20261130-160102-2");

    // Change the container, roll back: the config of the snapshot is back.
    env.pve.exec("pve.ct(101).config['memory'] = 2048");
    let upid = ct::rollback(&s, "pgo-20261130-160102").await.unwrap().unwrap();
    assert_eq!(short_upid(&upid), "UPID:pve1:vzrollback:101:root@pam");
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], json!(512));

    // Delete both.
    for name in ["pgo-20261130-160102", "pgo-20261130-160102-2"] {
        let upid = s.delete(name).await.unwrap().unwrap();
        assert_eq!(short_upid(&upid), "UPID:pve1:vzdelsnapshot:101:root@pam");
    }
    assert_eq!(env.held(), Vec::<String>::new());
    assert_eq!(s.list().await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_prunes_only_our_names() {
    let env = Env::new().await;
    let s = env.snaps();
    for name in ["pgo-20250101-000000", "before-upgrade", "pgo-20250103-000000", "pgo-manual", "pgo-20250102-000000"] {
        s.create(name, "").await.unwrap();
    }
    let deleted = ct::prune(&s, 1).await.unwrap();
    assert_eq!(deleted, vec!["pgo-20250101-000000", "pgo-20250102-000000"]);
    assert_eq!(env.held(), vec!["before-upgrade", "pgo-20250103-000000", "pgo-manual"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn name_already_used_is_reported() {
    let env = Env::new().await;
    let s = env.snaps();
    s.create("pgo-20250101-000000", "").await.unwrap();
    let e = s.create("pgo-20250101-000000", "").await.unwrap_err();
    assert_eq!(e, CtSnapshotError::NameInUse { target: "CT 101 on pve1".into(), name: "pgo-20250101-000000".into() });
    assert_eq!(e.to_string(), "CT 101 on pve1: snapshot name `pgo-20250101-000000` is already used");
}

#[tokio::test(flavor = "multi_thread")]
async fn locked_container_is_reported_not_waited_for() {
    let env = Env::new().await;
    let s = env.snaps();
    env.pve.exec("pve.ct(101).lock = 'backup'");
    let e = s.create("pgo-20250101-000000", "").await.unwrap_err();
    assert_eq!(e, CtSnapshotError::Locked { target: "CT 101 on pve1".into(), lock: "backup".into() });
    assert_eq!(
        e.to_string(),
        "CT 101 on pve1: the container is locked (backup); wait for the running backup task to finish or run `pct unlock` if it is stale"
    );
    assert_eq!(env.held(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_without_snapshots_is_reported_and_the_step_continues() {
    let env = Env::new().await;
    let s = env.snaps();
    // The rootfs on `local` (a directory storage, raw volume): PVE cannot snapshot it.
    env.pve.exec("pve.ct(101).config['rootfs'] = 'local:101/vm-101-disk-0.raw,size=4G'");
    let e = s.create("pgo-20250101-000000", "").await.unwrap_err();
    assert!(matches!(e, CtSnapshotError::NotSupported { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "CT 101 on pve1: cannot take a container snapshot: snapshot feature is not available (a volume is on storage \
         without snapshots; needs lvmthin, zfspool, btrfs, rbd, or qcow2 on a directory storage)"
    );

    // The snapshot step records it as a warning: the data snapshot is what protects the data.
    let opts = SnapshotOptions {
        share: env.share.path().to_path_buf(),
        keep: None,
        now: time::macros::datetime!(2026-11-30 16:01:02 UTC),
    };
    let a = step::snapshot(&spec("app", 101), &LocalExec::new(), Some(&s), &opts).await;
    assert_eq!(a.outcome, Outcome::Ok, "{a:#?}");
    assert_eq!(a.ct_snapshot, None);
    assert_eq!(
        a.warnings,
        vec![
            "app declares no SNAPSHOT paths: no data snapshot taken".to_string(),
            format!("no container snapshot: {e}"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rollback_and_delete_of_unknown_names_are_clear() {
    let env = Env::new().await;
    let s = env.snaps();
    let e = ct::rollback(&s, "pgo-20250101-000000").await.unwrap_err();
    assert_eq!(e.to_string(), "CT 101 on pve1: no snapshot named `pgo-20250101-000000`");
    let e = s.delete("pgo-20250101-000000").await.unwrap_err();
    assert_eq!(e, CtSnapshotError::NotFound { target: "CT 101 on pve1".into(), name: "pgo-20250101-000000".into() });
    // A name that is not a PVE snapshot name never reaches a path.
    env.pve.requests(true);
    let e = s.delete("../../../101").await.unwrap_err();
    assert!(e.to_string().contains("is not a valid PVE snapshot name"), "{e}");
    assert_eq!(env.pve.requests(false), vec![]);
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_step_takes_and_prunes_pve_snapshots_from_the_provision_artifact() {
    let env = Env::new().await;
    // The step's container snapshots come from the provision artifact (backend pve, node pve1).
    let p: Provision = artifact::read(&ArtifactDir::new(env.artifacts.path()).provision("app")).unwrap();
    let access = PveCtAccess { client: env.client.clone(), task_timeout: Duration::from_secs(30) };
    let cts = step::ct_snapshots(&p, Some(&access)).unwrap().expect("pve container snapshots");
    assert_eq!(cts.target(), "CT 101 on pve1");
    assert!(step::ct_snapshots(&p, None).unwrap().is_none(), "no API access, no PVE snapshots");

    env.snaps().create("before-upgrade", "mine").await.unwrap();
    env.snaps().create("pgo-20250101-000000", "old").await.unwrap();
    let opts = SnapshotOptions {
        share: env.share.path().to_path_buf(),
        keep: Some(1),
        now: time::macros::datetime!(2026-11-30 16:01:02 UTC),
    };
    let a = step::snapshot(&spec("app", 101), &LocalExec::new(), Some(cts.as_ref()), &opts).await;
    assert_eq!(a.outcome, Outcome::Ok, "{a:#?}");
    let mut v: Value = artifact::to_value(&a);
    let upid = v["ct_snapshot"]["upid"].as_str().unwrap().to_string();
    v["ct_snapshot"]["upid"] = json!(short_upid(&upid));
    assert_eq!(
        v,
        json!({
            "kind": "snapshot", "schema_version": "1.0", "name": "app", "vmid": 101, "operation": "snapshot",
            "paths": [], "snapshot_id": null, "archive": null, "manifest": null, "manifest_digest": null,
            "entry_count": 0, "bytes": 0, "data_bytes": 0, "verification": "notrun",
            "ct_snapshot": {"name": "pgo-20261130-160102", "upid": "UPID:pve1:vzsnapshot:101:root@pam",
                            "description": "proxmox-gitops snapshot of app"},
            "ct_pruned": ["pgo-20250101-000000"], "pruned": [],
            "warnings": ["app declares no SNAPSHOT paths: no data snapshot taken"], "result": "ok"
        })
    );
    assert_eq!(env.held(), vec!["before-upgrade", "pgo-20261130-160102"]);
}
