//! The lxc backend's planner: a pure function from the desired and the live state to a
//! [`ContainerPlan`]; unit-tested in `tests.rs` without a host.
//!
//! Planning: [`plan_container`] is a pure function of the desired keys and the live config: absent →
//! create; equal → nothing; managed keys differ → update in place (cgroup limits are also set
//! live with `lxc-cgroup`; mount, device, network and AppArmor changes need a restart and are
//! reported as `reboot_needed`); a different vmid or base, or a container not made by this tool
//! → recreate when the [`RecreatePolicy`] allows it, else refused.
//!

use super::desired::live_applicable;
use super::{Desired, META_FILE, Meta};
use crate::backend::model::{Action, Change, ContainerPlan, RecreatePolicy};
use crate::inventory::ContainerSpec;
use crate::lxc::{LxcConfig, State};

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
