//! The desired state of a container in LXC terms, as plain data.
//!
//! What the spec becomes: [`desired()`] turns a [`ContainerSpec`] into the LXC config keys this backend manages (see
//! [`MANAGED_KEYS`]): memory (`MEMORY` MiB) and swap (`SWAP` MiB) limits, a CPU quota of `CORES`
//! CPUs, `lxc.start.auto` from `BOOT`, `lxc.mount.entry` for bind/share/volume mounts,
//! device passthrough (`lxc.cgroup[2].devices.allow` + a bind of the node), the bridge, a MAC
//! address derived from the hostname, and a static address on the bridge
//! (`lxc.net.0.ipv4.address`/`gateway`, chosen by [`desired()`]'s address rule: the spec's `IP`
//! inside the bridge's subnet, else one from the part of the subnet lxc-net's dnsmasq does not
//! lease), so a container has its address the moment it starts instead of after a DHCP exchange. cgroup
//! v2 hosts get `lxc.cgroup2.memory.max`, `memory.swap.max`, `cpu.max`; cgroup v1 hosts the
//! `lxc.cgroup.memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`, `cpu.cfs_quota_us` family.
//! The file `<lxcpath>/<name>/proxmox-gitops.json` ([`super::Meta`]) records the vmid and base the
//! container was made for.
//!

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Result, bail};
use sha2::Digest;

use super::{Cgroup, CurrentAddress, HostFacts, HostPath, LxcOptions, Meta};
use crate::inventory::{ContainerSpec, IpConfig, Mount};
use crate::lxc;

/// Config keys this backend manages (for cgroup v1 and v2); every other key of the config file
/// (the template's includes, `lxc.rootfs.path`, `lxc.arch` …) is left alone.
pub const MANAGED_KEYS: &[&str] = &[
    "lxc.uts.name",
    "lxc.apparmor.profile",
    "lxc.net.0.link",
    "lxc.net.0.hwaddr",
    "lxc.net.0.ipv4.address",
    "lxc.net.0.ipv4.gateway",
    "lxc.start.auto",
    "lxc.cgroup.memory.limit_in_bytes",
    "lxc.cgroup.memory.memsw.limit_in_bytes",
    "lxc.cgroup.cpu.cfs_period_us",
    "lxc.cgroup.cpu.cfs_quota_us",
    "lxc.cgroup.devices.allow",
    "lxc.cgroup2.memory.max",
    "lxc.cgroup2.memory.swap.max",
    "lxc.cgroup2.cpu.max",
    "lxc.cgroup2.devices.allow",
    "lxc.mount.entry",
];

/// Managed keys whose new value can also be set on a running container (`lxc-cgroup`).
pub(super) fn live_applicable(key: &str) -> bool {
    key.starts_with("lxc.cgroup") && !key.ends_with("devices.allow")
}

/// The desired state of a container in LXC terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Every managed key with its desired values, in [`MANAGED_KEYS`] order (empty: absent).
    pub keys: Vec<(String, Vec<String>)>,
    /// The metadata the container must carry.
    pub meta: Meta,
    /// Directories to create on the host before start (volumes, share directories).
    pub host_dirs: Vec<PathBuf>,
    /// The static address configured (`lxc.net.0.ipv4.address`): the spec's `IP` when it fits
    /// the bridge's subnet, else the one the container has, else one from the static pool;
    /// `None`: DHCP.
    pub static_address: Option<Ipv4Addr>,
    /// Spec settings this backend cannot honour, one sentence each.
    pub warnings: Vec<String>,
}

/// A MAC address derived from the hostname: LXC's `00:16:3e` prefix and three bytes of
/// SHA-256(hostname), so the container keeps its DHCP lease across restarts and recreation.
pub fn hwaddr(hostname: &str) -> String {
    let h = sha2::Sha256::digest(hostname.as_bytes());
    format!("00:16:3e:{:02x}:{:02x}:{:02x}", h[0], h[1], h[2])
}

pub(super) fn in_subnet(addr: Ipv4Addr, net: (Ipv4Addr, u8)) -> bool {
    let mask = if net.1 == 0 { 0 } else { u32::MAX << (32 - u32::from(net.1.min(32))) };
    u32::from(addr) & mask == u32::from(net.0) & mask
}

