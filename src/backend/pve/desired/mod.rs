//! The desired PVE container, derived from a [`ContainerSpec`] and the PVE settings (pure).
//!
//! Mapping (pve-container's `POST /nodes/{node}/lxc` parameters):
//!
//! | spec | PVE |
//! |---|---|
//! | `ID`, hostname | `vmid`, `hostname` |
//! | `PROXMOX_STORAGE`/`PROXMOX_TEMPLATE` + node arch | `ostemplate=STORAGE:vztmpl/TEMPLATE_ARCH.tar.zst` |
//! | `CORES`, `MEMORY`, `SWAP` (MiB) | `cores`, `memory`, `swap` |
//! | `DISK=STORAGE:SIZE` (GiB) | `rootfs=STORAGE:SIZE` |
//! | `IP` + `PROXMOX_GATEWAY/MASK/INTERFACE/BRIDGE` | `net0=name=IFACE,bridge=BR,ip=IP/MASK,gw=GW` (`ip=dhcp` for dhcp) |
//! | `MOUNT` bind `HOST:CT` / volume `STORAGE:SIZE:CT` | `mpN=HOST,mp=CT` / `mpN=STORAGE:SIZE,mp=CT` |
//! | `MOUNT` `/dev/…` | `devN=PATH` |
//! | `MOUNT` share name | `features: mount=cifs`, privileged (as the seed) |
//! | `FEATURES` (e.g. `nesting,keyctl`) | `features=keyctl=1,nesting=1` (only those set) |
//! | `BOOT` | `onboot` |
//! | (ownership) | `tags` includes [`OWNER_TAG`] (`proxmox-gitops`) |
//!
//! `description` records the lib and the ostemplate (PVE does not keep the template in the
//! config), so a later plan can tell a template change.

pub mod drift;
pub mod template;

use std::collections::BTreeMap;

use crate::error::{Location, Problems};
use crate::inventory::{ContainerSpec, IpConfig, Mount};

/// Settings the mapping needs (from [`crate::settings::PveSettings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PveDefaults {
    /// Template storage, e.g. `local` or `local:vztmpl`.
    pub storage: String,
    /// Template name without arch and extension, e.g. `debian-13-standard_13.1-2`.
    pub template: String,
    /// Gateway for static addresses.
    pub gateway: Option<String>,
    /// Prefix length for addresses given without one.
    pub mask: Option<u8>,
    /// Interface name in the container (`eth0`).
    pub interface: String,
    /// Host bridge (`vmbr0`).
    pub bridge: String,
}

impl PveDefaults {
    /// The defaults from the PVE settings (`PROXMOX_STORAGE`, default `local`;
    /// `PROXMOX_TEMPLATE`; `PROXMOX_GATEWAY`, `PROXMOX_MASK`, `PROXMOX_INTERFACE`,
    /// `PROXMOX_BRIDGE`); `None` when `PROXMOX_TEMPLATE` is not set.
    pub fn from_settings(s: &crate::settings::PveSettings) -> Option<PveDefaults> {
        Some(PveDefaults {
            storage: s.storage.clone().unwrap_or_else(|| "local".into()),
            template: s.template.clone()?,
            gateway: s.gateway.clone(),
            mask: s.mask,
            interface: s.interface.clone(),
            bridge: s.bridge.clone(),
        })
    }
}

/// A mount point `mpN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesiredMount {
    /// A host directory (root@pam only).
    Bind {
        /// Host path.
        host_path: String,
        /// Path in the container.
        mp: String,
    },
    /// A new volume.
    Volume {
        /// Storage id.
        storage: String,
        /// Size in GiB.
        size_gib: u64,
        /// Path in the container.
        mp: String,
    },
}

impl DesiredMount {
    /// The path in the container (`mp=`).
    pub fn mp(&self) -> &str {
        match self {
            DesiredMount::Bind { mp, .. } | DesiredMount::Volume { mp, .. } => mp,
        }
    }
}

