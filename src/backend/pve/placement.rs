//! Where a container is and where it goes (pure, no I/O): the node plan.
//!
//! Input: the node the spec wishes for ([`Wish`]: its `NODE`, else `PROXMOX_NODE`; the value
//! `auto` asks for a placement), and the cluster's view from `GET /cluster/resources`
//! ([`ClusterResources`]). Rules:
//!
//! * a container is found **anywhere in the cluster** by its vmid (moved by HA or by hand, it is
//!   read where it is);
//! * found on another node than a named `NODE` → **migrate** it there ([`Migration`]; restart
//!   mode when it runs, offline when stopped). A node change is never a reason to recreate;
//! * found, and `NODE` is `auto` or unset → it stays where it is;
//! * not found, `NODE` named → that node;
//! * not found, `NODE=auto`, or unset on a cluster with several online nodes → **placed** on the
//!   online node with the most free memory (`maxmem - mem`, less the memory of containers this
//!   run already placed there) among those where the rootfs storage is `available`; ties go
//!   to the first node by name. The choice and its reason are recorded in the plan;
//! * not found, unset, one online node → that node (today's behaviour); no node listed (the API
//!   identity lacks `Sys.Audit`) → [`NodeDecision::Discover`] (`GET /nodes`, as before).

use std::collections::BTreeMap;

use crate::model::Migration;
use crate::pve::ClusterResources;

/// The `NODE` value asking for a placement.
pub const AUTO: &str = "auto";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: u64 = 1024 * 1024;

/// The node a spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wish {
    /// A named node (`NODE=pve2`, or `PROXMOX_NODE`).
    Named(String),
    /// `NODE=auto` (or `PROXMOX_NODE=auto`).
    Auto,
    /// Neither `NODE` nor `PROXMOX_NODE`.
    Unset,
}

impl Wish {
    /// The spec's `NODE` wins over the configured `PROXMOX_NODE`; `auto` (any case) is [`Wish::Auto`].
    pub fn of(spec_node: Option<&str>, configured: Option<&str>) -> Wish {
        match spec_node.or(configured).map(str::trim).filter(|n| !n.is_empty()) {
            Some(n) if n.eq_ignore_ascii_case(AUTO) => Wish::Auto,
            Some(n) => Wish::Named(n.to_string()),
            None => Wish::Unset,
        }
    }
}

/// Where the container is after the plan, and how it gets there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// The node the plan applies on (the live state is read on [`NodePlan::live_node`]).
    pub node: String,
    /// The node the container is found on, when it exists.
    pub live_node: Option<String>,
    /// Why [`NodePlan::node`] was chosen for a new container (placement), if it was.
    pub placement: Option<String>,
    /// The move to [`NodePlan::node`], when the container is on another node.
    pub migrate: Option<Migration>,
}

/// The answer of [`plan_node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// The node is known.
    Ready(NodePlan),
    /// `NODE` unset, container not listed, and the answer lists no node: find the only online
    /// node with `GET /nodes` (as without a cluster view).
    Discover,
}