fn spec_file(spec: &ContainerSpec) -> String {
    spec.sources.first().cloned().unwrap_or_else(|| spec.dir.join("container.env")).display().to_string()
}

/// The static address of the container, `None` for DHCP (see the module docs):
///
/// 1. an `IP` inside the bridge's subnet is used as it is (with a warning when lxc-net's DHCP
///    range or another container has it too);
/// 2. otherwise a container that exists keeps what it has: its static address (unless another
///    container took it), or DHCP (no address change under a running service; a recreate gives it
///    a static one);
/// 3. a new container gets the first free address of the static pool, counting from a place
///    derived from its hostname (SHA-256, so the same lib gets the same address again when it is
///    free), skipping `host.taken`. No pool, or a full one: DHCP, with a warning.
fn address(spec: &ContainerSpec, host: &HostFacts, opts: &LxcOptions, warnings: &mut Vec<String>) -> Option<Ipv4Addr> {
    if let IpConfig::Static { address, .. } = spec.ip {
        if in_subnet(address, host.bridge_net) && address != host.bridge_net.0 {
            if let Some((a, b)) =
                host.dhcp_range.filter(|(a, b)| (u32::from(*a)..=u32::from(*b)).contains(&u32::from(address)))
            {
                warnings.push(format!(
                    "IP {address} is inside lxc-net's DHCP range {a}-{b}: a lease may give it to another container; \
                     choose an address outside it, or leave IP unset for the lxc backend to choose one"
                ));
            } else if host.taken.contains(&address) {
                warnings.push(format!("IP {address} is also used by another container on {}", opts.bridge));
            }
            return Some(address);
        }
        warnings.push(format!(
            "IP {address} is outside {}'s subnet {}/{}: ignored by the lxc backend, which chooses the container's address itself",
            opts.bridge, host.bridge_net.0, host.bridge_net.1
        ));
    }
    match host.current {
        CurrentAddress::Static(a) if in_subnet(a, host.bridge_net) && !host.taken.contains(&a) => return Some(a),
        CurrentAddress::Dhcp => return None,
        _ => {}
    }
    let (first, last) = host.pool?;
    let (first, last) = (u32::from(first), u32::from(last));
    let n = last - first + 1;
    let h = sha2::Sha256::digest(spec.hostname.as_bytes());
    let start = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) % n;
    let found = (0..n).map(|i| Ipv4Addr::from(first + (start + i) % n)).find(|a| !host.taken.contains(a));
    if found.is_none() {
        warnings.push(format!(
            "every static address {}-{} on {} is taken: `{}` gets its address from DHCP",
            Ipv4Addr::from(first),
            Ipv4Addr::from(last),
            opts.bridge,
            spec.hostname
        ));
    }
    found
}

