//! Making and removing containers on PVE: the template download (https, checked against the
//! node's template index; shared by concurrent provisions of one node, failure included), `POST …/lxc` (repeated when its answer is lost; an "already exists"
//! after a repeat finds the first attempt's `vzcreate` task), and the destroy sequence
//! (`vzshutdown`, `vzstop` when it fails, `DELETE …/lxc/{vmid}` with `purge=1` and
//! `destroy-unreferenced-disks=1`).

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use super::desired::template::template_source;
use super::desired::{Desired, Lease, create_params, template_file, template_volid, with_lease};
use super::lease::Acquired;
use super::{PveBackend, Rec};
use crate::error::{Hint, Hinted};
use crate::inventory::ContainerSpec;
use crate::model::{ActionRecord, ApplyOptions};
use crate::pve::{PveError, TaskFilter, TaskOutcome};

/// What a create did.
#[derive(Debug)]
pub(super) enum Created {
    /// This run created the container with the task `upid`. `failed`: the task failed, but the
    /// container stands (a set-up that runs a `start=1` start inside the create task failed that
    /// start); the caller records the container as created, releases its lease, and reports it.
    Yes { upid: String, failed: Option<anyhow::Error> },
    /// The vmid was taken when the create arrived: nothing was created.
    Taken,
}