/// Plans the node of container `vmid` (see the module docs). `storage` is its rootfs storage,
/// `memory_mib` its `MEMORY`, `reserved` the bytes of memory already promised per node to
/// containers placed earlier in the run.
///
/// # Errors
/// A message (without the container's name) when the container is on a node that is offline,
/// or no online node can take a new container.
pub fn plan_node(
    wish: &Wish,
    vmid: u32,
    res: &ClusterResources,
    storage: &str,
    memory_mib: u64,
    reserved: &BTreeMap<String, u64>,
) -> Result<NodeDecision, String> {
    let found = res.ct(vmid);
    if let Some(f) = found {
        let offline = f.status == "unknown" || res.nodes.iter().any(|n| n.node == f.node && !n.online);
        match wish {
            Wish::Named(n) if *n != f.node => {
                if offline {
                    return Err(format!(
                        "CT {vmid} is on node {}, which is offline: it can be neither read nor migrated to {n}; \
                         bring {} back online (or let HA recover the CT), then run again",
                        f.node, f.node
                    ));
                }
                return Ok(NodeDecision::Ready(NodePlan {
                    node: n.clone(),
                    live_node: Some(f.node.clone()),
                    placement: None,
                    migrate: Some(Migration { from: f.node.clone(), to: n.clone(), restart: f.status == "running" }),
                }));
            }
            _ => {
                return Ok(NodeDecision::Ready(NodePlan {
                    node: f.node.clone(),
                    live_node: Some(f.node.clone()),
                    placement: None,
                    migrate: None,
                }));
            }
        }
    }
    match wish {
        Wish::Named(n) => {
            Ok(NodeDecision::Ready(NodePlan { node: n.clone(), live_node: None, placement: None, migrate: None }))
        }
        Wish::Unset => match res.online_nodes().as_slice() {
            [] if res.nodes.is_empty() => Ok(NodeDecision::Discover),
            [] => Err("the cluster lists no online node (GET /cluster/resources); set PROXMOX_NODE".into()),
            [one] => Ok(NodeDecision::Ready(NodePlan {
                node: one.to_string(),
                live_node: None,
                placement: None,
                migrate: None,
            })),
            _ => place(res, storage, memory_mib, reserved).map(NodeDecision::Ready),
        },
        Wish::Auto => place(res, storage, memory_mib, reserved).map(NodeDecision::Ready),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

/// Chooses the node for a new container: the online node with the most free memory (less
/// `reserved`) where `storage` is available; ties go to the first by name.
fn place(
    res: &ClusterResources,
    storage: &str,
    memory_mib: u64,
    reserved: &BTreeMap<String, u64>,
) -> Result<NodePlan, String> {
    if res.nodes.is_empty() {
        return Err(format!(
            "NODE={AUTO} needs the cluster's nodes, and GET /cluster/resources lists none (the API identity needs \
             Sys.Audit on /nodes); name the node with NODE in container.env or PROXMOX_NODE"
        ));
    }
    let mut candidates: Vec<(&str, u64)> = res
        .nodes
        .iter()
        .filter(|n| n.online)
        .filter(|n| res.storages.iter().any(|s| s.node == n.node && s.storage == storage && s.available))
        .map(|n| (n.node.as_str(), n.free_mem().saturating_sub(reserved.get(&n.node).copied().unwrap_or(0))))
        .collect();
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let Some(&(best, free)) = candidates.first() else {
        let online = res.online_nodes();
        let with: Vec<&str> = res.storages.iter().filter(|s| s.storage == storage).map(|s| s.node.as_str()).collect();
        return Err(format!(
            "no online node can take the container: storage `{storage}` (DISK) is available on {} and the online nodes are {}; \
             add the storage to an online node (Datacenter → Storage) or set DISK to a storage they have",
            if with.is_empty() { "no node".to_string() } else { with.join(", ") },
            if online.is_empty() { "none".to_string() } else { online.join(", ") },
        ));
    };
    if free < memory_mib * MIB {
        tracing::warn!("placement: the best node {best} has {} free, less than MEMORY={memory_mib}", gib(free));
    }
    let mut by_name = candidates.clone();
    by_name.sort_by(|a, b| a.0.cmp(b.0));
    let listed = by_name.iter().map(|(n, f)| format!("{n} {}", gib(*f))).collect::<Vec<_>>().join(", ");
    Ok(NodePlan {
        node: best.to_string(),
        live_node: None,
        placement: Some(format!(
            "NODE={AUTO}: most free memory ({}) of the online nodes with storage {storage}: {listed}",
            gib(free)
        )),
        migrate: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::{CtResource, NodeResource, StorageResource};

    const G: u64 = 1024 * 1024 * 1024;

    fn node(name: &str, online: bool, mem: u64, maxmem: u64) -> NodeResource {
        NodeResource { node: name.into(), online, mem, maxmem }
    }

    fn store(node: &str, storage: &str) -> StorageResource {
        StorageResource { node: node.into(), storage: storage.into(), available: true, shared: false }
    }

    fn ct(vmid: u32, node: &str, status: &str) -> CtResource {
        CtResource {
            vmid,
            node: node.into(),
            name: "web".into(),
            status: status.into(),
            lock: None,
            template: false,
            tags: None,
        }
    }

    fn cluster() -> ClusterResources {
        ClusterResources {
            cts: vec![],
            vms: vec![],
            nodes: vec![node("pve1", true, 6 * G, 8 * G), node("pve2", true, 2 * G, 8 * G), node("pve3", false, 0, 0)],
            storages: vec![store("pve1", "local-lvm"), store("pve2", "local-lvm"), store("pve3", "local-lvm")],
        }
    }

    fn ready(d: Result<NodeDecision, String>) -> NodePlan {
        match d {
            Ok(NodeDecision::Ready(p)) => p,
            other => panic!("not ready: {other:?}"),
        }
    }

    fn none() -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    #[test]
    fn wishes() {
        assert_eq!(Wish::of(Some("pve2"), Some("pve1")), Wish::Named("pve2".into()));
        assert_eq!(Wish::of(None, Some("pve1")), Wish::Named("pve1".into()));
        assert_eq!(Wish::of(Some("AUTO"), Some("pve1")), Wish::Auto);
        assert_eq!(Wish::of(None, Some("auto")), Wish::Auto);
        assert_eq!(Wish::of(None, None), Wish::Unset);
    }

    #[test]
    fn auto_places_on_the_most_free_memory_with_the_storage() {
        let p = ready(plan_node(&Wish::Auto, 101, &cluster(), "local-lvm", 512, &none()));
        assert_eq!(p.node, "pve2");
        assert_eq!(p.migrate, None);
        assert_eq!(p.live_node, None);
        assert_eq!(
            p.placement.as_deref(),
            Some(
                "NODE=auto: most free memory (6.0 GiB) of the online nodes with storage local-lvm: pve1 2.0 GiB, pve2 6.0 GiB"
            )
        );
    }

    #[test]
    fn a_node_without_the_storage_is_never_chosen() {
        let mut c = cluster();
        c.storages.retain(|s| s.node != "pve2");
        c.storages.push(StorageResource { available: false, ..store("pve2", "local-lvm") });
        assert_eq!(ready(plan_node(&Wish::Auto, 101, &c, "local-lvm", 512, &none())).node, "pve1");
        let e = plan_node(&Wish::Auto, 101, &c, "ceph", 512, &none()).unwrap_err();
        assert!(e.contains("storage `ceph` (DISK) is available on no node"), "{e}");
        assert!(e.contains("online nodes are pve1, pve2"), "{e}");
    }

    #[test]
    fn memory_promised_earlier_in_the_run_counts_and_ties_go_by_name() {
        let mut reserved = BTreeMap::new();
        reserved.insert("pve2".to_string(), 4 * G);
        // pve2: 6 - 4 = 2 GiB free, pve1 2 GiB: a tie, pve1 first by name.
        assert_eq!(ready(plan_node(&Wish::Auto, 101, &cluster(), "local-lvm", 512, &reserved)).node, "pve1");
    }

    #[test]
    fn unset_node_single_node_keeps_todays_behaviour() {
        let mut c = cluster();
        c.nodes.retain(|n| n.node == "pve1");
        let p = ready(plan_node(&Wish::Unset, 101, &c, "local-lvm", 512, &none()));
        assert_eq!((p.node.as_str(), p.placement), ("pve1", None));
        // Several online nodes: placed.
        let p = ready(plan_node(&Wish::Unset, 101, &cluster(), "local-lvm", 512, &none()));
        assert_eq!(p.node, "pve2");
        assert!(p.placement.is_some());
        // No node listed (no Sys.Audit): discover as before; NODE=auto cannot.
        let bare = ClusterResources::default();
        assert_eq!(plan_node(&Wish::Unset, 101, &bare, "local-lvm", 512, &none()), Ok(NodeDecision::Discover));
        assert!(plan_node(&Wish::Auto, 101, &bare, "local-lvm", 512, &none()).unwrap_err().contains("Sys.Audit"));
    }

    #[test]
    fn a_container_on_another_node_is_migrated_never_placed() {
        let mut c = cluster();
        c.cts.push(ct(101, "pve2", "running"));
        let p = ready(plan_node(&Wish::Named("pve1".into()), 101, &c, "local-lvm", 512, &none()));
        assert_eq!(p.node, "pve1");
        assert_eq!(p.live_node.as_deref(), Some("pve2"));
        assert_eq!(p.migrate, Some(Migration { from: "pve2".into(), to: "pve1".into(), restart: true }));
        c.cts[0].status = "stopped".into();
        let p = ready(plan_node(&Wish::Named("pve1".into()), 101, &c, "local-lvm", 512, &none()));
        assert_eq!(p.migrate.map(|m| m.restart), Some(false));
        // Where NODE names it: nothing moves.
        let p = ready(plan_node(&Wish::Named("pve2".into()), 101, &c, "local-lvm", 512, &none()));
        assert_eq!((p.node.as_str(), p.migrate), ("pve2", None));
        // auto / unset: found where it is (moved by HA or by hand), no placement.
        for w in [Wish::Auto, Wish::Unset] {
            let p = ready(plan_node(&w, 101, &c, "local-lvm", 512, &none()));
            assert_eq!(
                p,
                NodePlan { node: "pve2".into(), live_node: Some("pve2".into()), placement: None, migrate: None }
            );
        }
    }

    #[test]
    fn a_container_on_an_offline_node_is_an_error_not_a_create() {
        let mut c = cluster();
        c.cts.push(ct(101, "pve3", "unknown"));
        let e = plan_node(&Wish::Named("pve1".into()), 101, &c, "local-lvm", 512, &none()).unwrap_err();
        assert!(e.contains("CT 101 is on node pve3, which is offline"), "{e}");
    }
}
