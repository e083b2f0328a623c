//! The Proxmox VE backend: plans and applies a container over the PVE API.
//!
//! * [`desired`] maps a spec to PVE's parameters (pure);
//! * [`planner`] compares desired and live state (pure, exhaustively unit-tested);
//! * [`PveBackend`] reads live state, executes plans and records every action.
//!
//! Execution rules (PVE behaviour handled here, each covered by `tests/provision_pve.rs`):
//!
//! * `CT is locked (…)` / `can't lock file … got timeout` — the operation is repeated with
//!   capped exponential backoff for at most [`Timeouts::lock`], whether the error came as an
//!   HTTP answer or as a task's exit status;
//! * a create that got no answer is repeated; "already exists" after such a repeat means the
//!   first attempt went through — its `vzcreate` task is looked up and waited for;
//! * "already running" for a start and "not running" for a shutdown/stop are success;
//!   "does not exist" means absent;
//! * `PUT …/config` carries the digest read by `plan`, so a concurrent change fails instead of
//!   being overwritten; when its answer is lost the config is read again and only what is still
//!   missing is written;
//! * concurrent provisions of the same node share one template download and one
//!   `GET /nodes/{node}/status`.

pub mod desired;
pub mod planner;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use backon::{ExponentialBuilder, Retryable};
use serde_json::Value;
use tokio::sync::OnceCell;

use self::desired::{Desired, PveDefaults, TEMPLATE_BASE_URL, create_params, desired, template_file, template_volid};
use self::planner::{Live, LiveCt};
use crate::backend::model::{
    Action, ActionRecord, ApplyOptions, BackendKind, ContainerPlan, Outcome, Provision, RecreatePolicy,
};
use crate::inventory::{ContainerSpec, IpConfig};
use crate::pve::{PveClient, PveError, Replay, TaskOutcome};

/// Per-operation timeouts (how long a task may run before the step gives up on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// `vzcreate` (unpacking a template on slow storage takes minutes): 600 s.
    pub create: Duration,
    /// `vzstart`: 120 s.
    pub start: Duration,
    /// Clean `vzshutdown` before a destroy; `vzstop` follows when it fails: 120 s.
    pub shutdown: Duration,
    /// `vzstop`: 60 s.
    pub stop: Duration,
    /// `vzdestroy`: 300 s.
    pub destroy: Duration,
    /// Template `download`: 1800 s.
    pub download: Duration,
    /// `resize`: 300 s.
    pub resize: Duration,
    /// How long a locked container is waited for (`CT is locked`): 120 s.
    pub lock: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            create: Duration::from_secs(600),
            start: Duration::from_secs(120),
            shutdown: Duration::from_secs(120),
            stop: Duration::from_secs(60),
            destroy: Duration::from_secs(300),
            download: Duration::from_secs(1800),
            resize: Duration::from_secs(300),
            lock: Duration::from_secs(120),
        }
    }
}

/// Options of the backend.
#[derive(Debug, Clone)]
pub struct PveBackendOptions {
    /// Template, network and storage settings.
    pub defaults: PveDefaults,
    /// The configured node (`PROXMOX_NODE`); a spec's `NODE` wins; `None` discovers it.
    pub node: Option<String>,
    /// Timeouts.
    pub timeouts: Timeouts,
}

#[derive(Debug, Clone, Default)]
struct Cached {
    digest: Option<String>,
    warnings: Vec<String>,
}

/// The PVE backend. Share one instance (and so one client session) across concurrent provisions.
pub struct PveBackend {
    client: Arc<PveClient>,
    opts: PveBackendOptions,
    discovered: OnceCell<String>,
    arches: tokio::sync::Mutex<HashMap<String, String>>,
    templates: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    cache: Mutex<HashMap<u32, Cached>>,
}

/// Collects the actions and warnings of one apply.
#[derive(Default)]
struct Rec {
    actions: Vec<ActionRecord>,
    warnings: Vec<String>,
}

impl Rec {
    fn push(&mut self, action: &str, task: Option<&TaskOutcome>, started: Instant, detail: Option<String>) {
        if let Some(t) = task {
            self.warnings.extend(t.warnings.iter().cloned());
        }
        tracing::info!(
            "{action}{}{} ({} ms)",
            task.map(|t| format!(" {}: {}", t.upid, t.exit_status)).unwrap_or_default(),
            detail.as_deref().map(|d| format!(" — {d}")).unwrap_or_default(),
            started.elapsed().as_millis()
        );
        self.actions.push(ActionRecord {
            action: action.into(),
            upid: task.map(|t| t.upid.clone()),
            exit_status: task.map(|t| t.exit_status.clone()),
            duration_ms: started.elapsed().as_millis() as u64,
            detail,
        });
    }
}

