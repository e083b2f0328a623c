//! The provision planner: desired container vs. live config → [`Action`] (pure, no I/O).
//!
//! Live state is what `GET /nodes/{node}/lxc/{vmid}/config` answers (with pending values
//! applied, PVE's default), the keys `GET …/pending` marks as pending, and whether the container
//! runs. Rules (pve-container semantics):
//!
//! * a container without our mark for the lib ([`marked_for`]) → **foreign** (never touched),
//!   or with `--adopt` **adopt** (the mark and the in-place changes; see [`plan_with`]);
//! * lease lines of the description (`proxmox-gitops lease: …`) are ignored, and only our own
//!   lines of it are compared: the user's text (notes, an adopted container's description) is
//!   kept after them whenever the description is rewritten;
//! * absent → **create**;
//! * identical → **nothing**;
//! * only `cores`, `memory`, `swap`, `onboot`, `description`, `net0`, `tags` (the
//!   [`OWNER_TAG`](super::desired::OWNER_TAG) missing — added to the user's own tags, which are kept) or feature flags the
//!   caller may change differ → **update** in place (`PUT …/config` with the digest, only those keys);
//!   feature changes on a running container need a reboot (they go to `pending`);
//! * `rootfs`/`mpN` grow → **resize** (`PUT …/resize`, online for a running container; PVE
//!   keeps a volume id in `rootfs`, so a `STORAGE:SIZE` value is never PUT on an existing
//!   container);
//! * mount points and devices never recreate (pve-container `update_pct_config`,
//!   `vmconfig_hotplug_pending`, `vmconfig_apply_pending`): desired mounts are matched to the
//!   live `mpN` by path first ([`match_mounts`]); a new `mpN`/`devN` is **added** in place (`PUT
//!   …/config`; PVE hotplugs it into a running container), a removed one is **deleted** in
//!   place (`delete=mpN`; a volume becomes an `unusedN` disk, not destroyed), a changed one
//!   (path, bind source, kind) is rewritten in place (the volume id is kept for a path change).
//!   On a running container PVE keeps deletes and changes pending until the next start: the
//!   update is `reboot_needed`, and the executor restarts the container only when the policy
//!   allows a restart ([`RecreatePolicy::allows_restart`]), else says it is pending;
//! * **refused** whatever the policy (`needs_recreate: false`), each reason naming the fix: a
//!   volume shrink (`DISK`/`MOUNT` in the lib's `container.env`, both sizes), a volume mount on
//!   another storage (`pct move-volume`), feature flags PVE reserves for `root@pam` (all but
//!   `nesting`; any on a privileged container) and changes to live bind mounts or devices under
//!   a token or non-root user;
//! * anything else — another ostemplate or arch, `unprivileged`, `rootfs` on another storage,
//!   the vmid holding another hostname, a template — needs a **recreate**, done only when the
//!   [`RecreatePolicy`] allows (`when-needed`, `always`); otherwise the action is **refused**
//!   and nothing changes;
//! * pending changes left by an earlier run on a running container make an update with no
//!   changes when the policy allows a restart (the restart applies them), else a warning.

use std::collections::{BTreeMap, BTreeSet};

use super::desired::{Desired, DesiredMount, marked_for, without_lease};
use crate::inventory::{ContainerSpec, Mount};
use crate::model::{Action, RecreatePolicy, Resize, SettingChange};

mod sections;

/// A live container as read from PVE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCt {
    /// `GET …/config` (pending values applied) as strings, without `digest`.
    pub config: BTreeMap<String, String>,
    /// Keys with a pending change or delete (`GET …/pending` entries with `pending` or `delete`).
    pub pending: BTreeSet<String>,
    /// `status == "running"` (`GET …/status/current`).
    pub running: bool,
}

/// The live side of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PveObserved {
    /// `GET …/config` answered "does not exist".
    Absent,
    /// The container exists.
    Present(LiveCt),
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvePlanned {
    /// What to do.
    pub action: Action,
    /// Whether to start the container afterwards.
    pub start: bool,
    /// Notes for the artifact (unknown ostemplate, pending changes, a lock …).
    pub warnings: Vec<String>,
    /// Whether what PVE keeps pending after the in-place change of the running container is
    /// applied by a reboot ([`crate::model::ContainerPlan::reboot_for_pending`]): the policy
    /// allows a restart ([`RecreatePolicy::allows_restart`]).
    pub reboot_for_pending: bool,
}

