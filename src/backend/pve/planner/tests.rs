//! Unit tests of the pure planner: every rule of the module docs, desired vs. live.

use super::*;
use crate::backend::pve::desired::tests::{defaults, spec};
use crate::backend::pve::desired::{Desired, desired, features_string, own_lines, user_notes, with_user_notes};
use crate::inventory::Mount;
use crate::model::Change;
use pretty_assertions::assert_eq;

fn want() -> Desired {
    desired(&spec(), &defaults(), "amd64").unwrap()
}

/// The config PVE shows for a container created from `want()`.
fn live_of(d: &Desired) -> LiveCt {
    let mut c: BTreeMap<String, String> = BTreeMap::new();
    c.insert("hostname".into(), d.hostname.clone());
    c.insert("arch".into(), d.arch.clone());
    c.insert("ostype".into(), "debian".into());
    c.insert("cores".into(), d.cores.to_string());
    c.insert("memory".into(), d.memory_mib.to_string());
    c.insert("swap".into(), d.swap_mib.to_string());
    c.insert("onboot".into(), if d.onboot { "1" } else { "0" }.into());
    c.insert("description".into(), d.description.clone());
    c.insert("tags".into(), "proxmox-gitops".into());
    c.insert("rootfs".into(), format!("{}:vm-{}-disk-0,size={}G", d.rootfs_storage, d.vmid, d.rootfs_gib));
    c.insert(
        "net0".into(),
        "name=eth0,bridge=vmbr0,gw=127.0.0.254,hwaddr=BC:24:11:00:00:01,ip=127.0.0.1/8,type=veth".into(),
    );
    if d.unprivileged {
        c.insert("unprivileged".into(), "1".into());
    }
    if !d.features.is_empty() {
        c.insert("features".into(), features_string(&d.features));
    }
    LiveCt { config: c, pending: BTreeSet::new(), running: true }
}

fn run(d: &Desired, ct: LiveCt, policy: RecreatePolicy, root: bool) -> PvePlanned {
    plan(d, &PveObserved::Present(ct), policy, root)
}

#[test]
fn absent_creates() {
    let p = plan(&want(), &PveObserved::Absent, RecreatePolicy::Never, false);
    assert_eq!(p, PvePlanned { action: Action::Create, start: true, warnings: vec![], reboot_for_pending: false });
}

#[test]
fn equal_is_nothing() {
    let d = want();
    let p = run(&d, live_of(&d), RecreatePolicy::Never, false);
    assert_eq!(p, PvePlanned { action: Action::Nothing, start: false, warnings: vec![], reboot_for_pending: false });
    let mut stopped = live_of(&d);
    stopped.running = false;
    // Memory comes back as a string or number; `lock` is ignored (with a warning).
    stopped.config.insert("lock".into(), "backup".into());
    let p = run(&d, stopped, RecreatePolicy::WhenNeeded, false);
    assert_eq!(p.action, Action::Nothing);
    assert!(p.start);
    assert_eq!(p.warnings, vec!["CT 101 is locked (backup); changes wait for the lock to clear"]);
}

#[test]
fn in_place_changes_only_changed_keys() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert("memory".into(), "512".into());
    ct.config.remove("swap"); // PVE default 512
    ct.config.insert("cores".into(), "1".into());
    ct.config.insert("onboot".into(), "0".into());
    // The user's own line in the description is kept: not a change (see
    // the_users_notes_in_the_description_are_kept_and_not_a_change).
    ct.config.insert("description".into(), format!("{}old\n", d.description));
    let p = run(&d, ct, RecreatePolicy::Never, false);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![
                Change { key: "cores".into(), from: Some("1".into()), to: Some("2".into()) },
                Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) },
                Change { key: "swap".into(), from: None, to: Some("256".into()) },
                Change { key: "onboot".into(), from: Some("0".into()), to: Some("1".into()) },
            ],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    assert!(!p.start);
}