/// The container PVE should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// vmid.
    pub vmid: u32,
    /// Hostname.
    pub hostname: String,
    /// The lib name.
    pub name: String,
    /// `STORAGE:vztmpl/TEMPLATE_ARCH.tar.zst`.
    pub ostemplate: String,
    /// `amd64`, `arm64` ….
    pub arch: String,
    /// Cores.
    pub cores: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Swap, MiB.
    pub swap_mib: u64,
    /// Start at boot.
    pub onboot: bool,
    /// Root filesystem storage.
    pub rootfs_storage: String,
    /// Root filesystem size, GiB.
    pub rootfs_gib: u64,
    /// `mpN` → mount, N counting from 0 in MOUNT order.
    pub mounts: BTreeMap<String, DesiredMount>,
    /// `devN` → host device path.
    pub devices: BTreeMap<String, String>,
    /// `net0` properties in order: name, bridge, ip, gw.
    pub net0: Vec<(String, String)>,
    /// Feature flags set (`nesting` → `1`, `mount` → `cifs`), sorted.
    pub features: BTreeMap<String, String>,
    /// `unprivileged`.
    pub unprivileged: bool,
    /// The `description`.
    pub description: String,
    /// The lib's `container.env` (its first env file), named in messages about its keys.
    pub env_file: std::path::PathBuf,
}

/// The PVE tag every container this tool creates carries (`tags`, a `;`-separated list in
/// pve-container's `POST /nodes/{node}/lxc`; PVE stores tags lowercase and sorted): visible and
/// filterable in the PVE UI, and how `drift` finds containers whose lib is gone.
pub const OWNER_TAG: &str = "proxmox-gitops";

/// The tags of a PVE `tags` value (split on `;`, `,` and spaces as PVE's `pve-tag-list` does),
/// lowercase, empty entries dropped, in their order.
pub fn split_tags(tags: &str) -> Vec<String> {
    tags.split([';', ',', ' ']).map(str::trim).filter(|t| !t.is_empty()).map(str::to_lowercase).collect()
}

/// Whether a PVE `tags` value includes [`OWNER_TAG`].
pub fn has_owner_tag(tags: Option<&str>) -> bool {
    tags.is_some_and(|t| split_tags(t).iter().any(|t| t == OWNER_TAG))
}

/// The `tags` value that keeps the user's own tags of `live` and adds [`OWNER_TAG`], or `None`
/// when it is there already.
pub fn tags_with_owner(live: Option<&str>) -> Option<String> {
    if has_owner_tag(live) {
        return None;
    }
    let mut tags = live.map(split_tags).unwrap_or_default();
    tags.push(OWNER_TAG.to_string());
    Some(tags.join(";"))
}

/// Start of the description line that marks a container as ours, followed by the lib's name in
/// backquotes ([`desired()`] writes it first; the user's notes may stand above it).
pub const LIB_MARKER: &str = "managed by proxmox-gitops: lib `";

/// Our own lines of a description, as indexes into `description.lines()`: the first line
/// starting with [`LIB_MARKER`], and the [`OSTEMPLATE_MARKER`] line right after it (lease lines
/// between them skipped). A note that merely looks like one of them elsewhere is the user's.
fn own_indexes(description: &str) -> (Option<usize>, Option<usize>) {
    let lines: Vec<&str> = description.lines().collect();
    let Some(marker) = lines.iter().position(|l| l.trim_start().starts_with(LIB_MARKER)) else {
        return (None, None);
    };
    let template = (marker + 1..lines.len())
        .find(|i| !is_lease_line(lines[*i]))
        .filter(|i| lines[*i].trim_start().starts_with(OSTEMPLATE_MARKER));
    (Some(marker), template)
}

/// The lib name recorded in a description written by [`desired()`], if any.
pub fn recorded_lib(description: &str) -> Option<&str> {
    let (marker, _) = own_indexes(description);
    description.lines().nth(marker?)?.trim().strip_prefix(LIB_MARKER)?.split('`').next()
}

/// The ostemplate recorded by [`desired()`] (the [`OSTEMPLATE_MARKER`] line right after our
/// lib marker), if any.
pub fn recorded_ostemplate(description: &str) -> Option<&str> {
    let (_, template) = own_indexes(description);
    Some(description.lines().nth(template?)?.trim().strip_prefix(OSTEMPLATE_MARKER)?.trim())
}

/// Start of the lease line a run writes into a container's description while it acts on the
/// container: `proxmox-gitops lease: HOLDER until UNIX_SECS` (see `crate::backend::pve` module
/// docs, "one actor per vmid"). The planner, drift and every description comparison ignore such
/// lines ([`without_lease`]).
pub const LEASE_MARKER: &str = "proxmox-gitops lease:";

