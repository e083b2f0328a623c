//! Unit tests of the pure parts of the lxc backend: desired config and planning.

use std::collections::BTreeMap;
use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::inventory::{IpConfig, Mount};
use crate::lxc::{LxcConfig, State};
use crate::model::{Action, Change, RecreatePolicy};

fn spec() -> ContainerSpec {
    ContainerSpec { cores: 2, swap_mib: 256, ..ContainerSpec::new("broker", 101, IpConfig::Dhcp) }
}

fn host(cgroup: Cgroup) -> HostFacts {
    HostFacts {
        cgroup,
        bridge_net: ("10.0.3.1".parse().unwrap(), 24),
        paths: BTreeMap::new(),
        container_dir: "/var/lib/lxc/broker".into(),
        dhcp_range: None,
        pool: None,
        taken: Default::default(),
        current: CurrentAddress::Absent,
    }
}

fn keys(d: &Desired) -> Vec<(String, Vec<String>)> {
    d.keys.iter().filter(|(_, v)| !v.is_empty()).cloned().collect()
}

fn kv(k: &str, v: &[&str]) -> (String, Vec<String>) {
    (k.to_string(), v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn desired_cgroup_v1_full_shape() {
    let d = desired(&spec(), &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    assert_eq!(
        keys(&d),
        vec![
            kv("lxc.uts.name", &["broker"]),
            kv("lxc.apparmor.profile", &["unconfined"]),
            kv("lxc.net.0.link", &["lxcbr0"]),
            kv("lxc.net.0.hwaddr", &[&hwaddr("broker")]),
            kv("lxc.start.auto", &["1"]),
            kv("lxc.cgroup.memory.limit_in_bytes", &["536870912"]),
            kv("lxc.cgroup.memory.memsw.limit_in_bytes", &["805306368"]),
            kv("lxc.cgroup.cpu.cfs_period_us", &["100000"]),
            kv("lxc.cgroup.cpu.cfs_quota_us", &["200000"]),
        ]
    );
    assert_eq!(
        d.meta,
        Meta { vmid: 101, name: "broker".into(), base: "pgo-base-bookworm".into(), release: "bookworm".into() }
    );
    assert_eq!(
        d.warnings,
        vec![
            "DISK size 8 GiB not enforced: the lxc backend keeps the rootfs as a directory (storage `local-lvm` ignored)"
        ]
    );
    assert_eq!(d.static_address, None);
}

#[test]
fn desired_cgroup_v2_and_no_swap_accounting() {
    let mut s = spec();
    s.onboot = false;
    let d = desired(&s, &host(Cgroup::V2 { swap: false }), &LxcOptions::default()).unwrap();
    assert_eq!(
        keys(&d)[4..].to_vec(),
        vec![
            kv("lxc.start.auto", &["0"]),
            kv("lxc.cgroup2.memory.max", &["536870912"]),
            kv("lxc.cgroup2.cpu.max", &["200000 100000"]),
        ]
    );
    assert_eq!(d.warnings[0], "SWAP=256 not enforced: the host kernel has no swap accounting");
    let d = desired(&spec(), &host(Cgroup::V2 { swap: true }), &LxcOptions::default()).unwrap();
    assert!(keys(&d).contains(&kv("lxc.cgroup2.memory.swap.max", &["268435456"])));
}

#[test]
fn hwaddr_is_stable_and_local() {
    assert_eq!(hwaddr("broker"), hwaddr("broker"));
    assert_ne!(hwaddr("broker"), hwaddr("web"));
    assert!(hwaddr("broker").starts_with("00:16:3e:"));
    assert_eq!(hwaddr("broker").len(), 17);
}

#[test]
fn static_ip_inside_the_bridge_subnet_is_used_outside_ignored() {
    let mut s = spec();
    s.ip = IpConfig::Static { address: "10.0.3.50".parse().unwrap(), prefix: Some(24) };
    let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    assert_eq!(d.static_address, Some("10.0.3.50".parse().unwrap()));
    assert!(keys(&d).contains(&kv("lxc.net.0.ipv4.address", &["10.0.3.50/24"])));
    assert!(keys(&d).contains(&kv("lxc.net.0.ipv4.gateway", &["10.0.3.1"])));

    s.ip = IpConfig::Static { address: "192.168.178.20".parse().unwrap(), prefix: Some(24) };
    let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    assert_eq!(d.static_address, None);
    assert!(!keys(&d).iter().any(|(k, _)| k.starts_with("lxc.net.0.ipv4")));
    assert_eq!(
        d.warnings[0],
        "IP 192.168.178.20 is outside lxcbr0's subnet 10.0.3.1/24: ignored by the lxc backend, which chooses the container's address itself"
    );
}

#[test]
fn node_is_ignored_with_a_warning() {
    let mut s = spec();
    let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    assert!(!d.warnings.iter().any(|w| w.starts_with("NODE")), "{:?}", d.warnings);
    for node in ["auto", "pve2"] {
        s.node = Some(node.into());
        let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
        let want = format!("NODE={node} ignored: the lxc backend runs every container on this host");
        assert!(d.warnings.contains(&want), "{:?}", d.warnings);
    }
}

#[test]
fn mounts_become_entries_and_devices() {
    let mut s = spec();
    s.mounts = vec![
        Mount::Bind { host_path: "/srv/my data".into(), container_path: "/data".into() },
        Mount::Bind { host_path: "/etc/motd".into(), container_path: "/etc/motd".into() },
        Mount::Share { name: "share".into() },
        Mount::Volume { storage: "local-lvm".into(), size_gib: 4, container_path: "/var/lib/x".into() },
        Mount::Device { path: "/dev/ttyUSB0".into() },
    ];
    let mut h = host(Cgroup::V1 { swap: true });
    h.paths.insert("/srv/my data".into(), HostPath::Dir);
    h.paths.insert("/etc/motd".into(), HostPath::File);
    h.paths.insert("/dev/ttyUSB0".into(), HostPath::Device(DeviceNode { kind: 'c', major: 188, minor: 0 }));
    let opts = LxcOptions { share: "/srv/share".into(), ..LxcOptions::default() };
    let d = desired(&s, &h, &opts).unwrap();
    let k = keys(&d);
    assert_eq!(
        k.iter().find(|(k, _)| k == "lxc.cgroup.devices.allow").unwrap(),
        &kv("lxc.cgroup.devices.allow", &["c 188:0 rwm"])
    );
    assert_eq!(
        k.iter().find(|(k, _)| k == "lxc.mount.entry").unwrap(),
        &kv(
            "lxc.mount.entry",
            &[
                "/srv/my\\040data data none bind,create=dir 0 0",
                "/etc/motd etc/motd none bind,create=file 0 0",
                "/srv/share/share share none bind,create=dir 0 0",
                "/var/lib/lxc/broker/volumes/mp3 var/lib/x none bind,create=dir 0 0",
                "/dev/ttyUSB0 dev/ttyUSB0 none bind,optional,create=file 0 0",
            ]
        )
    );
    assert_eq!(d.host_dirs, vec![PathBuf::from("/srv/share/share"), PathBuf::from("/var/lib/lxc/broker/volumes/mp3")]);
    assert!(
        d.warnings.iter().any(|w| w.starts_with("volume /var/lib/x (local-lvm:4) is a directory")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn impossible_mounts_are_clear_errors_naming_the_file() {
    let mut s = spec();
    s.mounts = vec![Mount::Bind { host_path: "/nope".into(), container_path: "/data".into() }];
    let e = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "libs/broker/container.env (MOUNT): bind mount source /nope does not exist on this host; create it or remove the entry"
    );
    s.mounts = vec![Mount::Device { path: "/dev/ttyNOPE".into() }];
    let e = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "libs/broker/container.env (MOUNT): device /dev/ttyNOPE does not exist on this host, so it cannot be passed through"
    );
    let mut h = host(Cgroup::V1 { swap: true });
    h.paths.insert("/dev/ttyNOPE".into(), HostPath::File);
    let e = desired(&s, &h, &LxcOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "libs/broker/container.env (MOUNT): /dev/ttyNOPE is not a device node, so it cannot be passed through"
    );
}

#[test]
fn host_path_kinds() {
    assert_eq!(host_path_kind(Path::new("/")), HostPath::Dir);
    assert_eq!(host_path_kind(Path::new("/nonexistent/x")), HostPath::Missing);
    assert_eq!(host_path_kind(Path::new("/dev/null")), HostPath::Device(DeviceNode { kind: 'c', major: 1, minor: 3 }));
    let f = tempfile::NamedTempFile::new().unwrap();
    assert_eq!(host_path_kind(f.path()), HostPath::File);
}

/// The live state after a create with `d`: the template's lines plus the managed keys.
fn live_from(d: &Desired, state: State) -> LxcObserved {
    let mut config = LxcConfig::parse(
        "lxc.net.0.type = veth\nlxc.rootfs.path = overlay:/var/lib/lxc/pgo-base-bookworm/rootfs:/var/lib/lxc/broker/overlay/delta\n\
         lxc.include = /usr/share/lxc/config/debian.common.conf\n",
    );
    for (k, v) in &d.keys {
        config.set_all(k, v);
    }
    LxcObserved { config, meta: Some(d.meta.clone()), state, interrupted: None }
}

fn plan_of(action: Action, start: bool) -> ContainerPlan {
    ContainerPlan {
        name: "broker".into(),
        vmid: 101,
        hostname: "broker".into(),
        action,
        start,
        node: None,
        placement: None,
        migrate: None,
        policy: RecreatePolicy::Never,
        reboot_for_pending: false,
    }
}

/// `plan` as recorded under `policy`.
fn under(policy: RecreatePolicy, plan: ContainerPlan) -> ContainerPlan {
    ContainerPlan { policy, ..plan }
}

#[test]
fn plan_absent_creates_equal_is_nothing() {
    let s = spec();
    let h = host(Cgroup::V1 { swap: true });
    let d = desired(&s, &h, &LxcOptions::default()).unwrap();
    assert_eq!(plan_container(&s, &d, None, RecreatePolicy::Never), plan_of(Action::Create, true));
    let live = live_from(&d, State::Running);
    assert_eq!(plan_container(&s, &d, Some(&live), RecreatePolicy::Never), plan_of(Action::Nothing, false));
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::WhenNeeded),
        under(RecreatePolicy::WhenNeeded, plan_of(Action::Nothing, false))
    );
    let stopped = live_from(&d, State::Stopped);
    assert_eq!(plan_container(&s, &d, Some(&stopped), RecreatePolicy::Never), plan_of(Action::Nothing, true));
}

#[test]
fn plan_resource_changes_update_in_place() {
    let mut s = spec();
    let h = host(Cgroup::V1 { swap: true });
    let before = desired(&s, &h, &LxcOptions::default()).unwrap();
    let live = live_from(&before, State::Running);
    s.memory_mib = 1024;
    s.cores = 1;
    s.onboot = false;
    let after = desired(&s, &h, &LxcOptions::default()).unwrap();
    let c = |k: &str, f: &str, t: &str| Change { key: k.into(), from: Some(f.into()), to: Some(t.into()) };
    assert_eq!(
        plan_container(&s, &after, Some(&live), RecreatePolicy::Never),
        plan_of(
            Action::Update {
                changes: vec![
                    c("lxc.start.auto", "1", "0"),
                    c("lxc.cgroup.memory.limit_in_bytes", "536870912", "1073741824"),
                    c("lxc.cgroup.memory.memsw.limit_in_bytes", "805306368", "1342177280"),
                    c("lxc.cgroup.cpu.cfs_quota_us", "200000", "100000"),
                ],
                resizes: vec![],
                reboot_needed: true,
            },
            false
        )
    );
    // Only cgroup limits: applied live, no reboot needed.
    s.onboot = true;
    let after = desired(&s, &h, &LxcOptions::default()).unwrap();
    let p = plan_container(&s, &after, Some(&live), RecreatePolicy::Never);
    assert!(matches!(p.action, Action::Update { reboot_needed: false, .. }), "{p:?}");
}

#[test]
fn plan_mount_changes_update_in_place() {
    let mut s = spec();
    let mut h = host(Cgroup::V2 { swap: true });
    h.paths.insert("/srv/a".into(), HostPath::Dir);
    let before = desired(&s, &h, &LxcOptions::default()).unwrap();
    let live = live_from(&before, State::Stopped);
    s.mounts = vec![Mount::Bind { host_path: "/srv/a".into(), container_path: "/a".into() }];
    let after = desired(&s, &h, &LxcOptions::default()).unwrap();
    assert_eq!(
        plan_container(&s, &after, Some(&live), RecreatePolicy::Never),
        plan_of(
            Action::Update {
                changes: vec![Change {
                    key: "lxc.mount.entry".into(),
                    from: None,
                    to: Some("/srv/a a none bind,create=dir 0 0".into())
                }],
                resizes: vec![],
                reboot_needed: false,
            },
            true
        )
    );
}

#[test]
fn plan_base_or_vmid_change_needs_the_policy() {
    let s = spec();
    let h = host(Cgroup::V1 { swap: true });
    let d = desired(&s, &h, &LxcOptions::default()).unwrap();
    let mut live = live_from(&d, State::Running);
    live.meta =
        Some(Meta { vmid: 101, name: "broker".into(), base: "pgo-base-bullseye".into(), release: "bullseye".into() });
    let reasons = vec!["base changed from pgo-base-bullseye (bullseye) to pgo-base-bookworm (bookworm)".to_string()];
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::Never),
        plan_of(Action::refused_recreate(reasons.clone()), false)
    );
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::WhenNeeded),
        under(RecreatePolicy::WhenNeeded, plan_of(Action::Recreate { reasons }, true))
    );
    live.meta = Some(Meta { vmid: 205, ..d.meta.clone() });
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::Never),
        plan_of(Action::refused_recreate(vec!["vmid changed from 205 to 101".into()]), false)
    );
    live.meta = None;
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::WhenNeeded),
        under(
            RecreatePolicy::WhenNeeded,
            plan_of(
                Action::Recreate {
                    reasons: vec![
                        "container `broker` exists but was not made by proxmox-gitops (no proxmox-gitops.json)".into()
                    ]
                },
                true
            )
        )
    );
}