#[test]
fn net0_change_keeps_mac() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert(
        "net0".into(),
        "name=eth0,bridge=vmbr1,gw=127.0.0.254,hwaddr=BC:24:11:00:00:01,ip=127.0.0.2/8,type=veth".into(),
    );
    let p = run(&d, ct, RecreatePolicy::Never, false);
    let Action::Update { changes, .. } = p.action else { panic!("{:?}", p.action) };
    assert_eq!(
        changes[0].to.as_deref(),
        Some("name=eth0,bridge=vmbr0,ip=127.0.0.1/8,gw=127.0.0.254,hwaddr=BC:24:11:00:00:01,type=veth")
    );
}

#[test]
fn grow_resizes_and_shrink_is_refused_naming_the_key_and_sizes() {
    let mut s = spec();
    s.mounts = vec![Mount::Volume { storage: "local-lvm".into(), size_gib: 4, container_path: "/data".into() }];
    s.rootfs.size_gib = 10;
    let d = desired(&s, &defaults(), "amd64").unwrap();
    let mut ct = live_of(&d);
    ct.config.insert("rootfs".into(), "local-lvm:vm-101-disk-0,size=8G".into());
    ct.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=2048M".into());
    let p = run(&d, ct.clone(), RecreatePolicy::Never, false);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![],
            resizes: vec![
                Resize { disk: "rootfs".into(), from_gib: 8, to_gib: 10 },
                Resize { disk: "mp0".into(), from_gib: 2, to_gib: 4 },
            ],
            reboot_needed: false,
        }
    );
    ct.config.insert("rootfs".into(), "local-lvm:vm-101-disk-0,size=12G".into());
    ct.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=4G".into());
    ct.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=6G".into());
    let reasons = vec![
        "DISK in libs/broker/container.env: rootfs of CT 101 is 12 GiB on PVE, the spec asks for 10 GiB, and PVE \
         cannot shrink a volume; set DISK=local-lvm:12 (or more)"
            .to_string(),
        "MOUNT in libs/broker/container.env: mp0 (local-lvm:4:/data) is 6 GiB on PVE, the spec asks for 4 GiB, and \
         PVE cannot shrink a volume; write local-lvm:6:/data (or more)"
            .to_string(),
    ];
    // No policy recreates for a shrink: a recreate would empty the volume.
    for policy in [RecreatePolicy::Never, RecreatePolicy::WhenNeeded] {
        let p = run(&d, ct.clone(), policy, false);
        assert_eq!(p.action, Action::refused_blocked(reasons.clone()));
        assert!(!p.start);
    }
}

#[test]
fn recreate_reasons() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert(
        "description".into(),
        "managed by proxmox-gitops: lib `broker`\nostemplate: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n"
            .into(),
    );
    ct.config.insert("rootfs".into(), "ceph:vm-101-disk-0,size=8G".into());
    ct.config.remove("unprivileged");
    ct.config.insert("hostname".into(), "other".into());
    ct.config.insert("arch".into(), "arm64".into());
    ct.config.insert("mp3".into(), "/srv,mp=/srv".into());
    ct.config.insert("dev0".into(), "/dev/ttyUSB0".into());
    ct.config.insert("template".into(), "1".into());
    let p = run(&d, ct, RecreatePolicy::Never, true);
    assert_eq!(
        p.action,
        Action::refused_recreate(vec![
                "vmid 101 holds `other`, not `broker` (vmid reused by another container?)".into(),
                "vmid 101 is a template".into(),
                "arch changes from arm64 to amd64".into(),
                "ostemplate changes from local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst to local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst".into(),
                "unprivileged changes from 0 to 1".into(),
            "rootfs moves from storage `ceph` to `local-lvm`".into(),
        ])
    );
    assert!(!run(&d, live_of(&d), RecreatePolicy::Never, true).action.changes_something());
}

fn with_mounts(mounts: Vec<Mount>) -> (ContainerSpec, Desired) {
    let s = ContainerSpec { mounts, ..spec() };
    let d = desired(&s, &defaults(), "amd64").unwrap();
    (s, d)
}

