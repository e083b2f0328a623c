//! [`Ct`]: one container of one node (`/nodes/{node}/lxc/{vmid}/…`), the only place that builds
//! a container's API paths. Its config with the digest, config writes guarded by a digest, the
//! pending changes, status and interfaces, the power tasks (start, shutdown, stop, reboot),
//! resize, migrate, destroy and the snapshots.
//!
//! Every call names its PVE API path (`pve-docs/api-viewer`, `PVE/API2/LXC.pm`,
//! `PVE/API2/LXC/Config.pm`, `PVE/API2/LXC/Status.pm`, `PVE/API2/LXC/Snapshot.pm`). The
//! asynchronous ones return the task's UPID without waiting: the caller waits with
//! [`PveClient::wait_task`] and its own bound, and decides what a failure means. The handle
//! decides no policy. Whether a write may be repeated after a lost answer ([`Replay`]) is stated
//! per call: a second start, shutdown, stop, destroy or resize finds its work done and is
//! harmless; a second config write, reboot, migrate, rollback or snapshot is not.

use std::collections::BTreeMap;

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

/// A container's config as `GET /nodes/{node}/lxc/{vmid}/config` answers it (pending values
/// applied, PVE's default): every key with a value, as text (numbers as PVE writes them), and the
/// `digest` (SHA-1 of the config file) that a write can be guarded by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtConfig {
    /// The keys and their values (`digest` not among them; `null`s left out).
    pub values: BTreeMap<String, String>,
    /// `digest`, when PVE sent one.
    pub digest: Option<String>,
}

impl CtConfig {
    /// Parses a config answer (an object; anything else yields an empty config).
    pub fn parse(v: &Value) -> Self {
        let mut cfg = CtConfig::default();
        for (k, v) in v.as_object().into_iter().flatten() {
            if k == "digest" {
                cfg.digest = v.as_str().map(str::to_string);
            } else if let Some(text) = value_text(v) {
                cfg.values.insert(k.clone(), text);
            }
        }
        cfg
    }

    /// The value of `key`, when set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// `lock`: the lock an operation holds on the container (`create`, `backup`, `migrate` …).
    pub fn lock(&self) -> Option<&str> {
        self.get("lock").filter(|l| !l.is_empty())
    }

    /// `description` (empty when unset).
    pub fn description(&self) -> &str {
        self.get("description").unwrap_or("")
    }

    /// `hostname` (empty when unset).
    pub fn hostname(&self) -> &str {
        self.get("hostname").unwrap_or("")
    }
}

/// A key PVE keeps pending for a running container (`GET /nodes/{node}/lxc/{vmid}/pending`: the
/// entries with a `pending` value or a `delete` mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingKey {
    /// The config key (`memory`, `mp0` …).
    pub key: String,
    /// True when the key is to be removed (`delete`), false when it gets a new value.
    pub delete: bool,
}

/// A snapshot as `GET /nodes/{node}/lxc/{vmid}/snapshot` lists it (PVE's `current` pseudo-entry
/// left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtSnapshotEntry {
    /// `name`.
    pub name: String,
    /// `description` (trailing whitespace trimmed; PVE appends a newline).
    pub description: String,
    /// `snaptime`: creation time, seconds since the epoch, when PVE gives one.
    pub snaptime: Option<i64>,
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// `v` when it is a UPID; a [`PveError::Decode`] naming the call otherwise.
pub(super) fn upid(v: Value, method: &str, path: &str) -> Result<String, PveError> {
    match v {
        Value::String(s) if s.starts_with("UPID:") => Ok(s),
        other => Err(PveError::Decode {
            method: method.into(),
            path: path.into(),
            detail: format!("expected a UPID, got {other}"),
        }),
    }
}

/// One container: CT `vmid` on `node`. Cheap to make ([`PveClient::ct`]); it holds no state of
/// its own.
#[derive(Debug, Clone)]
pub struct Ct<'c> {
    client: &'c PveClient,
    node: String,
    vmid: u32,
}

impl PveClient {
    /// The handle of CT `vmid` on `node`. Nothing is sent until a call.
    pub fn ct(&self, node: &str, vmid: u32) -> Ct<'_> {
        Ct { client: self, node: node.to_string(), vmid }
    }
}

