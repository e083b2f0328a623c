//! Executing a plan on PVE: [`PveBackend::apply`] turns a [`ContainerPlan`] into API calls
//! (create or recreate through `lifecycle`, `PUT …/config` with the plan's digest, `PUT
//! …/resize`, start, the address from the spec or the CT's DHCP lease) and records every action
//! with its task in the [`Provision`] artifact. The PVE rules it applies (lock retries, lost
//! answers) are listed in the module docs of [`super`].

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use backon::{ExponentialBuilder, Retryable};
use serde_json::Value;

use super::planner::Live;
use super::{PveBackend, Rec, upid_of};
use crate::backend::model::{Action, ApplyOptions, BackendKind, ContainerPlan, Migration, Outcome, Provision};
use crate::inventory::{ContainerSpec, IpConfig};
use crate::pve::{PveError, Replay};

impl PveBackend {
    /// Executes `plan` for `spec`. Never panics: a failure ends in [`Outcome::Failed`] with the
    /// actions done until then.
    pub async fn apply(&self, spec: &ContainerSpec, plan: &ContainerPlan, opts: &ApplyOptions) -> Provision {
        let mut rec = Rec::default();
        if let Some(c) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&spec.vmid) {
            rec.warnings.extend(c.warnings.iter().cloned());
        }
        let mut fin = Final::default();
        let outcome = match self.apply_inner(spec, plan, opts, &mut rec, &mut fin).await {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::Failed { error: crate::actions::redact(&format!("{e:#}")) },
        };
        // Without a network call: a refused spec must not reach the API at all.
        let node = plan.node.clone().or_else(|| {
            spec.node.clone().or_else(|| self.opts.node.clone()).or_else(|| self.discovered.get().cloned())
        });
        Provision {
            node,
            address: fin.address,
            actions: rec.actions,
            warnings: rec.warnings,
            status: fin.status,
            created: fin.created,
            outcome,
            ..Provision::new(BackendKind::Pve, spec, plan.clone(), opts)
        }
    }

    async fn apply_inner(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        rec: &mut Rec,
        fin: &mut Final,
    ) -> anyhow::Result<()> {
        self.check_permissions(spec)?;
        // The plan's node (chosen by `NODE=auto`, or where the container was found); a plan made
        // elsewhere without one falls back to the spec's.
        let node = match &plan.node {
            Some(n) => n.clone(),
            None => self.node_for(spec).await?,
        };
        let vmid = spec.vmid;
        match &plan.action {
            Action::Refused { reasons, needs_recreate: false } => {
                fin.status = None;
                bail!("{} (vmid {vmid}): {}; nothing was changed", spec.name, reasons.join("; "));
            }
            Action::Refused { reasons, needs_recreate: true } => {
                fin.status = None;
                bail!(
                    "{} (vmid {vmid}) needs to be recreated ({}), which the recreate policy `never` forbids; nothing was changed. \
                     Re-run with --allow-recreate (or --recreate when-needed) to destroy and recreate it — its data is lost unless snapshotted",
                    spec.name,
                    reasons.join("; ")
                );
            }
            Action::Nothing => {
                if let Some(m) = &plan.migrate {
                    self.migrate(vmid, m, rec).await?;
                }
            }
            Action::Create => {
                let d = self.desired_for(spec, &node).await?;
                self.ensure_template(&node, &d, rec).await?;
                self.create(&node, &d, opts, rec).await?;
                fin.created = true;
            }
            Action::Recreate { reasons } => {
                tracing::warn!("{}: recreating CT {vmid}: {}", spec.name, reasons.join("; "));
                let d = self.desired_for(spec, &node).await?;
                self.ensure_template(&node, &d, rec).await?;
                // Destroyed where it is, created where NODE wants it (no migration first).
                let live_node = plan.migrate.as_ref().map_or(node.as_str(), |m| m.from.as_str());
                self.shutdown_and_destroy(live_node, vmid, rec).await?;
                self.create(&node, &d, opts, rec).await?;
                fin.created = true;
            }
            Action::Update { changes, resizes, .. } => {
                if let Some(m) = &plan.migrate {
                    self.migrate(vmid, m, rec).await?;
                }
                if !changes.is_empty() {
                    self.update_config(&node, spec, changes, rec).await?;
                }
                for r in resizes {
                    self.resize(&node, vmid, &r.disk, r.to_gib, rec).await?;
                }
                if !plan.start {
                    self.apply_pending(&node, vmid, opts, rec).await?;
                }
            }
        }
        if plan.start || fin.created {
            self.start(&node, vmid, rec).await?;
        }
        // Started now, or already running (the plan only skips the start for a running CT).
        fin.status = Some("running".to_string());
        let address = match spec.ip {
            IpConfig::Static { address, .. } => Some(IpAddr::V4(address)),
            IpConfig::Dhcp => self.dhcp_address(&node, vmid, opts.ssh_timeout).await?,
        };
        fin.address = address.map(|a| a.to_string());
        if opts.wait_ssh {
            let Some(ip) = address else { bail!("CT {vmid} has no address to wait for SSH on") };
            let started = Instant::now();
            crate::net::wait_for_ssh(SocketAddr::new(ip, opts.ssh_port), opts.ssh_timeout)
                .await
                .with_context(|| format!("{}: CT {vmid} runs, but SSH does not answer", spec.name))?;
            rec.push("wait-ssh", None, started, Some(format!("{ip}:{}", opts.ssh_port)));
        }
        Ok(())
    }

    /// Repeats `op` while PVE says the container is locked, for at most [`Timeouts::lock`].
    pub(super) async fn locked<T, F, Fut>(&self, what: &str, op: F) -> Result<T, PveError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, PveError>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .with_total_delay(Some(self.opts.timeouts.lock))
            .without_max_times()
            .with_jitter();
        op.retry(backoff)
            .when(|e: &PveError| e.is_locked())
            .notify(|e: &PveError, d: Duration| tracing::info!("{what}: {e}; retrying in {} ms", d.as_millis()))
            .await
    }

    /// Moves CT `vmid` as `m` says (`POST /nodes/{from}/lxc/{vmid}/migrate`, `restart=1` for a
    /// running container) and waits for the task, retrying while the container is locked. A
    /// container that was started since the plan (PVE: "can't migrate running container without
    /// --online or --restart") is moved in restart mode.
    async fn migrate(&self, vmid: u32, m: &Migration, rec: &mut Rec) -> anyhow::Result<()> {
        let started = Instant::now();
        let shutdown = self.opts.timeouts.shutdown.as_secs();
        let what = format!("migrate CT {vmid} from {} to {}", m.from, m.to);
        // Restart mode once PVE says the container runs (it was started since the plan).
        let restart = std::sync::atomic::AtomicBool::new(m.restart);
        let out = self
            .locked("migrate", || async {
                let mode = restart.load(std::sync::atomic::Ordering::Relaxed);
                let upid = match self.client.ct_migrate(&m.from, vmid, &m.to, mode, shutdown).await {
                    Err(e) if !mode && e.message().is_some_and(|t| t.contains("migrate running container")) => {
                        tracing::info!("CT {vmid} was started since the plan: migrating in restart mode");
                        restart.store(true, std::sync::atomic::Ordering::Relaxed);
                        self.client.ct_migrate(&m.from, vmid, &m.to, true, shutdown).await?
                    }
                    other => other?,
                };
                self.client.wait_task(&upid, self.opts.timeouts.migrate, &what).await
            })
            .await
            .with_context(|| format!("cannot {what}"))?;
        let how = if restart.into_inner() { "restart mode" } else { "offline" };
        rec.push("migrate", Some(&out), started, Some(format!("{} → {} ({how})", m.from, m.to)));
        Ok(())
    }

    pub(super) async fn start(&self, node: &str, vmid: u32, rec: &mut Rec) -> anyhow::Result<()> {
        let path = format!("/nodes/{node}/lxc/{vmid}/status/start");
        let started = Instant::now();
        let out = self
            .locked("start", || async {
                match self.client.post(&path, &[], Replay::Safe).await {
                    Ok(v) => {
                        let upid = upid_of(&v, &path)?;
                        match self.client.wait_task(&upid, self.opts.timeouts.start, &format!("start CT {vmid}")).await
                        {
                            Ok(o) => Ok(Some(o)),
                            Err(e) if e.is_already_running() => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) if e.is_already_running() => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await
            .with_context(|| format!("cannot start CT {vmid} on node {node}"))?;
        let detail = if out.is_none() { Some("already running".to_string()) } else { None };
        rec.push("start", out.as_ref(), started, detail);
        Ok(())
    }

    async fn update_config(
        &self,
        node: &str,
        spec: &ContainerSpec,
        changes: &[crate::backend::model::Change],
        rec: &mut Rec,
    ) -> anyhow::Result<()> {
        let vmid = spec.vmid;
        let path = format!("/nodes/{node}/lxc/{vmid}/config");
        let started = Instant::now();
        let mut digest = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&vmid).and_then(|c| c.digest.clone());
        let mut todo: Vec<crate::backend::model::Change> = changes.to_vec();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut params: Vec<(&str, String)> =
                todo.iter().filter_map(|c| c.to.as_ref().map(|v| (c.key.as_str(), v.clone()))).collect();
            let deletes: Vec<&str> = todo.iter().filter(|c| c.to.is_none()).map(|c| c.key.as_str()).collect();
            if !deletes.is_empty() {
                params.push(("delete", deletes.join(",")));
            }
            if let Some(d) = &digest {
                params.push(("digest", d.clone()));
            }
            match self.locked("config", || self.client.put(&path, &params, Replay::Unsafe)).await {
                Ok(_) => break,
                Err(e @ PveError::Transport { retryable: true, .. }) if attempts < 4 => {
                    // The answer was lost: see what PVE has now and write only what is missing.
                    tracing::info!("{e}; reading the config again");
                    let (live, new_digest) = self.read_live(node, vmid).await?;
                    let Live::Present(ct) = live else { bail!("CT {vmid} disappeared while its config was written") };
                    todo.retain(|c| !written(c, &ct.config));
                    if todo.is_empty() {
                        break;
                    }
                    digest = new_digest;
                }
                Err(e)
                    if attempts < 4 && e.message().is_some_and(|m| m.contains("detected modified configuration")) =>
                {
                    // The config file changed since it was read (a backup's lock came and went,
                    // or someone edited it). Go on only if the keys to change still hold the
                    // values the plan saw; otherwise the plan is stale.
                    let (live, new_digest) = self.read_live(node, vmid).await?;
                    let Live::Present(ct) = live else { bail!("CT {vmid} disappeared while its config was written") };
                    todo.retain(|c| !written(c, &ct.config));
                    if let Some(c) = todo.iter().find(|c| ct.config.get(&c.key) != c.from.as_ref()) {
                        return Err(e).with_context(|| {
                            format!(
                                "cannot change the config of CT {vmid}: `{}` changed on PVE since the plan (now {}); plan again",
                                c.key,
                                ct.config.get(&c.key).map(String::as_str).unwrap_or("unset")
                            )
                        });
                    }
                    if todo.is_empty() {
                        break;
                    }
                    tracing::info!(
                        "CT {vmid}: config changed since the plan (digest), unrelated keys only; writing again"
                    );
                    digest = new_digest;
                }
                Err(e) => return Err(e).with_context(|| format!("cannot change the config of CT {vmid}")),
            }
        }
        let detail = changes
            .iter()
            .map(|c| match (&c.from, &c.to) {
                _ if c.key == "description" => "description".to_string(),
                (f, Some(t)) => format!("{}: {} → {t}", c.key, f.as_deref().unwrap_or("unset")),
                (_, None) => format!("{}: deleted", c.key),
            })
            .collect::<Vec<_>>()
            .join(", ");
        rec.push("config", None, started, Some(detail));
        Ok(())
    }

    /// What PVE keeps pending for the running CT `vmid` (`GET …/pending`: entries with
    /// `pending` or `delete`) is applied by a reboot (`POST …/status/reboot`, recorded as
    /// `reboot`) when the recreate policy allows a restart
    /// ([`crate::backend::model::RecreatePolicy::allows_restart`]); otherwise a warning says it
    /// stays pending until the next restart and how to restart now.
    async fn apply_pending(&self, node: &str, vmid: u32, opts: &ApplyOptions, rec: &mut Rec) -> anyhow::Result<()> {
        let pending = self.client.get(&format!("/nodes/{node}/lxc/{vmid}/pending"), &[]).await?;
        let keys: Vec<String> = pending
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let key = i.get("key").and_then(Value::as_str)?;
                if i.get("delete").is_some_and(|v| !v.is_null()) {
                    Some(format!("{key} (delete)"))
                } else {
                    i.get("pending").is_some_and(|v| !v.is_null()).then(|| key.to_string())
                }
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        if !opts.recreate.allows_restart() {
            rec.warnings.push(format!(
                "pending until the next restart: CT {vmid} applies {} when it starts again; the recreate policy \
                 `never` allows no restart — re-run with --allow-recreate, or run `pct reboot {vmid}` on node {node}",
                keys.join(", ")
            ));
            return Ok(());
        }
        let started = Instant::now();
        let secs = self.opts.timeouts.shutdown.as_secs().max(1);
        let out = self
            .locked("reboot", || async {
                let upid = self.client.ct_reboot(node, vmid, secs).await?;
                let wait = self.opts.timeouts.shutdown + self.opts.timeouts.start;
                self.client.wait_task(&upid, wait, &format!("reboot CT {vmid}")).await
            })
            .await
            .with_context(|| format!("cannot reboot CT {vmid} on node {node} to apply {}", keys.join(", ")))?;
        rec.push("reboot", Some(&out), started, Some(format!("applies {}", keys.join(", "))));
        Ok(())
    }

    async fn resize(&self, node: &str, vmid: u32, disk: &str, gib: u64, rec: &mut Rec) -> anyhow::Result<()> {
        let path = format!("/nodes/{node}/lxc/{vmid}/resize");
        let started = Instant::now();
        let params = [("disk", disk.to_string()), ("size", format!("{gib}G"))];
        let out = self
            .locked("resize", || async {
                match self.client.put(&path, &params, Replay::Safe).await {
                    Ok(Value::String(upid)) if upid.starts_with("UPID:") => self
                        .client
                        .wait_task(&upid, self.opts.timeouts.resize, &format!("resize CT {vmid} {disk}"))
                        .await
                        .map(Some),
                    Ok(_) => Ok(None),
                    // A repeated resize after a lost answer: the first one went through.
                    Err(e) if e.message().is_some_and(|m| m.contains("already at specified size")) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await
            .with_context(|| format!("cannot grow {disk} of CT {vmid} to {gib} GiB"))?;
        rec.push("resize", out.as_ref(), started, Some(format!("{disk} → {gib}G")));
        Ok(())
    }

    /// Reads the DHCP address of `net0` from `GET …/interfaces`, polling with backoff for at most
    /// `timeout`.
    async fn dhcp_address(&self, node: &str, vmid: u32, timeout: Duration) -> anyhow::Result<Option<IpAddr>> {
        let path = format!("/nodes/{node}/lxc/{vmid}/interfaces");
        let iface = self.opts.defaults.interface.clone();
        let start = Instant::now();
        let mut delay = Duration::from_millis(200);
        loop {
            let ifs = self.client.get(&path, &[]).await?;
            let found = ifs
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i.get("name").and_then(Value::as_str) == Some(iface.as_str()))
                .find_map(|i| {
                    i.get("inet")
                        .and_then(Value::as_str)
                        .and_then(|c| c.split('/').next())
                        .and_then(|a| a.parse::<IpAddr>().ok())
                });
            if found.is_some() {
                return Ok(found);
            }
            if start.elapsed() >= timeout {
                bail!("CT {vmid} got no DHCP address on {iface} within {:.1} s", timeout.as_secs_f64());
            }
            tokio::time::sleep(delay.min(timeout.saturating_sub(start.elapsed()))).await;
            delay = (delay * 2).min(Duration::from_secs(3));
        }
    }
}

/// Whether PVE's config (pending values applied) shows `c` written. A new volume
/// (`STORAGE:SIZE,mp=…`) shows as the volume PVE allocated (`STORAGE:vm-…,mp=…,size=…`): the
/// key holding a volume of that storage at that path counts, so a repeated write never allocates
/// a second volume.
fn written(c: &crate::backend::model::Change, config: &std::collections::BTreeMap<String, String>) -> bool {
    let live = config.get(&c.key);
    if live == c.to.as_ref() {
        return true;
    }
    let (Some(live), Some(to)) = (live, &c.to) else { return false };
    let (to_vol, to_props) = super::planner::split_props(to);
    let (live_vol, live_props) = super::planner::split_props(live);
    let storage = |v: &Option<String>| v.as_deref().and_then(|v| v.split_once(':')).map(|(s, _)| s.to_string());
    c.key.starts_with("mp")
        && !to_props.contains_key("size")
        && storage(&to_vol).is_some()
        && storage(&to_vol) == storage(&live_vol)
        && to_props.get("mp") == live_props.get("mp")
}

#[derive(Default)]
struct Final {
    address: Option<String>,
    status: Option<String>,
    created: bool,
}

#[cfg(test)]
mod tests {
    use super::written;
    use crate::backend::model::Change;
    use std::collections::BTreeMap;

    #[test]
    fn a_new_volume_counts_as_written_once_pve_allocated_it() {
        let add = Change { key: "mp0".into(), from: None, to: Some("local-lvm:4,mp=/data".into()) };
        let cfg = |v: &str| BTreeMap::from([("mp0".to_string(), v.to_string())]);
        assert!(written(&add, &cfg("local-lvm:vm-101-disk-1,mp=/data,size=4G")));
        assert!(!written(&add, &cfg("local-lvm:vm-101-disk-1,mp=/other,size=4G")));
        assert!(!written(&add, &cfg("ceph:vm-101-disk-1,mp=/data,size=4G")));
        assert!(!written(&add, &BTreeMap::new()));
        let delete = Change { key: "mp0".into(), from: Some("local-lvm:vm-101-disk-1,mp=/data".into()), to: None };
        assert!(written(&delete, &BTreeMap::new()));
        assert!(!written(&delete, &cfg("local-lvm:vm-101-disk-1,mp=/data")));
        let memory = Change { key: "memory".into(), from: Some("512".into()), to: Some("1024".into()) };
        assert!(written(&memory, &BTreeMap::from([("memory".to_string(), "1024".to_string())])));
    }
}
