//! The lxc backend against real LXC containers on this host (needs root, lxc, debootstrap and
//! Debian's mirror for the one base bootstrap per run).
//!
//! Runs with its own harness (libtest-mimic) so the run's base is bootstrapped once, shared by
//! every test, and removed after the last one: `cargo test --test provision_lxc [FILTER]`.
//! If LXC cannot run here, every test FAILS saying so.

mod support;

use std::sync::{LazyLock, OnceLock};
use std::time::Instant;

use libtest_mimic::{Arguments, Failed, Trial};
use pretty_assertions::assert_eq;
use proxmox_gitops::inventory::{ContainerSpec, Mount};
use proxmox_gitops::lxc::META_FILE;
use proxmox_gitops::model::{Action, Outcome, Provision, RecreatePolicy};
use serde_json::{Value, json};

use support::lxc::{self, Fixture};

static RT: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime"));
static FIXTURE: OnceLock<Result<Fixture, String>> = OnceLock::new();
static FIRST: tokio::sync::OnceCell<(ContainerSpec, Provision)> = tokio::sync::OnceCell::const_new();

fn fixture() -> Result<&'static Fixture, Failed> {
    FIXTURE.get_or_init(|| RT.block_on(Fixture::new())).as_ref().map_err(|e| Failed::from(e.as_str()))
}