impl Ct<'_> {
    /// The node the handle addresses.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The vmid the handle addresses.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    fn path(&self, tail: &str) -> String {
        format!("/nodes/{}/lxc/{}{tail}", self.node, self.vmid)
    }

    async fn task(
        &self,
        method: &str,
        tail: &str,
        params: &[(&str, String)],
        replay: Replay,
    ) -> Result<String, PveError> {
        let path = self.path(tail);
        let v = match method {
            "DELETE" => self.client.delete(&path, params, replay).await?,
            "PUT" => self.client.put(&path, params, replay).await?,
            _ => self.client.post(&path, params, replay).await?,
        };
        upid(v, method, &path)
    }

    /// `GET …/config`: the config (pending values applied) with its digest; `None` when the
    /// container does not exist (PVE's "Configuration file … does not exist").
    ///
    /// # Errors
    /// API and transport errors other than "does not exist".
    pub async fn config(&self) -> Result<Option<CtConfig>, PveError> {
        match self.client.get(&self.path("/config"), &[]).await {
            Ok(v) => Ok(Some(CtConfig::parse(&v))),
            Err(e) if e.is_absent() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `PUT …/config` with `params` (`delete` lists keys to remove), guarded by `digest` when
    /// given: PVE refuses the write when the file changed since that digest was read. Not
    /// repeated after a lost answer (the caller reads the config again to see what landed).
    ///
    /// # Errors
    /// API and transport errors: a stale digest ([`PveError::is_config_changed`]), a lock
    /// ([`PveError::is_locked`], [`PveError::is_file_lock_timeout`]), PVE's per-key refusals.
    pub async fn set_config(&self, params: &[(&str, String)], digest: Option<&str>) -> Result<(), PveError> {
        let mut params = params.to_vec();
        if let Some(d) = digest {
            params.push(("digest", d.to_string()));
        }
        self.client.put(&self.path("/config"), &params, Replay::Unsafe).await.map(drop)
    }

    /// `GET …/pending`: the keys a running container applies when it starts again.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn pending(&self) -> Result<Vec<PendingKey>, PveError> {
        let v = self.client.get(&self.path("/pending"), &[]).await?;
        let set = |i: &Value, k: &str| i.get(k).is_some_and(|v| !v.is_null());
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let key = i.get("key").and_then(Value::as_str)?.to_string();
                if set(i, "delete") {
                    Some(PendingKey { key, delete: true })
                } else {
                    set(i, "pending").then_some(PendingKey { key, delete: false })
                }
            })
            .collect())
    }

    /// `GET …/status/current`: the container's status, `None` when it does not exist.
    ///
    /// # Errors
    /// API and transport errors other than "does not exist"; [`PveError::Decode`] when the
    /// answer has no `status`.
    pub async fn status(&self) -> Result<Option<CtStatus>, PveError> {
        let path = self.path("/status/current");
        let v = match self.client.get(&path, &[]).await {
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

    /// `GET …/interfaces`: the running container's interfaces (name and IPv4 address).
    ///
    /// # Errors
    /// API and transport errors (a stopped container answers with an error).
    pub async fn interfaces(&self) -> Result<Vec<CtInterface>, PveError> {
        let v = self.client.get(&self.path("/interfaces"), &[]).await?;
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

    /// `POST …/status/start`: a `vzstart` task; its UPID. Repeated after a lost answer (the
    /// second one answers "already running", [`PveError::is_already_running`]).
    ///
    /// # Errors
    /// API and transport errors (`already running`, a lock), a malformed answer.
    pub async fn start(&self) -> Result<String, PveError> {
        self.task("POST", "/status/start", &[], Replay::Safe).await
    }

    /// `POST …/status/shutdown` (`timeout`: seconds the clean shutdown may take, at least 1): a
    /// `vzshutdown` task; its UPID. Repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors (`not running`, [`PveError::is_not_running`]), a malformed answer.
    pub async fn shutdown(&self, timeout_secs: u64) -> Result<String, PveError> {
        self.task("POST", "/status/shutdown", &[("timeout", timeout_secs.max(1).to_string())], Replay::Safe).await
    }

    /// `POST …/status/stop`: a `vzstop` task (no clean shutdown); its UPID. Repeated after a
    /// lost answer.
    ///
    /// # Errors
    /// API and transport errors (`not running`), a malformed answer.
    pub async fn stop(&self) -> Result<String, PveError> {
        self.task("POST", "/status/stop", &[], Replay::Safe).await
    }

    /// `POST …/status/reboot` (`timeout`: seconds the clean shutdown may take before the
    /// container is stopped): a `vzreboot` task; its UPID. Not repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors (`not running` for a stopped container, a lock), a malformed
    /// answer.
    pub async fn reboot(&self, shutdown_secs: u64) -> Result<String, PveError> {
        self.task("POST", "/status/reboot", &[("timeout", shutdown_secs.max(1).to_string())], Replay::Unsafe).await
    }

    /// `PUT …/resize` (`disk`: `rootfs` or `mpN`; `size` in GiB, absolute): grows the volume;
    /// the UPID of its `resize` task, or `None` when PVE answered without one (older versions
    /// resize synchronously). Repeated after a lost answer (the second one answers "already at
    /// specified size").
    ///
    /// # Errors
    /// API and transport errors (shrinking is refused by PVE).
    pub async fn resize(&self, disk: &str, gib: u64) -> Result<Option<String>, PveError> {
        let params = [("disk", disk.to_string()), ("size", format!("{gib}G"))];
        match self.client.put(&self.path("/resize"), &params, Replay::Safe).await? {
            Value::String(s) if s.starts_with("UPID:") => Ok(Some(s)),
            _ => Ok(None),
        }
    }

    /// `POST …/migrate` with `target`: moves the container to `target` in a `vzmigrate` task
    /// (`hamigrate` for an HA-managed one); its UPID. With `restart` (a running container) PVE
    /// shuts it down, moves it and starts it again on `target`, waiting at most `shutdown_secs`
    /// for the clean shutdown (`timeout`); without, the container must be stopped (an offline
    /// migration). Not repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors (`target is local node`, `no such cluster node`, a lock, a
    /// running container without `restart`), a malformed answer.
    pub async fn migrate(&self, target: &str, restart: bool, shutdown_secs: u64) -> Result<String, PveError> {
        let mut params = vec![("target", target.to_string())];
        if restart {
            params.push(("restart", "1".into()));
            params.push(("timeout", shutdown_secs.max(1).to_string()));
        }
        self.task("POST", "/migrate", &params, Replay::Unsafe).await
    }

    /// `DELETE /nodes/{node}/lxc/{vmid}` with `purge=1` (out of backup jobs, replication and HA)
    /// and `destroy-unreferenced-disks=1`: a `vzdestroy` task; its UPID. Repeated after a lost
    /// answer (the second one finds nothing: "does not exist").
    ///
    /// # Errors
    /// API and transport errors (a running container, a lock, "does not exist").
    pub async fn destroy(&self) -> Result<String, PveError> {
        let params = [("purge", "1".to_string()), ("destroy-unreferenced-disks", "1".to_string())];
        self.task("DELETE", "", &params, Replay::Safe).await
    }

    /// `GET …/snapshot`: the container's snapshots, oldest first as PVE lists them.
    ///
    /// # Errors
    /// API and transport errors; [`PveError::Decode`] when the answer is not a list.
    pub async fn snapshots(&self) -> Result<Vec<CtSnapshotEntry>, PveError> {
        let path = self.path("/snapshot");
        let v = self.client.get(&path, &[]).await?;
        let items = v.as_array().ok_or_else(|| PveError::Decode {
            method: "GET".into(),
            path: path.clone(),
            detail: format!("expected a list, got {v}"),
        })?;
        Ok(items
            .iter()
            .filter_map(|s| {
                let name = s.get("name").and_then(Value::as_str)?;
                (name != "current").then(|| CtSnapshotEntry {
                    name: name.to_string(),
                    description: s.get("description").and_then(Value::as_str).unwrap_or("").trim_end().to_string(),
                    snaptime: s.get("snaptime").and_then(Value::as_i64).filter(|t| *t > 0),
                })
            })
            .collect())
    }

    /// `POST …/snapshot` (`snapname`, `description`): a `vzsnapshot` task; its UPID. `name`
    /// must be a valid PVE snapshot name (checked by the caller: it goes into later paths). Not
    /// repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors (an existing name, a lock), a malformed answer.
    pub async fn snapshot(&self, name: &str, description: &str) -> Result<String, PveError> {
        let params = [("snapname", name.to_string()), ("description", description.to_string())];
        self.task("POST", "/snapshot", &params, Replay::Unsafe).await
    }

    /// `POST …/snapshot/{name}/rollback`, with `start=1` when `start`: PVE stops a running
    /// container, rolls it back to the snapshot and (with `start`) starts it again, all in one
    /// `vzrollback` task; its UPID. `name` must be a valid PVE snapshot name (checked by the
    /// caller: it is put into the path). Not repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors, a malformed answer. A missing snapshot fails the task
    /// ("snapshot '…' does not exist"), seen when waiting for it.
    pub async fn rollback(&self, name: &str, start: bool) -> Result<String, PveError> {
        let params: Vec<(&str, String)> = if start { vec![("start", "1".into())] } else { vec![] };
        self.task("POST", &format!("/snapshot/{name}/rollback"), &params, Replay::Unsafe).await
    }

    /// `DELETE …/snapshot/{name}`: a `vzdelsnapshot` task; its UPID. `name` as for
    /// [`Ct::rollback`]. Not repeated after a lost answer.
    ///
    /// # Errors
    /// API and transport errors, a malformed answer.
    pub async fn delete_snapshot(&self, name: &str) -> Result<String, PveError> {
        self.task("DELETE", &format!("/snapshot/{name}"), &[], Replay::Unsafe).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_values_as_text_and_the_digest_apart() {
        let v = serde_json::json!({"hostname": "web", "memory": 512, "onboot": 1, "digest": "abc", "lock": null});
        let c = CtConfig::parse(&v);
        assert_eq!(c.digest.as_deref(), Some("abc"));
        assert_eq!(c.get("memory"), Some("512"));
        assert_eq!(c.hostname(), "web");
        assert_eq!(c.lock(), None);
        assert_eq!(c.description(), "");
        assert!(!c.values.contains_key("digest"));
    }
}