/// A lease parsed from a description line (see [`LEASE_MARKER`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it: `HOST:PID` (plus `:run-ID` with `GITHUB_RUN_ID`) and a per-process nonce.
    pub holder: String,
    /// When it expires, seconds since the Unix epoch by PVE's clock (the `Date` of its answers).
    pub until: u64,
}

impl Lease {
    /// The description line: `proxmox-gitops lease: HOLDER until UNIX_SECS`.
    pub fn line(&self) -> String {
        format!("{LEASE_MARKER} {} until {}", self.holder, self.until)
    }

    /// Whether it is still valid at `now` (Unix seconds).
    pub fn live_at(&self, now: u64) -> bool {
        self.until > now
    }
}

/// Whether `line` is a lease line (it starts with [`LEASE_MARKER`], leading blanks allowed).
pub fn is_lease_line(line: &str) -> bool {
    line.trim_start().starts_with(LEASE_MARKER)
}

/// The lease recorded in `description` (the first well-formed lease line), if any. A malformed
/// lease line (no `until`, a bad number) is not a lease.
pub fn parse_lease(description: &str) -> Option<Lease> {
    description.lines().filter(|l| is_lease_line(l)).find_map(|l| {
        let rest = l.trim().strip_prefix(LEASE_MARKER)?.trim();
        let (holder, until) = rest.rsplit_once(" until ")?;
        let until = until.trim().parse::<u64>().ok()?;
        let holder = holder.trim();
        (!holder.is_empty()).then(|| Lease { holder: holder.to_string(), until })
    })
}

/// `description` without its lease lines (the other lines unchanged, in order, each ending
/// with a newline as [`desired()`] writes them; an empty description stays empty).
pub fn without_lease(description: &str) -> String {
    description.lines().filter(|l| !is_lease_line(l)).map(|l| format!("{l}\n")).collect()
}

/// `description` with `lease` as its only lease line, appended after the other lines.
pub fn with_lease(description: &str, lease: &Lease) -> String {
    format!("{}{}\n", without_lease(description), lease.line())
}

/// The lines of `description` this tool manages (our lib marker and the ostemplate line after
/// it; lease lines left out), each ending with a newline: what the planner compares with
/// [`desired()`]'s.
pub fn own_lines(description: &str) -> String {
    let (marker, template) = own_indexes(description);
    description
        .lines()
        .enumerate()
        .filter(|(i, _)| Some(*i) == marker || Some(*i) == template)
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

/// The rest of `description`: the user's own text (notes typed in PVE's UI, or the description
/// an adopted container had), lease lines left out, blank lines at its start and end trimmed,
/// each line ending with a newline; empty when there is none. Kept whenever this tool rewrites
/// the description.
pub fn user_notes(description: &str) -> String {
    let (marker, template) = own_indexes(description);
    let lines: Vec<&str> = description
        .lines()
        .enumerate()
        .filter(|(i, l)| Some(*i) != marker && Some(*i) != template && !is_lease_line(l))
        .map(|(_, l)| l)
        .collect();
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    match (first, last) {
        (Some(a), Some(b)) => lines[a..=b].iter().map(|l| format!("{l}\n")).collect(),
        _ => String::new(),
    }
}

/// The description to write: `ours` ([`desired()`]'s), then a blank line and the user's notes
/// of the `live` description ([`user_notes`]) when it has any.
pub fn with_user_notes(ours: &str, live: &str) -> String {
    let notes = user_notes(live);
    if notes.is_empty() { ours.to_string() } else { format!("{ours}\n{notes}") }
}

/// Whether a live `description` carries our mark for lib `name`: the first-line marker
/// ``managed by proxmox-gitops: lib `NAME` `` ([`LIB_MARKER`], written by [`desired()`]). A
/// container at a lib's vmid without it is foreign: never stopped, destroyed or recreated, and
/// changed only when the user adopts it (`--adopt`).
pub fn marked_for(description: &str, name: &str) -> bool {
    recorded_lib(description) == Some(name)
}

/// Marker line in the description that records the ostemplate.
pub const OSTEMPLATE_MARKER: &str = "ostemplate: ";

/// Maps the node's `current-kernel.machine` (`GET /nodes/{node}/status`) to the template arch;
/// unknown values mean `amd64` (the only arch Proxmox ships templates for).
pub fn arch_of_machine(machine: &str) -> &'static str {
    match machine {
        "aarch64" | "arm64" => "arm64",
        "armv7l" | "armhf" => "armhf",
        "riscv64" => "riscv64",
        "i686" | "i386" => "i386",
        _ => "amd64",
    }
}