/// The run's first container, created from nothing: it bootstraps the base. Shared by every test
/// that needs the base to exist.
async fn first(f: &'static Fixture) -> &'static (ContainerSpec, Provision) {
    FIRST
        .get_or_init(|| async move {
            let spec = f.spec("first", 90001);
            let p = f.provision(&spec, RecreatePolicy::Never).await;
            (spec, p)
        })
        .await
}

/// The artifact as JSON with the varying parts (durations, the address the backend chose)
/// normalised.
fn normalised(p: &Provision) -> Value {
    let mut v = serde_json::to_value(p).unwrap();
    // When this run created it: RFC 3339, within the last hour.
    if let Some(at) = v.get_mut("created_at") {
        let t =
            time::OffsetDateTime::parse(at.as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
        let age = time::OffsetDateTime::now_utc() - t;
        assert!(age >= time::Duration::ZERO && age < time::Duration::hours(1), "created_at {t}");
        *at = json!("<time>");
    }
    let address = p.address.clone().unwrap_or_default();
    for a in v["actions"].as_array_mut().unwrap() {
        a["duration_ms"] = json!(0);
        if let Some(d) = a["detail"].as_str().filter(|_| !address.is_empty()) {
            a["detail"] = json!(d.replace(&address, "<address>"));
        }
    }
    if v["address"].is_string() {
        v["address"] = json!("<address>");
    }
    v
}

/// The guest files a new container gets (the config action's detail).
const GUEST_FILES: &str = "written into the rootfs: /etc/ssh/ssh_host_ed25519_key, /etc/ssh/ssh_host_ed25519_key.pub, \
     /etc/ssh/sshd_config.d/proxmox-gitops-hostkey.conf, /etc/network/interfaces, /etc/resolv.conf, \
     /root/.ssh/authorized_keys";

fn actions(p: &Provision) -> Vec<&str> {
    p.actions.iter().map(|a| a.action.as_str()).collect()
}

fn assert_ok(p: &Provision) {
    assert_eq!(p.outcome, Outcome::Ok, "{}", serde_json::to_string_pretty(p).unwrap());
}

fn assert_lxcbr0(addr: &str) {
    let a: std::net::Ipv4Addr = addr.parse().expect("an IPv4 address");
    assert_eq!(a.octets()[..3], [10, 0, 3], "address {a} is not on lxcbr0 (10.0.3.0/24)");
}

/// An address the backend chose: on lxcbr0, outside the range lxc-net's dnsmasq leases.
fn assert_static_pool(addr: &str) {
    assert_lxcbr0(addr);
    let settings = std::fs::read_to_string(proxmox_gitops::lxc::LXC_NET_SETTINGS).ok();
    let (first, last) = proxmox_gitops::lxc::lxc_net_dhcp_range(settings.as_deref()).expect("lxc-net's DHCP range");
    let a: std::net::Ipv4Addr = addr.parse().unwrap();
    assert!(!(first..=last).contains(&a), "{a} is inside lxc-net's DHCP range {first}-{last}");
}

fn test_create_from_nothing_bootstraps_the_base() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        let (spec, p) = first(f).await;
        assert_ok(p);
        let base = &f.backend.options().base;
        let warning =
            "DISK size 4 GiB not enforced: the lxc backend keeps the rootfs as a directory (storage `local` ignored)";
        assert_eq!(
            normalised(p),
            json!({
                "backend": "lxc",
                "name": spec.name,
                "node": null,
                "vmid": 90001,
                "hostname": spec.hostname,
                "address": "<address>",
                "ssh_port": 22,
                "plan": {"name": spec.name, "vmid": 90001, "hostname": spec.hostname, "action": "create", "start": true,
                         "policy": "never"},
                "actions": [
                    {"action": "bootstrap-base", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": format!("{base} (debian bookworm) in {}", f.lxc_path.display())},
                    {"action": "clone", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": format!("overlay snapshot of {base}")},
                    {"action": "config", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": format!("address <address>; {GUEST_FILES}")},
                    {"action": "install-key", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": format!("{}/.keys/90001.pub → /root/.ssh/authorized_keys (written into the rootfs)",
                                       f.share.path().display())},
                    {"action": "start", "upid": null, "exit_status": "OK", "duration_ms": 0, "detail": null},
                    {"action": "address", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": "<address> (lxc-info -iH)"},
                    {"action": "wait-ssh", "upid": null, "exit_status": "OK", "duration_ms": 0,
                     "detail": "<address>:22"},
                ],
                "warnings": [warning],
                "status": "running",
                "created": true,
                "created_at": "<time>",
                "protected_by": null,
                "inputs_digest": null,
                "result": "ok",
            })
        );
        assert_static_pool(p.address.as_deref().unwrap());
        // The base is kept stopped for the next clones.
        let base_state = f.backend.client().state(base).await.unwrap();
        assert_eq!(base_state.as_str(), "stopped");
    });
    Ok(())
}

fn test_ssh_reachable_with_the_generated_key() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        let (spec, p) = first(f).await;
        assert_ok(p);
        let addr = p.address.as_deref().unwrap();
        // The address read back is the one the container really has.
        let ips = f.attach(&spec.hostname, &["hostname", "-I"]);
        // Its only IPv4 address: no DHCP client added a second one.
        let v4: Vec<&str> = ips.split_whitespace().filter(|i| i.parse::<std::net::Ipv4Addr>().is_ok()).collect();
        assert_eq!(v4, vec![addr], "`hostname -I`: {ips}");
        let resolv = f.attach(&spec.hostname, &["cat", "/etc/resolv.conf"]);
        assert!(resolv.contains("nameserver 10.0.3.1"), "{resolv}");
        let out = f.ssh(addr, spec.vmid, &["hostname"]).expect("ssh with the generated key");
        assert_eq!(out.trim(), spec.hostname);
        let modes = f.ssh(addr, spec.vmid, &["stat -c '%a %U' /root/.ssh /root/.ssh/authorized_keys"]).unwrap();
        assert_eq!(modes, "700 root\n600 root\n");
        // Another vmid's key is not accepted.
        proxmox_gitops::ssh::keys::ensure(f.share.path(), 90099, "other").unwrap();
        assert!(f.ssh(addr, 90099, &["true"]).is_err(), "a foreign key must not log in");
    });
    Ok(())
}