fn volume(size_gib: u64, path: &str) -> Mount {
    Mount::Volume { storage: "local-lvm".into(), size_gib, container_path: path.into() }
}

fn change(key: &str, from: Option<&str>, to: Option<&str>) -> Change {
    Change { key: key.into(), from: from.map(Into::into), to: to.map(Into::into) }
}

fn lines(s: &ContainerSpec, action: &Action, policy: RecreatePolicy) -> Vec<String> {
    setting_changes(s, action, policy).iter().map(crate::cli::describe::setting_line).collect()
}

#[test]
fn a_new_mount_point_or_device_is_added_in_place_never_recreated() {
    let (s, d) = with_mounts(vec![
        Mount::Bind { host_path: "/srv/a".into(), container_path: "/a".into() },
        volume(4, "/data"),
        Mount::Device { path: "/dev/ttyUSB0".into() },
    ]);
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "/srv/a,mp=/a".into());
    for policy in [RecreatePolicy::Never, RecreatePolicy::WhenNeeded] {
        let p = run(&d, ct.clone(), policy, true);
        let action = Action::Update {
            changes: vec![
                change("mp1", None, Some("local-lvm:4,mp=/data")),
                change("dev0", None, Some("/dev/ttyUSB0")),
            ],
            resizes: vec![],
            // PVE hotplugs a new mount point and device into a running container.
            reboot_needed: false,
        };
        // Anything PVE still leaves pending is applied by a reboot only where the policy allows one.
        let reboot_for_pending = policy.allows_restart();
        assert_eq!(p, PvePlanned { action: action.clone(), start: false, warnings: vec![], reboot_for_pending });
        assert_eq!(lines(&s, &action, policy), vec!["MOUNT +local-lvm:4:/data", "MOUNT +/dev/ttyUSB0"]);
    }
}

#[test]
fn a_removed_mount_point_is_deleted_in_place_and_its_volume_kept() {
    let (s, d) = with_mounts(vec![]);
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=4G".into());
    ct.config.insert("dev0".into(), "/dev/ttyUSB0,mode=0660".into());
    let p = run(&d, ct.clone(), RecreatePolicy::Never, true);
    let action = Action::Update {
        changes: vec![
            change("mp0", Some("local-lvm:vm-101-disk-1,mp=/data,size=4G"), None),
            change("dev0", Some("/dev/ttyUSB0,mode=0660"), None),
        ],
        resizes: vec![],
        // PVE keeps deletes pending on a running container.
        reboot_needed: true,
    };
    assert_eq!(p.action, action);
    assert_eq!(
        p.warnings,
        vec![
            "mp0 (local-lvm:vm-101-disk-1) leaves CT 101: PVE keeps the volume as an unused disk (`unusedN` in \
             `pct config 101`) and does not destroy its data; remove it with `pct set 101 --delete unusedN` when no \
             longer needed"
        ]
    );
    assert_eq!(
        lines(&s, &action, RecreatePolicy::Never),
        vec!["MOUNT -local-lvm:4:/data (pending until restart)", "MOUNT -/dev/ttyUSB0 (pending until restart)"]
    );
    assert_eq!(
        lines(&s, &action, RecreatePolicy::WhenNeeded),
        vec!["MOUNT -local-lvm:4:/data (reboot)", "MOUNT -/dev/ttyUSB0 (reboot)"]
    );
    // A stopped container takes the delete at once.
    ct.running = false;
    let p = run(&d, ct, RecreatePolicy::Never, true);
    assert!(matches!(p.action, Action::Update { reboot_needed: false, .. }), "{:?}", p.action);
    assert!(p.start);
    // Under an API token, a live bind mount or device cannot be touched: refused, not recreated.
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "/srv/a,mp=/a".into());
    let p = run(&d, ct, RecreatePolicy::WhenNeeded, false);
    let Action::Refused { reasons, needs_recreate: false } = &p.action else { panic!("{:?}", p.action) };
    assert!(reasons[0].starts_with("mp0 is the bind mount `/srv/a,mp=/a` on PVE: only root@pam"), "{reasons:?}");
}

