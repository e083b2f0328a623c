//! The local LXC backend: real containers on this host, managed with the LXC tools.
//!
//! # How a container is made
//!
//! The container is named after the spec's hostname and lives under the LXC path (see
//! [`crate::lxc`]). The first container bootstraps a cached **base** (`pgo-base-bookworm` by
//! default): `lxc-create -t debian -- -r bookworm --packages=python3` (debootstrap from Debian's
//! mirror, about a minute), with AppArmor unconfined, `openssh-server` present, its SSH host keys
//! and machine-id removed so every clone generates its own on first boot. The base is kept
//! stopped. Every container is then an `lxc-copy` of the base — an overlay snapshot
//! (`-s -B overlay`, well under a second) where the kernel allows it, else a full copy.
//!
//! # What the spec becomes
//!
//! [`desired`] turns a [`ContainerSpec`] into the LXC config keys this backend manages (see
//! [`MANAGED_KEYS`]): memory (`MEMORY` MiB) and swap (`SWAP` MiB) limits, a CPU quota of `CORES`
//! CPUs, `lxc.start.auto` from `BOOT`, `lxc.mount.entry` for bind/share/volume mounts,
//! device passthrough (`lxc.cgroup[2].devices.allow` + a bind of the node), the bridge and a MAC
//! address derived from the hostname (so the DHCP lease, hence the address, is stable). cgroup
//! v2 hosts get `lxc.cgroup2.memory.max`, `memory.swap.max`, `cpu.max`; cgroup v1 hosts the
//! `lxc.cgroup.memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`, `cpu.cfs_quota_us` family.
//! The file `<lxcpath>/<name>/proxmox-gitops.json` ([`Meta`]) records the vmid and base the
//! container was made for.
//!
//! # Planning
//!
//! [`plan_container`] is a pure function of the desired keys and the live config: absent →
//! create; equal → nothing; managed keys differ → update in place (cgroup limits are also set
//! live with `lxc-cgroup`; mount, device, network and AppArmor changes need a restart and are
//! reported as `reboot_needed`); a different vmid or base, or a container not made by this tool
//! → recreate when the [`RecreatePolicy`] allows it, else refused.
//!
//! # Addresses
//!
//! The network is LXC's bridge (`lxcbr0`, started with `lxc-net` when missing). A static `IP`
//! inside the bridge's subnet is configured as `lxc.net.0.ipv4.address`; any other static `IP`
//! (e.g. the PVE LAN address of the lib) is ignored with a warning and DHCP applies. The address
//! is read back with `lxc-info -iH` and recorded in the artifact.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::backend::model::{
    Action, ActionRecord, ApplyOptions, BackendKind, Change, ContainerPlan, Outcome, Provision, RecreatePolicy,
};
use crate::inventory::{ContainerSpec, IpConfig, Mount};
use crate::lxc::{self, LxcClient, LxcConfig, State};

/// Name of the metadata file in a container's directory.
pub const META_FILE: &str = "proxmox-gitops.json";
/// Marker file in the base's directory, written as the last step of a bootstrap: a base without
/// it is a half-made one and is bootstrapped again.
pub const BASE_READY_FILE: &str = "proxmox-gitops-base.json";

/// Options of the LXC backend.
#[derive(Debug, Clone)]
pub struct LxcOptions {
    /// LXC path; `None`: `$PGO_LXC_PATH`, else `lxc-config lxc.lxcpath` (`/var/lib/lxc`).
    pub lxc_path: Option<PathBuf>,
    /// Name of the cached base container, default `pgo-base-bookworm`.
    pub base: String,
    /// Debian release of the base, default `bookworm`.
    pub release: String,
    /// Host bridge, default `lxcbr0`.
    pub bridge: String,
    /// Host directory holding the share: a `MOUNT` entry `NAME` binds `<share>/NAME` at `/NAME`
    /// (default `/share`; never the share root itself, which holds the private keys in `.keys/`).
    pub share: PathBuf,
    /// How containers are cloned from the base.
    pub clone: CloneMode,
    /// Bound for reading the DHCP address back after start, default 60 s.
    pub address_timeout: Duration,
    /// Bound for the base bootstrap (debootstrap), default 20 min.
    pub bootstrap_timeout: Duration,
    /// Clean-shutdown time before a stop kills the container, default 30 s.
    pub stop_timeout: Duration,
}