#[test]
fn plan_always_recreates_an_existing_container() {
    let s = spec();
    let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    let live = live_from(&d, State::Running);
    assert_eq!(
        plan_container(&s, &d, Some(&live), RecreatePolicy::Always),
        under(
            RecreatePolicy::Always,
            plan_of(Action::Recreate { reasons: vec!["the recreate policy is `always`".into()] }, true)
        )
    );
    assert_eq!(
        plan_container(&s, &d, None, RecreatePolicy::Always),
        under(RecreatePolicy::Always, plan_of(Action::Create, true))
    );
}

#[test]
fn unmanaged_keys_are_ignored() {
    let s = spec();
    let d = desired(&s, &host(Cgroup::V1 { swap: true }), &LxcOptions::default()).unwrap();
    let mut live = live_from(&d, State::Running);
    live.config.set("lxc.tty.max", "4");
    live.config.set("lxc.include", "/usr/share/lxc/config/nesting.conf");
    assert_eq!(plan_container(&s, &d, Some(&live), RecreatePolicy::Never), plan_of(Action::Nothing, false));
}

fn pooled(current: CurrentAddress, taken: &[&str]) -> HostFacts {
    HostFacts {
        dhcp_range: Some(("10.0.3.2".parse().unwrap(), "10.0.3.99".parse().unwrap())),
        pool: Some(("10.0.3.100".parse().unwrap(), "10.0.3.254".parse().unwrap())),
        taken: taken.iter().map(|a| a.parse().unwrap()).collect(),
        current,
        ..host(Cgroup::V2 { swap: true })
    }
}

