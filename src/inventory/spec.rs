//! Validation of a container's layered env into a [`ContainerSpec`].
//!
//! Keys and rules (the seed's `container.env`, checked against what PVE accepts):
//!
//! | key | rule | default |
//! |---|---|---|
//! | `ID` | integer 100–999999999 (PVE `pve-vmid`) | required |
//! | `IP` | IPv4 with optional `/prefix`, or `dhcp` | required |
//! | `CORES` | integer 1–8192 (PVE `cores`) | 1 |
//! | `MEMORY` | MiB, integer 16–4294967295 (PVE `memory` minimum 16) | 512 |
//! | `SWAP` | MiB, integer 0–4294967295 (PVE `swap` minimum 0) | 512 |
//! | `DISK` | `STORAGE:SIZE`, size in GiB, integer 1–8589934591 (bytes fit 64 bits) | `local-lvm:8` |
//! | `BOOT` | yes/no, true/false, on/off or 1/0 (any case) | yes |
//! | `MOUNT` | comma list of `name`, `HOST:CT`, `STORAGE:SIZE:CT`, `/dev/…` | empty |
//! | `NODE` | PVE node name, or `auto` (placed on the online node with the most free memory that has the rootfs storage) | none |
//! | `SNAPSHOT` | comma list of absolute container paths, none twice or inside another, none at or below a pseudo-filesystem ([`PSEUDO_FILESYSTEMS`]) | empty |
//! | `REQUIRES` | comma list of names the lib's configuration needs set (`LOGIN`, `PASSWORD`, …), each one something could provide ([`unprovidable_requirement`]) | empty |
//! | `SERVICES` | comma list of systemd units `[A-Za-z0-9@._:-]+` the `health` check requires active (`.service` implied without a unit suffix) | empty: no failed unit |
//!
//! Other keys are kept in `extra`. Every problem names the file and line the value came from (or
//! the lib's `container.env` for a missing key). The PVE bounds and their source are in
//! [`pve_bounds`]. A required key set to an empty value is named at that line.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::dotenv::Entry;
use super::{ContainerSpec, Disk, Engine, IpConfig, Mount};
use crate::error::{Location, Problems};

pub use super::cross_check::{Identity, cross_check, cross_check_identities};

/// `CORES` when the env files do not set it.
pub const DEFAULT_CORES: u32 = 1;
/// `MEMORY` in MiB when the env files do not set it.
pub const DEFAULT_MEMORY_MIB: u64 = 512;
/// `SWAP` in MiB when the env files do not set it.
pub const DEFAULT_SWAP_MIB: u64 = 512;
/// `DISK` storage when the env files do not set it (`local-lvm:8`).
pub const DEFAULT_DISK_STORAGE: &str = "local-lvm";
/// `DISK` size in GiB when the env files do not set it.
pub const DEFAULT_DISK_GIB: u64 = 8;

/// Bounds of the sizes Proxmox VE accepts, from the API schema of `POST /nodes/{node}/lxc` (the
/// create call; `PUT /nodes/{node}/lxc/{vmid}/config` shares the schema): pve-container's
/// `PVE/LXC/Config.pm` (`cores`, `memory`, `swap`, `rootfs`) and pve-common's
/// `PVE/JSONSchema.pm` (`pve-vmid`). Checking them at resolve time turns what would be a
/// failed create task into a problem with file and line.
pub mod pve_bounds {
    /// `ID`: the `pve-vmid` format, `^[1-9][0-9]{2,8}$`, i.e. 100–999999999.
    pub const VMID: (u64, u64) = (100, 999_999_999);
    /// `CORES`: `cores`, integer, minimum 1, maximum 8192.
    pub const CORES: (u64, u64) = (1, 8192);
    /// `MEMORY` in MiB: `memory`, integer, minimum 16. The schema sets no maximum; ours is the
    /// largest `u32` (4 PiB), far above any host.
    pub const MEMORY_MIB: (u64, u64) = (16, u32::MAX as u64);
    /// `SWAP` in MiB: `swap`, integer, minimum 0. No schema maximum; ours as for memory.
    pub const SWAP_MIB: (u64, u64) = (0, u32::MAX as u64);
    /// `DISK` (and volume mounts) in GiB: a new volume is `STORAGE:SIZE_IN_GiB`
    /// (`$NEW_DISK_RE` in `PVE/LXC.pm`) and PVE records its `size` in bytes as an integer. The
    /// schema's `disk-size` format sets no maximum; the largest size whose byte count fits a
    /// signed 64-bit integer is 2^33 − 1 GiB (planners here compute bytes from it, too).
    pub const DISK_GIB: (u64, u64) = (1, (1 << 33) - 1);
    /// Where the bounds come from, for messages.
    pub const SOURCE: &str = "PVE API `POST /nodes/{node}/lxc`";
}