#[test]
fn removing_the_first_mount_entry_does_not_shift_the_others_onto_its_volume() {
    // MOUNT was `local-lvm:4:/a local-lvm:8:/b`; the user removes the first entry.
    let (s, d) = with_mounts(vec![volume(8, "/b")]);
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/a,size=4G".into());
    ct.config.insert("mp1".into(), "local-lvm:vm-101-disk-2,mp=/b,size=8G".into());
    let p = run(&d, ct.clone(), RecreatePolicy::Never, true);
    let action = Action::Update {
        changes: vec![change("mp0", Some("local-lvm:vm-101-disk-1,mp=/a,size=4G"), None)],
        resizes: vec![],
        reboot_needed: true,
    };
    assert_eq!(p.action, action);
    assert_eq!(lines(&s, &action, RecreatePolicy::Never), vec!["MOUNT -local-lvm:4:/a (pending until restart)"]);
    // A new entry takes a free number, never the one of a volume being removed.
    let (_, d) = with_mounts(vec![volume(8, "/b"), volume(2, "/c")]);
    let p = run(&d, ct, RecreatePolicy::Never, true);
    let Action::Update { changes, .. } = &p.action else { panic!("{:?}", p.action) };
    assert_eq!(
        changes,
        &vec![
            change("mp0", Some("local-lvm:vm-101-disk-1,mp=/a,size=4G"), None),
            change("mp2", None, Some("local-lvm:2,mp=/c")),
        ]
    );
    assert_eq!(
        crate::backend::pve::desired::drift::config_drift(
            &d,
            &live_with(
                &d,
                &[("mp1", "local-lvm:vm-101-disk-2,mp=/b,size=8G"), ("mp2", "local-lvm:vm-101-disk-3,mp=/c,size=2G")]
            )
        ),
        vec![],
        "drift matches mount points the same way"
    );
}

fn live_with(d: &Desired, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut c = live_of(d).config;
    c.insert("onboot".into(), "1".into());
    for (k, v) in extra {
        c.insert(k.to_string(), v.to_string());
    }
    c
}

#[test]
fn a_changed_mount_is_rewritten_in_place_and_a_moved_path_is_a_new_mount_point() {
    let (s, d) = with_mounts(vec![
        Mount::Bind { host_path: "/srv/new".into(), container_path: "/a".into() },
        volume(6, "/srv/data"),
    ]);
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "/srv/old,mp=/a,ro=1".into());
    ct.config.insert("mp1".into(), "local-lvm:vm-101-disk-1,mp=/data,size=4G,backup=1".into());
    let p = run(&d, ct, RecreatePolicy::WhenNeeded, true);
    let action = Action::Update {
        changes: vec![
            // Same path, another host directory: rewritten, its options kept.
            change("mp0", Some("/srv/old,mp=/a,ro=1"), Some("/srv/new,mp=/a,ro=1")),
            // Another path: the old volume leaves (kept as an unused disk), a new one comes.
            change("mp1", Some("local-lvm:vm-101-disk-1,mp=/data,size=4G,backup=1"), None),
            change("mp2", None, Some("local-lvm:6,mp=/srv/data")),
        ],
        resizes: vec![],
        reboot_needed: true,
    };
    assert_eq!(p.action, action);
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(p.warnings[0].starts_with("mp1 (local-lvm:vm-101-disk-1) leaves CT 101: PVE keeps the volume"));
    assert_eq!(
        lines(&s, &action, RecreatePolicy::WhenNeeded),
        vec![
            "MOUNT /srv/old:/a → /srv/new:/a (reboot)",
            "MOUNT -local-lvm:4:/data (reboot)",
            "MOUNT +local-lvm:6:/srv/data"
        ]
    );
}