fn address_keys(d: &Desired) -> Vec<(String, Vec<String>)> {
    keys(d).into_iter().filter(|(k, _)| k.starts_with("lxc.net.0.ipv4")).collect()
}

#[test]
fn a_new_container_gets_a_static_address_from_the_pool_derived_from_its_hostname() {
    let d = desired(&spec(), &pooled(CurrentAddress::Absent, &[]), &LxcOptions::default()).unwrap();
    let a = d.static_address.expect("an address from the pool");
    assert!((100..=254).contains(&a.octets()[3]) && a.octets()[..3] == [10, 0, 3], "{a}");
    assert_eq!(
        address_keys(&d),
        vec![kv("lxc.net.0.ipv4.address", &[&format!("{a}/24")]), kv("lxc.net.0.ipv4.gateway", &["10.0.3.1"])]
    );
    // Deterministic: the same hostname, the same address; another hostname, (here) another one.
    let again = desired(&spec(), &pooled(CurrentAddress::Absent, &[]), &LxcOptions::default()).unwrap();
    assert_eq!(again.static_address, Some(a));
    let mut other = spec();
    other.hostname = "web".into();
    let w = desired(&other, &pooled(CurrentAddress::Absent, &[]), &LxcOptions::default()).unwrap();
    assert_ne!(w.static_address, Some(a));
    // Taken (another container's config, a lease): the next free one, wrapping around.
    let next = desired(&spec(), &pooled(CurrentAddress::Absent, &[&a.to_string()]), &LxcOptions::default()).unwrap();
    let expected =
        if a.octets()[3] == 254 { "10.0.3.100".parse().unwrap() } else { std::net::Ipv4Addr::from(u32::from(a) + 1) };
    assert_eq!(next.static_address, Some(expected));
    assert!(next.warnings.iter().all(|w| !w.contains("taken")), "{:?}", next.warnings);
}