/// Keys this tool interprets; everything else goes to `extra`.
pub const KNOWN_KEYS: &[&str] =
    &["ID", "IP", "CORES", "MEMORY", "SWAP", "DISK", "BOOT", "MOUNT", "NODE", "SNAPSHOT", "REQUIRES", "SERVICES"];

/// The unit type suffixes of systemd (`systemd.unit(5)`): a `SERVICES` entry ending in one of
/// them is taken as it is, any other gets `.service` appended.
pub const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".slice",
    ".scope",
];

/// The longest unit name systemd accepts (`UNIT_NAME_MAX` in systemd's `unit-name.h`: 256
/// bytes including the terminating NUL).
pub const UNIT_NAME_MAX: usize = 255;

/// Checks one `SERVICES` entry and returns the full unit name: `.service` appended when the
/// name has no unit type suffix ([`UNIT_SUFFIXES`]), so `mosquitto` becomes
/// `mosquitto.service` and `getty@tty1` becomes `getty@tty1.service`, while `cron.timer` stays.
///
/// The rule: 1–255 characters of `[A-Za-z0-9@._:-]` (the characters systemd allows in unit
/// names, `unit_name_is_valid`), not starting with `-` or `.` (a leading `-` would read as an
/// option of `systemctl`), and not a bare suffix such as `.service`.
///
/// # Errors
/// A one-sentence message naming the entry and what is expected.
pub fn parse_unit(item: &str) -> Result<String, String> {
    let valid_chars = item.bytes().all(|b| b.is_ascii_alphanumeric() || b"@._:-".contains(&b));
    if item.is_empty() || !valid_chars || item.starts_with(['-', '.']) {
        return Err(format!(
            "`{item}` is not a systemd unit name: expected letters, digits and `@._:-`, not starting with `-` or `.` \
             (e.g. mosquitto or mosquitto.service)"
        ));
    }
    let unit =
        if UNIT_SUFFIXES.iter().any(|s| item.ends_with(s)) { item.to_string() } else { format!("{item}.service") };
    if unit.len() > UNIT_NAME_MAX {
        return Err(format!("unit name `{item}` is longer than systemd's {UNIT_NAME_MAX} characters"));
    }
    Ok(unit)
}

/// What [`build`] needs to know about a container besides its env.
#[derive(Debug, Clone)]
pub struct SpecInput<'a> {
    /// Lib name (or `config`).
    pub name: &'a str,
    /// Stage name.
    pub stage: &'a str,
    /// The lib directory relative to the root.
    pub dir: PathBuf,
    /// The lib directory on disk (for engine detection).
    pub abs_dir: PathBuf,
    /// The layered env: key → winning entry.
    pub env: &'a BTreeMap<String, Entry>,
    /// The env files layered, lowest first (relative paths).
    pub sources: Vec<PathBuf>,
    /// The lib's main env file, named in problems about missing keys.
    pub main_file: PathBuf,
    /// Submodule path when the lib is a submodule.
    pub submodule: Option<PathBuf>,
}

/// True when `s` is a valid DNS label (RFC 1123): 1–63 of `[A-Za-z0-9-]`, not starting or
/// ending with `-`. PVE's `dns-name` format checks the same per label.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True when `s` is a PVE storage id (`pve-storage-id`: `[a-z][a-z0-9\-_.]*[a-z0-9]`).
pub fn is_storage_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_.".contains(c))
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
}

/// The hostname of lib `name` on `stage`: `name` for `main`, `<stage>-<name>` otherwise.
pub fn hostname(name: &str, stage: &str) -> String {
    if stage == "main" { name.to_string() } else { format!("{stage}-{name}") }
}

pub(super) fn loc(e: &Entry) -> Location {
    Location::line(&e.file, e.line).with_key(&e.key)
}