fn test_second_container_clones_from_the_cache() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        let (first_spec, fp) = first(f).await;
        assert_ok(fp);
        let mut spec = f.spec("second", 90002);
        // A LAN address meant for PVE: ignored here (never contacted), the backend chooses one.
        spec.ip = proxmox_gitops::inventory::IpConfig::Static { address: "192.0.2.10".parse().unwrap(), prefix: Some(24) };
        let _g = f.guard(&spec);
        let t = Instant::now();
        let p = f.provision(&spec, RecreatePolicy::Never).await;
        let took = t.elapsed();
        assert_ok(&p);
        assert_eq!(actions(&p), vec!["clone", "config", "install-key", "start", "address", "wait-ssh"]);
        assert_eq!(p.actions[0].detail.as_deref(), Some(format!("overlay snapshot of {}", f.backend.options().base).as_str()));
        assert!(p.created);
        assert_static_pool(p.address.as_deref().unwrap());
        assert_ne!(p.address, fp.address, "two containers, two addresses");
        assert_eq!(
            p.warnings[0],
            "IP 192.0.2.10 is outside lxcbr0's subnet 10.0.3.1/24: ignored by the lxc backend, which chooses the container's address itself"
        );
        eprintln!("second container: SSH-ready in {:.1}s", took.as_secs_f64());
        // Every clone has its own SSH host key and machine-id.
        let k1 = f.attach(&first_spec.hostname, &["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]);
        let k2 = f.attach(&spec.hostname, &["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]);
        assert!(k1.starts_with("ssh-ed25519 "));
        assert_ne!(k1.split_whitespace().nth(1), k2.split_whitespace().nth(1), "clones share an SSH host key");
        let m1 = f.attach(&first_spec.hostname, &["cat", "/etc/machine-id"]);
        let m2 = f.attach(&spec.hostname, &["cat", "/etc/machine-id"]);
        assert_ne!(m1, m2, "clones share a machine-id");
    });
    Ok(())
}

fn test_rerun_changes_nothing() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let spec = f.spec("rerun", 90003);
        let _g = f.guard(&spec);
        let p1 = f.provision(&spec, RecreatePolicy::Never).await;
        assert_ok(&p1);
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!(plan.action, Action::Nothing);
        assert!(!plan.start);
        let p2 = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p2);
        assert_eq!(actions(&p2), Vec::<&str>::new());
        assert!(!p2.created);
        assert_eq!(p2.address, p1.address);
        assert_eq!(p2.status.as_deref(), Some("running"));
        // A stopped container is only started again, with the same (static) address.
        f.backend.client().stop(&spec.hostname, std::time::Duration::from_secs(30)).await.unwrap();
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!((plan.action.clone(), plan.start), (Action::Nothing, true));
        let p3 = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p3);
        assert_eq!(actions(&p3), vec!["start", "address", "wait-ssh"]);
        assert_eq!(p3.address, p1.address);
    });
    Ok(())
}

/// The container's memory limit in bytes as its cgroup shows it (v1 or v2).
fn memory_limit(f: &Fixture, name: &str) -> String {
    f.attach(
        name,
        &[
            "/bin/sh",
            "-c",
            "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
        ],
    )
    .trim()
    .to_string()
}

fn test_resource_change_is_applied() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let mut spec = f.spec("resize", 90004);
        let _g = f.guard(&spec);
        assert_ok(&f.provision(&spec, RecreatePolicy::Never).await);
        assert_eq!(memory_limit(f, &spec.hostname), (256u64 << 20).to_string());
        spec.memory_mib = 384;
        spec.cores = 2;
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        let Action::Update { changes, reboot_needed, .. } = &plan.action else {
            panic!("expected an update: {plan:?}")
        };
        assert!(!reboot_needed, "cgroup limits apply live: {plan:?}");
        let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert!(keys.iter().any(|k| k.contains("memory")), "{keys:?}");
        assert!(keys.iter().any(|k| k.contains("cpu")), "{keys:?}");
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p);
        assert_eq!(actions(&p), vec!["config", "cgroup"]);
        assert_eq!(memory_limit(f, &spec.hostname), (384u64 << 20).to_string());
        // The config file carries it too (survives a restart), and the next plan is clean.
        let config = std::fs::read_to_string(f.lxc_path.join(&spec.hostname).join("config")).unwrap();
        assert!(config.contains(&(384u64 << 20).to_string()), "{config}");
        assert_eq!(f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap().action, Action::Nothing);
        // onboot is config only.
        spec.onboot = true;
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!(
            plan.action,
            Action::Update {
                changes: vec![proxmox_gitops::model::Change {
                    key: "lxc.start.auto".into(),
                    from: Some("0".into()),
                    to: Some("1".into())
                }],
                resizes: vec![],
                reboot_needed: true,
            }
        );
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p);
        assert_eq!(actions(&p), vec!["config"]);
        assert!(
            p.warnings.iter().any(|w| w.starts_with("lxc.start.auto take effect at the next restart")),
            "{:?}",
            p.warnings
        );
    });
    Ok(())
}