/// The template file name `TEMPLATE_ARCH.tar.zst`.
pub fn template_file(template: &str, arch: &str) -> String {
    format!("{template}_{arch}.tar.zst")
}

/// The template storage id and volume id: `local` or `local:vztmpl` → (`local`,
/// `local:vztmpl/FILE`).
pub fn template_volid(storage: &str, file: &str) -> (String, String) {
    let sid = storage.split(':').next().unwrap_or(storage).to_string();
    (sid.clone(), format!("{sid}:vztmpl/{file}"))
}

/// The main env file of a spec, for error locations.
fn spec_file(spec: &ContainerSpec) -> std::path::PathBuf {
    spec.sources.first().cloned().unwrap_or_else(|| spec.dir.join("container.env"))
}

/// Feature flags PVE knows for containers that `FEATURES` may set (pve-container `features`).
const BOOL_FEATURES: &[&str] = &["nesting", "keyctl", "fuse", "mknod", "force_rw_sys"];

/// Parses `FEATURES` (comma list of `nesting`, `keyctl`, `fuse`, `mknod`, `force_rw_sys`,
/// each optionally `=1`/`=0`).
///
/// # Errors
/// A problem naming the lib's env file and key `FEATURES`.
pub fn parse_features(spec: &ContainerSpec) -> Result<BTreeMap<String, String>, Problems> {
    let mut out = BTreeMap::new();
    let mut problems = Problems::new();
    let Some(raw) = spec.env.get("FEATURES") else { return Ok(out) };
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item.split_once('=').unwrap_or((item, "1"));
        let on = match value.trim() {
            "1" | "yes" | "true" => true,
            "0" | "no" | "false" => false,
            _ => {
                problems.add(
                    Location::file(spec_file(spec)).with_key("FEATURES"),
                    format!("`{item}`: expected NAME or NAME=1/0"),
                );
                continue;
            }
        };
        if !BOOL_FEATURES.contains(&name.trim()) {
            problems.add(
                Location::file(spec_file(spec)).with_key("FEATURES"),
                format!("unknown feature `{}`; expected one of {}", name.trim(), BOOL_FEATURES.join(", ")),
            );
            continue;
        }
        if on {
            out.insert(name.trim().to_string(), "1".to_string());
        }
    }
    problems.into_result()?;
    Ok(out)
}

/// Derives the desired container from `spec` for a node of architecture `arch`.
///
/// # Errors
/// Problems naming the file/key: a static address without prefix and no `PROXMOX_MASK`, a bad
/// `FEATURES`, missing `PROXMOX_TEMPLATE`.
pub fn desired(spec: &ContainerSpec, d: &PveDefaults, arch: &str) -> Result<Desired, Problems> {
    let mut problems = Problems::new();
    let features_set = parse_features(spec).unwrap_or_else(|p| {
        problems.extend(p);
        BTreeMap::new()
    });
    let mut net0 = vec![("name".to_string(), d.interface.clone()), ("bridge".to_string(), d.bridge.clone())];
    match spec.ip {
        IpConfig::Dhcp => net0.push(("ip".into(), "dhcp".into())),
        IpConfig::Static { address, prefix } => match prefix.or(d.mask) {
            Some(p) => {
                net0.push(("ip".into(), format!("{address}/{p}")));
                if let Some(gw) = &d.gateway {
                    net0.push(("gw".into(), gw.clone()));
                }
            }
            None => problems.add(
                Location::file(spec_file(spec)).with_key("IP"),
                format!("`{address}` has no prefix length and PROXMOX_MASK is not set: write `{address}/24` or set PROXMOX_MASK"),
            ),
        },
    }
    let mut mounts = BTreeMap::new();
    let mut devices = BTreeMap::new();
    let mut features = features_set;
    let mut share = false;
    for m in &spec.mounts {
        match m {
            Mount::Share { .. } => share = true,
            Mount::Bind { host_path, container_path } => {
                mounts.insert(
                    format!("mp{}", mounts.len()),
                    DesiredMount::Bind { host_path: host_path.clone(), mp: container_path.clone() },
                );
            }
            Mount::Volume { storage, size_gib, container_path } => {
                mounts.insert(
                    format!("mp{}", mounts.len()),
                    DesiredMount::Volume { storage: storage.clone(), size_gib: *size_gib, mp: container_path.clone() },
                );
            }
            Mount::Device { path } => {
                devices.insert(format!("dev{}", devices.len()), path.clone());
            }
        }
    }
    if share {
        features.insert("mount".into(), "cifs".into());
    }
    problems.into_result()?;
    let file = template_file(&d.template, arch);
    let (_, ostemplate) = template_volid(&d.storage, &file);
    let description = format!("{LIB_MARKER}{}`\n{OSTEMPLATE_MARKER}{ostemplate}\n", spec.name);
    Ok(Desired {
        vmid: spec.vmid,
        hostname: spec.hostname.clone(),
        name: spec.name.clone(),
        ostemplate,
        arch: arch.to_string(),
        cores: spec.cores,
        memory_mib: spec.memory_mib,
        swap_mib: spec.swap_mib,
        onboot: spec.onboot,
        rootfs_storage: spec.rootfs.storage.clone(),
        rootfs_gib: spec.rootfs.size_gib,
        mounts,
        devices,
        net0,
        features,
        unprivileged: !share,
        description,
        env_file: spec_file(spec),
    })
}