/// Parses a whole number in `bounds` (inclusive); `source`, when given, names where the bounds
/// come from and is appended to the out-of-range message.
fn parse_int(e: &Entry, bounds: (u64, u64), what: &str, source: Option<&str>, problems: &mut Problems) -> Option<u64> {
    let (min, max) = bounds;
    let v = e.value.trim();
    // Digits only: Rust's parser would also take `+5`, which PVE does not.
    let parsed = if v.bytes().all(|b| b.is_ascii_digit()) { v.parse::<u64>().map_err(|_| ()) } else { Err(()) };
    match parsed {
        Ok(v) if (min..=max).contains(&v) => Some(v),
        Ok(v) => {
            let source = source.map(|s| format!(" ({s})")).unwrap_or_default();
            problems.add(loc(e), format!("{what} must be between {min} and {max}, found {v}{source}"));
            None
        }
        Err(_) => {
            problems.add(loc(e), format!("expected {what} as a whole number, found `{}`", e.value));
            None
        }
    }
}

/// Parses a `STORAGE:SIZE` pair (size in GiB).
fn parse_disk(s: &str) -> Result<Disk, String> {
    let Some((storage, size)) = s.split_once(':') else {
        return Err(format!("expected STORAGE:SIZE (size in GiB, e.g. local-lvm:8), found `{s}`"));
    };
    if !is_storage_id(storage) {
        return Err(format!("`{storage}` is not a PVE storage id (lowercase letters, digits, `-_.`)"));
    }
    let size = size.trim().trim_end_matches(['G', 'g']);
    let (min, max) = pve_bounds::DISK_GIB;
    match size.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Disk { storage: storage.to_string(), size_gib: n }),
        Ok(n) if n > max => Err(format!(
            "size {n} GiB after `{storage}:` is larger than {max} GiB, the largest size {} can record \
             (its size in bytes must fit a 64-bit integer)",
            pve_bounds::SOURCE
        )),
        Err(_) if !size.is_empty() && size.bytes().all(|b| b.is_ascii_digit()) => Err(format!(
            "size after `{storage}:` is larger than {max} GiB, the largest size {} can record",
            pve_bounds::SOURCE
        )),
        _ => Err(format!("expected a size in whole GiB ≥ 1 after `{storage}:`, found `{size}`")),
    }
}

pub(super) fn parse_ip(s: &str) -> Result<IpConfig, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("dhcp") {
        return Ok(IpConfig::Dhcp);
    }
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => {
            let p = Some(p)
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| (1..=32).contains(p))
                .ok_or_else(|| format!("expected a prefix length 1–32 after `/`, found `{p}`"))?;
            (a, Some(p))
        }
        None => (s, None),
    };
    let address: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("expected an IPv4 address (optionally with /prefix) or `dhcp`, found `{s}`"))?;
    if address.is_unspecified() || address.is_broadcast() || address.is_multicast() {
        return Err(format!("`{address}` cannot be a container's address"));
    }
    Ok(IpConfig::Static { address, prefix })
}

/// The values a boolean key (`BOOT`) accepts, as (true, false) pairs; case does not matter.
pub const BOOL_VALUES: &[(&str, &str)] = &[("yes", "no"), ("true", "false"), ("on", "off"), ("1", "0")];

/// What a boolean key expects, for messages: `yes/no, true/false, on/off or 1/0 (any case)`,
/// built from [`BOOL_VALUES`] so it lists exactly what [`parse_bool`] accepts.
fn bool_expected() -> String {
    let pairs: Vec<String> = BOOL_VALUES.iter().map(|(t, f)| format!("{t}/{f}")).collect();
    let (last, rest) = pairs.split_last().expect("non-empty");
    format!("{} or {last} (any case)", rest.join(", "))
}

fn parse_bool(s: &str) -> Option<bool> {
    let v = s.trim().to_ascii_lowercase();
    BOOL_VALUES.iter().find_map(|(t, f)| {
        if v == *t {
            Some(true)
        } else if v == *f {
            Some(false)
        } else {
            None
        }
    })
}

fn is_abs_path(s: &str) -> bool {
    s.starts_with('/') && !s.contains('\0') && !s.split('/').any(|c| c == "..")
}