fn test_recreate_refused_without_the_flag() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let mut spec = f.spec("recreate", 90005);
        let _g = f.guard(&spec);
        let p1 = f.provision(&spec, RecreatePolicy::Never).await;
        assert_ok(&p1);
        spec.vmid = 90006;
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!(plan.action, Action::refused_recreate(vec!["vmid changed from 90005 to 90006".into()]));
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_eq!(
            p.outcome,
            Outcome::Failed {
                error: format!(
                    "container `{}` must be recreated (vmid changed from 90005 to 90006), but the recreate policy forbids it; re-run with --allow-recreate",
                    spec.hostname
                )
            }
        );
        assert!(p.actions.is_empty());
        assert_eq!(p.status.as_deref(), Some("running"), "a refused recreate touches nothing");
        let meta = std::fs::read_to_string(f.lxc_path.join(&spec.hostname).join(META_FILE)).unwrap();
        assert!(meta.contains("90005"), "{meta}");

        let plan = f.backend.plan(&spec, RecreatePolicy::WhenNeeded).await.unwrap();
        assert!(matches!(plan.action, Action::Recreate { .. }), "{plan:?}");
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p);
        assert_eq!(actions(&p), vec!["stop", "destroy", "clone", "config", "install-key", "start", "address", "wait-ssh"]);
        // The recreated container gets the address it had: derived from its hostname, and free.
        assert_eq!(p.address, p1.address);
        assert!(p.created);
        let meta = std::fs::read_to_string(f.lxc_path.join(&spec.hostname).join(META_FILE)).unwrap();
        assert!(meta.contains("90006"), "{meta}");
        // The new vmid's key logs in.
        let out = f.ssh(p.address.as_deref().unwrap(), 90006, &["hostname"]).unwrap();
        assert_eq!(out.trim(), spec.hostname);
    });
    Ok(())
}

fn test_destroy() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let spec = f.spec("destroy", 90007);
        let _g = f.guard(&spec);
        assert_ok(&f.provision(&spec, RecreatePolicy::Never).await);
        // Another vmid's spec must not destroy it.
        let mut other = spec.clone();
        other.vmid = 90008;
        let e = f.backend.destroy(&other).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("container `{}` belongs to vmid 90007, not 90008: not destroying it", spec.hostname)
        );
        // A container snapshot (as `snapshot` and `update` take them) goes with the container:
        // `lxc-destroy` alone refuses a container that has one.
        let (snap, _) = f.backend.client().snapshot_running(&spec.hostname, "a test snapshot").await.unwrap();
        assert_eq!(f.backend.client().list_snapshots(&spec.hostname).unwrap().len(), 1, "{snap}");
        let done = f.backend.destroy(&spec).await.unwrap();
        let names: Vec<&str> = done.iter().map(|a| a.action.as_str()).collect();
        assert_eq!(names, vec!["stop", "destroy"]);
        assert!(!lxc::list(&f.lxc_path).contains(&spec.hostname));
        assert!(!f.lxc_path.join(&spec.hostname).exists());
        // Destroying what is gone is a no-op.
        assert!(f.backend.destroy(&spec).await.unwrap().is_empty());
        // The plan is a create again.
        assert_eq!(f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap().action, Action::Create);
    });
    Ok(())
}