/// Computes the desired LXC config of `spec` on a host described by `host` (pure).
///
/// # Errors
/// A mount the host cannot provide: a bind source that does not exist, a device path that is
/// missing or not a device node. The message names the spec's env file and `MOUNT`.
pub fn desired(spec: &ContainerSpec, host: &HostFacts, opts: &LxcOptions) -> Result<Desired> {
    let mut keys: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut host_dirs = Vec::new();
    let set = |keys: &mut BTreeMap<&str, Vec<String>>, k: &'static str, v: String| {
        keys.entry(k).or_default().push(v);
    };
    set(&mut keys, "lxc.uts.name", spec.hostname.clone());
    set(&mut keys, "lxc.apparmor.profile", "unconfined".into());
    set(&mut keys, "lxc.net.0.link", opts.bridge.clone());
    set(&mut keys, "lxc.net.0.hwaddr", hwaddr(&spec.hostname));
    set(&mut keys, "lxc.start.auto", if spec.onboot { "1" } else { "0" }.into());

    let static_address = address(spec, host, opts, &mut warnings);
    if let Some(address) = static_address {
        set(&mut keys, "lxc.net.0.ipv4.address", format!("{address}/{}", host.bridge_net.1));
        set(&mut keys, "lxc.net.0.ipv4.gateway", host.bridge_net.0.to_string());
    }

    let mem = spec.memory_mib * 1024 * 1024;
    let swap = spec.swap_mib * 1024 * 1024;
    let quota = u64::from(spec.cores) * 100_000;
    match host.cgroup {
        Cgroup::V1 { swap: has_swap } => {
            set(&mut keys, "lxc.cgroup.memory.limit_in_bytes", mem.to_string());
            if has_swap {
                set(&mut keys, "lxc.cgroup.memory.memsw.limit_in_bytes", (mem + swap).to_string());
            }
            set(&mut keys, "lxc.cgroup.cpu.cfs_period_us", "100000".into());
            set(&mut keys, "lxc.cgroup.cpu.cfs_quota_us", quota.to_string());
        }
        Cgroup::V2 { swap: has_swap } => {
            set(&mut keys, "lxc.cgroup2.memory.max", mem.to_string());
            if has_swap {
                set(&mut keys, "lxc.cgroup2.memory.swap.max", swap.to_string());
            }
            set(&mut keys, "lxc.cgroup2.cpu.max", format!("{quota} 100000"));
        }
    }
    if !matches!(host.cgroup, Cgroup::V1 { swap: true } | Cgroup::V2 { swap: true }) && spec.swap_mib > 0 {
        warnings.push(format!("SWAP={} not enforced: the host kernel has no swap accounting", spec.swap_mib));
    }
    warnings.push(format!(
        "DISK size {} GiB not enforced: the lxc backend keeps the rootfs as a directory (storage `{}` ignored)",
        spec.rootfs.size_gib, spec.rootfs.storage
    ));
    if let Some(node) = &spec.node {
        // `NODE` names a PVE node (or `auto`: the planner chooses one); locally there is one host.
        warnings.push(format!("NODE={node} ignored: the lxc backend runs every container on this host"));
    }

    let file = spec_file(spec);
    let devices_key =
        if matches!(host.cgroup, Cgroup::V1 { .. }) { "lxc.cgroup.devices.allow" } else { "lxc.cgroup2.devices.allow" };
    for (i, m) in spec.mounts.iter().enumerate() {
        let (src, dst, kind) = match m {
            Mount::Bind { host_path, container_path } => {
                match host.paths.get(host_path).copied().unwrap_or(HostPath::Missing) {
                    HostPath::Missing => bail!(
                        "{file} (MOUNT): bind mount source {host_path} does not exist on this host; create it or remove the entry"
                    ),
                    HostPath::Dir => (host_path.clone(), container_path.clone(), "dir"),
                    _ => (host_path.clone(), container_path.clone(), "file"),
                }
            }
            Mount::Share { name } => {
                let dir = opts.share.join(name);
                host_dirs.push(dir.clone());
                (dir.display().to_string(), format!("/{name}"), "dir")
            }
            Mount::Volume { storage, size_gib, container_path } => {
                let dir = host.container_dir.join("volumes").join(format!("mp{i}"));
                host_dirs.push(dir.clone());
                warnings.push(format!(
                    "volume {container_path} ({storage}:{size_gib}) is a directory under {}: its size is not enforced",
                    dir.display()
                ));
                (dir.display().to_string(), container_path.clone(), "dir")
            }
            Mount::Device { path } => match host.paths.get(path).copied().unwrap_or(HostPath::Missing) {
                HostPath::Device(d) => {
                    set(&mut keys, devices_key, format!("{} {}:{} rwm", d.kind, d.major, d.minor));
                    (path.clone(), path.clone(), "file")
                }
                HostPath::Missing => {
                    bail!("{file} (MOUNT): device {path} does not exist on this host, so it cannot be passed through")
                }
                _ => bail!("{file} (MOUNT): {path} is not a device node, so it cannot be passed through"),
            },
        };
        let mount_opts = if matches!(m, Mount::Device { .. }) {
            "bind,optional,create=file"
        } else if kind == "dir" {
            "bind,create=dir"
        } else {
            "bind,create=file"
        };
        set(
            &mut keys,
            "lxc.mount.entry",
            format!(
                "{} {} none {mount_opts} 0 0",
                lxc::config::escape_mount_path(&src),
                lxc::config::escape_mount_path(dst.trim_start_matches('/'))
            ),
        );
    }

    let keys = MANAGED_KEYS.iter().map(|k| (k.to_string(), keys.remove(k).unwrap_or_default())).collect();
    Ok(Desired {
        keys,
        meta: Meta { vmid: spec.vmid, name: spec.name.clone(), base: opts.base.clone(), release: opts.release.clone() },
        host_dirs,
        static_address,
        warnings,
    })
}
