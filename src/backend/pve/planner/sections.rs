//! The sections of [`super::plan_with`]: each compares one part of the desired container with
//! the live one and adds what it finds to one [`Findings`] value — what needs a recreate, what
//! blocks the plan, the in-place changes and resizes, warnings, and whether a reboot applies
//! them; [`decide`] turns the findings into the action under the recreate policy. The sections
//! only read; their order is the order of the reasons and changes in the plan.

use std::collections::{BTreeMap, BTreeSet};

use super::super::desired::{
    Desired, DesiredMount, LIB_MARKER, OSTEMPLATE_MARKER, features_string, own_lines, props_string, recorded_lib,
    recorded_ostemplate, tags_with_owner, with_user_notes,
};
use super::{
    LiveCt, compare_size, describe_mount, is_numbered, live_mount_entry, match_mounts, num, parse_features,
    split_props, truthy, volume_of, with_mp,
};
use crate::model::{Action, Change, RecreatePolicy, Resize};

/// What the sections found.
#[derive(Debug, Default)]
pub(super) struct Findings {
    /// Why the container must be recreated (nothing else applies it).
    pub recreate: Vec<String>,
    /// Why the plan cannot apply (a shrink, a key only root may change …).
    pub blocked: Vec<String>,
    /// In-place config changes, in plan order.
    pub changes: Vec<Change>,
    /// Volumes to grow.
    pub resizes: Vec<Resize>,
    /// Notes for the artifact.
    pub warnings: Vec<String>,
    /// A change of an existing mount point or device of a running container: PVE keeps it
    /// pending until the next start.
    pub pending_change: bool,
    /// Whether a reboot is needed to apply what changes.
    pub reboot_needed: bool,
}

impl Findings {
    /// An in-place change of `key` from `from` to `to`.
    fn set(&mut self, key: &str, from: Option<&String>, to: String) {
        self.changes.push(Change { key: key.into(), from: from.cloned(), to: Some(to) });
    }
}

/// The action for a container at the vmid that lacks our mark for lib `d.name`, when it is not
/// adopted: [`Action::Foreign`], saying whose it is and how to take it over.
pub(super) fn foreign(d: &Desired, cfg: &BTreeMap<String, String>, live_desc: &str) -> Action {
    let what = match recorded_lib(live_desc) {
        Some(lib) => format!("it was made by proxmox-gitops for lib `{lib}`"),
        None => format!("its description lacks the line \"{LIB_MARKER}{}`\"", d.name),
    };
    // Plan data, compared between a saved plan and a fresh one: the hint is spelled for the
    // binary whatever the entry point, so that a plan reads the same wherever it was made.
    let reason = format!(
        "CT {} (hostname `{}`) was not created by proxmox-gitops for lib `{}`: {what}. \
         It is never stopped, changed, destroyed or recreated; to take it over in place, {}, \
         or give the lib another ID",
        d.vmid,
        cfg.get("hostname").map(String::as_str).unwrap_or("(none)"),
        d.name,
        crate::error::Hint::Adopt.render(crate::error::EntryPoint::Binary)
    );
    Action::Foreign { reason }
}

/// The vmid must hold this container (hostname, not a template) of the same architecture; a
/// lock is a warning.
pub(super) fn identity(d: &Desired, cfg: &BTreeMap<String, String>, f: &mut Findings) {
    match cfg.get("hostname") {
        Some(h) if h == &d.hostname => {}
        other => f.recreate.push(format!(
            "vmid {} holds `{}`, not `{}` (vmid reused by another container?)",
            d.vmid,
            other.map(String::as_str).unwrap_or("(no hostname)"),
            d.hostname
        )),
    }
    if truthy(cfg.get("template")) {
        f.recreate.push(format!("vmid {} is a template", d.vmid));
    }
    if let Some(lock) = cfg.get("lock") {
        f.warnings.push(format!("CT {} is locked ({lock}); changes wait for the lock to clear", d.vmid));
    }
    let live_arch = cfg.get("arch").map(String::as_str).unwrap_or("amd64");
    if live_arch != d.arch {
        f.recreate.push(format!("arch changes from {live_arch} to {}", d.arch));
    }
}

