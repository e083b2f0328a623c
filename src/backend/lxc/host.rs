//! Facts about the host that the desired state of a container depends on: the cgroup layout
//! (which decides the resource-limit keys), the bridge's subnet (which decides whether a static
//! `IP` can be used), the addresses free for static use and those taken, and what each host path
//! of a `MOUNT` is. [`HostFacts::gather`] reads them;
//! tests give them by hand, which keeps [`super::desired()`] pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::LxcOptions;
use crate::inventory::{ContainerSpec, Mount};
use crate::lxc::{self, LxcClient};

/// The cgroup layout of the host, which decides the config keys of resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cgroup {
    /// Legacy/hybrid hierarchy (`/sys/fs/cgroup/memory/…`): `lxc.cgroup.*` keys. `swap` is
    /// true when `memory.memsw.limit_in_bytes` exists (swap accounting on).
    V1 {
        /// Swap accounting available.
        swap: bool,
    },
    /// Unified hierarchy (`/sys/fs/cgroup/cgroup.controllers`): `lxc.cgroup2.*` keys. `swap` is
    /// true when `memory.swap.max` exists.
    V2 {
        /// Swap accounting available.
        swap: bool,
    },
}

impl Cgroup {
    /// Detects the host's layout from `/sys/fs/cgroup`.
    pub fn detect() -> Cgroup {
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").is_file() {
            let swap = std::fs::read_dir(root)
                .map(|d| d.flatten().any(|e| e.path().join("memory.swap.max").is_file()))
                .unwrap_or(false);
            Cgroup::V2 { swap }
        } else {
            Cgroup::V1 { swap: root.join("memory/memory.memsw.limit_in_bytes").is_file() }
        }
    }
}

/// A device node on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNode {
    /// `c` (character) or `b` (block).
    pub kind: char,
    /// Major number.
    pub major: u64,
    /// Minor number.
    pub minor: u64,
}

/// What a host path in a `MOUNT` entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPath {
    /// A directory.
    Dir,
    /// A regular file (or anything else that is not a directory).
    File,
    /// A device node.
    Device(DeviceNode),
    /// Does not exist.
    Missing,
}

/// Facts about the host that [`super::desired()`] needs; gathered by [`HostFacts::gather`], given by
/// hand in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// cgroup layout.
    pub cgroup: Cgroup,
    /// The bridge's address and prefix length (e.g. 10.0.3.1/24).
    pub bridge_net: (Ipv4Addr, u8),
    /// What each host path named by the spec's mounts is.
    pub paths: BTreeMap<String, HostPath>,
    /// The container's directory (`<lxcpath>/<hostname>`), home of its volumes.
    pub container_dir: PathBuf,
    /// lxc-net's DHCP range on the bridge, `None` when the bridge is not lxc-net's (its DHCP
    /// server, if any, is unknown).
    pub dhcp_range: Option<(Ipv4Addr, Ipv4Addr)>,
    /// The addresses the backend gives containers without an `IP` of their own: the part of the
    /// subnet outside the DHCP range ([`lxc::static_pool`]); `None` when there is none.
    pub pool: Option<(Ipv4Addr, Ipv4Addr)>,
    /// Addresses in use on the bridge by something else: other containers' static addresses
    /// (every config under the LXC path) and dnsmasq's unexpired leases of other MAC addresses.
    pub taken: BTreeSet<Ipv4Addr>,
    /// The container's own address now.
    pub current: CurrentAddress,
}

/// The address a container has now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentAddress {
    /// The container does not exist.
    Absent,
    /// It exists and takes its address from DHCP (no `lxc.net.0.ipv4.address`).
    Dhcp,
    /// It exists with this static address.
    Static(Ipv4Addr),
}