#[test]
fn an_existing_container_keeps_its_address_and_a_full_pool_falls_back_to_dhcp() {
    let opts = LxcOptions::default();
    let kept = desired(&spec(), &pooled(CurrentAddress::Static("10.0.3.150".parse().unwrap()), &[]), &opts).unwrap();
    assert_eq!(kept.static_address, Some("10.0.3.150".parse().unwrap()));
    // A container made before static addresses keeps DHCP (no address change under a service).
    let dhcp = desired(&spec(), &pooled(CurrentAddress::Dhcp, &[]), &opts).unwrap();
    assert_eq!((dhcp.static_address, address_keys(&dhcp)), (None, vec![]));
    // Its address taken meanwhile by another container: a new one.
    let moved =
        desired(&spec(), &pooled(CurrentAddress::Static("10.0.3.150".parse().unwrap()), &["10.0.3.150"]), &opts)
            .unwrap();
    assert_ne!(moved.static_address, Some("10.0.3.150".parse().unwrap()));
    assert!(moved.static_address.is_some());
    // Every address taken: DHCP, said once.
    let all: Vec<String> = (100..=254).map(|i| format!("10.0.3.{i}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let full = desired(&spec(), &pooled(CurrentAddress::Absent, &all), &opts).unwrap();
    assert_eq!(full.static_address, None);
    assert!(
        full.warnings.contains(
            &"every static address 10.0.3.100-10.0.3.254 on lxcbr0 is taken: `broker` gets its address from DHCP"
                .to_string()
        ),
        "{:?}",
        full.warnings
    );
    // No pool (a bridge lxc-net does not manage): DHCP, as before.
    let none = desired(&spec(), &host(Cgroup::V2 { swap: true }), &opts).unwrap();
    assert_eq!(none.static_address, None);
}

#[test]
fn a_static_ip_of_the_spec_is_used_as_it_is_with_a_warning_inside_the_dhcp_range() {
    let mut s = spec();
    s.ip = IpConfig::Static { address: "10.0.3.20".parse().unwrap(), prefix: Some(24) };
    let d = desired(&s, &pooled(CurrentAddress::Static("10.0.3.150".parse().unwrap()), &[]), &LxcOptions::default())
        .unwrap();
    assert_eq!(d.static_address, Some("10.0.3.20".parse().unwrap()));
    assert!(
        d.warnings.contains(
            &"IP 10.0.3.20 is inside lxc-net's DHCP range 10.0.3.2-10.0.3.99: a lease may give it to another container; \
              choose an address outside it, or leave IP unset for the lxc backend to choose one"
                .to_string()
        ),
        "{:?}",
        d.warnings
    );
    s.ip = IpConfig::Static { address: "10.0.3.200".parse().unwrap(), prefix: Some(24) };
    let d = desired(&s, &pooled(CurrentAddress::Absent, &["10.0.3.200"]), &LxcOptions::default()).unwrap();
    assert_eq!(d.static_address, Some("10.0.3.200".parse().unwrap()));
    assert!(d.warnings.contains(&"IP 10.0.3.200 is also used by another container on lxcbr0".to_string()));
}