fn test_mounts_and_devices_reach_the_container() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join("hello"), "from the host\n").unwrap();
        let mut spec = f.spec("mounts", 90009);
        spec.mounts = vec![
            Mount::Bind { host_path: data.path().display().to_string(), container_path: "/data".into() },
            Mount::Share { name: "share".into() },
            Mount::Device { path: "/dev/full".into() },
        ];
        let _g = f.guard(&spec);
        let p = f.provision(&spec, RecreatePolicy::Never).await;
        assert_ok(&p);
        assert_eq!(f.attach(&spec.hostname, &["cat", "/data/hello"]), "from the host\n");
        // The share is <share>/share, never the share root with the private keys.
        let share_dir = f.share.path().join("share").join("share");
        std::fs::write(share_dir.join("note"), "shared\n").unwrap();
        assert_eq!(f.attach(&spec.hostname, &["cat", "/share/note"]), "shared\n");
        assert_eq!(f.attach(&spec.hostname, &["/bin/sh", "-c", "test -e /share/.keys && echo LEAK || echo ok"]), "ok\n");
        assert_eq!(f.attach(&spec.hostname, &["stat", "-c", "%F %t:%T", "/dev/full"]), "character special file 1:7\n");
        let config = std::fs::read_to_string(f.lxc_path.join(&spec.hostname).join("config")).unwrap();
        assert!(config.contains("devices.allow = c 1:7 rwm"), "{config}");
        // A bind source that does not exist is refused at plan time, naming the env file.
        spec.mounts.push(Mount::Bind { host_path: "/nonexistent/pgotest".into(), container_path: "/x".into() });
        let e = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "libs/mounts/container.env (MOUNT): bind mount source /nonexistent/pgotest does not exist on this host; create it or remove the entry"
        );
    });
    Ok(())
}

/// An address of lxcbr0's subnet that neither dnsmasq has leased nor a container is configured
/// with, from the top of lxc-net's DHCP range down (so the backend never chooses it for another
/// container meanwhile: it chooses from outside that range).
fn unleased_address(f: &Fixture) -> std::net::Ipv4Addr {
    let leases = std::fs::read_to_string("/var/lib/misc/dnsmasq.lxcbr0.leases").unwrap_or_default();
    let mut used: Vec<String> =
        leases.lines().filter_map(|l| l.split_whitespace().nth(2)).map(str::to_string).collect();
    used.extend(f.backend.client().configured_addresses().unwrap().into_iter().map(|(_, a)| a.to_string()));
    let settings = std::fs::read_to_string(proxmox_gitops::lxc::LXC_NET_SETTINGS).ok();
    let (first, last) = proxmox_gitops::lxc::lxc_net_dhcp_range(settings.as_deref()).expect("lxc-net's DHCP range");
    (u32::from(first)..=u32::from(last))
        .rev()
        .map(std::net::Ipv4Addr::from)
        .find(|a| !used.contains(&a.to_string()))
        .expect("a free address in lxc-net's DHCP range")
}

fn test_static_address_inside_the_bridge_subnet_is_used() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let addr = unleased_address(f);
        let mut spec = f.spec("static", 90010);
        spec.ip = proxmox_gitops::inventory::IpConfig::Static { address: addr, prefix: Some(24) };
        let _g = f.guard(&spec);
        let p = f.provision(&spec, RecreatePolicy::Never).await;
        assert_ok(&p);
        assert_eq!(p.address, Some(addr.to_string()));
        assert!(!p.warnings.iter().any(|w| w.contains("outside lxcbr0's subnet")), "{:?}", p.warnings);
        let inside = format!("IP {addr} is inside lxc-net's DHCP range");
        assert!(p.warnings.iter().any(|w| w.starts_with(&inside)), "{:?}", p.warnings);
        let out = f.ssh(&addr.to_string(), spec.vmid, &["hostname"]).expect("ssh to the static address");
        assert_eq!(out.trim(), spec.hostname);
    });
    Ok(())
}

