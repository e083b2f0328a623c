//! The provision planner: desired container vs. live config → [`Action`] (pure, no I/O).
//!
//! Live state is what `GET /nodes/{node}/lxc/{vmid}/config` answers (with pending values
//! applied, PVE's default), the keys `GET …/pending` marks as pending, and whether the container
//! runs. Rules (pve-container semantics):
//!
//! * a container without our mark for the lib ([`marked_for`]) → **foreign** (never touched),
//!   or with `--adopt` **adopt** (the mark and the in-place changes; see [`plan_with`]);
//! * lease lines of the description (`proxmox-gitops lease: …`) are ignored;
//! * absent → **create**;
//! * identical → **nothing**;
//! * only `cores`, `memory`, `swap`, `onboot`, `description`, `net0`, `tags` (the
//!   [`OWNER_TAG`](super::desired::OWNER_TAG) missing — added to the user's own tags, which are kept) or feature flags the
//!   caller may change differ → **update** in place (`PUT …/config` with the digest, only those keys);
//!   feature changes on a running container need a reboot (they go to `pending`);
//! * `rootfs`/`mpN` grow → **resize** (`PUT …/resize`; PVE keeps a volume id in `rootfs`, so a
//!   `STORAGE:SIZE` value is never PUT on an existing container);
//! * anything else — another ostemplate or arch, `unprivileged`, a volume on another storage, a
//!   shrink, mount points added/removed/changed, devices, the vmid holding another hostname, a
//!   template — needs a **recreate**, done only when the [`RecreatePolicy`] allows
//!   (`when-needed`, `always`); otherwise the action is **refused** and nothing changes.
//! * feature flags PVE reserves for `root@pam` (all but `nesting`; any on a privileged
//!   container) that would change under a token or non-root user are refused with the reason.

use std::collections::{BTreeMap, BTreeSet};