/// Splits a PVE property string `first,k=v,…` into the bare first value and the pairs.
pub fn split_props(s: &str) -> (Option<String>, BTreeMap<String, String>) {
    let mut first = None;
    let mut props = BTreeMap::new();
    for (i, part) in s.split(',').enumerate() {
        match part.split_once('=') {
            Some((k, v)) => {
                props.insert(k.trim().to_string(), v.trim().to_string());
            }
            None if i == 0 && !part.is_empty() => first = Some(part.trim().to_string()),
            None => {}
        }
    }
    (first, props)
}

/// Bytes of a PVE size (`8G`, `512M`, `1T`, `4096K`, plain bytes).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        'T' => 1024.0_f64.powi(4),
        _ => return None,
    };
    Some((n * mult) as u64)
}

const GIB: u64 = 1024 * 1024 * 1024;

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("1") | Some("true") | Some("yes") | Some("on"))
}

fn num(v: Option<&String>) -> Option<u64> {
    v.and_then(|s| s.trim().parse::<u64>().ok())
}

pub use super::desired::recorded_ostemplate;

/// Parses `features` into `name → value` (booleans as `1`/`0`).
fn parse_features(s: Option<&String>) -> BTreeMap<String, String> {
    let Some(s) = s else { return BTreeMap::new() };
    split_props(s)
        .1
        .into_iter()
        .map(|(k, v)| {
            let v = match v.as_str() {
                "true" | "yes" | "on" => "1".to_string(),
                "false" | "no" | "off" => "0".to_string(),
                _ => v,
            };
            (k, v)
        })
        .filter(|(k, v)| !(v == "0" && k != "mount"))
        .collect()
}

/// A size in GiB as the user writes it: `12`, or `1.5` when not whole.
fn gib_text(bytes: u64) -> String {
    if bytes.is_multiple_of(GIB) { (bytes / GIB).to_string() } else { format!("{:.1}", bytes as f64 / GIB as f64) }
}

/// The volume of a `rootfs`/`mpN` value (`STORAGE:NAME` or a host path) and its properties.
fn volume_of(live: &str) -> (String, BTreeMap<String, String>) {
    let (first, props) = split_props(live);
    (first.or_else(|| props.get("volume").cloned()).unwrap_or_default(), props)
}

/// Compares the size of an existing volume (`rootfs` or a volume `mpN`) with `size_gib`: a
/// growth is a [`Resize`] (`PUT …/resize`, online on a running container); a shrink is blocked
/// with `refusal(live GiB)` (PVE cannot shrink a volume, and a recreate would empty it).
fn compare_size(
    key: &str,
    props: &BTreeMap<String, String>,
    size_gib: u64,
    refusal: impl FnOnce(String) -> String,
    blocked: &mut Vec<String>,
    resizes: &mut Vec<Resize>,
) {
    let want = size_gib * GIB;
    match props.get("size").and_then(|s| parse_size(s)) {
        Some(have) if have < want => {
            resizes.push(Resize { disk: key.to_string(), from_gib: have / GIB, to_gib: size_gib })
        }
        Some(have) if have > want => blocked.push(refusal(gib_text(have))),
        _ => {}
    }
}

/// `value` with its `mp` property set to `mp` (other properties — `size`, `backup`, `ro` … —
/// kept, in their order).
fn with_mp(value: &str, mp: &str) -> String {
    let mut seen = false;
    let mut parts: Vec<String> = value
        .split(',')
        .map(|p| match p.split_once('=') {
            Some(("mp", _)) => {
                seen = true;
                format!("mp={mp}")
            }
            _ => p.to_string(),
        })
        .collect();
    if !seen {
        parts.push(format!("mp={mp}"));
    }
    parts.join(",")
}