/// The first overlap among snapshot paths (given without a trailing `/`), as a message: the
/// same path twice, or one path inside another. An archive would hold the data twice and a
/// restore would fight itself. `resolve` refuses it with the `SNAPSHOT` line; the snapshot step
/// checks again before archiving.
pub fn snapshot_overlap(paths: &[String]) -> Option<String> {
    for (i, a) in paths.iter().enumerate() {
        for b in &paths[i + 1..] {
            if a == b {
                return Some(format!("snapshot path `{a}` is declared twice"));
            }
            for (outer, inner) in [(a, b), (b, a)] {
                if inner.starts_with(&format!("{outer}/")) {
                    return Some(format!("snapshot path `{inner}` lies inside `{outer}`: declare only `{outer}`"));
                }
            }
        }
    }
    None
}

/// Pseudo-filesystems a container mounts at these paths (procfs, sysfs, devtmpfs, the tmpfs of
/// `/run`, and `/var/run`, its link on every current distribution): kernel and runtime state, not
/// data. An archive of one is garbage (`/proc/kcore`, device nodes) or never ends (files that
/// read forever), and none of it survives a restart anyway, so a `SNAPSHOT` path at or below one
/// is refused at resolve.
pub const PSEUDO_FILESYSTEMS: &[&str] = &["/proc", "/sys", "/dev", "/run", "/var/run"];

/// The pseudo-filesystem ([`PSEUDO_FILESYSTEMS`]) that snapshot path `p` (without a trailing
/// `/`) is or lies in, if any.
pub fn pseudo_filesystem(p: &str) -> Option<&'static str> {
    PSEUDO_FILESYSTEMS.iter().copied().find(|fs| p == *fs || p.starts_with(&format!("{fs}/")))
}

/// The names the configuration contract always sets (see `steps::configure`): a `REQUIRES` of
/// one of them is always met.
pub const CONTRACT_NAMES: &[&str] =
    &["IP", "ID", "HOSTNAME", "STAGE", "HOST", "LOGIN", "PASSWORD", "PGO_OUTPUT", "PGO_CONTAINERS"];

/// Why a `REQUIRES` name could never be met by a global or a setting, if so (the lib's own env
/// files can still set any name; the caller checks them first):
///
/// * a setting of proxmox-gitops itself other than `HOST`, `LOGIN` and `PASSWORD` (e.g.
///   `PROXMOX_PASSWORD`, `GITEA_TOKEN`, `PROXMOX_GITOPS_STAGE`): settings are not handed to a
///   lib's configuration;
/// * a name starting with `GITHUB_`, `GITEA_` or `CI`: no global may have it (Gitea reserves
///   these variable names, see [`crate::inventory::globals::global_name`]).
pub fn unprovidable_requirement(name: &str) -> Option<String> {
    if CONTRACT_NAMES.contains(&name) {
        return None;
    }
    let setting = crate::settings::CONFIG_KEYS.iter().any(|(v, _)| *v == name)
        || ["PROXMOX_TOKEN_ID", "PROXMOX_TOKEN_SECRET", "PROXMOX_FINGERPRINT", "PROXMOX_CA"].contains(&name)
        || name.starts_with("PROXMOX_GITOPS_");
    if setting {
        return Some(format!(
            "`{name}` is a setting of proxmox-gitops, which is never handed to a lib's configuration: a lib gets every \
             global, its own keys, HOST, LOGIN, PASSWORD, IP, ID, HOSTNAME and STAGE"
        ));
    }
    if let Err(e) = crate::inventory::globals::global_name(name) {
        return Some(format!(
            "`{name}` can never be set: no global may have this name ({e}) and this lib's env files do not set it"
        ));
    }
    None
}

/// Parses one `MOUNT` entry.
pub fn parse_mount(item: &str) -> Result<Mount, String> {
    let item = item.trim();
    if item.starts_with("/dev/") && !item.contains(':') {
        if !is_abs_path(item) {
            return Err(format!("device path `{item}` must be absolute without `..`"));
        }
        return Ok(Mount::Device { path: item.to_string() });
    }
    let parts: Vec<&str> = item.split(':').collect();
    match parts.as_slice() {
        [name]
            if !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
                && name.as_bytes()[0].is_ascii_lowercase() =>
        {
            Ok(Mount::Share { name: name.to_string() })
        }
        [host, ct] if host.starts_with('/') => {
            if !is_abs_path(host) || !is_abs_path(ct) || *ct == "/" {
                return Err(format!(
                    "bind mount `{item}`: both paths must be absolute (without `..`), and not `/` in the container"
                ));
            }
            Ok(Mount::Bind { host_path: host.to_string(), container_path: ct.to_string() })
        }
        [storage, size, ct] => {
            let disk = parse_disk(&format!("{storage}:{size}")).map_err(|e| format!("volume mount `{item}`: {e}"))?;
            if !is_abs_path(ct) || *ct == "/" {
                return Err(format!("volume mount `{item}`: the container path must be absolute and not `/`"));
            }
            Ok(Mount::Volume { storage: disk.storage, size_gib: disk.size_gib, container_path: ct.to_string() })
        }
        _ => Err(format!(
            "cannot read mount `{item}`: expected a share name (`share`), HOST_PATH:CONTAINER_PATH, \
             STORAGE:SIZE:CONTAINER_PATH or a /dev/… device"
        )),
    }
}