impl PveBackend {
    /// Makes sure the template is on the storage: when missing, downloads it over https with
    /// the checksum of the node's template index (`GET /nodes/{node}/aplinfo`, see
    /// [`super::desired::template`]) through `POST /nodes/{node}/storage/{storage}/download-url`
    /// (`checksum`, `checksum-algorithm`). Concurrent callers for the same node and template
    /// share one check and one download, and its outcome: after a failure every waiter gets the
    /// same error without a second request.
    ///
    /// # Errors
    /// API and task errors; no index entry for the node's architecture (the message names it).
    pub(super) async fn ensure_template(&self, node: &str, d: &Desired, rec: &mut Rec) -> anyhow::Result<()> {
        let file = template_file(&self.opts.defaults.template, &d.arch);
        let (sid, volid) = template_volid(&self.opts.defaults.storage, &file);
        let cell = {
            let mut map = self.templates.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(format!("{node}/{volid}")).or_default().clone()
        };
        let mut record: Option<(TaskOutcome, Instant)> = None;
        let outcome = cell
            .get_or_init(|| async {
                self.provide_template(node, &sid, &volid, &file, &d.arch, &mut record)
                    .await
                    .with_context(|| format!("cannot provide the template {volid} on node {node}"))
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        if let Some((out, started)) = record {
            rec.push("download", Some(&out), started, Some(volid));
        }
        outcome.clone().map_err(|e| anyhow!(e))
    }

    /// The template check and download behind [`PveBackend::ensure_template`] (run once per
    /// node and template).
    async fn provide_template(
        &self,
        node: &str,
        sid: &str,
        volid: &str,
        file: &str,
        arch: &str,
        record: &mut Option<(TaskOutcome, Instant)>,
    ) -> anyhow::Result<()> {
        let pve_node = self.client.node(node);
        if pve_node.templates(sid).await?.iter().any(|v| v == volid) {
            return Ok(());
        }
        let index = pve_node.aplinfo().await?;
        let source = template_source(&index, file, arch, node)?;
        let started = Instant::now();
        tracing::info!("template {volid} missing on {node}: downloading {} ({} checked)", source.url, source.algorithm);
        let upid = pve_node
            .download_url(
                sid,
                &[
                    ("url", source.url.clone()),
                    ("content", "vztmpl".into()),
                    ("filename", file.to_string()),
                    ("checksum", source.checksum.clone()),
                    ("checksum-algorithm", source.algorithm.to_string()),
                ],
            )
            .await?;
        let out = self.client.wait_task(&upid, self.opts.timeouts.download, &format!("download {file}")).await?;
        *record = Some((out, started));
        Ok(())
    }

    /// Creates CT `d.vmid` with `lease` in its description (the create decides which run gets
    /// the vmid: PVE refuses a second create). [`Created::Taken`] when PVE answered that the vmid
    /// exists on a first attempt: another run (or someone) got it first.
    pub(super) async fn create(
        &self,
        node: &str,
        d: &Desired,
        opts: &ApplyOptions,
        lease: &Lease,
        start: bool,
        rec: &mut Rec,
    ) -> anyhow::Result<Created> {
        let key = crate::ssh::keys::ensure(&opts.share, d.vmid, &d.hostname)?;
        let params = create_params(d, &key.public_line);
        let mut params: Vec<(&str, String)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), if k == "description" { with_lease(v, lease) } else { v.clone() }))
            .collect();
        if start {
            params.push(("start", "1".into()));
        }
        let pve_node = self.client.node(node);
        let started = Instant::now();
        let mut lost_answers = 0;
        let upid = loop {
            match self.locked("create", || pve_node.create_ct(&params)).await {
                Ok(upid) => break upid,
                Err(PveError::Transport { detail, retryable: true, .. }) if lost_answers < 5 => {
                    lost_answers += 1;
                    tracing::info!("create CT {}: no answer ({detail}); repeating", d.vmid);
                    tokio::time::sleep(Duration::from_millis(100 << lost_answers)).await;
                }
                Err(e) if lost_answers > 0 && e.is_already_exists() => {
                    break self.find_create_task(node, d.vmid).await?;
                }
                Err(e) if e.is_already_exists() => {
                    tracing::warn!("create CT {}: {e}; another run got the vmid first", d.vmid);
                    return Ok(Created::Taken);
                }
                Err(e) => return Err(e).with_context(|| format!("cannot create CT {} on node {node}", d.vmid)),
            }
        };
        let waited = self
            .locked("create", || async {
                self.client.wait_task(&upid, self.opts.timeouts.create, &format!("create CT {}", d.vmid)).await
            })
            .await;
        let out = match waited {
            Ok(out) => out,
            // PVE removes what a failed create made; a container still there without its
            // `create` lock was made, and what failed came after (a start run inside the task).
            Err(e @ PveError::Task { .. })
                if start
                    && self
                        .client
                        .ct(node, d.vmid)
                        .config()
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|c| c.lock().is_none()) =>
            {
                // The create's own record keeps its UPID and the exit status the task ended with.
                rec.push("create", failed_task(&e, started).as_ref(), started, Some(d.ostemplate.clone()));
                let failed = start_failed(d.vmid, node, e);
                return Ok(Created::Yes { upid, failed: Some(failed) });
            }
            Err(e) => return Err(e).with_context(|| format!("creating CT {} on node {node} failed", d.vmid)),
        };
        rec.push("create", Some(&out), started, Some(d.ostemplate.clone()));
        Ok(Created::Yes { upid, failed: None })
    }

    /// After a create with `start=1` ended well: did the start happen? PVE's create worker
    /// starts the container itself when the create succeeded (`PVE/API2/LXC.pm`, `create_vm`:
    /// `vm_start` from inside the `vzcreate` worker, which forks a `vzstart` task of its own and
    /// ends; some set-ups, fakepve among them, run the start inside the create task). So: the
    /// container runs now (`GET …/status/current`) — started; else the `vzstart` task of the
    /// vmid begun since the create is waited for like any start (its failure is reported with
    /// its log); no such task — not started, and the caller starts it.
    ///
    /// # Errors
    /// The `vzstart` task failed or timed out; API errors.
    pub(super) async fn started_with_create(
        &self,
        node: &str,
        vmid: u32,
        create_upid: &str,
        rec: &mut Rec,
    ) -> anyhow::Result<bool> {
        let started = Instant::now();
        let ct = self.client.ct(node, vmid);
        if ct.status().await?.is_some_and(|s| s.running()) {
            rec.push("start", None, started, Some("with the create (start=1)".into()));
            return Ok(true);
        }
        let since = crate::pve::upid_start(create_upid).unwrap_or(0);
        let filter = TaskFilter { vmid: Some(vmid), kind: Some("vzstart".into()), active: false, limit: 5 };
        let task = self
            .client
            .node(node)
            .tasks(&filter)
            .await?
            .into_iter()
            .find(|t| t.kind == "vzstart" && crate::pve::upid_start(&t.upid).is_some_and(|s| s >= since));
        let Some(task) = task else {
            tracing::info!("CT {vmid}: created with start=1 but not running, and no vzstart task of it: starting it");
            return Ok(false);
        };
        let out = self
            .client
            .wait_task(&task.upid, self.opts.timeouts.start, &format!("start CT {vmid}"))
            .await
            .map_err(|e| start_failed(vmid, node, e))?;
        rec.push("start", Some(&out), started, Some("started by the create (start=1)".into()));
        Ok(true)
    }

    /// The latest `vzcreate` task of `vmid` started by this identity (after a create whose
    /// answer was lost).
    async fn find_create_task(&self, node: &str, vmid: u32) -> anyhow::Result<String> {
        let filter = TaskFilter { vmid: Some(vmid), kind: Some("vzcreate".into()), active: false, limit: 10 };
        let tasks = self.client.node(node).tasks(&filter).await?;
        let me = self.client.auth().identity();
        tasks
            .into_iter()
            .filter(|t| t.kind == "vzcreate")
            .filter(|t| t.user.as_deref().is_none_or(|u| u == me || me.starts_with(&format!("{u}!"))))
            .map(|t| t.upid)
            .next()
            .ok_or_else(|| {
                anyhow!("CT {vmid} exists after a create whose answer was lost, but no vzcreate task of {me} was found")
            })
    }

    /// Shuts the container down (stop after the shutdown timeout) and destroys it with
    /// `purge=1` and `destroy-unreferenced-disks=1`. An absent container is fine.
    pub(super) async fn shutdown_and_destroy(&self, node: &str, vmid: u32, rec: &mut Rec) -> anyhow::Result<()> {
        let ct = self.client.ct(node, vmid);
        let Some(status) = ct.status().await? else { return Ok(()) };
        if status.running() {
            let started = Instant::now();
            let secs = self.opts.timeouts.shutdown.as_secs().max(1);
            let shutdown = self
                .locked("shutdown", || async {
                    match ct.shutdown(secs).await {
                        Ok(upid) => {
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
                            match ct.stop().await {
                                Ok(upid) => self
                                    .client
                                    .wait_task(&upid, self.opts.timeouts.stop, &format!("stop CT {vmid}"))
                                    .await
                                    .map(Some),
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
                match ct.destroy().await {
                    Ok(upid) => self
                        .client
                        .wait_task(&upid, self.opts.timeouts.destroy, &format!("destroy CT {vmid}"))
                        .await
                        .map(Some),
                    Err(e) if e.is_absent() => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await
            .with_context(|| format!("cannot destroy CT {vmid}"))?;
        rec.push("destroy", out.as_ref(), started, Some("purge=1,destroy-unreferenced-disks=1".into()));
        Ok(())
    }

    /// Destroys the container of `spec` (shutdown, stop after the timeout, destroy with purge) on
    /// the node it is on ([`PveBackend::live_node`]), under its lease ([`super::lease`]: another
    /// run working on it is waited for, bounded). An absent container yields no actions.
    ///
    /// # Errors
    /// API and task errors; another run's lease that outlasts the wait; a PVE lock that does not
    /// clear.
    pub async fn destroy(&self, spec: &ContainerSpec) -> anyhow::Result<Vec<ActionRecord>> {
        let Some(node) = self.live_node(spec).await? else { return Ok(vec![]) };
        let mut rec = Rec::default();
        let held = match self.acquire(&node, spec.vmid).await? {
            Acquired::Absent => return Ok(rec.actions),
            Acquired::Held { held, .. } => held,
        };
        match self.shutdown_and_destroy(&node, spec.vmid, &mut rec).await {
            // The lease went with the container.
            Ok(()) => held.stop(),
            Err(e) => {
                if let Err(r) = self.release(held).await {
                    tracing::warn!("CT {}: cannot remove our lease ({r:#}); it expires by itself", spec.vmid);
                }
                return Err(super::lease::with_lock_hint(e, &node, spec.vmid));
            }
        }
        Ok(rec.actions)
    }
}

/// The record of a task that ran and failed (`e` is [`PveError::Task`]): its UPID and the exit
/// status it ended with, timed from `started`; `None` for any other error (no task ran to the
/// end).
pub(super) fn failed_task(e: &PveError, started: Instant) -> Option<TaskOutcome> {
    match e {
        PveError::Task { upid, exit_status, .. } => Some(TaskOutcome {
            upid: upid.clone(),
            exit_status: exit_status.clone(),
            warnings: Vec::new(),
            duration: started.elapsed(),
        }),
        _ => None,
    }
}

/// The failure of CT `vmid`'s start on `node`. A start task that failed names the way to see
/// why: `pct start VMID --debug` on the node prints LXC's own log of the start, which the task
/// log does not hold. Other failures (API, lock, timeout) keep their own remedies.
pub(super) fn start_failed(vmid: u32, node: &str, e: impl Into<anyhow::Error>) -> anyhow::Error {
    let e: anyhow::Error = e.into();
    let message = format!("cannot start CT {vmid} on node {node}");
    if matches!(e.downcast_ref::<PveError>(), Some(PveError::Task { .. })) {
        let debug = ["pct".to_string(), "start".into(), vmid.to_string(), "--debug".into()];
        Hinted::new(message, Hint::on_node(debug, node)).because(e).into()
    } else {
        e.context(message)
    }
}