/// The ostemplate our description line records (a change needs a recreate; none recorded is a
/// warning) and `unprivileged`. Returns the recorded ostemplate.
pub(super) fn template_and_privilege<'a>(
    d: &Desired,
    cfg: &BTreeMap<String, String>,
    live_desc: &'a str,
    f: &mut Findings,
) -> Option<&'a str> {
    let recorded = recorded_ostemplate(live_desc);
    match recorded {
        Some(t) if t != d.ostemplate => f.recreate.push(format!("ostemplate changes from {t} to {}", d.ostemplate)),
        Some(_) => {}
        None => f.warnings.push(format!(
            "CT {} was not created by proxmox-gitops (no `{}` line in its description): template changes cannot be detected",
            d.vmid,
            OSTEMPLATE_MARKER.trim()
        )),
    }
    if truthy(cfg.get("unprivileged")) != d.unprivileged {
        f.recreate.push(format!(
            "unprivileged changes from {} to {}",
            u8::from(truthy(cfg.get("unprivileged"))),
            u8::from(d.unprivileged)
        ));
    }
    recorded
}

/// The rootfs: another storage needs a recreate, a larger size a resize, a smaller one blocks.
pub(super) fn rootfs(d: &Desired, cfg: &BTreeMap<String, String>, f: &mut Findings) {
    let file = d.env_file.display();
    match cfg.get("rootfs") {
        Some(v) => {
            let (volume, props) = volume_of(v);
            let live_storage = volume.split(':').next().unwrap_or("");
            if volume.starts_with('/') || live_storage != d.rootfs_storage {
                f.recreate.push(format!("rootfs moves from storage `{live_storage}` to `{}`", d.rootfs_storage));
            } else {
                let refusal = |have: String| {
                    format!(
                        "DISK in {file}: rootfs of CT {} is {have} GiB on PVE, the spec asks for {} GiB, and PVE \
                         cannot shrink a volume; set DISK={}:{have} (or more)",
                        d.vmid, d.rootfs_gib, d.rootfs_storage
                    )
                };
                compare_size("rootfs", &props, d.rootfs_gib, refusal, &mut f.blocked, &mut f.resizes);
            }
        }
        None => f.recreate.push("rootfs is missing on PVE".into()),
    }
}