/// Validates the layered env of one container into a [`ContainerSpec`].
///
/// # Errors
/// All problems found (missing `ID`/`IP`, malformed values, out-of-range numbers, an invalid
/// hostname), each with the file and line of the offending value.
pub fn build(input: SpecInput<'_>) -> Result<ContainerSpec, Problems> {
    let mut problems = Problems::new();
    let env = input.env;
    // A required key no file sets is named at the lib's main file; one set to an empty value is
    // named at the line that empties it.
    let missing = |key: &str, what: &str, problems: &mut Problems| match env.get(key) {
        Some(e) => problems.add(loc(e), format!("{key} is empty: a value is required ({what})")),
        None => problems.add(
            Location::file(&input.main_file).with_key(key),
            format!("missing required key {key}: the key is absent from every env file of this lib ({what})"),
        ),
    };
    // Empty values of optional keys mean "not set", as an empty shell variable would.
    let get = |k: &str| env.get(k).filter(|e| !e.value.trim().is_empty());

    let hostname = hostname(input.name, input.stage);
    if !is_dns_label(&hostname) {
        problems.add(
            Location::file(&input.dir).with_key("hostname"),
            format!(
                "hostname `{hostname}` (from the lib's directory name) is not a valid DNS label: use \
                 letters, digits and `-` (no `_`), at most 63 characters"
            ),
        );
    }

    let vmid = match get("ID") {
        Some(e) => parse_int(e, pve_bounds::VMID, "ID (the vmid)", None, &mut problems).map(|v| v as u32),
        None => {
            missing("ID", "the PVE vmid, 100–999999999", &mut problems);
            None
        }
    };
    let ip = match get("IP") {
        Some(e) => match parse_ip(&e.value) {
            Ok(ip) => Some(ip),
            Err(m) => {
                problems.add(loc(e), m);
                None
            }
        },
        None => {
            missing("IP", "an IPv4 address such as 192.168.178.20/24, or `dhcp`", &mut problems);
            None
        }
    };
    let size = |key: &str, default: u64, bounds: (u64, u64), what: &str, param: &str, problems: &mut Problems| {
        let source = format!("{} parameter `{param}`", pve_bounds::SOURCE);
        get(key).map_or(Some(default), |e| parse_int(e, bounds, what, Some(&source), problems))
    };
    let cores = size("CORES", DEFAULT_CORES as u64, pve_bounds::CORES, "CORES", "cores", &mut problems);
    let memory = size("MEMORY", DEFAULT_MEMORY_MIB, pve_bounds::MEMORY_MIB, "MEMORY (MiB)", "memory", &mut problems);
    let swap = size("SWAP", DEFAULT_SWAP_MIB, pve_bounds::SWAP_MIB, "SWAP (MiB)", "swap", &mut problems);
    let rootfs = match get("DISK") {
        Some(e) => match parse_disk(e.value.trim()) {
            Ok(d) => Some(d),
            Err(m) => {
                problems.add(loc(e), m);
                None
            }
        },
        None => Some(Disk { storage: DEFAULT_DISK_STORAGE.into(), size_gib: DEFAULT_DISK_GIB }),
    };
    let onboot = match get("BOOT") {
        Some(e) => parse_bool(&e.value).or_else(|| {
            problems.add(loc(e), format!("expected {}, found `{}`", bool_expected(), e.value));
            None
        }),
        None => Some(true),
    };
    let mut mounts = Vec::new();
    if let Some(e) = get("MOUNT") {
        let mut targets: BTreeMap<String, String> = BTreeMap::new();
        for item in e.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match parse_mount(item) {
                Ok(m) => {
                    // Two entries on one container path (or one device twice) would make PVE
                    // refuse the config, or the second silently hide the first.
                    let target = match &m {
                        Mount::Share { name } => format!("share `{name}`"),
                        Mount::Bind { container_path, .. } | Mount::Volume { container_path, .. } => {
                            container_path.trim_end_matches('/').to_string()
                        }
                        Mount::Device { path } => path.clone(),
                    };
                    match targets.get(&target) {
                        Some(first) => problems
                            .add(loc(e), format!("mount `{item}` uses {target} again (already used by `{first}`)")),
                        None => {
                            targets.insert(target, item.to_string());
                            mounts.push(m);
                        }
                    }
                }
                Err(msg) => problems.add(loc(e), msg),
            }
        }
    }
    let node = match get("NODE") {
        Some(e) if !is_dns_label(e.value.trim()) => {
            problems.add(loc(e), format!("`{}` is not a valid PVE node name", e.value));
            None
        }
        Some(e) => Some(e.value.trim().to_string()),
        None => None,
    };
    let mut snapshot_paths = Vec::new();
    if let Some(e) = get("SNAPSHOT") {
        for p in e.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if is_abs_path(p) && p != "/" {
                let p = p.trim_end_matches('/');
                match pseudo_filesystem(p) {
                    Some(fs) => problems.add(
                        loc(e),
                        format!(
                            "snapshot path `{p}` is {}the pseudo-filesystem `{fs}`: it holds kernel or runtime state, \
                             not data (its archive would be garbage or never end); declare the lib's data directories",
                            if p == fs { "" } else { "inside " }
                        ),
                    ),
                    None => snapshot_paths.push(p.to_string()),
                }
            } else {
                problems.add(loc(e), format!("snapshot path `{p}` must be absolute (not `/`, no `..`)"));
            }
        }
        if let Some(m) = snapshot_overlap(&snapshot_paths) {
            problems.add(loc(e), m);
        }
    }
    let mut requires = Vec::new();
    if let Some(e) = get("REQUIRES") {
        for name in e.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let valid = name.bytes().next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
                && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            let own = env.get(name).is_some_and(|o| !o.value.trim().is_empty());
            if !valid {
                problems.add(
                    loc(e),
                    format!("`{name}` is not a setting name: expected upper-case letters, digits and `_` (e.g. LOGIN)"),
                );
            } else if let Some(why) = unprovidable_requirement(name).filter(|_| !own) {
                problems.add(loc(e), why);
            } else if !requires.iter().any(|r| r == name) {
                requires.push(name.to_string());
            }
        }
    }

    let mut services: Vec<String> = Vec::new();
    if let Some(e) = get("SERVICES") {
        for item in e.value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match parse_unit(item) {
                Ok(unit) => {
                    if !services.contains(&unit) {
                        services.push(unit);
                    }
                }
                Err(m) => problems.add(loc(e), m),
            }
        }
    }

    engine_conflict(&input.dir, &Engine::files(&input.abs_dir), &mut problems);

    problems.into_result()?;
    let all: BTreeMap<String, String> = env.iter().map(|(k, e)| (k.clone(), e.value.clone())).collect();
    let extra =
        all.iter().filter(|(k, _)| !KNOWN_KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(ContainerSpec {
        name: input.name.to_string(),
        hostname,
        vmid: vmid.expect("checked"),
        ip: ip.expect("checked"),
        cores: cores.expect("checked") as u32,
        memory_mib: memory.expect("checked"),
        swap_mib: swap.expect("checked"),
        rootfs: rootfs.expect("checked"),
        mounts,
        onboot: onboot.expect("checked"),
        node,
        snapshot_paths,
        requires,
        services,
        engine: Engine::detect(&input.abs_dir),
        dir: input.dir,
        sources: input.sources,
        submodule: input.submodule,
        env: all,
        extra,
    })
}

