//! Typed calls on one existing container (`/nodes/{node}/lxc/{vmid}/…`) that operations on
//! live containers need (health checks, unattended updates): its status, its interfaces, a
//! reboot and a rollback that starts it again.
//!
//! Every call names its PVE API path (`pve-docs/api-viewer`, `PVE/API2/LXC/Status.pm`,
//! `PVE/API2/LXC/Snapshot.pm`, `PVE/API2/LXC.pm`). The asynchronous ones return the task's UPID
//! without waiting: the caller waits with [`PveClient::wait_task`] and its own bound. Writes are
//! not repeated after a lost answer ([`Replay::Unsafe`]): a second reboot or rollback is not
//! harmless.

use serde_json::Value;

use super::{PveClient, PveError, Replay};

/// A container's live status (`GET /nodes/{node}/lxc/{vmid}/status/current`, subset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtStatus {
    /// `status`: `running` or `stopped`.
    pub status: String,
    /// `name`: the container's hostname (PVE reports the `hostname` config key here).
    pub name: Option<String>,
    /// `lock`: the config lock held by a running operation (`backup`, `snapshot`, `rollback` …).
    pub lock: Option<String>,
    /// `uptime` in seconds (0 when stopped).
    pub uptime: u64,
}

impl CtStatus {
    /// True for `status == "running"`.
    pub fn running(&self) -> bool {
        self.status == "running"
    }
}

/// One network interface of a running container (`GET /nodes/{node}/lxc/{vmid}/interfaces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtInterface {
    /// `name`, e.g. `eth0`.
    pub name: String,
    /// `inet`: the IPv4 address with prefix (`10.0.0.5/24`), when it has one.
    pub inet: Option<String>,
}

fn upid(v: Value, method: &str, path: &str) -> Result<String, PveError> {
    match v {
        Value::String(s) if s.starts_with("UPID:") => Ok(s),
        other => Err(PveError::Decode {
            method: method.into(),
            path: path.into(),
            detail: format!("expected a UPID, got {other}"),
        }),
    }
}

impl PveClient {
    /// `GET /nodes/{node}/lxc/{vmid}/status/current`: the container's status, `None` when it does
    /// not exist (PVE's "Configuration file … does not exist").
    ///
    /// # Errors
    /// API and transport errors other than "does not exist"; [`PveError::Decode`] when the
    /// answer has no `status`.
    pub async fn ct_status(&self, node: &str, vmid: u32) -> Result<Option<CtStatus>, PveError> {
        let path = format!("/nodes/{node}/lxc/{vmid}/status/current");
        let v = match self.get(&path, &[]).await {
            Ok(v) => v,
            Err(e) if e.is_absent() => return Ok(None),
            Err(e) => return Err(e),
        };
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string).filter(|s| !s.is_empty());
        let status = text("status").ok_or_else(|| PveError::Decode {
            method: "GET".into(),
            path: path.clone(),
            detail: format!("no `status` in {v}"),
        })?;
        Ok(Some(CtStatus {
            status,
            name: text("name"),
            lock: text("lock"),
            uptime: v.get("uptime").and_then(Value::as_u64).unwrap_or(0),
        }))
    }

    /// `GET /nodes/{node}/lxc/{vmid}/interfaces`: the running container's interfaces (name and
    /// IPv4 address).
    ///
    /// # Errors
    /// API and transport errors (a stopped container answers with an error).
    pub async fn ct_interfaces(&self, node: &str, vmid: u32) -> Result<Vec<CtInterface>, PveError> {
        let v = self.get(&format!("/nodes/{node}/lxc/{vmid}/interfaces"), &[]).await?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let name = i.get("name").and_then(Value::as_str)?.to_string();
                let inet = i.get("inet").and_then(Value::as_str).map(str::to_string);
                Some(CtInterface { name, inet })
            })
            .collect())
    }

    /// `POST /nodes/{node}/lxc/{vmid}/status/reboot` (`timeout`: seconds the clean shutdown may
    /// take before the container is stopped): starts a `vzreboot` task and returns its UPID.
    ///
    /// # Errors
    /// API and transport errors (`not running` for a stopped container, a lock), a malformed
    /// answer.
    pub async fn ct_reboot(&self, node: &str, vmid: u32, shutdown_secs: u64) -> Result<String, PveError> {
        let path = format!("/nodes/{node}/lxc/{vmid}/status/reboot");
        let v = self.post(&path, &[("timeout", shutdown_secs.max(1).to_string())], Replay::Unsafe).await?;
        upid(v, "POST", &path)
    }

    /// `POST /nodes/{node}/lxc/{vmid}/status/start`: starts a `vzstart` task and returns its UPID.
    ///
    /// # Errors
    /// API and transport errors (`already running`, a lock), a malformed answer.
    pub async fn ct_start(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let path = format!("/nodes/{node}/lxc/{vmid}/status/start");
        let v = self.post(&path, &[], Replay::Unsafe).await?;
        upid(v, "POST", &path)
    }

    /// `POST /nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback` with `start=1` when `start`:
    /// PVE stops a running container, rolls it back to the snapshot and (with `start`) starts it
    /// again, all in one `vzrollback` task; returns its UPID. `snapname` must be a valid PVE
    /// snapshot name (checked by the caller: it is put into the path).
    ///
    /// # Errors
    /// API and transport errors, a malformed answer. A missing snapshot fails the task
    /// ("snapshot '…' does not exist"), seen when waiting for it.
    pub async fn ct_rollback(&self, node: &str, vmid: u32, snapname: &str, start: bool) -> Result<String, PveError> {
        let path = format!("/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback");
        let params: Vec<(&str, String)> = if start { vec![("start", "1".into())] } else { vec![] };
        let v = self.post(&path, &params, Replay::Unsafe).await?;
        upid(v, "POST", &path)
    }
}