#[test]
fn a_volume_on_another_storage_is_refused_with_move_volume() {
    let (_, d) = with_mounts(vec![volume(4, "/data")]);
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "ceph:vm-101-disk-1,mp=/data,size=4G".into());
    let p = run(&d, ct, RecreatePolicy::WhenNeeded, true);
    assert_eq!(
        p.action,
        Action::refused_blocked(vec![
            "MOUNT in libs/broker/container.env: mp0 (ceph:4:/data) is on storage `ceph` on PVE, the spec wants \
             `local-lvm`; move it keeping its data: stop CT 101 and run `pct move-volume 101 mp0 local-lvm` on its node"
                .into()
        ])
    );
}

#[test]
fn match_mounts_by_path_then_own_number_then_free() {
    let (_, d) = with_mounts(vec![volume(1, "/x"), volume(2, "/y"), volume(3, "/z")]);
    let cfg: BTreeMap<String, String> = [
        ("mp0", "local-lvm:vm-101-disk-1,mp=/y,size=2G"),
        ("mp1", "local-lvm:vm-101-disk-2,mp=/old,size=2G"),
        ("mp3", "/srv,mp=/w"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let got: Vec<(String, String)> =
        match_mounts(&d.mounts, &cfg).into_iter().map(|(k, m)| (k, m.mp().to_string())).collect();
    // /y keeps the live mp0 (same path); /z takes its own number mp2 (free); /x's own mp0 is
    // taken, so it gets the lowest number neither live nor taken (mp4): the volume at /old (mp1)
    // is never remounted at another entry's path.
    assert_eq!(got, vec![("mp0".into(), "/y".into()), ("mp2".into(), "/z".into()), ("mp4".into(), "/x".into())]);
}

#[test]
fn ostemplate_unknown_is_a_warning() {
    let d = want();
    let mut ct = live_of(&d);
    // Ours (the lib line), but made before the ostemplate line existed.
    ct.config.insert("description".into(), "managed by proxmox-gitops: lib `broker`\n".into());
    let p = run(&d, ct, RecreatePolicy::Never, false);
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(p.warnings.len(), 1);
    assert!(p.warnings[0].contains("not created by proxmox-gitops"), "{:?}", p.warnings);
}

#[test]
fn always_recreates() {
    let d = want();
    let p = run(&d, live_of(&d), RecreatePolicy::Always, false);
    assert_eq!(p.action, Action::Recreate { reasons: vec!["recreate policy `always`".into()] });
    assert!(p.start);
}

#[test]
fn features_by_auth() {
    let mut s = spec();
    s.env.insert("FEATURES".into(), "nesting".into());
    let d = desired(&s, &defaults(), "amd64").unwrap();
    let mut ct = live_of(&d);
    ct.config.remove("features");
    // nesting alone: allowed under a token, needs a reboot when running.
    let p = run(&d, ct.clone(), RecreatePolicy::Never, false);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![Change { key: "features".into(), from: None, to: Some("nesting=1".into()) }],
            resizes: vec![],
            reboot_needed: true,
        }
    );
    // keyctl removed on PVE side: only root may change it.
    ct.config.insert("features".into(), "keyctl=1,nesting=1".into());
    let p = run(&d, ct.clone(), RecreatePolicy::WhenNeeded, false);
    let Action::Refused { reasons, needs_recreate: false } = &p.action else { panic!("{:?}", p.action) };
    assert!(reasons[0].contains("only root@pam") && reasons[0].contains("keyctl"), "{reasons:?}");
    let p = run(&d, ct, RecreatePolicy::Never, true);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![Change {
                key: "features".into(),
                from: Some("keyctl=1,nesting=1".into()),
                to: Some("nesting=1".into())
            }],
            resizes: vec![],
            reboot_needed: true,
        }
    );
    // Equal flags written differently are equal.
    let mut ct = live_of(&d);
    ct.config.insert("features".into(), "nesting=1,fuse=0".into());
    assert_eq!(run(&d, ct, RecreatePolicy::Never, false).action, Action::Nothing);
}

