//! The update flow against the in-memory container of `live::fake`: its snapshots keep
//! and restore the "disk" (packages, service states), so a rollback is seen in the state, not
//! only in the calls.

use std::collections::BTreeMap;
use std::time::Duration;

use pretty_assertions::assert_eq;
use time::macros::datetime;

use super::*;
use crate::exec::BoxFuture;
use crate::inventory::IpConfig;
use crate::live::fake::{Fake, State, debian};
use crate::live::{CtState, SnapshotTaken};
use crate::snapshot::ct::CtSnapshotInfo;

fn spec(name: &str) -> ContainerSpec {
    ContainerSpec { services: vec!["mosquitto.service".into()], ..ContainerSpec::new(name, 120, IpConfig::Dhcp) }
}

fn opts() -> UpdateOptions {
    UpdateOptions {
        jobs: 2,
        check: CheckOptions::default(),
        upgrade_timeout: Duration::from_secs(60),
        boot_timeout: Duration::from_secs(30),
        settle_timeout: Duration::ZERO,
        now: datetime!(2026-12-01 17:00:00 UTC),
        this_host: Some("runner".into()),
    }
}

fn info(name: &str) -> CtSnapshotInfo {
    CtSnapshotInfo { name: name.into(), description: String::new(), snaptime: None }
}

async fn update(kind: BackendKind, state: State) -> (ContainerUpdate, Fake) {
    let fake = Fake::new(kind, state);
    let u = update_one(&fake, &spec("broker"), &opts()).await;
    (u, fake)
}

fn actions(u: &ContainerUpdate) -> Vec<String> {
    u.actions.iter().map(|a| format!("{} {}", a.action, a.exit_status.as_deref().unwrap_or("-"))).collect()
}

fn snapshot_names(f: &Fake) -> Vec<String> {
    f.get().snapshots.into_iter().map(|(i, _)| i.name).collect()
}

#[tokio::test]
async fn success_upgrades_keeps_the_new_snapshot_and_prunes_older_update_snapshots() {
    let mut st = debian();
    let old = st.disk.clone();
    st.snapshots = vec![(info("pgo-update-20261124-170000"), old.clone()), (info("pgo-20250101-000000"), old)];
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Updated, "{u:#?}");
    assert_eq!(u.error, None);
    assert_eq!(u.os.as_deref(), Some("Debian GNU/Linux 12 (bookworm)"));
    assert_eq!(u.package_manager, Some(PackageManager::Apt));
    assert_eq!(u.snapshot.as_deref(), Some("pgo-update-20261201-170000"));
    assert_eq!(u.pruned, vec!["pgo-update-20261124-170000".to_string()]);
    assert_eq!(snapshot_names(&fake), ["pgo-20250101-000000", "pgo-update-20261201-170000"]);
    assert_eq!(fake.get().disk.packages, "upgraded");
    assert!(!u.rebooted && u.rollback.is_none());
    assert_eq!(u.health.as_ref().map(|h| h.state), Some(HealthState::Healthy));
    assert_eq!(u.health_before.as_ref().map(|h| h.state), Some(HealthState::Healthy));
    assert_eq!(actions(&u), ["check OK", "snapshot OK", "upgrade OK", "upgrade OK", "check OK", "prune OK"]);
    assert_eq!(u.actions[1].upid.as_deref(), Some("UPID:pve1:vzsnapshot:pgo-update-20261201-170000"));
    assert_eq!(u.commands.len(), 2);
    assert_eq!(u.commands[1].output_tail, "Setting up libc6 ...\nDone\n");
    assert_eq!((u.commands[1].exit_code, u.commands[1].error.as_deref()), (Some(0), None));
    // The snapshot comes before any upgrade command.
    let calls = fake.calls();
    let snap = calls.iter().position(|c| c.starts_with("snapshot ")).unwrap();
    let first_upgrade = calls.iter().position(|c| c.contains("apt-get")).unwrap();
    assert!(snap < first_upgrade, "{calls:?}");
}

#[tokio::test]
async fn a_failing_upgrade_command_is_rolled_back() {
    let mut st = debian();
    st.refresh_exit = 100;
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::RolledBack, "{u:#?}");
    let reason = "`env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=120 update` failed: exit code \
                  100: E: Problem executing scripts APT::Update::Pre-Invoke";
    assert_eq!(u.error.as_deref(), Some(format!("{reason}; rolled back to pgo-update-20261201-170000").as_str()));
    assert_eq!(
        u.rollback,
        Some(Rollback {
            snapshot: "pgo-update-20261201-170000".into(),
            reason: reason.into(),
            upid: Some("UPID:pve1:vzrollback:pgo-update-20261201-170000".into()),
            outcome: Outcome::Ok,
        })
    );
    assert_eq!(u.commands.len(), 1, "the second command is not run");
    assert_eq!(actions(&u), ["check OK", "snapshot OK", "upgrade failed", "rollback OK", "wait OK", "check OK"]);
    assert_eq!(u.health.as_ref().map(|h| h.state), Some(HealthState::Healthy));
    assert!(u.pruned.is_empty());
    assert_eq!(snapshot_names(&fake), ["pgo-update-20261201-170000"], "the snapshot is kept after a rollback");
}