fn test_containers_made_at_once_get_distinct_static_addresses() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let specs: Vec<ContainerSpec> = (0..4).map(|i| f.spec(&format!("par{i}"), 90020 + i)).collect();
        let _guards: Vec<_> = specs.iter().map(|s| f.guard(s)).collect();
        let mut set = tokio::task::JoinSet::new();
        for s in specs.clone() {
            set.spawn(async move { f.provision(&s, RecreatePolicy::Never).await });
        }
        let mut addresses = Vec::new();
        while let Some(p) = set.join_next().await {
            let p = p.unwrap();
            assert_ok(&p);
            assert_static_pool(p.address.as_deref().unwrap());
            let out = f.ssh(p.address.as_deref().unwrap(), p.vmid, &["hostname"]).expect("ssh");
            assert_eq!(out.trim(), p.hostname);
            addresses.push(p.address.unwrap());
        }
        let mut distinct = addresses.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), specs.len(), "{addresses:?}");
        // What each config says is what each container has.
        for s in &specs {
            let config = f.backend.client().read_config(&s.hostname).unwrap().unwrap();
            let configured = config.get("lxc.net.0.ipv4.address").unwrap().split('/').next().unwrap().to_string();
            assert!(addresses.contains(&configured), "{configured} not in {addresses:?}");
        }
    });
    Ok(())
}

/// Two runs (a monorepo pipeline and a lib's own) provisioning the same new container at once:
/// both planned `create`; the container's lock makes one create it and the other wait, plan again
/// and find nothing to do (it used to fail with "cannot copy … lxc-copy … failed").
fn test_two_runs_creating_one_container_at_once_take_turns() -> Result<(), Failed> {
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let spec = f.spec("twice", 90030);
        let _guard = f.guard(&spec);
        let opts = f.apply_options();
        // Both plans are made before either run acts, as two pipelines do.
        let plans = [
            f.backend.plan(&spec, RecreatePolicy::Never).await.expect("plan"),
            f.backend.plan(&spec, RecreatePolicy::Never).await.expect("plan"),
        ];
        assert!(plans.iter().all(|p| p.action == Action::Create), "{plans:?}");
        let mut set = tokio::task::JoinSet::new();
        for plan in plans {
            let (spec, opts) = (spec.clone(), opts.clone());
            set.spawn(async move { f.backend.apply(&spec, &plan, &opts).await });
        }
        let mut provisions = Vec::new();
        while let Some(p) = set.join_next().await {
            provisions.push(p.unwrap());
        }
        for p in &provisions {
            assert_ok(p);
        }
        provisions.sort_by_key(|p| !p.created);
        let [made, found] = &provisions[..] else { unreachable!() };
        assert!(made.created && !found.created, "created exactly once: {provisions:#?}");
        assert_eq!(actions(made).iter().filter(|a| **a == "clone").count(), 1);
        assert!(!actions(found).contains(&"clone"), "{found:#?}");
        // The second run planned again under the lock and found the container made.
        assert_eq!(found.plan.action, Action::Nothing, "{found:#?}");
        assert_eq!(found.address, made.address);
        let lock = f.backend.container_lock_path(&spec.hostname);
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "", "{} is released and emptied", lock.display());
        let out = f.ssh(found.address.as_deref().unwrap(), spec.vmid, &["hostname"]).expect("ssh");
        assert_eq!(out.trim(), spec.hostname);
    });
    Ok(())
}