#[test]
fn pending_is_reported() {
    let d = want();
    let mut ct = live_of(&d);
    ct.pending.insert("memory".into());
    let p = run(&d, ct.clone(), RecreatePolicy::Never, false);
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(p.warnings, vec!["pending changes (memory) apply at the next reboot of CT 101"]);
    ct.config.insert("cores".into(), "4".into());
    let p = run(&d, ct.clone(), RecreatePolicy::Never, false);
    assert!(matches!(p.action, Action::Update { reboot_needed: true, .. }), "{:?}", p.action);
    // Pending alone: a policy that allows a restart restarts the container to apply it.
    ct.config.insert("cores".into(), "2".into());
    let p = run(&d, ct.clone(), RecreatePolicy::WhenNeeded, false);
    assert_eq!(p.action, Action::Update { changes: vec![], resizes: vec![], reboot_needed: true });
    ct.running = false;
    assert_eq!(run(&d, ct, RecreatePolicy::WhenNeeded, false).action, Action::Nothing);
}

#[test]
fn sizes() {
    assert_eq!(parse_size("8G"), Some(8 * GIB));
    assert_eq!(parse_size("512M"), Some(512 * 1024 * 1024));
    assert_eq!(parse_size("1T"), Some(1024 * GIB));
    assert_eq!(parse_size("1024"), Some(1024));
    assert_eq!(parse_size("x"), None);
    assert_eq!(split_props("local-lvm:vm-1-disk-0,size=8G").0.as_deref(), Some("local-lvm:vm-1-disk-0"));
}

#[test]
fn missing_owner_tag_is_added_in_place_keeping_the_users_tags() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert("tags".into(), "prod;web".into());
    let p = run(&d, ct, RecreatePolicy::Never, false);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![Change {
                key: "tags".into(),
                from: Some("prod;web".into()),
                to: Some("prod;web;proxmox-gitops".into())
            }],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    let mut ct = live_of(&d);
    ct.config.remove("tags");
    let p = run(&d, ct, RecreatePolicy::Never, false);
    assert_eq!(
        p.action,
        Action::Update {
            changes: vec![Change { key: "tags".into(), from: None, to: Some("proxmox-gitops".into()) }],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    // Already there among others (any case, any separator): nothing to do.
    let mut ct = live_of(&d);
    ct.config.insert("tags".into(), "a,Proxmox-GitOps b".into());
    assert_eq!(run(&d, ct, RecreatePolicy::Never, false).action, Action::Nothing);
    assert!(create_params_have_tag(&d));
}

fn create_params_have_tag(d: &Desired) -> bool {
    crate::backend::pve::desired::create_params(d, "ssh-ed25519 AAAA k")
        .iter()
        .any(|(k, v)| k == "tags" && v == crate::backend::pve::desired::OWNER_TAG)
}

#[test]
fn settings_in_the_users_terms() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert("memory".into(), "2048".into());
    ct.config.insert("cores".into(), "1".into());
    ct.config.remove("swap");
    ct.config.insert("onboot".into(), "0".into());
    ct.config.insert("rootfs".into(), "local-lvm:vm-101-disk-0,size=4G".to_string());
    ct.config.insert(
        "net0".into(),
        "name=eth0,bridge=vmbr1,gw=127.0.0.254,hwaddr=BC:24:11:00:00:01,ip=127.0.0.9/8,type=veth".into(),
    );
    let planned = run(&d, ct, RecreatePolicy::Never, true);
    let s = spec();
    let lines: Vec<String> = setting_changes(&s, &planned.action, RecreatePolicy::Never)
        .iter()
        .map(|c| format!("{} {:?} {:?} {:?}", c.setting, c.from, c.to, c.how))
        .collect();
    assert_eq!(
        lines,
        vec![
            r#"CORES Some("1") Some("2") None"#,
            r#"MEMORY Some("2048") Some("1024") None"#,
            r#"SWAP Some("512") Some("256") None"#,
            r#"BOOT Some("no") Some("yes") None"#,
            r#"IP Some("127.0.0.9/8") Some("127.0.0.1/8") None"#,
            r#"PROXMOX_BRIDGE Some("vmbr1") Some("vmbr0") None"#,
            r#"DISK Some("local-lvm:4") Some("local-lvm:8") Some("resize")"#,
        ]
    );
}

