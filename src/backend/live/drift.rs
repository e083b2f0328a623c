//! Drift: how a deployed container differs from what its spec wants, key by key in the user's
//! terms, and which containers carry our mark but have no lib any more — from the backend
//! alone (a scheduled run has no artifacts).
//!
//! # PVE
//!
//! `GET /cluster/resources?type=vm` lists every container with its node, status, hostname
//! (`name`) and `tags`. For a spec: its vmid missing → `container present → absent`; held by
//! another hostname → `HOSTNAME` (not ours: nothing more is compared); on another node than
//! the spec's `NODE` (else `PROXMOX_NODE`) → `NODE`; then `GET /nodes/{node}/lxc/{vmid}/config`
//! against the desired container ([`crate::backend::pve::desired::drift::config_drift`], the
//! planner's own mapping) and `STATE running → stopped`.
//!
//! A container is **ours** when it carries the [`OWNER_TAG`] or its description records a lib
//! (`managed by proxmox-gitops: lib `NAME``; containers made before the tag existed). It is an
//! **orphan** of the stage when its hostname is the stage's hostname of that lib
//! ([`crate::inventory::spec::hostname`]) and no spec of the stage has its vmid: containers of
//! other stages are never reported.
//!
//! # LXC
//!
//! The container named after the spec's hostname ([`super::Containers::status`] for the
//! ownership check), its config file against the backend's desired keys
//! ([`crate::backend::lxc::config_changes`]) mapped back to `MEMORY`, `SWAP`, `CORES`, `BOOT`,
//! `IP`, `MOUNT`; orphans are containers whose `proxmox-gitops.json` names a lib whose stage
//! hostname is the container's name and that no spec of the stage has.

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Live;
use crate::backend::lxc::{HostFacts, Meta, config_changes};
use crate::backend::pve::desired::drift::config_drift;
use crate::backend::pve::desired::{
    OWNER_TAG, PveDefaults, arch_of_machine, desired as pve_desired, has_owner_tag, recorded_lib,
};
use crate::inventory::ContainerSpec;
use crate::inventory::spec::hostname;
use crate::live::CtState;
use crate::lxc::META_FILE;
pub use crate::model::KeyDrift;

/// A container carrying our mark whose lib the stage no longer has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orphan {
    /// vmid (PVE), or the vmid its metadata records (LXC).
    pub vmid: u32,
    /// Its hostname (the LXC container's name).
    pub hostname: String,
    /// The lib its description (PVE) or `proxmox-gitops.json` (LXC) names.
    pub lib: String,
    /// The PVE node it is on (`None` for LXC).
    pub node: Option<String>,
    /// `running`, `stopped` ….
    pub state: String,
}

impl Live {
    /// The differences of `spec`'s container from what the spec wants (empty: none). For PVE
    /// `defaults` gives the template, network and storage settings the desired container is
    /// derived with (required).
    ///
    /// # Errors
    /// The backend cannot answer (API error, unreadable LXC config); the spec's own problems;
    /// PVE without `defaults`.
    pub async fn drift(&self, spec: &ContainerSpec, defaults: Option<&PveDefaults>) -> anyhow::Result<Vec<KeyDrift>> {
        match self {
            Live::Pve(p) => {
                let defaults = defaults.with_context(|| {
                    format!(
                        "the container template is not set ({}): the desired container is unknown",
                        crate::settings::setting_names("PROXMOX_TEMPLATE")
                    )
                })?;
                pve_drift(p, p.listed().await?, spec, defaults).await
            }
            Live::Lxc(l) => lxc_drift(l, spec).await,
        }
    }

