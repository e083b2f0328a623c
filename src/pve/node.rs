//! [`Node`]: one node of the cluster (`/nodes/{node}/…`), the only place that builds a node's
//! API paths outside a container ([`super::ct`]): its status, the template index and storage
//! content, the template download, the container create, its task list; and the node list
//! (`GET /nodes`).
//!
//! Paths and parameters follow PVE's API (`pve-docs/api-viewer`, `PVE/API2/Nodes.pm`,
//! `PVE/API2/LXC.pm`, `PVE/API2/Storage/Content.pm`, `PVE/API2/Tasks.pm`). The asynchronous
//! calls return the task's UPID without waiting.

use serde_json::Value;

use super::ct::upid;
use super::{PveClient, PveError, Replay};

/// A node as `GET /nodes` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    /// `node`: its name.
    pub node: String,
    /// `status == "online"`.
    pub online: bool,
}

/// A task as `GET /nodes/{node}/tasks` lists it (subset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntry {
    /// `upid`.
    pub upid: String,
    /// `type`: `vzcreate`, `vzstart`, `vzdump` … (`task` when PVE gives none).
    pub kind: String,
    /// `user`: the identity that started it (`root@pam`, `user@pve!token`'s user part …).
    pub user: Option<String>,
    /// `id`: the guest the task is about, when it is about one.
    pub id: Option<String>,
    /// True while it runs: no `endtime`, and no `status` other than `running`.
    pub running: bool,
    /// `starttime`: UNIX seconds.
    pub starttime: Option<u64>,
    /// `endtime`: UNIX seconds, once it ended.
    pub endtime: Option<u64>,
    /// `status`: the exit status once it ended (`OK`, `WARNINGS: n`, an error), else `running`
    /// or none.
    pub status: Option<String>,
}

/// Which tasks [`Node::tasks`] asks for.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// `vmid`: only the tasks of this guest.
    pub vmid: Option<u32>,
    /// `typefilter`: only tasks of this type (`vzcreate` …).
    pub kind: Option<String>,
    /// `source=active`: only running tasks (PVE's default is the archive).
    pub active: bool,
    /// `limit`: at most this many (PVE's default is 50).
    pub limit: u32,
}

fn text(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string).filter(|s| !s.is_empty())
}

/// One node: cheap to make ([`PveClient::node`]); it holds no state of its own.
#[derive(Debug, Clone)]
pub struct Node<'c> {
    client: &'c PveClient,
    name: String,
}

impl PveClient {
    /// The handle of node `name`. Nothing is sent until a call.
    pub fn node(&self, name: &str) -> Node<'_> {
        Node { client: self, name: name.to_string() }
    }

    /// `GET /nodes`: the cluster's nodes with whether they are online.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn nodes(&self) -> Result<Vec<NodeEntry>, PveError> {
        let v = self.get("/nodes", &[]).await?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some(NodeEntry { node: text(n, "node")?, online: text(n, "status").as_deref() == Some("online") })
            })
            .collect())
    }
}

impl Node<'_> {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn path(&self, tail: &str) -> String {
        format!("/nodes/{}{tail}", self.name)
    }

    /// `GET /nodes/{node}/status` → `current-kernel.machine` (`x86_64`, `aarch64` …): the
    /// machine the node runs, which decides the template's architecture; empty when PVE does
    /// not say.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn machine(&self) -> Result<String, PveError> {
        let st = self.client.get(&self.path("/status"), &[]).await?;
        Ok(st.pointer("/current-kernel/machine").and_then(Value::as_str).unwrap_or("").to_string())
    }

    /// `GET /nodes/{node}/storage/{storage}/content?content=vztmpl`: the volids of the container
    /// templates on `storage`.
    ///
    /// # Errors
    /// API and transport errors (an unknown or inactive storage).
    pub async fn templates(&self, storage: &str) -> Result<Vec<String>, PveError> {
        let path = self.path(&format!("/storage/{storage}/content"));
        let v = self.client.get(&path, &[("content", "vztmpl".into())]).await?;
        Ok(v.as_array().into_iter().flatten().filter_map(|t| text(t, "volid")).collect())
    }

    /// `GET /nodes/{node}/aplinfo`: the node's template index (the answer as is; the entries
    /// name `template`, `location`, `sha512sum`/`md5sum` and `architecture`).
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn aplinfo(&self) -> Result<Value, PveError> {
        self.client.get(&self.path("/aplinfo"), &[]).await
    }

    /// `POST /nodes/{node}/storage/{storage}/download-url` (`params`: `url`, `content`,
    /// `filename`, `checksum`, `checksum-algorithm`): a `download` task; its UPID. Repeated after a
    /// lost answer: a second download of the same URL to the same file name is harmless (PVE
    /// writes a temporary file and renames it).
    ///
    /// # Errors
    /// API and transport errors, a malformed answer.
    pub async fn download_url(&self, storage: &str, params: &[(&str, String)]) -> Result<String, PveError> {
        let path = self.path(&format!("/storage/{storage}/download-url"));
        let v = self.client.post(&path, params, Replay::Safe).await?;
        upid(v, "POST", &path)
    }

    /// `POST /nodes/{node}/lxc` with `params` (`vmid`, `ostemplate`, `rootfs` …, see
    /// `PVE/API2/LXC.pm`'s `create_vm`): a `vzcreate` task; its UPID. Not repeated after a lost
    /// answer: the caller decides (a second create meets "already exists").
    ///
    /// # Errors
    /// API and transport errors ([`PveError::is_already_exists`] for a taken vmid), a malformed
    /// answer.
    pub async fn create_ct(&self, params: &[(&str, String)]) -> Result<String, PveError> {
        let path = self.path("/lxc");
        let v = self.client.post(&path, params, Replay::Unsafe).await?;
        upid(v, "POST", &path)
    }

    /// `GET /nodes/{node}/tasks` narrowed by `filter`: the tasks, newest first as PVE lists them.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskEntry>, PveError> {
        let mut params: Vec<(&str, String)> = Vec::new();
        if let Some(vmid) = filter.vmid {
            params.push(("vmid", vmid.to_string()));
        }
        if let Some(kind) = &filter.kind {
            params.push(("typefilter", kind.clone()));
        }
        if filter.active {
            params.push(("source", "active".into()));
        }
        if filter.limit > 0 {
            params.push(("limit", filter.limit.to_string()));
        }
        let v = self.client.get(&self.path("/tasks"), &params).await?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let ended = t.get("endtime").is_some_and(|e| !e.is_null());
                let status = text(t, "status");
                Some(TaskEntry {
                    upid: text(t, "upid")?,
                    kind: text(t, "type").unwrap_or_else(|| "task".into()),
                    user: text(t, "user"),
                    id: t.get("id").and_then(|v| match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    }),
                    running: !ended && status.as_deref().is_none_or(|s| s == "running"),
                    starttime: t.get("starttime").and_then(Value::as_u64),
                    endtime: t.get("endtime").and_then(Value::as_u64),
                    status,
                })
            })
            .collect())
    }
}