#[test]
fn share_and_features_in_the_users_terms() {
    let share = ContainerSpec { mounts: vec![Mount::Share { name: "share".into() }], ..spec() };
    let action = Action::Update {
        changes: vec![Change {
            key: "features".into(),
            from: Some("nesting=1".into()),
            to: Some("keyctl=1,mount=cifs,nesting=1".into()),
        }],
        resizes: vec![],
        reboot_needed: true,
    };
    type Row = (String, Option<String>, Option<String>, Option<String>);
    let got: Vec<Row> = setting_changes(&share, &action, RecreatePolicy::WhenNeeded)
        .into_iter()
        .map(|c| (c.setting, c.from, c.to, c.how))
        .collect();
    assert_eq!(
        got,
        vec![
            ("MOUNT".into(), None, Some("share".into()), Some("reboot".into())),
            ("FEATURES".into(), Some("nesting".into()), Some("keyctl,nesting".into()), Some("reboot".into())),
        ]
    );
    let never = setting_changes(&share, &action, RecreatePolicy::Never);
    assert_eq!(never[0].how.as_deref(), Some("pending until restart"));
    assert!(setting_changes(&share, &Action::Create, RecreatePolicy::Never).is_empty());
}

#[test]
fn lease_lines_are_not_a_change() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert("description".into(), format!("{}proxmox-gitops lease: h:1:ab until 99\n", d.description));
    assert_eq!(run(&d, ct, RecreatePolicy::Never, false).action, Action::Nothing);
}

#[test]
fn foreign_containers_are_never_touched_without_adopt() {
    let d = want();
    for desc in [None, Some("my own notes\n"), Some("managed by proxmox-gitops: lib `cache`\nostemplate: x\n")] {
        let mut ct = live_of(&d);
        match desc {
            Some(t) => ct.config.insert("description".into(), t.into()),
            None => ct.config.remove("description"),
        };
        // Another template and a shrink would need a recreate: still no destroy, whatever the policy.
        ct.config.insert("rootfs".into(), "local-lvm:vm-101-disk-0,size=64G".into());
        ct.running = false;
        for policy in [RecreatePolicy::Never, RecreatePolicy::WhenNeeded, RecreatePolicy::Always] {
            let p = run(&d, ct.clone(), policy, true);
            let Action::Foreign { reason } = &p.action else { panic!("{desc:?} {policy:?}: {:?}", p.action) };
            assert!(reason.contains("not created by proxmox-gitops for lib `broker`"), "{reason}");
            assert!(reason.contains("--adopt"), "{reason}");
            assert!(!reason.contains("--allow-recreate"), "{reason}");
            assert!(!p.start, "a foreign container is not even started");
        }
        // Adopting: a shrink is refused as for our own containers (or, with another recorded
        // ostemplate, as a recreate), and what needs a recreate (the rootfs on another storage)
        // is refused too: adopting never destroys.
        let p = plan_with(&d, &PveObserved::Present(ct.clone()), RecreatePolicy::WhenNeeded, true, true);
        let Action::Refused { reasons, needs_recreate: false } = &p.action else { panic!("{:?}", p.action) };
        assert!(
            reasons.iter().any(|r| r.contains("cannot shrink") || r.contains("adopting never destroys")),
            "{reasons:?}"
        );
        let mut moved = ct.clone();
        moved.config.insert("rootfs".into(), "other:vm-101-disk-0,size=8G".into());
        let p = plan_with(&d, &PveObserved::Present(moved), RecreatePolicy::WhenNeeded, true, true);
        let Action::Refused { reasons, needs_recreate: false } = &p.action else { panic!("{:?}", p.action) };
        assert!(reasons.iter().any(|r| r.contains("adopting never destroys")), "{reasons:?}");
    }
}

