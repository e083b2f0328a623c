//! Unit tests of the pure planner: every rule of the module docs, desired vs. live.

use super::*;
use crate::backend::pve::desired::tests::{defaults, spec};
use crate::backend::pve::desired::{Desired, desired};
use crate::inventory::Mount;
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

fn run(d: &Desired, ct: LiveCt, policy: RecreatePolicy, root: bool) -> Planned {
    plan(d, &Live::Present(ct), policy, root)
}

#[test]
fn absent_creates() {
    let p = plan(&want(), &Live::Absent, RecreatePolicy::Never, false);
    assert_eq!(p, Planned { action: Action::Create, start: true, warnings: vec![] });
}

#[test]
fn equal_is_nothing() {
    let d = want();
    let p = run(&d, live_of(&d), RecreatePolicy::Never, false);
    assert_eq!(p, Planned { action: Action::Nothing, start: false, warnings: vec![] });
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
                Change {
                    key: "description".into(),
                    from: Some(format!("{}old\n", d.description)),
                    to: Some(d.description.clone())
                },
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
fn grow_resizes_and_shrink_recreates() {
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
    let reasons = vec!["rootfs would shrink from 12G to 10 GiB (PVE cannot shrink a volume)".to_string()];
    assert_eq!(run(&d, ct.clone(), RecreatePolicy::Never, false).action, Action::Refused { reasons: reasons.clone() });
    let p = run(&d, ct, RecreatePolicy::WhenNeeded, false);
    assert_eq!(p.action, Action::Recreate { reasons });
    assert!(p.start);
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
        Action::Refused {
            reasons: vec![
                "vmid 101 holds `other`, not `broker` (vmid reused by another container?)".into(),
                "vmid 101 is a template".into(),
                "arch changes from arm64 to amd64".into(),
                "ostemplate changes from local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst to local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst".into(),
                "unprivileged changes from 0 to 1".into(),
                "rootfs moves from storage `ceph` to `local-lvm`".into(),
                "mp3 (/srv,mp=/srv) is not in the spec".into(),
                "dev0 is `/dev/ttyUSB0` on PVE, the spec wants `(none)`".into(),
            ]
        }
    );
    assert!(!run(&d, live_of(&d), RecreatePolicy::Never, true).action.changes_something());
}

#[test]
fn mounts_added_or_changed_recreate() {
    let mut s = spec();
    s.mounts = vec![
        Mount::Bind { host_path: "/srv/a".into(), container_path: "/a".into() },
        Mount::Volume { storage: "local-lvm".into(), size_gib: 4, container_path: "/data".into() },
    ];
    let d = desired(&s, &defaults(), "amd64").unwrap();
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "/srv/b,mp=/a".into());
    let p = run(&d, ct, RecreatePolicy::WhenNeeded, true);
    assert_eq!(
        p.action,
        Action::Recreate {
            reasons: vec![
                "mp0 is `/srv/b,mp=/a` on PVE, the spec wants `/srv/a,mp=/a`".into(),
                "mp1 (local-lvm:4,mp=/data) is new".into(),
            ]
        }
    );
    let mut ct = live_of(&d);
    ct.config.insert("mp0".into(), "/srv/a,mp=/a".into());
    ct.config.insert("mp1".into(), "local-lvm:vm-101-disk-1,mp=/other,size=4G".into());
    let p = run(&d, ct, RecreatePolicy::Never, true);
    assert_eq!(
        p.action,
        Action::Refused { reasons: vec!["mp1 is mounted at `/other` on PVE, the spec wants `/data`".into()] }
    );
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
    let Action::Refused { reasons } = &p.action else { panic!("{:?}", p.action) };
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
    let p = run(&d, ct, RecreatePolicy::Never, false);
    assert!(matches!(p.action, Action::Update { reboot_needed: true, .. }), "{:?}", p.action);
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
    let lines: Vec<String> = setting_changes(&s, &planned.action)
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
    let got: Vec<(String, Option<String>, Option<String>, Option<String>)> =
        setting_changes(&share, &action).into_iter().map(|c| (c.setting, c.from, c.to, c.how)).collect();
    assert_eq!(
        got,
        vec![
            ("MOUNT".into(), None, Some("share".into()), Some("reboot".into())),
            ("FEATURES".into(), Some("nesting".into()), Some("keyctl,nesting".into()), Some("reboot".into())),
        ]
    );
    assert!(setting_changes(&share, &Action::Create).is_empty());
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
        // Adopting: never a recreate either.
        let p = plan_with(&d, &Live::Present(ct.clone()), RecreatePolicy::WhenNeeded, true, true);
        let Action::Refused { reasons } = &p.action else { panic!("{:?}", p.action) };
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
    let p = plan_with(&d, &Live::Present(ct), RecreatePolicy::Never, false, true);
    assert_eq!(
        p.action,
        Action::Adopt {
            changes: vec![
                Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) },
                Change { key: "description".into(), from: Some("hand-made\n".into()), to: Some(d.description.clone()) },
                Change { key: "tags".into(), from: Some("prod".into()), to: Some("prod;proxmox-gitops".into()) },
            ],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    assert!(!p.start);
    // Adopting our own container changes nothing.
    assert_eq!(plan_with(&d, &Live::Present(live_of(&d)), RecreatePolicy::Never, false, true).action, Action::Nothing);
}
