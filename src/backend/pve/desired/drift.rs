//! Drift of a PVE container: the desired container vs. its live config, key by key in the
//! user's terms (pure; `proxmox-gitops drift`).
//!
//! Each difference names the `container.env` key (or setting) it comes from, with both values as
//! the user writes them: `MEMORY 512 → 1024` (MiB), `DISK local-lvm:8 → local-lvm:16` (GiB),
//! `MOUNT (mp0)`, `IP`, `BOOT`, `CORES`, `SWAP`, `FEATURES`, `PROXMOX_BRIDGE`,
//! `PROXMOX_GATEWAY`, `PROXMOX_INTERFACE`, `PROXMOX_TEMPLATE` (from the `ostemplate:` line of
//! the description), `HOSTNAME`, `MOUNT (share)` (a share needs a privileged container) and
//! `tags` (the [`super::OWNER_TAG`] missing). Live values are read the way the planner reads
//! them ([`crate::backend::pve::planner`]: PVE's defaults for unset `memory`/`swap`, sizes with
//! units, property strings).

use std::collections::BTreeMap;

use super::{Desired, DesiredMount, OWNER_TAG, features_string, has_owner_tag};
use crate::backend::pve::planner::{match_mounts, parse_size, recorded_ostemplate, split_props};
use crate::model::KeyDrift;

const GIB: u64 = 1024 * 1024 * 1024;
/// What a key PVE does not have shows as.
const UNSET: &str = "(unset)";

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("1") | Some("true") | Some("yes") | Some("on"))
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// A volume value (`rootfs`, volume `mpN`) as `STORAGE:GIB` (and `:MP` for mount points).
fn volume_terms(live: &str, with_mp: bool) -> String {
    let (first, props) = split_props(live);
    let volume = first.or_else(|| props.get("volume").cloned()).unwrap_or_default();
    let mp = props.get("mp").cloned().unwrap_or_default();
    if volume.starts_with('/') {
        return if with_mp { format!("{volume}:{mp}") } else { volume };
    }
    let storage = volume.split(':').next().unwrap_or("").to_string();
    let size = props
        .get("size")
        .and_then(|s| parse_size(s))
        .map(|b| if b % GIB == 0 { (b / GIB).to_string() } else { format!("{:.1}", b as f64 / GIB as f64) });
    let size = size.unwrap_or_else(|| "?".into());
    if with_mp { format!("{storage}:{size}:{mp}") } else { format!("{storage}:{size}") }
}

fn desired_mount(m: &DesiredMount) -> String {
    match m {
        DesiredMount::Bind { host_path, mp } => format!("{host_path}:{mp}"),
        DesiredMount::Volume { storage, size_gib, mp } => format!("{storage}:{size_gib}:{mp}"),
    }
}