#[test]
fn adopt_writes_the_mark_in_place() {
    let d = want();
    let mut ct = live_of(&d);
    ct.config.insert("description".into(), "hand-made\n".into());
    ct.config.insert("tags".into(), "prod".into());
    ct.config.insert("memory".into(), "512".into());
    let p = plan_with(&d, &PveObserved::Present(ct), RecreatePolicy::Never, false, true);
    assert_eq!(
        p.action,
        Action::Adopt {
            changes: vec![
                Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) },
                Change {
                    key: "description".into(),
                    from: Some("hand-made\n".into()),
                    to: Some(format!("{}\nhand-made\n", d.description)),
                },
                Change { key: "tags".into(), from: Some("prod".into()), to: Some("prod;proxmox-gitops".into()) },
            ],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    assert!(!p.start);
    // Adopting our own container changes nothing.
    assert_eq!(
        plan_with(&d, &PveObserved::Present(live_of(&d)), RecreatePolicy::Never, false, true).action,
        Action::Nothing
    );
    // Once adopted, the kept text is the user's: the next plan changes nothing.
    let mut adopted = live_of(&d);
    adopted.config.insert("description".into(), format!("{}\nhand-made\n", d.description));
    assert_eq!(
        plan_with(&d, &PveObserved::Present(adopted), RecreatePolicy::Never, false, false).action,
        Action::Nothing
    );
}

#[test]
fn the_users_notes_in_the_description_are_kept_and_not_a_change() {
    let d = want();
    let mut ct = live_of(&d);
    // Notes typed in PVE's UI below (or above) our lines, and a lease line: nothing to change.
    let noted = format!("Backups: weekly, ask Bob\n\n{}proxmox-gitops lease: h:1 until 9\n", d.description);
    ct.config.insert("description".into(), noted.clone());
    assert_eq!(
        plan_with(&d, &PveObserved::Present(ct.clone()), RecreatePolicy::Never, false, false).action,
        Action::Nothing
    );
    // The user's lines and ours, told apart; ours rewritten with the notes after them.
    assert_eq!(own_lines(&noted), d.description);
    assert_eq!(user_notes(&noted), "Backups: weekly, ask Bob\n");
    assert_eq!(with_user_notes(&d.description, &noted), format!("{}\nBackups: weekly, ask Bob\n", d.description));
    assert_eq!(with_user_notes(&d.description, &d.description), d.description);
    // A note that looks like our lines (above them, or a second copy) stays a note: it is not the
    // recorded template (which would plan a recreate) nor the owner.
    let mut ct = live_of(&d);
    let lookalike = format!(
        "ostemplate: local:vztmpl/alpine.tar.xz is what Bob wants\n{}managed by proxmox-gitops: lib `other`\n",
        d.description
    );
    ct.config.insert("description".into(), lookalike.clone());
    assert_eq!(
        plan_with(&d, &PveObserved::Present(ct), RecreatePolicy::WhenNeeded, false, false).action,
        Action::Nothing
    );
    assert_eq!(own_lines(&lookalike), d.description);
    assert_eq!(
        user_notes(&lookalike),
        "ostemplate: local:vztmpl/alpine.tar.xz is what Bob wants\nmanaged by proxmox-gitops: lib `other`\n"
    );
}

#[test]
fn the_plan_decides_whether_a_reboot_applies_what_pve_keeps_pending() {
    let (_, d) = with_mounts(vec![volume(4, "/data")]);
    let running = live_of(&d);
    let mut stopped = running.clone();
    stopped.running = false;
    let decided = |ct: &LiveCt, policy| run(&d, ct.clone(), policy, true).reboot_for_pending;
    // An in-place change of a running container: a reboot only where the policy allows one.
    assert!(!decided(&running, RecreatePolicy::Never));
    assert!(decided(&running, RecreatePolicy::WhenNeeded));
    // A stopped container applies everything when this run starts it: no reboot.
    assert!(!decided(&stopped, RecreatePolicy::WhenNeeded));
    // Nothing to change, nothing to reboot for.
    let mut same = running.clone();
    same.config.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=4G".into());
    let p = run(&d, same, RecreatePolicy::WhenNeeded, true);
    assert_eq!(p.action, Action::Nothing, "{p:?}");
    assert!(!p.reboot_for_pending);
}