    /// The containers carrying our mark whose lib the stage `stage` no longer has: ours, named
    /// as the stage names its lib, and with a vmid (PVE) or name (LXC) no spec of `specs` (the
    /// whole stage) has.
    ///
    /// # Errors
    /// The backend cannot answer.
    pub async fn orphans(&self, stage: &str, specs: &[ContainerSpec]) -> anyhow::Result<Vec<Orphan>> {
        match self {
            Live::Pve(p) => {
                let mut out = Vec::new();
                for r in p.listed().await?.cts.iter().filter(|r| !r.template) {
                    if specs.iter().any(|s| s.vmid == r.vmid) {
                        continue;
                    }
                    let tagged = has_owner_tag(r.tags.as_deref());
                    // The description names the lib: one config read per candidate.
                    let config = p
                        .client()
                        .ct(&r.node, r.vmid)
                        .config()
                        .await
                        .with_context(|| format!("cannot read the config of CT {} on node {}", r.vmid, r.node))?;
                    let Some(config) = config else { continue };
                    let lib = recorded_lib(config.description()).map(str::to_string);
                    let Some(lib) = lib else {
                        if tagged {
                            tracing::info!(
                                "CT {} `{}` carries the tag {OWNER_TAG} but records no lib in its description: not ours to judge",
                                r.vmid,
                                r.name
                            );
                        }
                        continue;
                    };
                    if hostname(&lib, stage) != r.name {
                        continue;
                    }
                    out.push(Orphan {
                        vmid: r.vmid,
                        hostname: r.name.clone(),
                        lib,
                        node: Some(r.node.clone()),
                        state: r.status.clone(),
                    });
                }
                Ok(out)
            }
            Live::Lxc(l) => {
                let client = l.backend().client();
                let mut out = Vec::new();
                for name in client.list().await? {
                    if specs.iter().any(|s| s.hostname == name) {
                        continue;
                    }
                    let path = client.container_dir(&name).join(META_FILE);
                    let Ok(bytes) = std::fs::read(&path) else { continue };
                    let Ok(meta) = serde_json::from_slice::<Meta>(&bytes) else {
                        tracing::warn!("{}: not a valid {META_FILE}; skipped", path.display());
                        continue;
                    };
                    if hostname(&meta.name, stage) != name {
                        continue;
                    }
                    let state = client.state(&name).await?.as_str().to_string();
                    out.push(Orphan { vmid: meta.vmid, hostname: name, lib: meta.name, node: None, state });
                }
                Ok(out)
            }
        }
    }
}

async fn pve_drift(
    p: &crate::backend::pve::live::PveLive,
    resources: &crate::pve::ClusterResources,
    spec: &ContainerSpec,
    defaults: &PveDefaults,
) -> anyhow::Result<Vec<KeyDrift>> {
    let vmid = spec.vmid;
    let Some(r) = resources.ct(vmid).filter(|r| !r.template) else {
        return Ok(vec![KeyDrift::new("container", format!("CT {vmid}"), "absent")]);
    };
    if r.name != spec.hostname {
        return Ok(vec![KeyDrift::new(
            "HOSTNAME",
            spec.hostname.clone(),
            format!("{} (vmid {vmid} holds another container)", r.name),
        )]);
    }
    let mut out = Vec::new();
    // NODE=auto: wherever the container was placed is where it should be.
    if let Some(want) = spec.node.as_deref().or(p.configured_node())
        && !want.eq_ignore_ascii_case(crate::backend::pve::placement::AUTO)
        && want != r.node
    {
        out.push(KeyDrift::new("NODE", want, r.node.clone()));
    }
    let client = p.client();
    let node = &r.node;
    let (ct, pve_node) = (client.ct(node, vmid), client.node(node));
    let (config, machine) = tokio::try_join!(ct.config(), pve_node.machine())
        .with_context(|| format!("cannot read CT {vmid} on node {node}"))?;
    let Some(config) = config else {
        return Ok(vec![KeyDrift::new("container", format!("CT {vmid}"), "absent")]);
    };
    let d = pve_desired(spec, defaults, arch_of_machine(&machine))?;
    out.extend(config_drift(&d, &config.values));
    if r.status != "running" {
        out.push(KeyDrift::new("STATE", "running", r.status.clone()));
    }
    Ok(out)
}

const MIB: u64 = 1024 * 1024;

