//! The cluster's view: `GET /cluster/resources` (containers, nodes and storages on every node).
//!
//! PVE lists in `/cluster/resources` only what the API identity may audit (`VM.Audit` on the
//! guest, `Sys.Audit` on the node, `Datastore.Audit` on the storage); an entry missing from the
//! answer is not proof that it does not exist. Sizes are in bytes (PVE's units).

use serde_json::Value;

use super::{PveClient, PveError};

/// A container as `/cluster/resources` lists it (`type == "lxc"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtResource {
    /// `vmid`.
    pub vmid: u32,
    /// `node`: where the container is now (after an HA or manual migration too).
    pub node: String,
    /// `name`: the hostname.
    pub name: String,
    /// `status`: `running`, `stopped`, or `unknown` when its node is offline.
    pub status: String,
    /// `lock`: a config lock held by a running operation (`migrate`, `backup`, `create` …).
    pub lock: Option<String>,
    /// `template == 1`.
    pub template: bool,
    /// `tags` (`;`-separated), when it has some.
    pub tags: Option<String>,
}

/// A node as `/cluster/resources` lists it (`type == "node"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResource {
    /// `node`: its name.
    pub node: String,
    /// `status == "online"`.
    pub online: bool,
    /// `mem`: memory in use, bytes (0 when offline).
    pub mem: u64,
    /// `maxmem`: memory installed, bytes (0 when offline).
    pub maxmem: u64,
}

impl NodeResource {
    /// `maxmem - mem` in bytes (0 when unknown).
    pub fn free_mem(&self) -> u64 {
        self.maxmem.saturating_sub(self.mem)
    }
}

/// A storage on one node as `/cluster/resources` lists it (`type == "storage"`; a storage
/// enabled on several nodes has one entry per node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageResource {
    /// `node`.
    pub node: String,
    /// `storage`: its id (`local-lvm`).
    pub storage: String,
    /// `status == "available"` (PVE: active and enabled on that node).
    pub available: bool,
    /// `shared == 1`.
    pub shared: bool,
}

/// The parsed answer of `GET /cluster/resources`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterResources {
    /// Containers (not VMs).
    pub cts: Vec<CtResource>,
    /// QEMU VMs as `(vmid, node)`: a vmid they hold is taken for containers too (PVE's vmids are
    /// cluster-wide).
    pub vms: Vec<(u32, String)>,
    /// Nodes (only when the request asked for them: no `type`, or `type=node`).
    pub nodes: Vec<NodeResource>,
    /// Storages per node (no `type`, or `type=storage`).
    pub storages: Vec<StorageResource>,
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn u64_of(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)).unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

impl ClusterResources {
    /// Parses the `data` array of `GET /cluster/resources`; entries of other types (`sdn`,
    /// `pool` …) and entries without their key fields are skipped; of a `qemu` entry only its
    /// vmid and node are kept.
    pub fn parse(v: &Value) -> Self {
        let mut out = ClusterResources::default();
        for r in v.as_array().into_iter().flatten() {
            match r.get("type").and_then(Value::as_str) {
                Some("lxc") => {
                    let (Some(vmid), Some(node)) = (r.get("vmid").and_then(Value::as_u64), str_of(r, "node")) else {
                        continue;
                    };
                    out.cts.push(CtResource {
                        vmid: vmid as u32,
                        node,
                        name: str_of(r, "name").unwrap_or_default(),
                        status: str_of(r, "status").unwrap_or_else(|| "unknown".into()),
                        lock: str_of(r, "lock").filter(|l| !l.is_empty()),
                        template: u64_of(r, "template") == 1,
                        tags: str_of(r, "tags"),
                    });
                }
                Some("qemu") => {
                    if let (Some(vmid), Some(node)) = (r.get("vmid").and_then(Value::as_u64), str_of(r, "node")) {
                        out.vms.push((vmid as u32, node));
                    }
                }
                Some("node") => {
                    let Some(node) = str_of(r, "node") else { continue };
                    out.nodes.push(NodeResource {
                        node,
                        online: r.get("status").and_then(Value::as_str) == Some("online"),
                        mem: u64_of(r, "mem"),
                        maxmem: u64_of(r, "maxmem"),
                    });
                }
                Some("storage") => {
                    let (Some(node), Some(storage)) = (str_of(r, "node"), str_of(r, "storage")) else { continue };
                    out.storages.push(StorageResource {
                        node,
                        storage,
                        available: r.get("status").and_then(Value::as_str) == Some("available"),
                        shared: u64_of(r, "shared") == 1,
                    });
                }
                _ => {}
            }
        }
        out
    }

    /// The container with `vmid`, if listed.
    pub fn ct(&self, vmid: u32) -> Option<&CtResource> {
        self.cts.iter().find(|c| c.vmid == vmid)
    }

    /// The node of the QEMU VM with `vmid`, if one is listed.
    pub fn vm_node(&self, vmid: u32) -> Option<&str> {
        self.vms.iter().find(|(v, _)| *v == vmid).map(|(_, n)| n.as_str())
    }

    /// The online nodes' names, sorted.
    pub fn online_nodes(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.nodes.iter().filter(|n| n.online).map(|n| n.node.as_str()).collect();
        v.sort_unstable();
        v
    }
}

impl PveClient {
    /// `GET /cluster/resources`, with `type=kind` when given (`vm` lists guests only, `node`,
    /// `storage`); `None` lists everything (one request for containers, nodes and storages).
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn cluster_resources(&self, kind: Option<&str>) -> Result<ClusterResources, PveError> {
        let params: Vec<(&str, String)> = kind.map(|k| ("type", k.to_string())).into_iter().collect();
        Ok(ClusterResources::parse(&self.get("/cluster/resources", &params).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_containers_nodes_and_storages() {
        let v = serde_json::json!([
            {"type": "lxc", "vmid": 101, "node": "pve2", "name": "web", "status": "running", "lock": "migrate",
             "template": 0, "tags": "proxmox-gitops"},
            {"type": "qemu", "vmid": 200, "node": "pve1", "name": "vm"},
            {"type": "lxc", "node": "pve1"},
            {"type": "node", "node": "pve1", "status": "online", "mem": 2048, "maxmem": 8192},
            {"type": "node", "node": "pve3", "status": "offline"},
            {"type": "storage", "node": "pve1", "storage": "local-lvm", "status": "available", "shared": 0},
            {"type": "sdn", "node": "pve1", "sdn": "localnetwork"}
        ]);
        let r = ClusterResources::parse(&v);
        assert_eq!(
            r.cts,
            vec![CtResource {
                vmid: 101,
                node: "pve2".into(),
                name: "web".into(),
                status: "running".into(),
                lock: Some("migrate".into()),
                template: false,
                tags: Some("proxmox-gitops".into()),
            }]
        );
        assert_eq!(r.nodes.len(), 2);
        assert_eq!(r.nodes[0].free_mem(), 6144);
        assert_eq!(r.nodes[1].free_mem(), 0);
        assert_eq!(r.online_nodes(), vec!["pve1"]);
        assert_eq!(
            r.storages,
            vec![StorageResource { node: "pve1".into(), storage: "local-lvm".into(), available: true, shared: false }]
        );
        assert_eq!(r.ct(101).map(|c| c.node.as_str()), Some("pve2"));
        assert!(r.ct(200).is_none());
        assert_eq!(r.vm_node(200), Some("pve1"), "a VM's vmid is taken for containers too");
        assert_eq!(r.vm_node(101), None);
    }
}