/// A run killed between the clone and the metadata (a runner's host rebooted, `kill -9` of the
/// job) leaves a clone without `proxmox-gitops.json`, or a directory `lxc-copy` did not finish,
/// beside the create marker it wrote first. The next create of that vmid removes it and makes the
/// container; without the marker (or for another vmid) the same clone is not ours and stays
/// untouched. The state is made as the create makes it: the marker, then the clone.
fn test_a_create_killed_half_way_is_removed_and_made_again() -> Result<(), Failed> {
    use proxmox_gitops::backend::lxc::interrupted;
    let f = fixture()?;
    RT.block_on(async {
        assert_ok(&first(f).await.1);
        let spec = f.spec("killed", 90040);
        let _guard = f.guard(&spec);
        let name = spec.hostname.as_str();
        let marker = f.backend.create_marker_path(name);
        let base = f.backend.options().base.clone();
        let clone = || f.backend.client().copy(&base, name, true, std::time::Duration::from_secs(600));

        // Without a marker: somebody else's container, refused and left alone.
        clone().await.unwrap();
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert!(matches!(plan.action, Action::Refused { .. }), "{plan:?}");
        // A marker for another vmid does not make it ours either.
        interrupted::mark(&marker, 90041).unwrap();
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert!(matches!(plan.action, Action::Refused { .. }), "{plan:?}");
        assert!(f.lxc_path.join(name).join("config").is_file(), "untouched");

        // The marker of this vmid: an interrupted create of ours. Planned as a create, applied
        // by removing the clone first.
        interrupted::mark(&marker, spec.vmid).unwrap();
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!((plan.action.clone(), plan.start), (Action::Create, true));
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p);
        assert_eq!(
            actions(&p),
            vec!["remove-interrupted", "clone", "config", "install-key", "start", "address", "wait-ssh"]
        );
        assert!(p.created);
        assert!(!marker.exists(), "the marker goes once the metadata is written");
        let meta = std::fs::read_to_string(f.lxc_path.join(name).join(META_FILE)).unwrap();
        assert!(meta.contains("90040"), "{meta}");
        let out = f.ssh(p.address.as_deref().unwrap(), spec.vmid, &["hostname"]).expect("ssh");
        assert_eq!(out.trim(), name);

        // Killed during `lxc-copy`: a directory without a config. Not a container to LXC, so the
        // plan creates; the create removes the directory first.
        f.backend.client().stop(name, std::time::Duration::from_secs(30)).await.unwrap();
        f.backend.client().destroy(name).await.unwrap();
        std::fs::create_dir_all(f.lxc_path.join(name).join("rootfs/etc")).unwrap();
        interrupted::mark(&marker, spec.vmid).unwrap();
        let plan = f.backend.plan(&spec, RecreatePolicy::Never).await.unwrap();
        assert_eq!(plan.action, Action::Create);
        let p = f.backend.apply(&spec, &plan, &f.apply_options()).await;
        assert_ok(&p);
        assert_eq!(actions(&p)[..2], ["remove-interrupted", "clone"], "{p:#?}");
        assert!(!marker.exists());
    });
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    type Test = fn() -> Result<(), Failed>;
    let tests: Vec<(&str, Test)> = vec![
        ("create_from_nothing_bootstraps_the_base", test_create_from_nothing_bootstraps_the_base),
        ("ssh_reachable_with_the_generated_key", test_ssh_reachable_with_the_generated_key),
        ("second_container_clones_from_the_cache", test_second_container_clones_from_the_cache),
        ("rerun_changes_nothing", test_rerun_changes_nothing),
        ("resource_change_is_applied", test_resource_change_is_applied),
        ("recreate_refused_without_the_flag", test_recreate_refused_without_the_flag),
        ("destroy", test_destroy),
        ("mounts_and_devices_reach_the_container", test_mounts_and_devices_reach_the_container),
        ("static_address_inside_the_bridge_subnet_is_used", test_static_address_inside_the_bridge_subnet_is_used),
        (
            "containers_made_at_once_get_distinct_static_addresses",
            test_containers_made_at_once_get_distinct_static_addresses,
        ),
        ("two_runs_creating_one_container_at_once_take_turns", test_two_runs_creating_one_container_at_once_take_turns),
        ("a_create_killed_half_way_is_removed_and_made_again", test_a_create_killed_half_way_is_removed_and_made_again),
    ];
    let trials = tests.into_iter().map(|(name, t)| Trial::test(name, t)).collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(Ok(f)) = FIXTURE.get() {
        f.teardown();
        let left: Vec<String> = lxc::list(&f.lxc_path).into_iter().filter(|n| n.starts_with(&f.prefix)).collect();
        if !left.is_empty() {
            eprintln!("warning: containers left behind: {left:?}");
        }
    }
    conclusion.exit();
}