/// Mount points change in place: a new one is added (PVE hotplugs it into a running container),
/// a removed one deleted (its volume becomes an `unusedN` disk, never destroyed), a changed one
/// rewritten; removals and changes of a running container stay pending in PVE until its next
/// restart.
pub(super) fn mount_points(d: &Desired, ct: &LiveCt, is_root: bool, f: &mut Findings) {
    let cfg = &ct.config;
    let file = d.env_file.display();
    let mounts = match_mounts(&d.mounts, cfg);
    let mut mp_keys: Vec<String> = cfg.keys().filter(|k| is_numbered(k, "mp")).cloned().collect();
    mp_keys.extend(mounts.keys().filter(|k| !cfg.contains_key(*k)).cloned());
    mp_keys.sort_by_key(|k| k[2..].parse::<u32>().unwrap_or(u32::MAX));
    let unused_note = |key: &str, volume: &str| {
        format!(
            "{key} ({volume}) leaves CT {vmid}: PVE keeps the volume as an unused disk (`unusedN` in `pct config {vmid}`) \
             and does not destroy its data; remove it with `pct set {vmid} --delete unusedN` when no longer needed",
            vmid = d.vmid
        )
    };
    for key in &mp_keys {
        let live = cfg.get(key);
        let (live_volume, live_props) = live.map(|l| volume_of(l)).unwrap_or_default();
        let live_is_volume = live.is_some() && !live_volume.starts_with('/');
        // Some(to): write `to` (None: delete the key).
        let rewrite: Option<Option<String>> = match (live, mounts.get(key)) {
            (None, None) => None,
            (Some(_), None) => Some(None),
            (None, Some(m)) => Some(Some(describe_mount(m))),
            (Some(l), Some(m @ DesiredMount::Volume { storage, size_gib, mp })) => {
                let live_storage = live_volume.split(':').next().unwrap_or("");
                if !live_is_volume {
                    Some(Some(describe_mount(m)))
                } else if live_storage != storage {
                    f.blocked.push(format!(
                        "MOUNT in {file}: {key} ({}) is on storage `{live_storage}` on PVE, the spec wants `{storage}`; \
                         move it keeping its data: stop CT {vmid} and {} on its node",
                        live_mount_entry(l),
                        crate::error::Hint::command(["pct", "move-volume", &d.vmid.to_string(), key, storage]),
                        vmid = d.vmid
                    ));
                    None
                } else {
                    let refusal = |have: String| {
                        format!(
                            "MOUNT in {file}: {key} ({storage}:{size_gib}:{mp}) is {have} GiB on PVE, the spec asks for \
                             {size_gib} GiB, and PVE cannot shrink a volume; write {storage}:{have}:{mp} (or more)"
                        )
                    };
                    compare_size(key, &live_props, *size_gib, refusal, &mut f.blocked, &mut f.resizes);
                    // Matched by path (`match_mounts`): the same mount point.
                    None
                }
            }
            (Some(l), Some(DesiredMount::Bind { host_path, mp })) => {
                (&live_volume != host_path || live_props.get("mp") != Some(mp)).then(|| {
                    Some(if live_is_volume {
                        format!("{host_path},mp={mp}")
                    } else {
                        // Keep the options set on PVE (`ro`, `backup` …) of the bind mount.
                        let rest = l.split(',').skip(1).collect::<Vec<_>>().join(",");
                        with_mp(&if rest.is_empty() { host_path.clone() } else { format!("{host_path},{rest}") }, mp)
                    })
                })
            }
        };
        let Some(to) = rewrite else { continue };
        if let Some(l) = live {
            // PVE applies a delete or a change of an existing mount point at the next start.
            f.pending_change |= ct.running;
            if !is_root && !live_is_volume {
                f.blocked.push(format!(
                    "{key} is the bind mount `{l}` on PVE: only root@pam (a ticket, not an API token) may change \
                     or remove it; set PROXMOX_PASSWORD for root@pam"
                ));
            }
            if live_is_volume && to.as_deref().is_none_or(|t| !t.starts_with(&format!("{live_volume},"))) {
                f.warnings.push(unused_note(key, &live_volume));
            }
        }
        f.changes.push(Change { key: key.clone(), from: live.cloned(), to });
    }
}

/// Devices passed through (`devN`), compared by path; changing an existing one needs root@pam.
pub(super) fn devices(d: &Desired, ct: &LiveCt, is_root: bool, f: &mut Findings) {
    let cfg = &ct.config;
    let mut dev_keys: Vec<String> = cfg.keys().filter(|k| is_numbered(k, "dev")).cloned().collect();
    dev_keys.extend(d.devices.keys().filter(|k| !cfg.contains_key(*k)).cloned());
    dev_keys.sort_by_key(|k| k[3..].parse::<u32>().unwrap_or(u32::MAX));
    for key in &dev_keys {
        let live_path = cfg.get(key).map(|v| {
            let (first, props) = split_props(v);
            first.or_else(|| props.get("path").cloned()).unwrap_or_default()
        });
        if live_path.as_ref() == d.devices.get(key) {
            continue;
        }
        if cfg.contains_key(key) {
            f.pending_change |= ct.running;
            if !is_root {
                f.blocked.push(format!(
                    "{key} passes the device `{}` through on PVE: only root@pam (a ticket, not an API token) may \
                     change or remove it; set PROXMOX_PASSWORD for root@pam",
                    live_path.as_deref().unwrap_or("")
                ));
            }
        }
        f.changes.push(Change { key: key.clone(), from: cfg.get(key).cloned(), to: d.devices.get(key).cloned() });
    }
}