/// The desired mount points keyed by the live `mpN` each one is: [`super::desired::desired()`]
/// numbers them in `MOUNT` order, but PVE's numbers stay with the volumes, so removing the first
/// `MOUNT` entry must not shift the others onto another volume. In order:
///
/// 1. a desired mount takes the live `mpN` mounted at the same path (`mp=`) — its bind source,
///    storage, size or kind may differ;
/// 2. else its own number, when no live mount point has it;
/// 3. else the lowest number that is neither live nor taken.
///
/// A mount whose path changed is so a new mount point, and the old one is removed (a volume
/// kept as an unused disk): a volume never shows up at another entry's path.
pub fn match_mounts(
    desired: &BTreeMap<String, DesiredMount>,
    cfg: &BTreeMap<String, String>,
) -> BTreeMap<String, DesiredMount> {
    let index = |k: &str| k[2..].parse::<u32>().unwrap_or(u32::MAX);
    let mut wanted: Vec<(&String, &DesiredMount)> = desired.iter().collect();
    wanted.sort_by_key(|(k, _)| index(k));
    let live: Vec<(&String, String)> = cfg
        .iter()
        .filter(|(k, _)| is_numbered(k, "mp"))
        .map(|(k, v)| (k, volume_of(v).1.get("mp").cloned().unwrap_or_default()))
        .collect();
    let mut out: BTreeMap<String, DesiredMount> = BTreeMap::new();
    let mut rest = Vec::new();
    for (k, m) in wanted {
        match live.iter().find(|(lk, path)| path == m.mp() && !out.contains_key(*lk)) {
            Some((lk, _)) => {
                out.insert((*lk).clone(), m.clone());
            }
            None => rest.push((k, m)),
        }
    }
    let mut later = Vec::new();
    for (k, m) in rest {
        if out.contains_key(k) || cfg.contains_key(k) {
            later.push(m);
        } else {
            out.insert(k.clone(), m.clone());
        }
    }
    for m in later {
        let n = (0u32..).find(|n| !cfg.contains_key(&format!("mp{n}")) && !out.contains_key(&format!("mp{n}")));
        out.insert(format!("mp{}", n.unwrap_or(0)), m.clone());
    }
    out
}

/// How the `MOUNT` entry of a `mpN` value reads (`local-lvm:4:/data`, `/srv/a:/a`), also for a
/// new volume's `STORAGE:SIZE,mp=…`.
fn mount_value_entry(value: &str) -> String {
    let (volume, props) = volume_of(value);
    match volume.split_once(':') {
        Some((storage, size)) if !props.contains_key("size") && size.parse::<f64>().is_ok() => {
            format!("{storage}:{size}:{}", props.get("mp").map(String::as_str).unwrap_or(""))
        }
        _ => live_mount_entry(value),
    }
}

/// How the `MOUNT` entry of a live `mpN` reads (`local-lvm:4:/data`, `/srv/a:/a`).
fn live_mount_entry(live: &str) -> String {
    let (volume, props) = volume_of(live);
    let mp = props.get("mp").cloned().unwrap_or_default();
    if volume.starts_with('/') {
        return format!("{volume}:{mp}");
    }
    let storage = volume.split(':').next().unwrap_or("");
    let size = props.get("size").and_then(|s| parse_size(s)).map(gib_text).unwrap_or_else(|| "?".into());
    format!("{storage}:{size}:{mp}")
}

fn describe_mount(m: &DesiredMount) -> String {
    match m {
        DesiredMount::Bind { host_path, mp } => format!("{host_path},mp={mp}"),
        DesiredMount::Volume { storage, size_gib, mp } => format!("{storage}:{size_gib},mp={mp}"),
    }
}

/// Plans `d` against `live` under `policy`; `is_root` says whether the API identity is a
/// `root@pam` ticket (see [`crate::pve::Auth::is_root`]). A container without our mark is
/// [`Action::Foreign`] (see [`plan_with`]).
pub fn plan(d: &Desired, live: &PveObserved, policy: RecreatePolicy, is_root: bool) -> PvePlanned {
    plan_with(d, live, policy, is_root, false)
}