#[tokio::test]
async fn unhealthy_after_the_upgrade_is_rolled_back_and_the_disk_is_restored() {
    let mut st = debian();
    st.upgrade_breaks = Some("mosquitto.service".into());
    let before = st.disk.clone();
    let (u, fake) = update(BackendKind::Lxc, st).await;
    assert_eq!(u.result, UpdateResult::RolledBack, "{u:#?}");
    assert_eq!(
        u.error.as_deref(),
        Some("unhealthy after the upgrade: down (mosquitto failed); rolled back to pgo-update-20261201-170000")
    );
    assert_eq!(fake.get().disk, before, "the rollback restored the packages and the service");
    // LXC freezes the running container for its snapshot (no restart, nothing to wait for);
    // the pause is recorded.
    assert_eq!(
        u.actions[1].detail.as_deref(),
        Some("pgo-update-20261201-170000 (the container was paused for 120 ms)")
    );
    assert_eq!(
        actions(&u),
        ["check OK", "snapshot OK", "upgrade OK", "upgrade OK", "check failed", "rollback OK", "wait OK", "check OK"]
    );
    assert_eq!(u.health.as_ref().map(|h| h.state), Some(HealthState::Healthy));
}

#[tokio::test]
async fn a_reboot_asked_for_is_made_and_waited_for() {
    let mut st = debian();
    st.upgrade_asks_reboot = true;
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Updated, "{u:#?}");
    assert!(u.rebooted);
    assert!(!fake.get().reboot_required);
    assert_eq!(
        actions(&u),
        ["check OK", "snapshot OK", "upgrade OK", "upgrade OK", "reboot OK", "wait OK", "check OK"]
    );
    assert_eq!(u.actions[4].upid.as_deref(), Some("UPID:pve1:vzreboot"));
}

#[tokio::test]
async fn a_container_that_does_not_come_back_from_its_reboot_is_rolled_back() {
    let mut st = debian();
    st.upgrade_asks_reboot = true;
    st.reboot_kills = true;
    let fake = Fake::new(BackendKind::Pve, st);
    let o = UpdateOptions { boot_timeout: Duration::from_millis(700), ..opts() };
    let u = update_one(&fake, &spec("broker"), &o).await;
    assert_eq!(u.result, UpdateResult::RolledBack, "{u:#?}");
    let e = u.error.clone().unwrap();
    assert!(
        e.starts_with("after the reboot, broker did not answer within 0.7 s: cannot reach SSH at 10.0.0.5:22"),
        "{e}"
    );
    assert_eq!(fake.get().disk.packages, "v1");
    assert_eq!(u.health.as_ref().map(|h| h.state), Some(HealthState::Healthy));
}

#[tokio::test]
async fn nothing_is_changed_when_the_container_is_not_healthy_before() {
    let mut st = debian();
    st.disk.services.insert("mosquitto.service".into(), "inactive".into());
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Failed);
    assert!(u.error.as_deref().unwrap().starts_with("not updated: it is down before the update (mosquitto inactive)"));
    assert!(fake.calls().iter().all(|c| !c.starts_with("snapshot") && !c.contains("apt-get")), "{:?}", fake.calls());
}

#[tokio::test]
async fn an_unsupported_distribution_is_not_touched() {
    let mut st = debian();
    st.os_release = "ID=fedora\nPRETTY_NAME=\"Fedora Linux 40\"\n".into();
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Failed);
    assert_eq!(
        u.error.as_deref(),
        Some(
            "Fedora Linux 40 has no package manager this tool upgrades (Debian/Ubuntu with apt-get, Alpine with apk); \
             nothing was changed"
        )
    );
    assert!(fake.calls().iter().all(|c| !c.starts_with("snapshot")), "{:?}", fake.calls());
    assert!(u.snapshot.is_none());
}

#[tokio::test]
async fn no_snapshot_no_upgrade() {
    let mut st = debian();
    st.snapshot_error =
        Some("CT 120 on pve1: cannot take a container snapshot: snapshot feature is not available".into());
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Failed);
    assert_eq!(
        u.error.as_deref(),
        Some(
            "no snapshot, so no upgrade (nothing was changed): CT 120 on pve1: cannot take a container snapshot: \
             snapshot feature is not available"
        )
    );
    assert!(fake.calls().iter().all(|c| !c.contains("apt-get")), "{:?}", fake.calls());
    assert_eq!(fake.get().disk.packages, "v1");
}