/// A managed LXC key's values (joined with `; `) in the user's terms: `(key, value)`.
fn lxc_terms(key: &str, value: Option<&str>) -> (String, String) {
    let mib = |v: &str| v.trim().parse::<u64>().map(|b| (b / MIB).to_string()).unwrap_or_else(|_| v.to_string());
    let Some(v) = value else {
        let k = match key {
            "lxc.cgroup2.memory.max" | "lxc.cgroup.memory.limit_in_bytes" => "MEMORY",
            "lxc.cgroup2.memory.swap.max" => "SWAP",
            "lxc.cgroup.memory.memsw.limit_in_bytes" => "MEMORY+SWAP",
            "lxc.cgroup2.cpu.max" | "lxc.cgroup.cpu.cfs_quota_us" => "CORES",
            "lxc.start.auto" => "BOOT",
            "lxc.net.0.ipv4.address" => "IP",
            "lxc.mount.entry" | "lxc.cgroup2.devices.allow" | "lxc.cgroup.devices.allow" => "MOUNT",
            other => other,
        };
        return (k.to_string(), "(unset)".into());
    };
    match key {
        "lxc.cgroup2.memory.max" | "lxc.cgroup.memory.limit_in_bytes" => ("MEMORY".into(), mib(v)),
        "lxc.cgroup2.memory.swap.max" => ("SWAP".into(), mib(v)),
        "lxc.cgroup.memory.memsw.limit_in_bytes" => ("MEMORY+SWAP".into(), mib(v)),
        "lxc.cgroup2.cpu.max" => {
            let mut it = v.split_whitespace().map(|n| n.parse::<f64>().ok());
            let cores = match (it.next().flatten(), it.next().flatten()) {
                (Some(q), Some(p)) if p > 0.0 => format!("{}", q / p),
                _ => v.to_string(),
            };
            ("CORES".into(), cores)
        }
        "lxc.cgroup.cpu.cfs_quota_us" => {
            ("CORES".into(), v.trim().parse::<f64>().map(|q| format!("{}", q / 100_000.0)).unwrap_or(v.into()))
        }
        "lxc.start.auto" => ("BOOT".into(), if v.trim() == "1" { "yes" } else { "no" }.into()),
        "lxc.net.0.ipv4.address" => ("IP".into(), v.to_string()),
        "lxc.mount.entry" | "lxc.cgroup2.devices.allow" | "lxc.cgroup.devices.allow" => ("MOUNT".into(), v.to_string()),
        other => (other.to_string(), v.to_string()),
    }
}

async fn lxc_drift(l: &crate::backend::lxc::live::LxcLive, spec: &ContainerSpec) -> anyhow::Result<Vec<KeyDrift>> {
    let name = spec.hostname.as_str();
    let state = l.status(spec).await?;
    match &state {
        CtState::Absent => return Ok(vec![KeyDrift::new("container", name, "absent")]),
        CtState::Foreign { detail } => return Ok(vec![KeyDrift::new("container", format!("{name} (ours)"), detail)]),
        CtState::Running | CtState::NotRunning { .. } => {}
    }
    let backend = l.backend();
    let client = backend.client();
    let host = HostFacts::gather(spec, backend.options(), client, false).await?;
    let desired = crate::backend::lxc::desired(spec, &host, backend.options())?;
    let config = client.read_config(name)?.with_context(|| format!("LXC container `{name}` has no config file"))?;
    let mut out: Vec<KeyDrift> = config_changes(&desired, &config)
        .into_iter()
        .map(|c| {
            let (key, want) = lxc_terms(&c.key, c.to.as_deref());
            let (_, have) = lxc_terms(&c.key, c.from.as_deref());
            KeyDrift::new(key, want, have)
        })
        .collect();
    if let CtState::NotRunning { state } = state {
        out.push(KeyDrift::new("STATE", "running", state));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::lxc_terms;

    #[test]
    fn lxc_keys_in_the_users_terms() {
        assert_eq!(lxc_terms("lxc.cgroup2.memory.max", Some("536870912")), ("MEMORY".into(), "512".into()));
        assert_eq!(lxc_terms("lxc.cgroup2.cpu.max", Some("200000 100000")), ("CORES".into(), "2".into()));
        assert_eq!(lxc_terms("lxc.cgroup.cpu.cfs_quota_us", Some("50000")), ("CORES".into(), "0.5".into()));
        assert_eq!(lxc_terms("lxc.start.auto", Some("0")), ("BOOT".into(), "no".into()));
        assert_eq!(lxc_terms("lxc.start.auto", None), ("BOOT".into(), "(unset)".into()));
        assert_eq!(lxc_terms("lxc.net.0.link", Some("br1")), ("lxc.net.0.link".into(), "br1".into()));
    }
}