/// [`plan`], with `adopt` (`--adopt`) saying whether a container at the vmid that lacks our
/// mark ([`marked_for`]: the description line naming this lib) may be taken over:
///
/// * not adopting → [`Action::Foreign`] whatever differs: it is never stopped, changed,
///   destroyed or recreated;
/// * adopting, everything in place → [`Action::Adopt`]: the mark (description, `tags`) and the
///   in-place changes;
/// * adopting, a recreate needed → [`Action::Refused`] whatever the policy: a container this tool
///   did not create is never destroyed (the reasons say to save its data and remove it by hand).
///
/// Lease lines in the description (`proxmox-gitops lease: …`) are ignored throughout.
pub fn plan_with(d: &Desired, live: &PveObserved, policy: RecreatePolicy, is_root: bool, adopt: bool) -> PvePlanned {
    let ct = match live {
        PveObserved::Absent => {
            return PvePlanned { action: Action::Create, start: true, warnings: vec![], reboot_for_pending: false };
        }
        PveObserved::Present(ct) => ct,
    };
    let cfg = &ct.config;
    let live_desc = without_lease(cfg.get("description").map(String::as_str).unwrap_or(""));
    let ours = marked_for(&live_desc, &d.name);
    if !ours && !adopt {
        let action = sections::foreign(d, cfg, &live_desc);
        return PvePlanned { action, start: false, warnings: vec![], reboot_for_pending: false };
    }
    let mut f = sections::Findings::default();
    sections::identity(d, cfg, &mut f);
    let recorded = sections::template_and_privilege(d, cfg, &live_desc, &mut f);
    sections::rootfs(d, cfg, &mut f);
    sections::mount_points(d, ct, is_root, &mut f);
    sections::devices(d, ct, is_root, &mut f);
    sections::settings(d, cfg, &live_desc, recorded.is_some() || !ours, &mut f);
    sections::network(d, cfg, &mut f);
    sections::features(d, ct, is_root, &mut f);
    sections::pending(d, ct, &mut f);
    let warnings = std::mem::take(&mut f.warnings);
    let action = sections::decide(d, f, ours, policy);
    let start = match &action {
        Action::Create | Action::Recreate { .. } => true,
        Action::Refused { .. } | Action::Foreign { .. } => false,
        Action::Nothing | Action::Update { .. } | Action::Adopt { .. } => !ct.running,
    };
    let in_place = matches!(action, Action::Update { .. } | Action::Adopt { .. });
    let reboot_for_pending = in_place && ct.running && policy.allows_restart();
    PvePlanned { action, start, warnings, reboot_for_pending }
}

/// `yes`/`no` for a PVE boolean (`1`, `true` …; unset is `no`).
fn yes_no(v: Option<&String>) -> String {
    if truthy(v) { "yes" } else { "no" }.to_string()
}

/// How `MOUNT` writes a bind or volume mount of the spec (`HOST:CT`, `STORAGE:SIZE:CT`).
fn mount_entry(m: &Mount) -> String {
    match m {
        Mount::Share { name } => name.clone(),
        Mount::Bind { host_path, container_path } => format!("{host_path}:{container_path}"),
        Mount::Volume { storage, size_gib, container_path } => format!("{storage}:{size_gib}:{container_path}"),
        Mount::Device { path } => path.clone(),
    }
}

/// The spec's volume mount that a resize of PVE's `mpN` to `to_gib` concerns: the only volume
/// entry of that size, else the entry numbered `N` (bind and volume mounts count from 0 in
/// `MOUNT` order, as [`super::desired::desired()`] numbers them; [`match_mounts`] may have
/// kept another number for a volume that exists).
fn spec_volume<'a>(spec: &'a ContainerSpec, key: &str, to_gib: u64) -> Option<&'a Mount> {
    let sized: Vec<&Mount> =
        spec.mounts.iter().filter(|m| matches!(m, Mount::Volume { size_gib, .. } if *size_gib == to_gib)).collect();
    if let [one] = sized.as_slice() {
        return Some(one);
    }
    let n: usize = key.strip_prefix("mp")?.parse().ok()?;
    spec.mounts.iter().filter(|m| matches!(m, Mount::Bind { .. } | Mount::Volume { .. })).nth(n)
}