#[tokio::test]
async fn a_failed_rollback_says_how_to_roll_back_by_hand() {
    let mut st = debian();
    st.refresh_exit = 100;
    st.rollback_error = Some("CT is locked (backup)".into());
    let (u, _) = update(BackendKind::Pve, st).await;
    assert_eq!(u.result, UpdateResult::Failed);
    let e = u.error.unwrap();
    assert!(e.contains("the rollback to pgo-update-20261201-170000 FAILED: CT is locked (backup)"), "{e}");
    assert!(e.contains("`pct rollback 120 pgo-update-20261201-170000 --start` on its node"), "{e}");
    assert_eq!(u.rollback.map(|r| r.outcome), Some(Outcome::Failed { error: "CT is locked (backup)".into() }));
}

#[tokio::test]
async fn not_deployed_and_stopped_containers_are_reported_not_failed() {
    let mut st = debian();
    st.exists = false;
    let (u, fake) = update(BackendKind::Pve, st).await;
    assert_eq!((u.result, u.error.as_deref()), (UpdateResult::NotDeployed, None));
    assert_eq!(fake.calls(), ["status"]);
    let mut st = debian();
    st.running = false;
    let (u, fake) = update(BackendKind::Lxc, st).await;
    assert_eq!(
        (u.result, u.error.as_deref()),
        (UpdateResult::Skipped, Some("container is stopped: not updated (start it to have it updated)"))
    );
    assert_eq!(fake.calls(), ["status"]);
    assert!(!u.result.is_failure());
}

#[tokio::test]
async fn the_container_this_run_is_in_is_not_touched() {
    let fake = Fake::new(BackendKind::Pve, debian());
    let o = UpdateOptions { this_host: Some("broker".into()), ..opts() };
    let u = update_one(&fake, &spec("broker"), &o).await;
    assert_eq!(u.result, UpdateResult::Skipped);
    assert!(u.error.as_deref().unwrap().starts_with("this run is inside it"), "{u:?}");
    assert_eq!(fake.calls(), Vec::<String>::new());
}

/// Several containers behind one backend: a fake per container name.
struct Many(BTreeMap<String, Fake>);

impl Many {
    fn of(&self, spec: &ContainerSpec) -> &Fake {
        &self.0[&spec.name]
    }
}

impl Containers for Many {
    fn kind(&self) -> BackendKind {
        BackendKind::Pve
    }
    fn status<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<CtState>> {
        self.of(spec).status(spec)
    }
    fn exec<'a>(&'a self, spec: &'a ContainerSpec, t: Duration) -> BoxFuture<'a, anyhow::Result<Box<dyn RemoteExec>>> {
        self.of(spec).exec(spec, t)
    }
    fn snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
        d: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<SnapshotTaken>> {
        self.of(spec).snapshot(spec, name, d)
    }
    fn snapshots<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Vec<CtSnapshotInfo>>> {
        self.of(spec).snapshots(spec)
    }
    fn delete_snapshot<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        name: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        self.of(spec).delete_snapshot(spec, name)
    }
    fn rollback<'a>(&'a self, spec: &'a ContainerSpec, name: &'a str) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        self.of(spec).rollback(spec, name)
    }
    fn reboot<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, anyhow::Result<Option<String>>> {
        self.of(spec).reboot(spec)
    }
}

#[tokio::test]
async fn one_failure_does_not_stop_the_others() {
    let mut broken = debian();
    broken.refresh_exit = 100;
    let mut gone = debian();
    gone.exists = false;
    let many = Many(
        [
            ("a".to_string(), Fake::new(BackendKind::Pve, broken)),
            ("b".to_string(), Fake::new(BackendKind::Pve, debian())),
            ("c".to_string(), Fake::new(BackendKind::Pve, gone)),
        ]
        .into(),
    );
    let specs = vec![spec("a"), spec("b"), spec("c")];
    let report = update_all(&many, "main", &specs, &opts()).await;
    let got: Vec<(&str, UpdateResult)> = report.containers.iter().map(|c| (c.name.as_str(), c.result)).collect();
    assert_eq!(got, [("a", UpdateResult::RolledBack), ("b", UpdateResult::Updated), ("c", UpdateResult::NotDeployed)]);
    assert!(!report.ok);
    assert_eq!(report.started_at, "2026-12-01T17:00:00Z");
    assert_eq!(many.0["b"].get().disk.packages, "upgraded");
}

#[test]
fn captured_output_keeps_whole_lines_of_the_tail() {
    let mut c = Capture::new("broker", 16);
    c.push(b"first line\nsecond ");
    c.push(b"line\nthird line\nlast");
    assert_eq!(c.finish(), "third line\nlast");
    let mut c = Capture::new("broker", 1024);
    c.push(b"short\n");
    assert_eq!(c.finish(), "short\n");
}