/// `features` as PVE writes it: `k=v` sorted, comma-joined.
pub fn features_string(f: &BTreeMap<String, String>) -> String {
    f.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// `net0` value from ordered properties.
pub fn props_string(p: &[(String, String)]) -> String {
    p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The options of a spec that PVE reserves for `root@pam` (a ticket, not a token), each with
/// why: bind mounts and devices (`check_ct_modify_config_perm`: "mount point type bind is only
/// allowed for root@pam", "device passthrough"), feature flags other than `nesting`, and any
/// feature on a privileged container (share mounts make one).
pub fn root_only_options(d: &Desired) -> Vec<String> {
    let mut out = Vec::new();
    for (k, m) in &d.mounts {
        if let DesiredMount::Bind { host_path, mp } = m {
            out.push(format!("{k} (bind mount {host_path} → {mp})"));
        }
    }
    for (k, p) in &d.devices {
        out.push(format!("{k} (device passthrough {p})"));
    }
    if !d.unprivileged && !d.features.is_empty() {
        out.push(format!("features={} on a privileged container (share mount)", features_string(&d.features)));
    } else {
        let others: Vec<&str> = d.features.keys().map(String::as_str).filter(|k| *k != "nesting").collect();
        if !others.is_empty() {
            out.push(format!("features {} (only nesting is allowed to non-root users)", others.join(",")));
        }
    }
    out
}

/// The parameters of `POST /nodes/{node}/lxc` creating `d` with the public key `ssh_key`.
pub fn create_params(d: &Desired, ssh_key: &str) -> Vec<(String, String)> {
    let mut p: Vec<(&str, String)> = vec![
        ("vmid", d.vmid.to_string()),
        ("hostname", d.hostname.clone()),
        ("ostemplate", d.ostemplate.clone()),
        ("cores", d.cores.to_string()),
        ("memory", d.memory_mib.to_string()),
        ("swap", d.swap_mib.to_string()),
        ("rootfs", format!("{}:{}", d.rootfs_storage, d.rootfs_gib)),
        ("net0", props_string(&d.net0)),
        ("unprivileged", if d.unprivileged { "1" } else { "0" }.into()),
        ("onboot", if d.onboot { "1" } else { "0" }.into()),
        ("description", d.description.clone()),
        ("tags", OWNER_TAG.to_string()),
        ("ssh-public-keys", ssh_key.trim().to_string()),
    ];
    if !d.features.is_empty() {
        p.push(("features", features_string(&d.features)));
    }
    let mut p: Vec<(String, String)> = p.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    for (k, m) in &d.mounts {
        p.push((
            k.clone(),
            match m {
                DesiredMount::Bind { host_path, mp } => format!("{host_path},mp={mp}"),
                DesiredMount::Volume { storage, size_gib, mp } => format!("{storage}:{size_gib},mp={mp}"),
            },
        ));
    }
    for (k, path) in &d.devices {
        p.push((k.clone(), path.clone()));
    }
    p
}

#[cfg(test)]
pub(crate) mod tests;