use super::desired::{
    Desired, DesiredMount, LIB_MARKER, OSTEMPLATE_MARKER, features_string, marked_for, props_string, recorded_lib,
    tags_with_owner, without_lease,
};
use crate::backend::model::{Action, Change, RecreatePolicy, Resize, SettingChange};
use crate::inventory::{ContainerSpec, Mount};

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
pub enum Live {
    /// `GET …/config` answered "does not exist".
    Absent,
    /// The container exists.
    Present(LiveCt),
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// What to do.
    pub action: Action,
    /// Whether to start the container afterwards.
    pub start: bool,
    /// Notes for the artifact (unknown ostemplate, pending changes, a lock …).
    pub warnings: Vec<String>,
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

/// The ostemplate recorded in a description by [`super::desired::desired()`], if any.
pub fn recorded_ostemplate(description: &str) -> Option<&str> {
    description.lines().find_map(|l| l.trim().strip_prefix(OSTEMPLATE_MARKER)).map(str::trim)
}

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

/// Compares one volume (`rootfs` or a volume `mpN`): storage, mount path, size.
fn compare_volume(
    key: &str,
    live: &str,
    storage: &str,
    size_gib: u64,
    mp: Option<&str>,
    recreate: &mut Vec<String>,
    resizes: &mut Vec<Resize>,
) {
    let (volume, props) = split_props(live);
    let volume = volume.or_else(|| props.get("volume").cloned()).unwrap_or_default();
    if volume.starts_with('/') {
        recreate.push(format!("{key} is a bind mount of {volume} on PVE, the spec wants a volume on {storage}"));
        return;
    }
    let live_storage = volume.split(':').next().unwrap_or("");
    if live_storage != storage {
        recreate.push(format!("{key} moves from storage `{live_storage}` to `{storage}`"));
        return;
    }
    if let Some(mp) = mp {
        let live_mp = props.get("mp").map(String::as_str).unwrap_or("");
        if live_mp != mp {
            recreate.push(format!("{key} is mounted at `{live_mp}` on PVE, the spec wants `{mp}`"));
            return;
        }
    }
    let want = size_gib * GIB;
    match props.get("size").and_then(|s| parse_size(s)) {
        Some(have) if have < want => {
            resizes.push(Resize { disk: key.to_string(), from_gib: have / GIB, to_gib: size_gib })
        }
        Some(have) if have > want => recreate.push(format!(
            "{key} would shrink from {} to {size_gib} GiB (PVE cannot shrink a volume)",
            props.get("size").map(String::as_str).unwrap_or("?")
        )),
        _ => {}
    }
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
pub fn plan(d: &Desired, live: &Live, policy: RecreatePolicy, is_root: bool) -> Planned {
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
pub fn plan_with(d: &Desired, live: &Live, policy: RecreatePolicy, is_root: bool, adopt: bool) -> Planned {
    let ct = match live {
        Live::Absent => return Planned { action: Action::Create, start: true, warnings: vec![] },
        Live::Present(ct) => ct,
    };
    let cfg = &ct.config;
    let mut recreate: Vec<String> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut changes: Vec<Change> = Vec::new();
    let mut resizes: Vec<Resize> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();

    // Identity: the vmid must hold this container.
    match cfg.get("hostname") {
        Some(h) if h == &d.hostname => {}
        other => recreate.push(format!(
            "vmid {} holds `{}`, not `{}` (vmid reused by another container?)",
            d.vmid,
            other.map(String::as_str).unwrap_or("(no hostname)"),
            d.hostname
        )),
    }
    if truthy(cfg.get("template")) {
        recreate.push(format!("vmid {} is a template", d.vmid));
    }
    if let Some(lock) = cfg.get("lock") {
        warnings.push(format!("CT {} is locked ({lock}); changes wait for the lock to clear", d.vmid));
    }
    let live_arch = cfg.get("arch").map(String::as_str).unwrap_or("amd64");
    if live_arch != d.arch {
        recreate.push(format!("arch changes from {live_arch} to {}", d.arch));
    }
    let live_desc = without_lease(cfg.get("description").map(String::as_str).unwrap_or(""));
    let live_desc = live_desc.as_str();
    let ours = marked_for(live_desc, &d.name);
    if !ours && !adopt {
        let what = match recorded_lib(live_desc) {
            Some(lib) => format!("it was made by proxmox-gitops for lib `{lib}`"),
            None => format!("its description lacks the line `{LIB_MARKER}{}`", d.name),
        };
        let reason = format!(
            "CT {} (hostname `{}`) was not created by proxmox-gitops for lib `{}`: {what}. \
             It is never stopped, changed, destroyed or recreated; to take it over in place, re-run with --adopt, \
             or give the lib another ID",
            d.vmid,
            cfg.get("hostname").map(String::as_str).unwrap_or("(none)"),
            d.name
        );
        return Planned { action: Action::Foreign { reason }, start: false, warnings: vec![] };
    }
    let recorded = recorded_ostemplate(live_desc);
    match recorded {
        Some(t) if t != d.ostemplate => recreate.push(format!("ostemplate changes from {t} to {}", d.ostemplate)),
        Some(_) => {}
        None => warnings.push(format!(
            "CT {} was not created by proxmox-gitops (no `{}` line in its description): template changes cannot be detected",
            d.vmid,
            OSTEMPLATE_MARKER.trim()
        )),
    }
    if truthy(cfg.get("unprivileged")) != d.unprivileged {
        recreate.push(format!(
            "unprivileged changes from {} to {}",
            u8::from(truthy(cfg.get("unprivileged"))),
            u8::from(d.unprivileged)
        ));
    }

    // Volumes.
    match cfg.get("rootfs") {
        Some(v) => compare_volume("rootfs", v, &d.rootfs_storage, d.rootfs_gib, None, &mut recreate, &mut resizes),
        None => recreate.push("rootfs is missing on PVE".into()),
    }
    let live_mps: BTreeSet<&String> = cfg.keys().filter(|k| is_numbered(k, "mp")).collect();
    let mut mp_keys: BTreeSet<String> = live_mps.iter().map(|k| k.to_string()).collect();
    mp_keys.extend(d.mounts.keys().cloned());
    for key in &mp_keys {
        match (cfg.get(key), d.mounts.get(key)) {
            (Some(l), None) => recreate.push(format!("{key} ({l}) is not in the spec")),
            (None, Some(m)) => recreate.push(format!("{key} ({}) is new", describe_mount(m))),
            (Some(l), Some(DesiredMount::Volume { storage, size_gib, mp })) => {
                compare_volume(key, l, storage, *size_gib, Some(mp), &mut recreate, &mut resizes)
            }
            (Some(l), Some(DesiredMount::Bind { host_path, mp })) => {
                let (first, props) = split_props(l);
                let live_vol = first.or_else(|| props.get("volume").cloned()).unwrap_or_default();
                if &live_vol != host_path || props.get("mp") != Some(mp) {
                    recreate.push(format!("{key} is `{l}` on PVE, the spec wants `{host_path},mp={mp}`"));
                }
            }
            (None, None) => {}
        }
    }
    let mut dev_keys: BTreeSet<String> = cfg.keys().filter(|k| is_numbered(k, "dev")).cloned().collect();
    dev_keys.extend(d.devices.keys().cloned());
    for key in &dev_keys {
        let live_path = cfg.get(key).map(|v| {
            let (first, props) = split_props(v);
            first.or_else(|| props.get("path").cloned()).unwrap_or_default()
        });
        if live_path.as_ref() != d.devices.get(key) {
            recreate.push(format!(
                "{key} is `{}` on PVE, the spec wants `{}`",
                live_path.as_deref().unwrap_or("(none)"),
                d.devices.get(key).map(String::as_str).unwrap_or("(none)")
            ));
        }
    }

    // In-place settings.
    let mut set = |key: &str, from: Option<&String>, to: String| {
        changes.push(Change { key: key.into(), from: from.cloned(), to: Some(to) });
    };
    if num(cfg.get("cores")) != Some(u64::from(d.cores)) {
        set("cores", cfg.get("cores"), d.cores.to_string());
    }
    if num(cfg.get("memory")).unwrap_or(512) != d.memory_mib {
        set("memory", cfg.get("memory"), d.memory_mib.to_string());
    }
    if num(cfg.get("swap")).unwrap_or(512) != d.swap_mib {
        set("swap", cfg.get("swap"), d.swap_mib.to_string());
    }
    if truthy(cfg.get("onboot")) != d.onboot {
        set("onboot", cfg.get("onboot"), if d.onboot { "1" } else { "0" }.into());
    }
    if (recorded.is_some() || !ours) && live_desc.trim() != d.description.trim() {
        set("description", cfg.get("description"), d.description.clone());
    }
    if let Some(tags) = tags_with_owner(cfg.get("tags").map(String::as_str)) {
        set("tags", cfg.get("tags"), tags);
    }
    // net0: compare the properties we manage; keep the MAC address and anything else PVE added.
    let (_, mut net) = split_props(cfg.get("net0").map(String::as_str).unwrap_or(""));
    let want: BTreeMap<&str, &str> = d.net0.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let net_differs =
        ["name", "bridge", "ip", "gw"].iter().any(|k| net.get(*k).map(String::as_str) != want.get(k).copied());
    if net_differs {
        for k in ["name", "bridge", "ip", "gw"] {
            match want.get(k) {
                Some(v) => {
                    net.insert(k.to_string(), v.to_string());
                }
                None => {
                    net.remove(k);
                }
            }
        }
        let mut ordered: Vec<(String, String)> = d.net0.clone();
        ordered.extend(net.into_iter().filter(|(k, _)| !want.contains_key(k.as_str())));
        set("net0", cfg.get("net0"), props_string(&ordered));
    }
    let live_features = parse_features(cfg.get("features"));
    let mut reboot_needed = false;
    if live_features != d.features {
        let changed: BTreeSet<&String> = live_features
            .keys()
            .chain(d.features.keys())
            .filter(|k| live_features.get(*k) != d.features.get(*k))
            .collect();
        let others: Vec<&str> = changed.iter().map(|s| s.as_str()).filter(|k| *k != "nesting").collect();
        if !is_root && (!truthy(cfg.get("unprivileged")) || !others.is_empty()) {
            refused.push(format!(
                "features change from `{}` to `{}`: PVE lets only root@pam (a ticket, not an API token) change {}; \
                 set PROXMOX_PASSWORD for root@pam or change the features in the PVE UI",
                features_string(&live_features),
                features_string(&d.features),
                if others.is_empty() {
                    "feature flags of a privileged container".to_string()
                } else {
                    others.join(",")
                }
            ));
        } else {
            let from = cfg.get("features").cloned();
            changes.push(Change {
                key: "features".into(),
                from,
                to: (!d.features.is_empty()).then(|| features_string(&d.features)),
            });
            reboot_needed |= ct.running;
        }
    }
    if !ct.pending.is_empty() {
        warnings.push(format!(
            "pending changes ({}) apply at the next reboot of CT {}",
            ct.pending.iter().cloned().collect::<Vec<_>>().join(", "),
            d.vmid
        ));
        reboot_needed |= ct.running;
    }

    let action = if !ours {
        // Adopting: in place only, never a destroy.
        if !recreate.is_empty() || policy == RecreatePolicy::Always {
            let mut reasons = recreate;
            if reasons.is_empty() {
                reasons.push("recreate policy `always`".into());
            }
            reasons.push(format!(
                "CT {} was not created by proxmox-gitops, and adopting never destroys a container: save its data \
                 and remove it yourself (`pct destroy {}` on its node), then provision creates it",
                d.vmid, d.vmid
            ));
            Action::Refused { reasons }
        } else if !refused.is_empty() {
            Action::Refused { reasons: refused }
        } else {
            Action::Adopt { changes, resizes, reboot_needed }
        }
    } else if policy == RecreatePolicy::Always {
        let mut reasons = recreate;
        reasons.push("recreate policy `always`".into());
        Action::Recreate { reasons }
    } else if !recreate.is_empty() {
        match policy {
            RecreatePolicy::WhenNeeded => Action::Recreate { reasons: recreate },
            _ => Action::Refused { reasons: recreate },
        }
    } else if !refused.is_empty() {
        Action::Refused { reasons: refused }
    } else if !changes.is_empty() || !resizes.is_empty() {
        Action::Update { changes, resizes, reboot_needed }
    } else {
        Action::Nothing
    };
    let start = match &action {
        Action::Create | Action::Recreate { .. } => true,
        Action::Refused { .. } | Action::Foreign { .. } => false,
        Action::Nothing | Action::Update { .. } | Action::Adopt { .. } => !ct.running,
    };
    Planned { action, start, warnings }
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

/// The spec's mount that becomes PVE's `mpN` (bind and volume mounts count from 0 in `MOUNT`
/// order, as [`super::desired::desired()`] numbers them).
fn spec_mount<'a>(spec: &'a ContainerSpec, key: &str) -> Option<&'a Mount> {
    let n: usize = key.strip_prefix("mp")?.parse().ok()?;
    spec.mounts.iter().filter(|m| matches!(m, Mount::Bind { .. } | Mount::Volume { .. })).nth(n)
}

/// The settings an in-place update changes, in the user's terms (see [`SettingChange`]):
/// `cores` → `CORES`, `memory` → `MEMORY` (MiB), `swap` → `SWAP` (MiB; PVE's default 512 when
/// unset), `onboot` → `BOOT` (`yes`/`no`), `net0`'s `ip`/`gw`/`bridge`/`name` → `IP`,
/// `PROXMOX_GATEWAY`, `PROXMOX_BRIDGE`, `PROXMOX_INTERFACE`, `features` `mount=cifs` →
/// `MOUNT +share`, other feature flags → `FEATURES`, a grown `rootfs` → `DISK STORAGE:OLD →
/// STORAGE:NEW (resize)`, a grown `mpN` → its `MOUNT` entry (resize), `description` →
/// `description` (the lib and ostemplate this tool records). Empty for other actions (their
/// reasons say what differs).
pub fn setting_changes(spec: &ContainerSpec, action: &Action) -> Vec<SettingChange> {
    let (Action::Update { changes, resizes, reboot_needed } | Action::Adopt { changes, resizes, reboot_needed }) =
        action
    else {
        return vec![];
    };
    let mut out = Vec::new();
    for c in changes {
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
                let how = |s: SettingChange| if *reboot_needed { s.how("reboot") } else { s };
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
            match spec_mount(spec, &r.disk) {
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