/// The settings an in-place update changes, in the user's terms (see [`SettingChange`]):
/// `cores` → `CORES`, `memory` → `MEMORY` (MiB), `swap` → `SWAP` (MiB; PVE's default 512 when
/// unset), `onboot` → `BOOT` (`yes`/`no`), `net0`'s `ip`/`gw`/`bridge`/`name` → `IP`,
/// `PROXMOX_GATEWAY`, `PROXMOX_BRIDGE`, `PROXMOX_INTERFACE`, `features` `mount=cifs` →
/// `MOUNT +share`, other feature flags → `FEATURES`, a grown `rootfs` → `DISK STORAGE:OLD →
/// STORAGE:NEW (resize)`, a grown `mpN` → its `MOUNT` entry (resize), `description` →
/// `description` (the lib and ostemplate this tool records), a mount point or device added
/// → `MOUNT +ENTRY`, removed → `MOUNT -ENTRY`, changed → `MOUNT OLD → NEW` (entries as `MOUNT`
/// writes them). A change PVE keeps pending on a running container (feature flags, a mount
/// point or device removed or changed) is applied `reboot` when `policy` allows a restart
/// ([`RecreatePolicy::allows_restart`]), else `pending until restart`. Empty for other actions
/// (their reasons say what differs).
pub fn setting_changes(spec: &ContainerSpec, action: &Action, policy: RecreatePolicy) -> Vec<SettingChange> {
    let (Action::Update { changes, resizes, reboot_needed } | Action::Adopt { changes, resizes, reboot_needed }) =
        action
    else {
        return vec![];
    };
    let pending_how = if policy.allows_restart() { "reboot" } else { "pending until restart" };
    let how = |s: SettingChange| if *reboot_needed { s.how(pending_how) } else { s };
    let mut out = Vec::new();
    for c in changes {
        if is_numbered(&c.key, "mp") || is_numbered(&c.key, "dev") {
            let entry = |v: &String| if c.key.starts_with("mp") { mount_value_entry(v) } else { volume_of(v).0 };
            out.push(match (&c.from, &c.to) {
                (None, to) => SettingChange::new("MOUNT", None, to.as_ref().map(entry)),
                (Some(from), to) => how(SettingChange::new("MOUNT", Some(entry(from)), to.as_ref().map(entry))),
            });
            continue;
        }
        match c.key.as_str() {
            "cores" => out.push(SettingChange::new("CORES", c.from.clone(), c.to.clone())),
            "memory" => out.push(SettingChange::new(
                "MEMORY",
                Some(c.from.clone().unwrap_or_else(|| "512".into())),
                c.to.clone(),
            )),
            "swap" => {
                out.push(SettingChange::new("SWAP", Some(c.from.clone().unwrap_or_else(|| "512".into())), c.to.clone()))
            }
            "onboot" => {
                out.push(SettingChange::new("BOOT", Some(yes_no(c.from.as_ref())), Some(yes_no(c.to.as_ref()))))
            }
            "net0" => {
                let (_, from) = split_props(c.from.as_deref().unwrap_or(""));
                let (_, to) = split_props(c.to.as_deref().unwrap_or(""));
                for (prop, setting) in [
                    ("ip", "IP"),
                    ("gw", "PROXMOX_GATEWAY"),
                    ("bridge", "PROXMOX_BRIDGE"),
                    ("name", "PROXMOX_INTERFACE"),
                ] {
                    if from.get(prop) != to.get(prop) {
                        out.push(SettingChange::new(setting, from.get(prop).cloned(), to.get(prop).cloned()));
                    }
                }
            }
            "features" => {
                let mut from = parse_features(c.from.as_ref());
                let mut to = parse_features(c.to.as_ref());
                match (from.remove("mount").is_some(), to.remove("mount").is_some()) {
                    (false, true) => {
                        let share = spec.mounts.iter().find(|m| matches!(m, Mount::Share { .. }));
                        out.push(how(SettingChange::new(
                            "MOUNT",
                            None,
                            Some(share.map_or("share".into(), mount_entry)),
                        )))
                    }
                    (true, false) => out.push(how(SettingChange::new("MOUNT", Some("share".into()), None))),
                    _ => {}
                }
                if from != to {
                    let names = |f: &BTreeMap<String, String>| {
                        (!f.is_empty()).then(|| f.keys().cloned().collect::<Vec<_>>().join(","))
                    };
                    out.push(how(SettingChange::new("FEATURES", names(&from), names(&to))));
                }
            }
            "description" => out.push(SettingChange::new("description", None, None)),
            other => out.push(SettingChange::new(other, c.from.clone(), c.to.clone())),
        }
    }
    for r in resizes {
        let change = if r.disk == "rootfs" {
            let storage = &spec.rootfs.storage;
            SettingChange::new(
                "DISK",
                Some(format!("{storage}:{}", r.from_gib)),
                Some(format!("{storage}:{}", r.to_gib)),
            )
        } else {
            match spec_volume(spec, &r.disk, r.to_gib) {
                Some(Mount::Volume { storage, container_path, .. }) => SettingChange::new(
                    "MOUNT",
                    Some(format!("{storage}:{}:{container_path}", r.from_gib)),
                    Some(format!("{storage}:{}:{container_path}", r.to_gib)),
                ),
                _ => {
                    SettingChange::new(&r.disk, Some(format!("{} GiB", r.from_gib)), Some(format!("{} GiB", r.to_gib)))
                }
            }
        };
        out.push(change.how("resize"));
    }
    out
}

fn is_numbered(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests;