/// A problem when the lib directory `dir` (relative to the root) has more than one of the engine
/// files `found` ([`Engine::files`]): the engine is never chosen silently.
fn engine_conflict(dir: &Path, found: &[&str], problems: &mut Problems) {
    if found.len() < 2 {
        return;
    }
    let named: Vec<String> = found
        .iter()
        .map(|f| format!("`{}`", if dir == Path::new(".") { PathBuf::from(f) } else { dir.join(f) }.display()))
        .collect();
    let (last, rest) = named.split_last().expect("two or more");
    let count = if found.len() == 2 { "two" } else { "three" };
    problems.add(
        Location::file(dir),
        format!(
            "{count} configuration engines, {} and {last}: a lib has at most one of `playbook.yml` (Ansible), \
             `configure.sh` (shell) and `recipes/default.rb` (Cinc); remove the others",
            rest.join(", ")
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_conflicts_name_every_file() {
        let msgs = |dir: &str, found: &[&str]| {
            let mut p = Problems::new();
            engine_conflict(Path::new(dir), found, &mut p);
            p.0.iter().map(|p| p.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(msgs("libs/x", &[]), Vec::<String>::new());
        assert_eq!(msgs("libs/x", &["configure.sh"]), Vec::<String>::new());
        let rule = "a lib has at most one of `playbook.yml` (Ansible), `configure.sh` (shell) and \
                    `recipes/default.rb` (Cinc); remove the others";
        assert_eq!(
            msgs("libs/x", &["playbook.yml", "recipes/default.rb"]),
            vec![format!(
                "libs/x: two configuration engines, `libs/x/playbook.yml` and `libs/x/recipes/default.rb`: {rule}"
            )]
        );
        assert_eq!(
            msgs(".", &["playbook.yml", "configure.sh", "recipes/default.rb"]),
            vec![format!(
                ".: three configuration engines, `playbook.yml`, `configure.sh` and `recipes/default.rb`: {rule}"
            )]
        );
    }

    #[test]
    fn boot_message_lists_exactly_what_parses() {
        assert_eq!(bool_expected(), "yes/no, true/false, on/off or 1/0 (any case)");
        for (t, f) in BOOL_VALUES {
            assert_eq!((parse_bool(t), parse_bool(f)), (Some(true), Some(false)), "{t}/{f}");
            let (t, f) = (t.to_uppercase(), f.to_uppercase());
            assert_eq!((parse_bool(&t), parse_bool(&f)), (Some(true), Some(false)), "{t}/{f}");
        }
        for bad in ["maybe", "y", "n", "2", ""] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
    }

    #[test]
    fn mounts() {
        assert_eq!(parse_mount("share").unwrap(), Mount::Share { name: "share".into() });
        assert_eq!(
            parse_mount("/srv/data:/data").unwrap(),
            Mount::Bind { host_path: "/srv/data".into(), container_path: "/data".into() }
        );
        assert_eq!(
            parse_mount("local-lvm:4:/var/lib/x").unwrap(),
            Mount::Volume { storage: "local-lvm".into(), size_gib: 4, container_path: "/var/lib/x".into() }
        );
        assert_eq!(parse_mount("/dev/ttyUSB0").unwrap(), Mount::Device { path: "/dev/ttyUSB0".into() });
        for bad in ["Share!", "rel:/x", "/a:rel", "local-lvm:x:/d", "a:b:c:d", "/srv/../etc:/x", "/x:/"] {
            assert!(parse_mount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ips_and_disks() {
        assert_eq!(parse_ip("dhcp").unwrap(), IpConfig::Dhcp);
        assert_eq!(
            parse_ip("10.0.0.5/24").unwrap(),
            IpConfig::Static { address: "10.0.0.5".parse().unwrap(), prefix: Some(24) }
        );
        assert!(parse_ip("10.0.0.5/33").is_err());
        assert!(parse_ip("10.0.0.5/0").is_err());
        assert!(parse_ip("10.0.0.5/+8").is_err());
        assert!(parse_ip("10.0.0").is_err());
        assert!(parse_ip("0.0.0.0").is_err());
        assert_eq!(parse_disk("local-lvm:8").unwrap(), Disk { storage: "local-lvm".into(), size_gib: 8 });
        assert_eq!(parse_disk("local-lvm:8G").unwrap().size_gib, 8);
        assert!(parse_disk("local-lvm:0").is_err());
        assert!(parse_disk("Local:8").is_err());
        assert!(parse_disk("8").is_err());
    }

    #[test]
    fn snapshot_overlaps() {
        let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(snapshot_overlap(&v(&["/data", "/etc/app", "/data2"])), None);
        assert_eq!(
            snapshot_overlap(&v(&["/data", "/etc", "/data"])).unwrap(),
            "snapshot path `/data` is declared twice"
        );
        assert_eq!(
            snapshot_overlap(&v(&["/data/db", "/data"])).unwrap(),
            "snapshot path `/data/db` lies inside `/data`: declare only `/data`"
        );
        assert_eq!(
            snapshot_overlap(&v(&["/data", "/x", "/data/db"])).unwrap(),
            "snapshot path `/data/db` lies inside `/data`: declare only `/data`"
        );
    }

    #[test]
    fn disk_sizes_within_pve_bounds() {
        let max = pve_bounds::DISK_GIB.1;
        assert_eq!(parse_disk(&format!("local-lvm:{max}")).unwrap().size_gib, max);
        // The planner computes bytes from the size: the largest one must not overflow.
        assert!(max.checked_mul(1 << 30).is_some());
        assert_eq!(
            parse_disk(&format!("local-lvm:{}", max + 1)).unwrap_err(),
            "size 8589934592 GiB after `local-lvm:` is larger than 8589934591 GiB, the largest size PVE API \
             `POST /nodes/{node}/lxc` can record (its size in bytes must fit a 64-bit integer)"
        );
        assert_eq!(
            parse_disk("local-lvm:99999999999999999999999").unwrap_err(),
            "size after `local-lvm:` is larger than 8589934591 GiB, the largest size PVE API `POST /nodes/{node}/lxc` \
             can record"
        );
    }

    #[test]
    fn unit_names() {
        assert_eq!(parse_unit("mosquitto").unwrap(), "mosquitto.service");
        assert_eq!(parse_unit("mosquitto.service").unwrap(), "mosquitto.service");
        assert_eq!(parse_unit("getty@tty1").unwrap(), "getty@tty1.service");
        assert_eq!(parse_unit("php8.2-fpm").unwrap(), "php8.2-fpm.service");
        assert_eq!(parse_unit("cron.timer").unwrap(), "cron.timer");
        assert_eq!(parse_unit("dev-sda1.device").unwrap(), "dev-sda1.device");
        assert_eq!(parse_unit("a:b_c").unwrap(), "a:b_c.service");
        for bad in ["", "-h", ".service", "two words", "a;b", "$(x)", "ü", "a/b", "a\\b"] {
            assert!(parse_unit(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_unit("--now").unwrap_err(),
            "`--now` is not a systemd unit name: expected letters, digits and `@._:-`, not starting with `-` or `.` \
             (e.g. mosquitto or mosquitto.service)"
        );
        assert!(parse_unit(&"a".repeat(247)).is_ok());
        assert!(parse_unit(&"a".repeat(248)).unwrap_err().contains("longer than systemd's 255"));
    }

    fn build_with(pairs: &[(&str, &str)]) -> Result<ContainerSpec, Problems> {
        let file = PathBuf::from("libs/app/container.env");
        let env: BTreeMap<String, Entry> = pairs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| {
                (k.to_string(), Entry { key: k.to_string(), value: v.to_string(), file: file.clone(), line: i + 1 })
            })
            .collect();
        build(SpecInput {
            name: "app",
            stage: "main",
            dir: PathBuf::from("libs/app"),
            abs_dir: PathBuf::from("/nonexistent/libs/app"),
            env: &env,
            sources: vec![file.clone()],
            main_file: file,
            submodule: None,
        })
    }

    #[test]
    fn services_key() {
        let s =
            build_with(&[("ID", "120"), ("IP", "dhcp"), ("SERVICES", " mosquitto, cron.timer,,mosquitto.service ")])
                .unwrap();
        assert_eq!(s.services, vec!["mosquitto.service".to_string(), "cron.timer".to_string()]);
        assert!(!s.extra.contains_key("SERVICES"), "SERVICES is interpreted, not extra");
        assert_eq!(
            build_with(&[("ID", "120"), ("IP", "dhcp"), ("SERVICES", "")]).unwrap().services,
            Vec::<String>::new()
        );
        let e = build_with(&[("ID", "120"), ("IP", "dhcp"), ("SERVICES", "ok,-x,a b")]).unwrap_err();
        let msgs: Vec<String> = e.0.iter().map(|p| p.to_string()).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(
            msgs[0].starts_with("libs/app/container.env:3 (SERVICES): `-x` is not a systemd unit name"),
            "{msgs:?}"
        );
        assert!(msgs[1].contains("`a b` is not a systemd unit name"), "{msgs:?}");
    }

    #[test]
    fn labels() {
        assert!(is_dns_label("broker"));
        assert!(is_dns_label("stage-broker"));
        assert!(!is_dns_label("my_lib"));
        assert!(!is_dns_label("-x"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