impl HostFacts {
    /// Looks at the host: cgroup layout, the bridge's subnet, the static pool and the addresses
    /// taken, and every host path the spec's mounts name. With `start_bridge` a missing bridge is
    /// brought up (`lxc-net`) and lxc-net's DHCP range is made to leave room for static addresses
    /// ([`lxc::reserve_static_range`]); without (planning) nothing on the host changes and
    /// lxc-net's configured subnet and the range it will have are used.
    ///
    /// # Errors
    /// The bridge cannot be brought up, lxc-net's settings cannot be written, the LXC path or
    /// the container's config cannot be read.
    pub async fn gather(
        spec: &ContainerSpec,
        opts: &LxcOptions,
        client: &LxcClient,
        start_bridge: bool,
    ) -> Result<HostFacts> {
        let mut bridge_net = if start_bridge {
            lxc::ensure_bridge(&opts.bridge).await?
        } else {
            lxc::bridge_ipv4_or_planned(&opts.bridge).await?
        };
        if start_bridge && lxc::reserve_static_range(&opts.bridge, bridge_net).await? {
            bridge_net = lxc::ensure_bridge(&opts.bridge).await?;
        }
        let settings = std::fs::read_to_string(lxc::LXC_NET_SETTINGS).ok();
        let dhcp_range = if lxc::lxc_net_bridge(settings.as_deref()) == opts.bridge {
            // Planning before the first provision: the range lxc-net will have once the backend
            // made room for static addresses.
            let planned = lxc::bridge::dhcp_split(settings.as_deref(), bridge_net)
                .map(|lines| format!("{}{lines}", settings.as_deref().unwrap_or("")));
            lxc::lxc_net_dhcp_range(planned.as_deref().or(settings.as_deref()))
        } else {
            None
        };
        let pool = dhcp_range.and_then(|r| lxc::static_pool(bridge_net, r));
        let name = spec.hostname.as_str();
        let mut taken: BTreeSet<Ipv4Addr> =
            client.configured_addresses()?.into_iter().filter(|(n, _)| n != name).map(|(_, a)| a).collect();
        let own_mac = super::hwaddr(name);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if let Ok(text) = std::fs::read_to_string(lxc::leases_file(&opts.bridge)) {
            taken.extend(
                lxc::parse_leases(&text)
                    .into_iter()
                    .filter(|l| (l.expires == 0 || l.expires > now) && !l.hwaddr.eq_ignore_ascii_case(&own_mac))
                    .map(|l| l.address),
            );
        }
        let current = match client.read_config(name)? {
            None => CurrentAddress::Absent,
            Some(c) => match c.get("lxc.net.0.ipv4.address").and_then(|v| v.split('/').next()?.trim().parse().ok()) {
                Some(a) => CurrentAddress::Static(a),
                None => CurrentAddress::Dhcp,
            },
        };
        let mut paths = BTreeMap::new();
        for m in &spec.mounts {
            let p = match m {
                Mount::Bind { host_path, .. } => host_path.clone(),
                Mount::Device { path } => path.clone(),
                Mount::Share { .. } | Mount::Volume { .. } => continue,
            };
            paths.insert(p.clone(), host_path_kind(Path::new(&p)));
        }
        Ok(HostFacts {
            cgroup: Cgroup::detect(),
            bridge_net,
            paths,
            container_dir: client.container_dir(&spec.hostname),
            dhcp_range,
            pool,
            taken,
            current,
        })
    }
}

/// Classifies a host path (following symlinks).
pub fn host_path_kind(p: &Path) -> HostPath {
    match std::fs::metadata(p) {
        Err(_) => HostPath::Missing,
        Ok(m) if m.is_dir() => HostPath::Dir,
        Ok(m) if m.file_type().is_char_device() || m.file_type().is_block_device() => {
            let rdev = m.rdev();
            // glibc's gnu_dev_major / gnu_dev_minor.
            let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
            let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
            HostPath::Device(DeviceNode { kind: if m.file_type().is_char_device() { 'c' } else { 'b' }, major, minor })
        }
        Ok(_) => HostPath::File,
    }
}