impl Default for LxcOptions {
    fn default() -> Self {
        Self {
            lxc_path: None,
            base: "pgo-base-bookworm".into(),
            release: "bookworm".into(),
            bridge: "lxcbr0".into(),
            share: "/share".into(),
            clone: CloneMode::Auto,
            address_timeout: Duration::from_secs(60),
            bootstrap_timeout: Duration::from_secs(20 * 60),
            stop_timeout: Duration::from_secs(30),
        }
    }
}

/// How a container is cloned from the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloneMode {
    /// An overlay snapshot, falling back to a full copy when the snapshot fails.
    #[default]
    Auto,
    /// Only an overlay snapshot (`lxc-copy -s -B overlay`).
    Snapshot,
    /// Only a full copy of the rootfs.
    Copy,
}

/// What the backend records next to a container's config (`proxmox-gitops.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The vmid the container belongs to (the key pair `<share>/.keys/<vmid>`).
    pub vmid: u32,
    /// The lib's name.
    pub name: String,
    /// The base container it was cloned from.
    pub base: String,
    /// The base's Debian release.
    pub release: String,
}

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

/// Facts about the host that [`desired`] needs; gathered by [`HostFacts::gather`], given by
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
}

impl HostFacts {
    /// Looks at the host: cgroup layout, the bridge's subnet, and every host path the spec's
    /// mounts name. With `start_bridge` a missing bridge is brought up (`lxc-net`); without
    /// (planning) nothing on the host changes and lxc-net's configured subnet is used.
    ///
    /// # Errors
    /// The bridge cannot be brought up.
    pub async fn gather(
        spec: &ContainerSpec,
        opts: &LxcOptions,
        client: &LxcClient,
        start_bridge: bool,
    ) -> Result<HostFacts> {
        let bridge_net = if start_bridge {
            lxc::ensure_bridge(&opts.bridge).await?
        } else {
            lxc::bridge_ipv4_or_planned(&opts.bridge).await?
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
fn live_applicable(key: &str) -> bool {
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
    /// The static address configured, when the spec's `IP` fits the bridge's subnet.
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

fn in_subnet(addr: Ipv4Addr, net: (Ipv4Addr, u8)) -> bool {
    let mask = if net.1 == 0 { 0 } else { u32::MAX << (32 - u32::from(net.1.min(32))) };
    u32::from(addr) & mask == u32::from(net.0) & mask
}

fn spec_file(spec: &ContainerSpec) -> String {
    spec.sources.first().cloned().unwrap_or_else(|| spec.dir.join("container.env")).display().to_string()
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

    let mut static_address = None;
    if let IpConfig::Static { address, .. } = spec.ip {
        if in_subnet(address, host.bridge_net) && address != host.bridge_net.0 {
            set(&mut keys, "lxc.net.0.ipv4.address", format!("{address}/{}", host.bridge_net.1));
            set(&mut keys, "lxc.net.0.ipv4.gateway", host.bridge_net.0.to_string());
            static_address = Some(address);
        } else {
            warnings.push(format!(
                "IP {address} is outside {}'s subnet {}/{}: ignored by the lxc backend, the address comes from DHCP",
                opts.bridge, host.bridge_net.0, host.bridge_net.1
            ));
        }
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

/// The live container as [`plan_container`] sees it.
#[derive(Debug, Clone)]
pub struct Live {
    /// Its config file.
    pub config: LxcConfig,
    /// Its `proxmox-gitops.json`, `None` when missing (not made by this tool).
    pub meta: Option<Meta>,
    /// Running or not.
    pub state: State,
}

fn joined(values: &[&str]) -> Option<String> {
    if values.is_empty() { None } else { Some(values.join("; ")) }
}

/// The managed keys whose live values differ from the desired ones.
pub fn config_changes(desired: &Desired, config: &LxcConfig) -> Vec<Change> {
    desired
        .keys
        .iter()
        .filter_map(|(k, want)| {
            let have = config.get_all(k);
            if have.iter().copied().eq(want.iter().map(String::as_str)) {
                return None;
            }
            let want: Vec<&str> = want.iter().map(String::as_str).collect();
            Some(Change { key: k.clone(), from: joined(&have), to: joined(&want) })
        })
        .collect()
}

/// Plans one container (pure): see the module docs for the rules.
pub fn plan_container(
    spec: &ContainerSpec,
    desired: &Desired,
    live: Option<&Live>,
    policy: RecreatePolicy,
) -> ContainerPlan {
    let plan = |action: Action, start: bool| ContainerPlan {
        name: spec.name.clone(),
        vmid: spec.vmid,
        hostname: spec.hostname.clone(),
        action,
        start,
    };
    let Some(live) = live else {
        return plan(Action::Create, true);
    };
    let mut reasons = Vec::new();
    match &live.meta {
        None => reasons
            .push(format!("container `{}` exists but was not made by proxmox-gitops (no {META_FILE})", spec.hostname)),
        Some(m) => {
            if m.vmid != desired.meta.vmid {
                reasons.push(format!("vmid changed from {} to {}", m.vmid, desired.meta.vmid));
            }
            if m.base != desired.meta.base || m.release != desired.meta.release {
                reasons.push(format!(
                    "base changed from {} ({}) to {} ({})",
                    m.base, m.release, desired.meta.base, desired.meta.release
                ));
            }
        }
    }
    if policy == RecreatePolicy::Always && reasons.is_empty() {
        reasons.push("the recreate policy is `always`".into());
    }
    if !reasons.is_empty() {
        return match policy {
            RecreatePolicy::Never => plan(Action::Refused { reasons }, false),
            _ => plan(Action::Recreate { reasons }, true),
        };
    }
    let running = live.state == State::Running;
    let changes = config_changes(desired, &live.config);
    if changes.is_empty() {
        return plan(Action::Nothing, !running);
    }
    let reboot_needed = running && changes.iter().any(|c| !live_applicable(&c.key));
    plan(Action::Update { changes, resizes: vec![], reboot_needed }, !running)
}

/// Provisions containers on the local host with the LXC tools.
#[derive(Debug, Clone)]
pub struct LxcBackend {
    client: LxcClient,
    opts: LxcOptions,
}

fn record(action: &str, started: Instant, detail: Option<String>) -> ActionRecord {
    ActionRecord {
        action: action.into(),
        upid: None,
        exit_status: Some("OK".into()),
        duration_ms: started.elapsed().as_millis() as u64,
        detail,
    }
}

/// Outcome of [`LxcBackend::ensure_base`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseStatus {
    /// The base existed already.
    Cached,
    /// The base was bootstrapped now.
    Bootstrapped,
}

impl LxcBackend {
    /// Opens the backend: checks root and the LXC tools (errors say what to install) and
    /// resolves the LXC path.
    ///
    /// # Errors
    /// See [`LxcClient::connect`].
    pub async fn new(opts: LxcOptions) -> Result<Self> {
        let client =
            LxcClient::connect(opts.lxc_path.clone()).await.context("the lxc backend cannot run on this host")?;
        Ok(LxcBackend { client, opts })
    }

    /// The blocking form of [`LxcBackend::new`], for callers outside an async context (e.g.
    /// choosing the backend before the runtime starts).
    ///
    /// # Errors
    /// See [`LxcClient::connect`].
    pub fn open(opts: LxcOptions) -> Result<Self> {
        let client = LxcClient::open(opts.lxc_path.clone()).context("the lxc backend cannot run on this host")?;
        Ok(LxcBackend { client, opts })
    }

    /// The LXC client (its path, for callers that print where containers live).
    pub fn client(&self) -> &LxcClient {
        &self.client
    }

    /// The options.
    pub fn options(&self) -> &LxcOptions {
        &self.opts
    }

    fn read_meta(&self, name: &str) -> Result<Option<Meta>> {
        let path = self.client.container_dir(name).join(META_FILE);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(
                serde_json::from_slice(&b).with_context(|| format!("{}: not a valid {META_FILE}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow!(e).context(format!("cannot read {}", path.display()))),
        }
    }

    async fn live(&self, name: &str) -> Result<Option<Live>> {
        let Some(config) = self.client.read_config(name)? else { return Ok(None) };
        let meta = self.read_meta(name)?;
        let state = self.client.state(name).await?;
        Ok(Some(Live { config, meta, state }))
    }

    async fn desired(&self, spec: &ContainerSpec, start_bridge: bool) -> Result<Desired> {
        let host = HostFacts::gather(spec, &self.opts, &self.client, start_bridge).await?;
        desired(spec, &host, &self.opts)
    }

    /// Compares `spec` with the live container named after its hostname and plans. Changes
    /// nothing on the host.
    ///
    /// # Errors
    /// A mount the host cannot provide, unreadable config or
    /// metadata, a failing `lxc-info`.
    pub async fn plan(&self, spec: &ContainerSpec, policy: RecreatePolicy) -> Result<ContainerPlan> {
        let desired = self.desired(spec, false).await?;
        let live = self.live(&spec.hostname).await?;
        Ok(plan_container(spec, &desired, live.as_ref(), policy))
    }

    /// Executes `plan` for `spec` and returns the `provision` artifact. Never panics and never
    /// returns early: a failure becomes [`Outcome::Failed`] with the actions done so far.
    pub async fn apply(&self, spec: &ContainerSpec, plan: &ContainerPlan, opts: &ApplyOptions) -> Provision {
        let mut p = Provision {
            backend: BackendKind::Lxc,
            name: spec.name.clone(),
            node: None,
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            address: None,
            ssh_port: opts.ssh_port,
            plan: plan.clone(),
            actions: vec![],
            warnings: vec![],
            status: None,
            created: false,
            protected_by: None,
            inputs_digest: None,
            outcome: Outcome::Ok,
        };
        if let Err(e) = self.apply_inner(spec, plan, opts, &mut p).await {
            p.outcome = Outcome::Failed { error: crate::ci::redact(&format!("{e:#}")) };
        }
        if let Ok(s) = self.client.state(&spec.hostname).await {
            p.status = Some(s.as_str().to_string());
        }
        p
    }

    async fn apply_inner(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        p: &mut Provision,
    ) -> Result<()> {
        let name = spec.hostname.as_str();
        let desired = self.desired(spec, true).await?;
        p.warnings.extend(desired.warnings.iter().cloned());
        match &plan.action {
            Action::Refused { reasons } => bail!(
                "container `{name}` must be recreated ({}), but the recreate policy forbids it: rerun with --allow-recreate",
                reasons.join("; ")
            ),
            Action::Recreate { reasons } => {
                if opts.recreate == RecreatePolicy::Never {
                    bail!("the plan recreates `{name}` ({}), but the recreate policy is `never`", reasons.join("; "));
                }
                p.actions.extend(self.destroy_container(name).await?);
                self.create(spec, &desired, p).await?;
            }
            Action::Create => {
                if self.client.exists(name) {
                    bail!("container `{name}` appeared since the plan was made; plan again");
                }
                self.create(spec, &desired, p).await?;
            }
            Action::Update { changes, .. } => {
                let t = Instant::now();
                self.write_config(name, &desired)?;
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
                p.actions.push(record("config", t, Some(keys.join(", "))));
                if self.client.state(name).await? == State::Running {
                    let t = Instant::now();
                    let applied = self.apply_cgroups_live(name, changes).await?;
                    if !applied.is_empty() {
                        p.actions.push(record("cgroup", t, Some(applied.join(", "))));
                    }
                    let pending: Vec<&str> =
                        changes.iter().filter(|c| !live_applicable(&c.key)).map(|c| c.key.as_str()).collect();
                    if !pending.is_empty() {
                        p.warnings.push(format!(
                            "{} take effect at the next restart (`lxc-stop -n {name} -P {} && lxc-start -n {name} -P {}`)",
                            pending.join(", "),
                            self.client.path().display(),
                            self.client.path().display()
                        ));
                    }
                }
            }
            Action::Nothing => {}
        }

        let mut started = false;
        if self.client.state(name).await? != State::Running {
            let t = Instant::now();
            self.client.start(name).await?;
            p.actions.push(record("start", t, None));
            started = true;
        }
        let t = Instant::now();
        let addr = self.read_address(name, &desired).await?;
        p.address = Some(addr.to_string());
        if started {
            // Recorded after a (re)start only: the wait is the container's boot up to its lease.
            p.actions.push(record("address", t, Some(format!("{addr} (lxc-info -iH)"))));
        }

        let key = crate::keys::ensure(&opts.share, spec.vmid, &spec.hostname)
            .with_context(|| format!("cannot prepare the key pair of vmid {}", spec.vmid))?;
        let t = Instant::now();
        if self.install_key(name, &key.public_line).await? {
            p.actions.push(record(
                "install-key",
                t,
                Some(format!("{} → /root/.ssh/authorized_keys", key.public.display())),
            ));
        }
        if opts.wait_ssh {
            let t = Instant::now();
            crate::net::wait_for_ssh(SocketAddr::from((addr, opts.ssh_port)), opts.ssh_timeout)
                .await
                .with_context(|| format!("container `{name}` runs at {addr}, but its sshd does not answer"))?;
            if started {
                p.actions.push(record("wait-ssh", t, Some(format!("{addr}:{}", opts.ssh_port))));
            }
        }
        Ok(())
    }

    async fn create(&self, spec: &ContainerSpec, desired: &Desired, p: &mut Provision) -> Result<()> {
        let name = spec.hostname.as_str();
        let t = Instant::now();
        if self.ensure_base().await? == BaseStatus::Bootstrapped {
            p.actions.push(record(
                "bootstrap-base",
                t,
                Some(format!("{} (debian {}) in {}", self.opts.base, self.opts.release, self.client.path().display())),
            ));
        }
        let t = Instant::now();
        let how = self.clone_base(name).await?;
        p.actions.push(record("clone", t, Some(format!("{how} of {}", self.opts.base))));
        p.created = true;
        let t = Instant::now();
        let result = (|| -> Result<()> {
            for d in &desired.host_dirs {
                std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            }
            self.write_config(name, desired)?;
            let meta = serde_json::to_vec_pretty(&desired.meta)?;
            lxc::write_atomic(&self.client.container_dir(name).join(META_FILE), &meta, 0o644)?;
            Ok(())
        })();
        if let Err(e) = result {
            // Nothing half-made stays behind: the clone without its config is removed.
            let _ = self.client.destroy(name).await;
            p.created = false;
            return Err(e.context(format!("cannot configure the new container `{name}` (removed again)")));
        }
        p.actions.push(record("config", t, None));
        Ok(())
    }

    fn write_config(&self, name: &str, desired: &Desired) -> Result<()> {
        let mut config = self
            .client
            .read_config(name)?
            .ok_or_else(|| anyhow!("container `{name}` has no config file in {}", self.client.path().display()))?;
        for d in &desired.host_dirs {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        for (k, v) in &desired.keys {
            config.set_all(k, v);
        }
        self.client.write_config(name, &config)?;
        Ok(())
    }

    /// Sets changed cgroup limits on the running container; returns the keys set. A limit that
    /// the kernel refuses in this order (v1 memory must stay ≤ memory+swap) is retried once
    /// after the others.
    async fn apply_cgroups_live(&self, name: &str, changes: &[Change]) -> Result<Vec<String>> {
        let mut todo: Vec<(String, String)> = changes
            .iter()
            .filter(|c| live_applicable(&c.key))
            .filter_map(|c| {
                let sub = c.key.trim_start_matches("lxc.cgroup2.").trim_start_matches("lxc.cgroup.");
                Some((sub.to_string(), c.to.clone()?))
            })
            .collect();
        let mut done = Vec::new();
        for _round in 0..2 {
            let mut failed = Vec::new();
            let mut last_err = None;
            for (k, v) in todo {
                match self.client.cgroup_set(name, &k, &v).await {
                    Ok(()) => done.push(k),
                    Err(e) => {
                        last_err = Some(e);
                        failed.push((k, v));
                    }
                }
            }
            if failed.is_empty() {
                return Ok(done);
            }
            todo = failed;
            if _round == 1 {
                return Err(
                    anyhow!(last_err.expect("a failure")).context(format!("cannot set cgroup limits of `{name}` live"))
                );
            }
        }
        Ok(done)
    }

    /// Makes sure the base container exists and is complete, bootstrapping it when needed.
    /// Concurrent callers (threads or processes) wait on a lock file
    /// `<lxcpath>/.<base>.lock`, so the base is bootstrapped once.
    ///
    /// # Errors
    /// A failing `lxc-create` (mirror unreachable, debootstrap missing), a base without sshd.
    pub async fn ensure_base(&self) -> Result<BaseStatus> {
        let base = self.opts.base.clone();
        let lock_path = self.base_lock_path();
        let lock = tokio::task::spawn_blocking(move || -> Result<std::fs::File> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .with_context(|| format!("cannot open {}", lock_path.display()))?;
            f.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
            Ok(f)
        })
        .await??;
        let dir = self.client.container_dir(&base);
        if dir.join(BASE_READY_FILE).is_file() && self.client.exists(&base) {
            drop(lock);
            return Ok(BaseStatus::Cached);
        }
        if self.client.exists(&base) {
            tracing::warn!("base `{base}` is incomplete (no {BASE_READY_FILE}): bootstrapping it again");
            let _ = self.client.stop(&base, self.opts.stop_timeout).await;
            self.client.destroy(&base).await.context("cannot remove the incomplete base")?;
        }
        let wait = crate::progress::Wait::start(format!(
            "bootstrapping base `{base}` (debootstrap debian {}, about a minute)",
            self.opts.release
        ));
        let release = format!("--release={}", self.opts.release);
        let r =
            self.client.create(&base, "debian", &[&release, "--packages=python3"], self.opts.bootstrap_timeout).await;
        if let Err(e) = r {
            if self.client.exists(&base) {
                let _ = self.client.destroy(&base).await;
            }
            return Err(anyhow!(e).context(format!("cannot bootstrap the base container `{base}`")));
        }
        self.prepare_base(&base).with_context(|| format!("cannot prepare the base container `{base}`"))?;
        wait.finish("ready");
        drop(lock);
        Ok(BaseStatus::Bootstrapped)
    }

    /// Makes the fresh base a good source for clones: AppArmor unconfined, the bridge, no SSH
    /// host keys and an empty machine-id (each clone generates its own at first boot, through a
    /// `pgo-ssh-hostkeys.service` that runs `ssh-keygen -A` before `ssh.service`).
    fn prepare_base(&self, base: &str) -> Result<()> {
        let mut config = self.client.read_config(base)?.ok_or_else(|| anyhow!("the base has no config"))?;
        config.set("lxc.apparmor.profile", "unconfined");
        config.set("lxc.net.0.link", &self.opts.bridge);
        let rootfs = config
            .get("lxc.rootfs.path")
            .and_then(|p| p.strip_prefix("dir:").or(Some(p)).map(PathBuf::from))
            .ok_or_else(|| anyhow!("the base's config has no lxc.rootfs.path"))?;
        self.client.write_config(base, &config)?;
        if !rootfs.join("usr/sbin/sshd").is_file() {
            bail!("{}: openssh-server is missing from the base", rootfs.display());
        }
        for e in std::fs::read_dir(rootfs.join("etc/ssh"))?.flatten() {
            if e.file_name().to_string_lossy().starts_with("ssh_host_") {
                std::fs::remove_file(e.path())?;
            }
        }
        std::fs::write(rootfs.join("etc/machine-id"), b"")?;
        let unit = "[Unit]\nDescription=Generate SSH host keys of a proxmox-gitops clone\n\
                    ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\nBefore=ssh.service\n\n\
                    [Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n\n\
                    [Install]\nWantedBy=ssh.service\n";
        let sysd = rootfs.join("etc/systemd/system");
        std::fs::write(sysd.join("pgo-ssh-hostkeys.service"), unit)?;
        let wants = sysd.join("ssh.service.wants");
        std::fs::create_dir_all(&wants)?;
        let link = wants.join("pgo-ssh-hostkeys.service");
        if !link.exists() {
            std::os::unix::fs::symlink("/etc/systemd/system/pgo-ssh-hostkeys.service", &link)?;
        }
        let ready = serde_json::json!({ "base": base, "release": self.opts.release });
        lxc::write_atomic(
            &self.client.container_dir(base).join(BASE_READY_FILE),
            serde_json::to_string_pretty(&ready)?.as_bytes(),
            0o644,
        )?;
        Ok(())
    }

    /// Clones the base as `name`; returns how (`overlay snapshot` or `full copy`).
    async fn clone_base(&self, name: &str) -> Result<&'static str> {
        let base = &self.opts.base;
        let timeout = Duration::from_secs(600);
        if self.opts.clone != CloneMode::Copy {
            match self.client.copy(base, name, true, timeout).await {
                Ok(()) => return Ok("overlay snapshot"),
                Err(e) if self.opts.clone == CloneMode::Auto => {
                    tracing::warn!("overlay snapshot of `{base}` failed, making a full copy: {e}");
                    if self.client.exists(name) {
                        let _ = self.client.destroy(name).await;
                    }
                }
                Err(e) => return Err(anyhow!(e).context(format!("cannot clone `{base}` as `{name}`"))),
            }
        }
        self.client
            .copy(base, name, false, timeout)
            .await
            .with_context(|| format!("cannot copy `{base}` as `{name}`"))?;
        Ok("full copy")
    }

    /// Polls `lxc-info -iH` (backoff 0.2 s doubling to 2 s, bounded by `address_timeout`) until
    /// the container has the static address, or an address in the bridge's subnet.
    async fn read_address(&self, name: &str, desired: &Desired) -> Result<Ipv4Addr> {
        let bridge = lxc::bridge_ipv4(&self.opts.bridge).await?;
        let start = Instant::now();
        let mut delay = Duration::from_millis(200);
        let mut wait = crate::progress::Wait::start(format!("waiting for the address of `{name}`"));
        loop {
            let ips = self.client.ipv4(name).await?;
            let found = match desired.static_address {
                Some(a) => ips.iter().copied().find(|i| *i == a),
                None => ips.iter().copied().find(|i| bridge.is_none_or(|b| in_subnet(*i, b))),
            };
            if let Some(a) = found {
                wait.finish(&a.to_string());
                return Ok(a);
            }
            wait.state(&format!("{} address(es) so far", ips.len()));
            if start.elapsed() >= self.opts.address_timeout {
                bail!(
                    "container `{name}` got no IPv4 address on {} within {}s (addresses seen: {ips:?}); \
                     check that lxc-net's dnsmasq runs (`/usr/libexec/lxc/lxc-net start`)",
                    self.opts.bridge,
                    self.opts.address_timeout.as_secs()
                );
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Authorizes `public_line` for root inside the running container (from the inside, with
    /// `lxc-attach`, so no host-side write can follow a symlink in the container's rootfs):
    /// `/root/.ssh` 0700, `authorized_keys` 0600. Returns false when the key was there already.
    async fn install_key(&self, name: &str, public_line: &str) -> Result<bool> {
        let t = lxc::QUICK_TIMEOUT;
        let out = self
            .client
            .attach(name, &["/bin/sh", "-c", "cat /root/.ssh/authorized_keys 2>/dev/null || true"], None, t)
            .await?;
        let have = String::from_utf8_lossy(&out.stdout);
        if have.lines().any(|l| l.trim() == public_line.trim()) {
            return Ok(false);
        }
        let script = "umask 077 && mkdir -p /root/.ssh && cat >> /root/.ssh/authorized_keys \
                      && chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys \
                      && chown root:root /root/.ssh /root/.ssh/authorized_keys";
        let line = format!("{}\n", public_line.trim());
        self.client
            .attach(name, &["/bin/sh", "-c", script], Some(line.as_bytes()), t)
            .await
            .with_context(|| format!("cannot install the SSH key into `{name}`"))?;
        Ok(true)
    }

    async fn destroy_container(&self, name: &str) -> Result<Vec<ActionRecord>> {
        let mut actions = Vec::new();
        if self.client.state(name).await? != State::Stopped {
            let t = Instant::now();
            self.client.stop(name, self.opts.stop_timeout).await?;
            actions.push(record("stop", t, None));
        }
        let t = Instant::now();
        self.client.destroy(name).await?;
        actions.push(record("destroy", t, None));
        Ok(actions)
    }

    /// Stops and destroys the container of `spec` (its key pair stays in the share). A missing
    /// container is not an error (nothing to do, no actions).
    ///
    /// # Errors
    /// The container was not made by proxmox-gitops or belongs to another vmid (refused: nothing
    /// is touched), a failing `lxc-stop`/`lxc-destroy`.
    pub async fn destroy(&self, spec: &ContainerSpec) -> Result<Vec<ActionRecord>> {
        if !self.owned(spec)? {
            return Ok(vec![]);
        }
        self.destroy_container(&spec.hostname).await
    }

    /// Whether the container of `spec` exists (`false` when absent) and is ours to destroy.
    ///
    /// # Errors
    /// It exists but was not made by proxmox-gitops, or belongs to another vmid; unreadable
    /// metadata.
    pub fn owned(&self, spec: &ContainerSpec) -> Result<bool> {
        let name = spec.hostname.as_str();
        if !self.client.exists(name) {
            return Ok(false);
        }
        match self.read_meta(name)? {
            None => bail!(
                "container `{name}` in {} was not made by proxmox-gitops (no {META_FILE}): not destroying it",
                self.client.path().display()
            ),
            Some(m) if m.vmid != spec.vmid => {
                bail!("container `{name}` belongs to vmid {}, not {}: not destroying it", m.vmid, spec.vmid)
            }
            Some(_) => {}
        }
        Ok(true)
    }

    /// The lock file serialising bootstraps of the base: `<lxcpath>/.<base>.lock`.
    pub fn base_lock_path(&self) -> PathBuf {
        self.client.path().join(format!(".{}.lock", self.opts.base))
    }

    /// Destroys the cached base (e.g. to re-bootstrap it) and its lock file. Fails while
    /// containers cloned from it as overlay snapshots still exist.
    ///
    /// # Errors
    /// A failing `lxc-destroy` (snapshot clones remain).
    pub async fn destroy_base(&self) -> Result<bool> {
        let base = &self.opts.base;
        if !self.client.exists(base) {
            return Ok(false);
        }
        self.client.stop(base, self.opts.stop_timeout).await?;
        self.client.destroy(base).await.with_context(|| format!("cannot destroy the base `{base}`"))?;
        let _ = std::fs::remove_file(self.base_lock_path());
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
