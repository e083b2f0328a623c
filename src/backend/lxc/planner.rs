//! The lxc backend's planner: a pure function from the desired and the live state to a
//! [`ContainerPlan`]; unit-tested in `tests.rs` without a host.
//!
//! Planning: [`plan_container`] is a pure function of the desired keys and the live config: absent →
//! create; equal → nothing; managed keys differ → update in place (cgroup limits are also set
//! live with `lxc-cgroup`; mount, device, network and AppArmor changes need a restart and are
//! reported as `reboot_needed`); a different vmid or base, or a container not made by this tool
//! → recreate when the [`RecreatePolicy`] allows it, else refused.
//!

use std::collections::BTreeSet;

use super::desired::live_applicable;
use super::{Desired, META_FILE, Meta};
use crate::inventory::ContainerSpec;
use crate::lxc::{LxcConfig, State};
use crate::model::{Action, Change, ContainerPlan, RecreatePolicy, SettingChange};

/// The live container as [`plan_container`] sees it.
#[derive(Debug, Clone)]
pub struct LxcObserved {
    /// Its config file.
    pub config: LxcConfig,
    /// Its `proxmox-gitops.json`, `None` when missing (not made by this tool).
    pub meta: Option<Meta>,
    /// Running or not.
    pub state: State,
    /// Without metadata: the vmid of the create marker beside it, when an interrupted create
    /// of ours left it (see [`super::interrupted`]).
    pub interrupted: Option<u32>,
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
    live: Option<&LxcObserved>,
    policy: RecreatePolicy,
) -> ContainerPlan {
    // No reboot for pending keys: LXC applies what it cannot change live at the next start,
    // and the plan says `reboot_needed` for those.
    let plan = |action: Action, start: bool| ContainerPlan {
        policy,
        ..ContainerPlan::new(&spec.name, spec.vmid, &spec.hostname, action, start)
    };
    let Some(live) = live else {
        return plan(Action::Create, true);
    };
    if live.meta.is_none() && live.interrupted == Some(spec.vmid) {
        // Half made by a killed run of ours, never started: the create removes it and starts over.
        return plan(Action::Create, true);
    }
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
            RecreatePolicy::Never => plan(Action::refused_recreate(reasons), false),
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

const MIB: u64 = 1024 * 1024;

/// MiB of a byte count written by [`super::desired()`] (`max` and unparsable values as is).
fn mib(v: Option<&str>) -> Option<String> {
    v.map(|v| v.trim().parse::<u64>().map_or_else(|_| v.trim().to_string(), |b| (b / MIB).to_string()))
}

/// CPUs of a CPU quota: `lxc.cgroup2.cpu.max` `QUOTA PERIOD` or a v1 `cfs_quota_us` (period
/// 100000); `max`/`-1` is unlimited.
fn cores(v: Option<&str>) -> Option<String> {
    let v = v?.trim();
    let mut parts = v.split_whitespace();
    let quota = parts.next()?;
    let period: f64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(100_000.0);
    match quota.parse::<f64>() {
        Ok(q) if q > 0.0 => {
            let n = q / period;
            Some(if n.fract() == 0.0 { format!("{n:.0}") } else { format!("{n:.2}") })
        }
        _ => Some("unlimited".into()),
    }
}

/// The container paths of `lxc.mount.entry` values (`SRC DST none OPTS 0 0`, joined with `; `).
fn mount_targets(v: Option<&str>) -> BTreeSet<String> {
    v.unwrap_or("")
        .split("; ")
        .filter_map(|e| e.split_whitespace().nth(1))
        .map(|d| format!("/{}", d.trim_start_matches('/').replace("\\040", " ")))
        .collect()
}

/// The settings an update changes, in the user's terms (see [`SettingChange`]): memory limits →
/// `MEMORY` (MiB), swap limits → `SWAP` (MiB; cgroup v1's memory+swap limit minus the memory
/// limit), CPU quotas → `CORES`, `lxc.start.auto` → `BOOT`, `lxc.mount.entry` → `MOUNT` (one
/// change per mount point added or removed, by its path in the container, e.g. `MOUNT +/share`),
/// `lxc.net.0.ipv4.address` → `IP`, `lxc.net.0.link` → the bridge; other keys as they are.
/// Changes needing a restart of a running container are marked `reboot`.
pub fn setting_changes(spec: &ContainerSpec, plan: &ContainerPlan) -> Vec<SettingChange> {
    let Action::Update { changes, reboot_needed, .. } = &plan.action else { return vec![] };
    let get = |key: &str| changes.iter().find(|c| c.key == key);
    let how = |c: &Change, s: SettingChange| {
        if *reboot_needed && !live_applicable(&c.key) { s.how("reboot") } else { s }
    };
    let mut out = Vec::new();
    for c in changes {
        let (from, to) = (c.from.as_deref(), c.to.as_deref());
        match c.key.as_str() {
            "lxc.cgroup2.memory.max" | "lxc.cgroup.memory.limit_in_bytes" => {
                out.push(how(c, SettingChange::new("MEMORY", mib(from), mib(to))))
            }
            "lxc.cgroup2.memory.swap.max" => out.push(how(c, SettingChange::new("SWAP", mib(from), mib(to)))),
            "lxc.cgroup.memory.memsw.limit_in_bytes" => {
                let mem = get("lxc.cgroup.memory.limit_in_bytes");
                let bytes = |v: Option<&str>| v.and_then(|v| v.trim().parse::<u64>().ok());
                let swap = |total: Option<&str>, mem: Option<u64>| match (bytes(total), mem) {
                    (Some(t), Some(m)) => Some((t.saturating_sub(m) / MIB).to_string()),
                    _ => total.map(str::to_string),
                };
                let want_mem = spec.memory_mib * MIB;
                let live_mem = mem.map_or(Some(want_mem), |m| bytes(m.from.as_deref()));
                let (was, will) = (swap(from, live_mem), swap(to, Some(want_mem)));
                // The memory+swap limit moves with MEMORY alone: only a different swap is a SWAP change.
                if was != will {
                    out.push(how(c, SettingChange::new("SWAP", was, will)));
                }
            }
            "lxc.cgroup2.cpu.max" | "lxc.cgroup.cpu.cfs_quota_us" => {
                out.push(how(c, SettingChange::new("CORES", cores(from), cores(to))))
            }
            "lxc.start.auto" => {
                let yn = |v: Option<&str>| Some(if v == Some("1") { "yes" } else { "no" }.to_string());
                out.push(SettingChange::new("BOOT", yn(from), yn(to)))
            }
            "lxc.mount.entry" => {
                let (have, want) = (mount_targets(from), mount_targets(to));
                for gone in have.difference(&want) {
                    out.push(how(c, SettingChange::new("MOUNT", Some(gone.clone()), None)));
                }
                for new in want.difference(&have) {
                    out.push(how(c, SettingChange::new("MOUNT", None, Some(new.clone()))));
                }
                if have == want {
                    // Same mount points, other sources or options.
                    out.push(how(c, SettingChange::new("MOUNT", from.map(str::to_string), to.map(str::to_string))));
                }
            }
            "lxc.net.0.ipv4.address" => out.push(how(c, SettingChange::new("IP", c.from.clone(), c.to.clone()))),
            "lxc.net.0.link" => out.push(how(c, SettingChange::new("bridge", c.from.clone(), c.to.clone()))),
            _ => out.push(how(c, SettingChange::new(&c.key, c.from.clone(), c.to.clone()))),
        }
    }
    out
}

#[cfg(test)]
mod terms_tests {
    use super::*;
    use crate::inventory::IpConfig;

    fn change(key: &str, from: &str, to: &str) -> Change {
        Change { key: key.into(), from: Some(from.into()), to: Some(to.into()) }
    }

    #[test]
    fn settings_in_the_users_terms() {
        let spec = ContainerSpec { memory_mib: 1024, ..ContainerSpec::new("broker", 101, IpConfig::Dhcp) };
        let plan = ContainerPlan {
            name: "broker".into(),
            vmid: 101,
            hostname: "broker".into(),
            action: Action::Update {
                changes: vec![
                    change("lxc.cgroup2.memory.max", "2147483648", "1073741824"),
                    change("lxc.cgroup2.cpu.max", "100000 100000", "200000 100000"),
                    change("lxc.start.auto", "0", "1"),
                    change(
                        "lxc.mount.entry",
                        "/srv/a srv/a none bind,create=dir 0 0",
                        "/srv/a srv/a none bind,create=dir 0 0; /share/share share none bind,create=dir 0 0",
                    ),
                ],
                resizes: vec![],
                reboot_needed: true,
            },
            start: false,
            node: None,
            placement: None,
            migrate: None,
            policy: crate::model::RecreatePolicy::Never,
            reboot_for_pending: false,
        };
        let got: Vec<String> = setting_changes(&spec, &plan)
            .iter()
            .map(|c| format!("{} {:?} {:?} {:?}", c.setting, c.from, c.to, c.how))
            .collect();
        assert_eq!(
            got,
            vec![
                r#"MEMORY Some("2048") Some("1024") None"#,
                r#"CORES Some("1") Some("2") None"#,
                r#"BOOT Some("no") Some("yes") None"#,
                r#"MOUNT None Some("/share") Some("reboot")"#,
            ]
        );
    }

    #[test]
    fn v1_swap_is_memsw_minus_memory() {
        let spec = ContainerSpec { memory_mib: 512, swap_mib: 256, ..ContainerSpec::new("b", 1, IpConfig::Dhcp) };
        let mib = |n: u64| (n * MIB).to_string();
        let plan = ContainerPlan {
            name: "b".into(),
            vmid: 1,
            hostname: "b".into(),
            action: Action::Update {
                changes: vec![change("lxc.cgroup.memory.memsw.limit_in_bytes", &mib(1024), &mib(768))],
                resizes: vec![],
                reboot_needed: false,
            },
            start: false,
            node: None,
            placement: None,
            migrate: None,
            policy: crate::model::RecreatePolicy::Never,
            reboot_for_pending: false,
        };
        let got = setting_changes(&spec, &plan);
        assert_eq!(got, vec![SettingChange::new("SWAP", Some("512".into()), Some("256".into()))]);

        // MEMORY 2048 → 1024 with the swap kept (512): the memory+swap limit moves too, but the
        // only change in the user's terms is MEMORY (was shown as `SWAP 512 → 512`).
        let mut spec = spec.clone();
        spec.memory_mib = 1024;
        let plan = ContainerPlan {
            action: Action::Update {
                changes: vec![
                    change("lxc.cgroup.memory.limit_in_bytes", &mib(2048), &mib(1024)),
                    change("lxc.cgroup.memory.memsw.limit_in_bytes", &mib(2560), &mib(1536)),
                ],
                resizes: vec![],
                reboot_needed: false,
            },
            ..plan
        };
        let got = setting_changes(&spec, &plan);
        assert_eq!(got, vec![SettingChange::new("MEMORY", Some("2048".into()), Some("1024".into()))]);
    }
}