fn upid_of(v: &Value, what: &str) -> Result<String, PveError> {
    v.as_str().filter(|s| s.starts_with("UPID:")).map(str::to_string).ok_or_else(|| PveError::Decode {
        method: "POST".into(),
        path: what.into(),
        detail: format!("expected a UPID, got {v}"),
    })
}

fn value_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl PveBackend {
    /// A backend over `client`.
    pub fn new(client: Arc<PveClient>, opts: PveBackendOptions) -> Self {
        Self {
            client,
            opts,
            discovered: OnceCell::new(),
            arches: tokio::sync::Mutex::new(HashMap::new()),
            templates: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client (shared session, request counter).
    pub fn client(&self) -> &Arc<PveClient> {
        &self.client
    }

    /// Refuses, before any API call, spec options PVE reserves for `root@pam` when the identity
    /// is not a `root@pam` ticket.
    ///
    /// # Errors
    /// Names each option, the identity in use and the fix; also the spec's own problems.
    pub fn check_permissions(&self, spec: &ContainerSpec) -> anyhow::Result<()> {
        let d = desired(spec, &self.opts.defaults, "amd64")?;
        if self.client.auth().is_root() {
            return Ok(());
        }
        let opts = desired::root_only_options(&d);
        if opts.is_empty() {
            return Ok(());
        }
        let file = spec.sources.first().cloned().unwrap_or_else(|| spec.dir.join("container.env"));
        bail!(
            "{} (vmid {}): {} — PVE allows {} only to root@pam logged in with a password, and the API identity is `{}`. \
             Fix: set PROXMOX_USER=root@pam with PROXMOX_PASSWORD (ticket auth), or remove {} from MOUNT/FEATURES in {}",
            spec.name,
            spec.vmid,
            opts.join("; "),
            if opts.len() == 1 { "this option" } else { "these options" },
            self.client.auth().identity(),
            if opts.len() == 1 { "it" } else { "them" },
            file.display()
        )
    }

    /// The node for `spec`: its `NODE`, else `PROXMOX_NODE`, else the only online node of
    /// `GET /nodes`.
    ///
    /// # Errors
    /// API errors; several or no online nodes without a configured one.
    pub async fn node_for(&self, spec: &ContainerSpec) -> anyhow::Result<String> {
        if let Some(n) = spec.node.clone().or_else(|| self.opts.node.clone()) {
            return Ok(n);
        }
        let n = self
            .discovered
            .get_or_try_init(|| async {
                let nodes = self.client.get("/nodes", &[]).await?;
                let online: Vec<String> = nodes
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|n| n.get("status").and_then(Value::as_str) == Some("online"))
                    .filter_map(|n| n.get("node").and_then(Value::as_str).map(str::to_string))
                    .collect();
                match online.as_slice() {
                    [one] => Ok(one.clone()),
                    [] => Err(anyhow!("GET /nodes lists no online node; set PROXMOX_NODE")),
                    many => Err(anyhow!(
                        "the cluster has several online nodes ({}); set PROXMOX_NODE, or NODE in a lib's container.env",
                        many.join(", ")
                    )),
                }
            })
            .await?;
        Ok(n.clone())
    }

    /// The template arch of `node` from `GET /nodes/{node}/status` (`current-kernel.machine`),
    /// fetched once per node.
    async fn arch(&self, node: &str) -> anyhow::Result<String> {
        let mut map = self.arches.lock().await;
        if let Some(a) = map.get(node) {
            return Ok(a.clone());
        }
        let st = self.client.get(&format!("/nodes/{node}/status"), &[]).await?;
        let machine = st.pointer("/current-kernel/machine").and_then(Value::as_str).unwrap_or("");
        let arch = desired::arch_of_machine(machine).to_string();
        map.insert(node.to_string(), arch.clone());
        Ok(arch)
    }

    async fn desired_for(&self, spec: &ContainerSpec, node: &str) -> anyhow::Result<Desired> {
        let arch = self.arch(node).await?;
        Ok(desired(spec, &self.opts.defaults, &arch)?)
    }

    /// Reads the live container: config (pending values applied) with its digest, the pending
    /// keys and whether it runs.
    async fn read_live(&self, node: &str, vmid: u32) -> Result<(Live, Option<String>), PveError> {
        let base = format!("/nodes/{node}/lxc/{vmid}");
        let config = match self.client.get(&format!("{base}/config"), &[]).await {
            Ok(c) => c,
            Err(e) if e.is_absent() => return Ok((Live::Absent, None)),
            Err(e) => return Err(e),
        };
        let (pending_path, status_path) = (format!("{base}/pending"), format!("{base}/status/current"));
        let (pending, status) =
            tokio::try_join!(self.client.get(&pending_path, &[]), self.client.get(&status_path, &[]))?;
        let mut ct = LiveCt::default();
        let mut digest = None;
        for (k, v) in config.as_object().into_iter().flatten() {
            if k == "digest" {
                digest = v.as_str().map(str::to_string);
            } else if !v.is_null() {
                ct.config.insert(k.clone(), value_string(v));
            }
        }
        for item in pending.as_array().into_iter().flatten() {
            if let Some(k) = item.get("key").and_then(Value::as_str)
                && (item.get("pending").is_some() || item.get("delete").is_some())
            {
                ct.pending.insert(k.to_string());
            }
        }
        ct.running = status.get("status").and_then(Value::as_str) == Some("running");
        Ok((Live::Present(ct), digest))
    }

    /// Plans `spec` against the live container under `policy` (reads only).
    ///
    /// # Errors
    /// Root-only options under a non-root identity (before any API call), spec problems
    /// ([`crate::error::Problems`] inside the `anyhow::Error`), API errors.
    pub async fn plan(&self, spec: &ContainerSpec, policy: RecreatePolicy) -> anyhow::Result<ContainerPlan> {
        self.check_permissions(spec)?;
        let node = self.node_for(spec).await?;
        let d = self.desired_for(spec, &node).await?;
        let (live, digest) = self
            .read_live(&node, spec.vmid)
            .await
            .with_context(|| format!("{}: cannot read CT {} on node {node}", spec.name, spec.vmid))?;
        let planned = planner::plan(&d, &live, policy, self.client.auth().is_root());
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(spec.vmid, Cached { digest, warnings: planned.warnings.clone() });
        Ok(ContainerPlan {
            name: spec.name.clone(),
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            action: planned.action,
            start: planned.start,
        })
    }

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
            Err(e) => Outcome::Failed { error: crate::ci::redact(&format!("{e:#}")) },
        };
        // Without a network call: a refused spec must not reach the API at all.
        let node = spec.node.clone().or_else(|| self.opts.node.clone()).or_else(|| self.discovered.get().cloned());
        Provision {
            backend: BackendKind::Pve,
            name: spec.name.clone(),
            node,
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            address: fin.address,
            ssh_port: opts.ssh_port,
            plan: plan.clone(),
            actions: rec.actions,
            warnings: rec.warnings,
            status: fin.status,
            created: fin.created,
            protected_by: None,
            inputs_digest: None,
            outcome,
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
        let node = self.node_for(spec).await?;
        let vmid = spec.vmid;
        match &plan.action {
            Action::Refused { reasons } => {
                fin.status = None;
                bail!(
                    "{} (vmid {vmid}) needs to be recreated ({}), which the recreate policy `never` forbids; nothing was changed. \
                     Re-run with --allow-recreate (or --recreate when-needed) to destroy and recreate it — its data is lost unless snapshotted",
                    spec.name,
                    reasons.join("; ")
                );
            }
            Action::Nothing => {}
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
                self.shutdown_and_destroy(&node, vmid, rec).await?;
                self.create(&node, &d, opts, rec).await?;
                fin.created = true;
            }
            Action::Update { changes, resizes, .. } => {
                if !changes.is_empty() {
                    self.update_config(&node, spec, changes, rec).await?;
                }
                for r in resizes {
                    self.resize(&node, vmid, &r.disk, r.to_gib, rec).await?;
                }
                if !plan.start {
                    let pending = self.client.get(&format!("/nodes/{node}/lxc/{vmid}/pending"), &[]).await?;
                    let keys: Vec<&str> = pending
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|i| i.get("pending").is_some() || i.get("delete").is_some())
                        .filter_map(|i| i.get("key").and_then(Value::as_str))
                        .collect();
                    if !keys.is_empty() {
                        rec.warnings
                            .push(format!("reboot needed: CT {vmid} applies {} at its next start", keys.join(", ")));
                    }
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
    async fn locked<T, F, Fut>(&self, what: &str, op: F) -> Result<T, PveError>
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

    /// Makes sure the template is on the storage, downloading it from [`TEMPLATE_BASE_URL`]
    /// when missing; concurrent callers for the same node and template share one download.
    async fn ensure_template(&self, node: &str, d: &Desired, rec: &mut Rec) -> anyhow::Result<()> {
        let file = template_file(&self.opts.defaults.template, &d.arch);
        let (sid, volid) = template_volid(&self.opts.defaults.storage, &file);
        let cell = {
            let mut map = self.templates.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(format!("{node}/{volid}")).or_default().clone()
        };
        let mut record: Option<(TaskOutcome, Instant)> = None;
        cell.get_or_try_init(|| async {
            let content = self
                .client
                .get(&format!("/nodes/{node}/storage/{sid}/content"), &[("content", "vztmpl".into())])
                .await?;
            let present = content
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v.get("volid").and_then(Value::as_str) == Some(volid.as_str()));
            if present {
                return Ok::<(), anyhow::Error>(());
            }
            let started = Instant::now();
            let url = format!("{TEMPLATE_BASE_URL}{file}");
            tracing::info!("template {volid} missing on {node}: downloading {url}");
            // A repeated download of the same URL to the same file name is harmless (PVE writes a
            // temporary file and renames it), so it is safe to replay.
            let upid = self
                .client
                .post(
                    &format!("/nodes/{node}/storage/{sid}/download-url"),
                    &[("url", url.clone()), ("content", "vztmpl".into()), ("filename", file.clone())],
                    Replay::Safe,
                )
                .await?;
            let upid = upid_of(&upid, "download-url")?;
            let out = self.client.wait_task(&upid, self.opts.timeouts.download, &format!("download {file}")).await?;
            record = Some((out, started));
            Ok(())
        })
        .await
        .with_context(|| format!("cannot provide the template {volid} on node {node}"))?;
        if let Some((out, started)) = record {
            rec.push("download", Some(&out), started, Some(volid));
        }
        Ok(())
    }

    async fn create(&self, node: &str, d: &Desired, opts: &ApplyOptions, rec: &mut Rec) -> anyhow::Result<()> {
        let key = crate::keys::ensure(&opts.share, d.vmid, &d.hostname)?;
        let params = create_params(d, &key.public_line);
        let params: Vec<(&str, String)> = params.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let path = format!("/nodes/{node}/lxc");
        let started = Instant::now();
        let mut lost_answers = 0;
        let upid = loop {
            match self.locked("create", || self.client.post(&path, &params, Replay::Unsafe)).await {
                Ok(v) => break upid_of(&v, &path)?,
                Err(PveError::Transport { detail, retryable: true, .. }) if lost_answers < 5 => {
                    lost_answers += 1;
                    tracing::info!("create CT {}: no answer ({detail}); repeating", d.vmid);
                    tokio::time::sleep(Duration::from_millis(100 << lost_answers)).await;
                }
                Err(e) if lost_answers > 0 && e.is_already_exists() => {
                    break self.find_create_task(node, d.vmid).await?;
                }
                Err(e) => return Err(e).with_context(|| format!("cannot create CT {} on node {node}", d.vmid)),
            }
        };
        let out = self
            .locked("create", || async {
                self.client.wait_task(&upid, self.opts.timeouts.create, &format!("create CT {}", d.vmid)).await
            })
            .await
            .with_context(|| format!("creating CT {} on node {node} failed", d.vmid))?;
        rec.push("create", Some(&out), started, Some(d.ostemplate.clone()));
        Ok(())
    }

    /// The latest `vzcreate` task of `vmid` started by this identity (after a create whose
    /// answer was lost).
    async fn find_create_task(&self, node: &str, vmid: u32) -> anyhow::Result<String> {
        let tasks = self
            .client
            .get(
                &format!("/nodes/{node}/tasks"),
                &[("vmid", vmid.to_string()), ("typefilter", "vzcreate".into()), ("limit", "10".into())],
            )
            .await?;
        let me = self.client.auth().identity();
        tasks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("vzcreate"))
            .filter(|t| {
                t.get("user").and_then(Value::as_str).is_none_or(|u| u == me || me.starts_with(&format!("{u}!")))
            })
            .find_map(|t| t.get("upid").and_then(Value::as_str).map(str::to_string))
            .ok_or_else(|| {
                anyhow!("CT {vmid} exists after a create whose answer was lost, but no vzcreate task of {me} was found")
            })
    }

    async fn start(&self, node: &str, vmid: u32, rec: &mut Rec) -> anyhow::Result<()> {
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
                    todo.retain(|c| ct.config.get(&c.key) != c.to.as_ref());
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
                    todo.retain(|c| ct.config.get(&c.key) != c.to.as_ref());
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

    /// Shuts the container down (stop after the shutdown timeout) and destroys it with
    /// `purge=1` and `destroy-unreferenced-disks=1`. An absent container is fine.
    async fn shutdown_and_destroy(&self, node: &str, vmid: u32, rec: &mut Rec) -> anyhow::Result<()> {
        let base = format!("/nodes/{node}/lxc/{vmid}");
        let status = match self.client.get(&format!("{base}/status/current"), &[]).await {
            Ok(s) => s,
            Err(e) if e.is_absent() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if status.get("status").and_then(Value::as_str) == Some("running") {
            let started = Instant::now();
            let secs = self.opts.timeouts.shutdown.as_secs().max(1);
            let shutdown = self
                .locked("shutdown", || async {
                    match self
                        .client
                        .post(&format!("{base}/status/shutdown"), &[("timeout", secs.to_string())], Replay::Safe)
                        .await
                    {
                        Ok(v) => {
                            let upid = upid_of(&v, "shutdown")?;
                            let wait = self.opts.timeouts.shutdown + Duration::from_secs(30);
                            self.client.wait_task(&upid, wait, &format!("shutdown CT {vmid}")).await.map(Some)
                        }
                        Err(e) if e.is_not_running() => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .await;
            match shutdown {
                Ok(out) => rec.push("shutdown", out.as_ref(), started, None),
                Err(e) => {
                    tracing::warn!("CT {vmid}: clean shutdown failed ({e}); stopping it");
                    rec.push("shutdown", None, started, Some(format!("failed: {e}")));
                    let started = Instant::now();
                    let out = self
                        .locked("stop", || async {
                            match self.client.post(&format!("{base}/status/stop"), &[], Replay::Safe).await {
                                Ok(v) => {
                                    let upid = upid_of(&v, "stop")?;
                                    self.client
                                        .wait_task(&upid, self.opts.timeouts.stop, &format!("stop CT {vmid}"))
                                        .await
                                        .map(Some)
                                }
                                Err(e) if e.is_not_running() => Ok(None),
                                Err(e) => Err(e),
                            }
                        })
                        .await
                        .with_context(|| format!("cannot stop CT {vmid}"))?;
                    rec.push("stop", out.as_ref(), started, None);
                }
            }
        }
        let started = Instant::now();
        let out = self
            .locked("destroy", || async {
                match self
                    .client
                    .delete(&base, &[("purge", "1".into()), ("destroy-unreferenced-disks", "1".into())], Replay::Safe)
                    .await
                {
                    Ok(v) => {
                        let upid = upid_of(&v, "destroy")?;
                        self.client
                            .wait_task(&upid, self.opts.timeouts.destroy, &format!("destroy CT {vmid}"))
                            .await
                            .map(Some)
                    }
                    Err(e) if e.is_absent() => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await
            .with_context(|| format!("cannot destroy CT {vmid}"))?;
        rec.push("destroy", out.as_ref(), started, Some("purge=1,destroy-unreferenced-disks=1".into()));
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

    /// The hostname of the live CT `spec.vmid` on its node (`GET /nodes/{node}/lxc/{vmid}/config`),
    /// `None` when the CT does not exist (PVE's "does not exist"); an empty string when its
    /// config has no `hostname`.
    ///
    /// # Errors
    /// Node discovery and API errors.
    pub async fn live_hostname(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        let node = self.node_for(spec).await?;
        match self.client.get(&format!("/nodes/{node}/lxc/{}/config", spec.vmid), &[]).await {
            Ok(c) => Ok(Some(c.get("hostname").and_then(Value::as_str).unwrap_or("").to_string())),
            Err(e) if e.is_absent() => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read CT {} on node {node}", spec.vmid))),
        }
    }

    /// Destroys the container of `spec` (shutdown, stop after the timeout, destroy with purge).
    /// An absent container yields no actions.
    ///
    /// # Errors
    /// API and task errors.
    pub async fn destroy(&self, spec: &ContainerSpec) -> anyhow::Result<Vec<ActionRecord>> {
        let node = self.node_for(spec).await?;
        let mut rec = Rec::default();
        self.shutdown_and_destroy(&node, spec.vmid, &mut rec).await?;
        Ok(rec.actions)
    }
}

#[derive(Default)]
struct Final {
    address: Option<String>,
    status: Option<String>,
    created: bool,
}