fn is_numbered(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every difference between `d` and the live `config` (`GET /nodes/{node}/lxc/{vmid}/config`
/// as strings, `digest` left out), in the order of the `container.env` keys; empty when the
/// container is as desired. Keys the tool does not manage (`ostype`, `hwaddr`, `lock`, the
/// user's own tags next to ours …) are not drift.
pub fn config_drift(d: &Desired, config: &BTreeMap<String, String>) -> Vec<KeyDrift> {
    let mut out = Vec::new();
    let mut push = |key: &str, desired: String, live: String| {
        if desired != live {
            out.push(KeyDrift::new(key, desired, live));
        }
    };
    let get = |k: &str| config.get(k).cloned().unwrap_or_else(|| UNSET.to_string());
    push("HOSTNAME", d.hostname.clone(), get("hostname"));
    let num = |k: &str, default: Option<u64>| match config.get(k).and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(n) => n.to_string(),
        None => default.map(|n| n.to_string()).unwrap_or_else(|| get(k)),
    };
    push("CORES", d.cores.to_string(), num("cores", None));
    push("MEMORY", d.memory_mib.to_string(), num("memory", Some(512)));
    push("SWAP", d.swap_mib.to_string(), num("swap", Some(512)));
    push(
        "DISK",
        format!("{}:{}", d.rootfs_storage, d.rootfs_gib),
        config.get("rootfs").map(|v| volume_terms(v, false)).unwrap_or_else(|| UNSET.into()),
    );
    // Mount points compare by the live `mpN` each desired one is (see `match_mounts`).
    let mounts = match_mounts(&d.mounts, config);
    let mut mp_keys: Vec<String> = config.keys().filter(|k| is_numbered(k, "mp")).cloned().collect();
    mp_keys.extend(mounts.keys().filter(|k| !config.contains_key(*k)).cloned());
    mp_keys.sort_by_key(|k| k[2..].parse::<u32>().unwrap_or(u32::MAX));
    for k in mp_keys {
        push(
            &format!("MOUNT ({k})"),
            mounts.get(&k).map(desired_mount).unwrap_or_else(|| UNSET.into()),
            config.get(&k).map(|v| volume_terms(v, true)).unwrap_or_else(|| UNSET.into()),
        );
    }
    let mut dev_keys: Vec<String> = config.keys().filter(|k| is_numbered(k, "dev")).cloned().collect();
    dev_keys.extend(d.devices.keys().filter(|k| !config.contains_key(*k)).cloned());
    dev_keys.sort_by_key(|k| k[3..].parse::<u32>().unwrap_or(u32::MAX));
    for k in dev_keys {
        let live = config.get(&k).map(|v| {
            let (first, props) = split_props(v);
            first.or_else(|| props.get("path").cloned()).unwrap_or_default()
        });
        push(
            &format!("MOUNT ({k})"),
            d.devices.get(&k).cloned().unwrap_or_else(|| UNSET.into()),
            live.unwrap_or_else(|| UNSET.into()),
        );
    }
    let unprivileged = truthy(config.get("unprivileged"));
    if unprivileged != d.unprivileged {
        let word = |u: bool| if u { "unprivileged" } else { "privileged" }.to_string();
        push("MOUNT (share)", word(d.unprivileged), word(unprivileged));
    }
    let (_, net) = split_props(config.get("net0").map(String::as_str).unwrap_or(""));
    let want: BTreeMap<&str, &str> = d.net0.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for (prop, key) in
        [("ip", "IP"), ("name", "PROXMOX_INTERFACE"), ("bridge", "PROXMOX_BRIDGE"), ("gw", "PROXMOX_GATEWAY")]
    {
        push(
            key,
            want.get(prop).map(|v| v.to_string()).unwrap_or_else(|| UNSET.into()),
            net.get(prop).cloned().unwrap_or_else(|| UNSET.into()),
        );
    }
    push("BOOT", yes_no(d.onboot), yes_no(truthy(config.get("onboot"))));
    let live_features: BTreeMap<String, String> = config
        .get("features")
        .map(|f| split_props(f).1)
        .unwrap_or_default()
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
        .collect();
    let shown = |f: &BTreeMap<String, String>| {
        let s = features_string(f);
        if s.is_empty() { "(none)".to_string() } else { s }
    };
    push("FEATURES", shown(&d.features), shown(&live_features));
    if let Some(t) = config.get("description").and_then(|desc| recorded_ostemplate(desc)) {
        push("PROXMOX_TEMPLATE", d.ostemplate.clone(), t.to_string());
    }
    if !has_owner_tag(config.get("tags").map(String::as_str)) {
        push("tags", format!("includes {OWNER_TAG}"), get("tags"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::pve::desired::desired;
    use crate::backend::pve::desired::tests::{defaults, spec};

    fn live_of(d: &Desired) -> BTreeMap<String, String> {
        let mut c = BTreeMap::new();
        for (k, v) in [
            ("hostname", d.hostname.clone()),
            ("cores", d.cores.to_string()),
            ("memory", d.memory_mib.to_string()),
            ("swap", d.swap_mib.to_string()),
            ("onboot", "1".into()),
            ("unprivileged", "1".into()),
            ("description", d.description.clone()),
            ("tags", "prod;proxmox-gitops".into()),
            ("rootfs", format!("{}:vm-{}-disk-0,size={}G", d.rootfs_storage, d.vmid, d.rootfs_gib)),
            ("net0", "name=eth0,bridge=vmbr0,gw=127.0.0.254,hwaddr=BC:24:11:00:00:01,ip=127.0.0.1/8,type=veth".into()),
        ] {
            c.insert(k.to_string(), v);
        }
        c
    }

    #[test]
    fn as_desired_is_no_drift() {
        let d = desired(&spec(), &defaults(), "amd64").unwrap();
        assert!(d.onboot);
        assert_eq!(config_drift(&d, &live_of(&d)), vec![]);
    }

    #[test]
    fn hand_changes_are_named_in_the_users_terms() {
        let d = desired(&spec(), &defaults(), "amd64").unwrap();
        let mut c = live_of(&d);
        c.insert("memory".into(), "2048".into());
        c.insert("rootfs".into(), "local-lvm:vm-101-disk-0,size=16G".into());
        c.insert("onboot".into(), "0".into());
        c.insert("mp0".into(), "local-lvm:vm-101-disk-1,mp=/data,size=4G".into());
        c.insert("net0".into(), "name=eth0,bridge=vmbr1,gw=127.0.0.254,ip=127.0.0.9/8".into());
        c.insert("features".into(), "nesting=1".into());
        c.insert("tags".into(), "prod".into());
        let got: Vec<String> =
            config_drift(&d, &c).iter().map(|k| format!("{} {} → {}", k.key, k.desired, k.live)).collect();
        assert_eq!(
            got,
            vec![
                "MEMORY 1024 → 2048",
                "DISK local-lvm:8 → local-lvm:16",
                "MOUNT (mp0) (unset) → local-lvm:4:/data",
                "IP 127.0.0.1/8 → 127.0.0.9/8",
                "PROXMOX_BRIDGE vmbr0 → vmbr1",
                "BOOT yes → no",
                "FEATURES (none) → nesting=1",
                "tags includes proxmox-gitops → prod",
            ]
        );
    }

    #[test]
    fn unset_memory_is_pves_default() {
        let d = desired(&spec(), &defaults(), "amd64").unwrap();
        let mut c = live_of(&d);
        c.remove("memory");
        assert_eq!(config_drift(&d, &c), vec![KeyDrift::new("MEMORY", "1024", "512")]);
    }
}