/// Cores, memory, swap, onboot, our description lines (when `ours_described`: we recorded
/// them, or the container is being adopted) and the tags.
pub(super) fn settings(
    d: &Desired,
    cfg: &BTreeMap<String, String>,
    live_desc: &str,
    ours_described: bool,
    f: &mut Findings,
) {
    if num(cfg.get("cores")) != Some(u64::from(d.cores)) {
        f.set("cores", cfg.get("cores"), d.cores.to_string());
    }
    if num(cfg.get("memory")).unwrap_or(512) != d.memory_mib {
        f.set("memory", cfg.get("memory"), d.memory_mib.to_string());
    }
    if num(cfg.get("swap")).unwrap_or(512) != d.swap_mib {
        f.set("swap", cfg.get("swap"), d.swap_mib.to_string());
    }
    if truthy(cfg.get("onboot")) != d.onboot {
        f.set("onboot", cfg.get("onboot"), if d.onboot { "1" } else { "0" }.into());
    }
    // Only our lines are compared and rewritten; the user's own text (notes typed in PVE's UI,
    // an adopted container's description) is kept after them.
    if ours_described && own_lines(live_desc).trim() != d.description.trim() {
        f.set("description", cfg.get("description"), with_user_notes(&d.description, live_desc));
    }
    if let Some(tags) = tags_with_owner(cfg.get("tags").map(String::as_str)) {
        f.set("tags", cfg.get("tags"), tags);
    }
}

/// net0: the properties we manage are compared; the MAC address and anything else PVE added are
/// kept.
pub(super) fn network(d: &Desired, cfg: &BTreeMap<String, String>, f: &mut Findings) {
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
        f.set("net0", cfg.get("net0"), props_string(&ordered));
    }
}

/// Feature flags: most need root@pam; a change to a running container needs a reboot.
pub(super) fn features(d: &Desired, ct: &LiveCt, is_root: bool, f: &mut Findings) {
    let cfg = &ct.config;
    let live_features = parse_features(cfg.get("features"));
    if live_features != d.features {
        let changed: BTreeSet<&String> = live_features
            .keys()
            .chain(d.features.keys())
            .filter(|k| live_features.get(*k) != d.features.get(*k))
            .collect();
        let others: Vec<&str> = changed.iter().map(|s| s.as_str()).filter(|k| *k != "nesting").collect();
        if !is_root && (!truthy(cfg.get("unprivileged")) || !others.is_empty()) {
            f.blocked.push(format!(
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
            f.changes.push(Change {
                key: "features".into(),
                from,
                to: (!d.features.is_empty()).then(|| features_string(&d.features)),
            });
            f.reboot_needed |= ct.running;
        }
    }
}

/// What PVE keeps pending (from this plan's mount and device changes, or an earlier run) needs
/// a reboot of a running container.
pub(super) fn pending(d: &Desired, ct: &LiveCt, f: &mut Findings) {
    f.reboot_needed |= f.pending_change;
    if !ct.pending.is_empty() {
        f.warnings.push(format!(
            "pending changes ({}) apply at the next reboot of CT {}",
            ct.pending.iter().cloned().collect::<Vec<_>>().join(", "),
            d.vmid
        ));
        f.reboot_needed |= ct.running;
    }
}

/// The action, from the findings, whether the container is `ours` (else it is being adopted)
/// and the recreate policy.
pub(super) fn decide(d: &Desired, f: Findings, ours: bool, policy: RecreatePolicy) -> Action {
    let Findings { recreate, blocked, changes, resizes, reboot_needed, .. } = f;
    if !ours {
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
            Action::refused_blocked(reasons)
        } else if !blocked.is_empty() {
            Action::refused_blocked(blocked)
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
            _ => Action::refused_recreate(recreate),
        }
    } else if !blocked.is_empty() {
        Action::refused_blocked(blocked)
    } else if !changes.is_empty() || !resizes.is_empty() {
        Action::Update { changes, resizes, reboot_needed }
    } else if reboot_needed && policy.allows_restart() {
        // Only what PVE keeps pending from an earlier run: the restart applies it.
        Action::Update { changes, resizes, reboot_needed }
    } else {
        Action::Nothing
    }
}
