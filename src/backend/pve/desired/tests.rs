//! Unit tests of the pure mapping of a spec to PVE parameters; `defaults` and `spec` are shared
//! with the planner tests.

use super::*;

pub fn spec() -> ContainerSpec {
    ContainerSpec {
        ip: IpConfig::Static { address: "127.0.0.1".parse().unwrap(), prefix: None },
        cores: 2,
        memory_mib: 1024,
        swap_mib: 256,
        ..ContainerSpec::new("broker", 101, IpConfig::Dhcp)
    }
}

pub fn defaults() -> PveDefaults {
    PveDefaults {
        storage: "local:vztmpl".into(),
        template: "debian-13-standard_13.1-2".into(),
        gateway: Some("127.0.0.254".into()),
        mask: Some(8),
        interface: "eth0".into(),
        bridge: "vmbr0".into(),
    }
}

#[test]
fn create_parameters() {
    let mut s = spec();
    s.mounts = vec![
        Mount::Volume { storage: "local-lvm".into(), size_gib: 4, container_path: "/data".into() },
        Mount::Device { path: "/dev/ttyUSB0".into() },
    ];
    s.env.insert("FEATURES".into(), "nesting, keyctl=1, fuse=0".into());
    let d = desired(&s, &defaults(), "amd64").unwrap();
    let p = create_params(&d, "ssh-ed25519 AAAA x\n");
    let got: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(
        got,
        vec![
            "vmid=101",
            "hostname=broker",
            "ostemplate=local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst",
            "cores=2",
            "memory=1024",
            "swap=256",
            "rootfs=local-lvm:8",
            "net0=name=eth0,bridge=vmbr0,ip=127.0.0.1/8,gw=127.0.0.254",
            "unprivileged=1",
            "onboot=1",
            "description=managed by proxmox-gitops: lib `broker`\nostemplate: local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst\n",
            "tags=proxmox-gitops",
            "ssh-public-keys=ssh-ed25519 AAAA x",
            "features=keyctl=1,nesting=1",
            "mp0=local-lvm:4,mp=/data",
            "dev0=/dev/ttyUSB0",
        ]
    );
    assert_eq!(
        root_only_options(&d),
        vec!["dev0 (device passthrough /dev/ttyUSB0)", "features keyctl (only nesting is allowed to non-root users)"]
    );
}

#[test]
fn dhcp_share_and_errors() {
    let mut s = spec();
    s.ip = IpConfig::Dhcp;
    s.mounts = vec![
        Mount::Share { name: "share".into() },
        Mount::Bind { host_path: "/srv".into(), container_path: "/srv".into() },
    ];
    let d = desired(&s, &defaults(), "arm64").unwrap();
    assert_eq!(props_string(&d.net0), "name=eth0,bridge=vmbr0,ip=dhcp");
    assert!(!d.unprivileged);
    assert_eq!(features_string(&d.features), "mount=cifs");
    assert_eq!(d.ostemplate, "local:vztmpl/debian-13-standard_13.1-2_arm64.tar.zst");
    assert_eq!(root_only_options(&d).len(), 2);

    let mut s = spec();
    let mut d0 = defaults();
    d0.mask = None;
    s.env.insert("FEATURES".into(), "nestin".into());
    let e = desired(&s, &d0, "amd64").unwrap_err();
    let msgs: Vec<String> = e.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        msgs,
        vec![
            "libs/broker/container.env (FEATURES): unknown feature `nestin`; expected one of nesting, keyctl, fuse, mknod, force_rw_sys",
            "libs/broker/container.env (IP): `127.0.0.1` has no prefix length and PROXMOX_MASK is not set: write `127.0.0.1/24` or set PROXMOX_MASK",
        ]
    );
    assert_eq!(arch_of_machine("x86_64"), "amd64");
    assert_eq!(arch_of_machine("fake"), "amd64");
    assert_eq!(arch_of_machine("aarch64"), "arm64");
    assert_eq!(template_volid("local", "t.tar.zst"), ("local".into(), "local:vztmpl/t.tar.zst".into()));
}

#[test]
fn owner_tag_is_added_to_the_users_tags() {
    assert_eq!(tags_with_owner(None).as_deref(), Some("proxmox-gitops"));
    assert_eq!(tags_with_owner(Some("")).as_deref(), Some("proxmox-gitops"));
    assert_eq!(tags_with_owner(Some("prod;Web")).as_deref(), Some("prod;web;proxmox-gitops"));
    assert_eq!(tags_with_owner(Some("prod;proxmox-gitops")), None);
    assert!(has_owner_tag(Some("a, proxmox-gitops")));
    assert!(!has_owner_tag(Some("proxmox")));
    assert!(!has_owner_tag(None));
}

/// What a share client needs from PVE (docs/share.md): `MOUNT=share` creates a privileged
/// container with `mount=cifs` next to the user's features, and says both need root@pam.
#[test]
fn a_share_needs_a_privileged_container_with_mount_cifs() {
    let mut s = spec();
    s.mounts = vec![Mount::Share { name: "share".into() }];
    s.env.insert("FEATURES".into(), "nesting".into());
    let d = desired(&s, &defaults(), "amd64").unwrap();
    let p = create_params(&d, "ssh-ed25519 AAAA x");
    let get = |k: &str| p.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    assert_eq!(get("unprivileged"), Some("0"));
    assert_eq!(get("features"), Some("mount=cifs,nesting=1"));
    // The share is no PVE mount point: the CIFS mount is the container's own (configure).
    assert!(p.iter().all(|(k, _)| !k.starts_with("mp")), "{p:?}");
    assert_eq!(root_only_options(&d), vec!["features=mount=cifs,nesting=1 on a privileged container (share mount)"]);
}

#[test]
fn lease_lines_round_trip_and_are_ignored() {
    let d = desired(&spec(), &defaults(), "amd64").unwrap();
    let lease = Lease { holder: "runner1:4242:run-77:1a2b".into(), until: 1_800_000_000 };
    assert_eq!(lease.line(), "proxmox-gitops lease: runner1:4242:run-77:1a2b until 1800000000");
    let leased = with_lease(&d.description, &lease);
    assert_eq!(parse_lease(&leased), Some(lease.clone()));
    assert_eq!(without_lease(&leased), d.description);
    assert!(marked_for(&leased, "broker"));
    assert!(!marked_for(&leased, "cache"));
    // A second lease replaces the first; a malformed one is no lease.
    let other = Lease { holder: "h:1".into(), until: 5 };
    assert_eq!(parse_lease(&with_lease(&leased, &other)), Some(other.clone()));
    assert_eq!(with_lease(&leased, &other).matches(LEASE_MARKER).count(), 1);
    assert_eq!(parse_lease("proxmox-gitops lease: nobody\n"), None);
    assert_eq!(parse_lease("x\nproxmox-gitops lease: a until soon\n"), None);
    assert!(other.live_at(4) && !other.live_at(5));
    assert_eq!(without_lease(""), "");
    assert_eq!(without_lease("proxmox-gitops lease: a until 1"), "");
}
