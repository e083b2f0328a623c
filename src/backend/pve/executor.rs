//! Executing a plan on PVE: [`PveBackend::apply`] turns a [`ContainerPlan`] into API calls
//! (create or recreate through `lifecycle`, `PUT …/config` with the plan's digest, `PUT
//! …/resize`, start, the address from the spec or the CT's DHCP lease) and records every action
//! with its task in the [`Provision`] artifact. The PVE rules it applies (lock retries, lost
//! answers) are listed in the module docs of [`super`].

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use anyhow::{Context, bail};

use super::desired::{with_lease, with_user_notes, without_lease};
use super::lease::{Acquired, Held, new_lease, with_lock_hint};
use super::lifecycle::Created;
use super::planner::PveObserved;
use super::{PveBackend, Rec};
use crate::inventory::{ContainerSpec, IpConfig};
use crate::model::PlanPolicy;
use crate::model::{Action, ApplyOptions, BackendKind, ContainerPlan, Outcome, Provision};
use crate::pve::PveError;

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
            Err(e) => {
                let node = plan.node.as_deref().or(spec.node.as_deref()).unwrap_or("(its node)");
                Outcome::Failed { error: crate::actions::redact(&format!("{:#}", with_lock_hint(e, node, spec.vmid))) }
            }
        };
        // Without a network call: a refused spec must not reach the API at all.
        let node = plan.node.clone().or_else(|| {
            spec.node.clone().or_else(|| self.opts.node.clone()).or_else(|| self.discovered.get().cloned())
        });
        // A run that ended before the address was read (a refusal, a failed task) still records
        // the static address the spec gives, as a run that failed before its plan does
        // (`failed_before_plan`): the container that is still there is reached through the
        // artifact by the protect-before-destroy guard and `destroy`. Not a foreign one's.
        let address = fin.address.or_else(|| match (&plan.action, &spec.ip) {
            (Action::Foreign { .. }, _) => None,
            (_, IpConfig::Static { address, .. }) => Some(address.to_string()),
            (_, IpConfig::Dhcp) => None,
        });
        Provision {
            node,
            address,
            actions: rec.actions,
            warnings: rec.warnings,
            status: fin.status,
            created: fin.created_at.is_some(),
            created_at: fin.created_at,
            outcome,
            ..Provision::new(BackendKind::Pve, spec, fin.replanned.unwrap_or_else(|| plan.clone()), opts)
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
        let mut held: Option<Held> = None;
        let result = self.apply_leased(spec, plan, opts, &node, &mut held, rec, fin).await;
        if let Some(h) = held {
            // Also after a failure: the next run must not wait for a lease nobody renews.
            if let Err(e) = self.release(h).await {
                let msg = format!(
                    "CT {}: cannot remove our lease line from its description ({e:#}); it expires by itself within {} s",
                    spec.vmid,
                    super::lease::LEASE_TTL.as_secs()
                );
                tracing::warn!("{msg}");
                rec.warnings.push(msg);
            }
        }
        result
    }

    /// Takes the lease on the container (module docs of [`super::lease`]) and checks that the
    /// plan still holds under it: when the config changed between the plan and the lease (its
    /// digest), or a plan that starts the container finds it running now (`GET
    /// …/status/current`: the digest does not cover the status, and another run's lease written
    /// and removed again leaves the same config), the container is planned again. The new plan
    /// replaces the old one whole — its start and migration too, so nothing another run did
    /// since is done twice — when it changes only in place (recorded in `fin.replanned`);
    /// anything else fails with "plan again".
    async fn lease_and_check(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        node: &str,
        held: &mut Option<Held>,
        fin: &mut Final,
    ) -> anyhow::Result<Option<ContainerPlan>> {
        let vmid = spec.vmid;
        let planned_digest =
            self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&vmid).and_then(|c| c.digest.clone());
        let at = plan.migrate.as_ref().map_or(node, |m| m.from.as_str());
        match self.acquire(at, vmid).await? {
            Acquired::Absent => {
                bail!("{}: CT {vmid} disappeared from node {node} since the plan; plan again", spec.name)
            }
            Acquired::Held { held: h, before, after } => {
                *held = Some(h);
                // Only these plans start because the container was stopped; a recreate starts
                // the new container whatever the old one did.
                let keeps = matches!(plan.action, Action::Nothing | Action::Update { .. } | Action::Adopt { .. });
                let started_since = plan.start && keeps && self.is_running(at, vmid).await?;
                if before.is_some() && before == planned_digest && !started_since {
                    self.set_digest(vmid, after);
                    return Ok(None);
                }
                let what = if started_since { "was started" } else { "changed" };
                tracing::info!("{}: CT {vmid} {what} since the plan; planning again under the lease", spec.name);
            }
        }
        let again = self.plan(spec, PlanPolicy::of(plan)).await?;
        if again.action == plan.action && again.start == plan.start && again.migrate == plan.migrate {
            return Ok(None);
        }
        let fine = again.action == plan.action
            || matches!(again.action, Action::Nothing | Action::Update { .. } | Action::Adopt { .. })
            || (matches!(again.action, Action::Recreate { .. }) && matches!(plan.action, Action::Recreate { .. }));
        if !fine {
            bail!(
                "{}: CT {vmid} changed on PVE since the plan (now: {}); nothing was changed, plan again",
                spec.name,
                summary(&again.action)
            );
        }
        fin.replanned = Some(again.clone());
        Ok(Some(again))
    }

    /// Whether CT `vmid` on `node` runs now (`GET …/status/current`); an absent one does not.
    async fn is_running(&self, node: &str, vmid: u32) -> anyhow::Result<bool> {
        let status = self
            .client
            .ct(node, vmid)
            .status()
            .await
            .with_context(|| format!("cannot read the status of CT {vmid} on node {node}"))?;
        Ok(status.is_some_and(|s| s.status == "running"))
    }

    fn set_digest(&self, vmid: u32, digest: Option<String>) {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).entry(vmid).or_default().digest = digest;
    }

    #[allow(clippy::too_many_arguments)]
    async fn apply_leased(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        node: &str,
        held: &mut Option<Held>,
        rec: &mut Rec,
        fin: &mut Final,
    ) -> anyhow::Result<()> {
        let vmid = spec.vmid;
        let mut plan = plan.clone();
        match &plan.action {
            Action::Refused { reasons, needs_recreate: false } => {
                fin.status = None;
                bail!("{} (vmid {vmid}): {}; nothing was changed", spec.name, reasons.join("; "));
            }
            Action::Refused { reasons, needs_recreate: true } => {
                fin.status = None;
                return Err(crate::error::Hinted::new(
                    format!(
                        "{} (vmid {vmid}) needs to be recreated ({}), which the recreate policy `never` forbids; nothing \
                         was changed (a recreate destroys it: its data is lost unless snapshotted)",
                        spec.name,
                        reasons.join("; ")
                    ),
                    crate::error::Hint::AllowRecreate { container: spec.name.clone() },
                )
                .into());
            }
            Action::Foreign { reason } => {
                fin.status = None;
                bail!("{}: {reason}; nothing was changed", spec.name);
            }
            // Nothing to write: no lease (a converged container sees no write at all).
            Action::Nothing if !plan.start && plan.migrate.is_none() => {}
            Action::Create => {}
            Action::Nothing | Action::Update { .. } | Action::Adopt { .. } | Action::Recreate { .. } => {
                if let Some(again) = self.lease_and_check(spec, &plan, node, held, fin).await? {
                    plan = again;
                }
            }
        }
        match &plan.action {
            Action::Refused { .. } | Action::Foreign { .. } => unreachable!("checked above"),
            Action::Nothing => self.migrate_leased(vmid, &plan, node, held, rec).await?,
            Action::Create => {
                let d = self.desired_for(spec, node).await?;
                self.ensure_template(node, &d, rec).await?;
                // PVE locks the CT while the create runs (waiters wait for the task); the lease is
                // renewed right after a create that took long.
                if let Some(again) = self.create_leased(spec, node, &d, opts, held, rec, fin).await? {
                    plan = again;
                }
            }
            Action::Recreate { reasons } => {
                tracing::warn!("{}: recreating CT {vmid}: {}", spec.name, reasons.join("; "));
                let mut d = self.desired_for(spec, node).await?;
                self.ensure_template(node, &d, rec).await?;
                // Destroyed where it is, created where NODE wants it (no migration first).
                let from = plan.migrate.as_ref().map_or(node, |m| m.from.as_str());
                // The user's notes in the old description go to the new container.
                let old = self.client.ct(from, vmid).config().await?.unwrap_or_default();
                d.description = with_user_notes(&d.description, old.description());
                // Our lease goes with the container (its renewal then ends by itself); the create
                // writes a new one.
                self.shutdown_and_destroy(from, vmid, rec).await?;
                if let Some(again) = self.create_leased(spec, node, &d, opts, held, rec, fin).await? {
                    plan = again;
                }
            }
            Action::Update { changes, resizes, .. } | Action::Adopt { changes, resizes, .. } => {
                self.migrate_leased(vmid, &plan, node, held, rec).await?;
                self.update_in_place(node, spec, &plan, changes, resizes, rec).await?;
            }
        }
        if (plan.start || fin.created_at.is_some()) && !fin.started_by_create {
            self.start(node, vmid, rec).await?;
        }
        // Started now, or already running (the plan only skips the start for a running CT).
        fin.status = Some("running".to_string());
        let address = match spec.ip {
            IpConfig::Static { address, .. } => Some(IpAddr::V4(address)),
            IpConfig::Dhcp => self.dhcp_address(node, vmid, opts.ssh_timeout).await?,
        };
        fin.address = address.map(|a| a.to_string());
        if opts.wait_ssh {
            let Some(ip) = address else { bail!("CT {vmid} has no address to wait for SSH on") };
            let started = Instant::now();
            crate::ssh::wait_for_ssh(SocketAddr::new(ip, opts.ssh_port), opts.ssh_timeout)
                .await
                .with_context(|| format!("{}: CT {vmid} runs, but SSH does not answer", spec.name))?;
            rec.push("wait-ssh", None, started, Some(format!("{ip}:{}", opts.ssh_port)));
        }
        Ok(())
    }

    /// Creates the container with a new lease in its description and holds that lease (renewed
    /// at once when the create took long). When PVE says the vmid is taken, another run created
    /// it first: [`PveBackend::after_lost_race`], whose new plan is returned.
    #[allow(clippy::too_many_arguments)]
    async fn create_leased(
        &self,
        spec: &ContainerSpec,
        node: &str,
        d: &super::desired::Desired,
        opts: &ApplyOptions,
        held: &mut Option<Held>,
        rec: &mut Rec,
        fin: &mut Final,
    ) -> anyhow::Result<Option<ContainerPlan>> {
        let lease = new_lease(self.client.server_now());
        // Before the create: no host key of the new container exists yet (an old one's, recorded
        // by the protect-before-destroy guard, is older still).
        let at = time::OffsetDateTime::now_utc();
        // Every create is followed by a start (see `apply`): PVE's `start=1` makes it one
        // request and no gap between the two tasks (`lifecycle::create`).
        match self.create(node, d, opts, &lease, true, rec).await? {
            Created::Yes { upid, failed } => {
                // Created, whatever comes next: the artifact says so, and the lease is released
                // also when the start fails.
                if let Some(old) = held.replace(self.hold_after_create(node, spec.vmid, &lease).await) {
                    old.stop();
                }
                fin.created_at = Some(at);
                if let Some(e) = failed {
                    return Err(e);
                }
                fin.started_by_create = self.started_with_create(node, spec.vmid, &upid, rec).await?;
                Ok(None)
            }
            Created::Taken => self.after_lost_race(spec, node, held, rec, fin).await.map(Some),
        }
    }

    /// Our create met an existing vmid: another run created it first. Waits for that run's lease
    /// (bounded), then plans again under our own lease with the policy `never` (a container
    /// another run just made is never destroyed here): nothing to do, or an in-place change, is
    /// carried out; anything else fails with the new plan's reasons.
    async fn after_lost_race(
        &self,
        spec: &ContainerSpec,
        node: &str,
        held: &mut Option<Held>,
        rec: &mut Rec,
        fin: &mut Final,
    ) -> anyhow::Result<ContainerPlan> {
        let vmid = spec.vmid;
        let started = Instant::now();
        match self.acquire(node, vmid).await? {
            Acquired::Absent => bail!(
                "{}: CT {vmid} existed when we created it, and is gone now (its create failed?); plan again",
                spec.name
            ),
            Acquired::Held { held: h, .. } => *held = Some(h),
        }
        let again = self.plan(spec, crate::model::RecreatePolicy::Never).await?;
        let note = format!(
            "CT {vmid} was created by another run at the same time; waited {} s for it, then planned again: {}",
            started.elapsed().as_secs(),
            summary(&again.action)
        );
        tracing::info!("{}: {note}", spec.name);
        rec.warnings.push(crate::actions::redact(&note));
        rec.push("lease-wait", None, started, Some(format!("CT {vmid} created by another run")));
        match &again.action {
            Action::Nothing => {}
            Action::Update { changes, resizes, .. } | Action::Adopt { changes, resizes, .. } => {
                self.update_in_place(node, spec, &again, changes, resizes, rec).await?;
            }
            Action::Foreign { reason } => bail!("{}: {reason}", spec.name),
            Action::Create | Action::Recreate { .. } | Action::Refused { .. } => bail!(
                "{}: CT {vmid} was created by another run and differs from this run's spec ({}); nothing was changed, plan again",
                spec.name,
                summary(&again.action)
            ),
        }
        fin.replanned = Some(again.clone());
        Ok(again)
    }

    /// The in-place part of an `update` or `adopt`: `PUT …/config`, resizes, then what PVE
    /// keeps pending ([`PveBackend::apply_pending`]: a reboot when the policy allows it, else a
    /// note) when the container is not started by this run anyway.
    #[allow(clippy::too_many_arguments)]
    async fn update_in_place(
        &self,
        node: &str,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        changes: &[crate::model::Change],
        resizes: &[crate::model::Resize],
        rec: &mut Rec,
    ) -> anyhow::Result<()> {
        let vmid = spec.vmid;
        if matches!(plan.action, Action::Adopt { .. }) {
            tracing::warn!("{}: adopting CT {vmid} (not created by proxmox-gitops): writing our mark", spec.name);
        }
        if !changes.is_empty() {
            self.update_config(node, spec, changes, rec).await?;
        }
        for r in resizes {
            self.resize(node, vmid, &r.disk, r.to_gib, rec).await?;
        }
        if !plan.start {
            self.apply_pending(node, vmid, plan, rec).await?;
        }
        Ok(())
    }

    pub(super) async fn start(&self, node: &str, vmid: u32, rec: &mut Rec) -> anyhow::Result<()> {
        let ct = self.client.ct(node, vmid);
        let started = Instant::now();
        let out = self
            .locked("start", || async {
                match ct.start().await {
                    Ok(upid) => {
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
            .await;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                // A start task that failed is recorded like one that ended well: its UPID and
                // exit status, next to the error that names it.
                if let Some(task) = super::lifecycle::failed_task(&e, started) {
                    rec.push("start", Some(&task), started, None);
                }
                return Err(super::lifecycle::start_failed(vmid, node, e));
            }
        };
        let detail = if out.is_none() { Some("already running".to_string()) } else { None };
        rec.push("start", out.as_ref(), started, detail);
        Ok(())
    }

    async fn update_config(
        &self,
        node: &str,
        spec: &ContainerSpec,
        changes: &[crate::model::Change],
        rec: &mut Rec,
    ) -> anyhow::Result<()> {
        let vmid = spec.vmid;
        let ct = self.client.ct(node, vmid);
        let started = Instant::now();
        let mut digest = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&vmid).and_then(|c| c.digest.clone());
        let mut todo: Vec<crate::model::Change> = changes.to_vec();
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Called under our lease: a new description keeps (renews) it.
            let mut params: Vec<(&str, String)> = todo
                .iter()
                .filter_map(|c| {
                    c.to.as_ref().map(|v| {
                        let v = if c.key == "description" {
                            with_lease(v, &new_lease(self.client.server_now()))
                        } else {
                            v.clone()
                        };
                        (c.key.as_str(), v)
                    })
                })
                .collect();
            let deletes: Vec<&str> = todo.iter().filter(|c| c.to.is_none()).map(|c| c.key.as_str()).collect();
            if !deletes.is_empty() {
                params.push(("delete", deletes.join(",")));
            }
            match self.locked("config", || ct.set_config(&params, digest.as_deref())).await {
                Ok(_) => break,
                Err(e @ PveError::Transport { retryable: true, .. }) if attempts < 4 => {
                    // The answer was lost: see what PVE has now and write only what is missing.
                    tracing::info!("{e}; reading the config again");
                    let (live, new_digest) = self.read_live(node, vmid).await?;
                    let PveObserved::Present(ct) = live else {
                        bail!("CT {vmid} disappeared while its config was written")
                    };
                    let cfg = lease_free(&ct.config);
                    todo.retain(|c| !written(c, &cfg));
                    if todo.is_empty() {
                        break;
                    }
                    digest = new_digest;
                }
                Err(e) if attempts < 4 && e.is_config_changed() => {
                    // The config file changed since it was read (a backup's lock came and went,
                    // or someone edited it). Go on only if the keys to change still hold the
                    // values the plan saw; otherwise the plan is stale.
                    let (live, new_digest) = self.read_live(node, vmid).await?;
                    let PveObserved::Present(ct) = live else {
                        bail!("CT {vmid} disappeared while its config was written")
                    };
                    let cfg = lease_free(&ct.config);
                    todo.retain(|c| !written(c, &cfg));
                    if let Some(c) = todo.iter().find(|c| {
                        let from =
                            if c.key == "description" { c.from.as_deref().map(without_lease) } else { c.from.clone() };
                        cfg.get(&c.key) != from.as_ref()
                    }) {
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
    /// `reboot`) when the plan says so ([`ContainerPlan::reboot_for_pending`]); otherwise a
    /// warning says it stays pending until the next restart and how to restart now.
    async fn apply_pending(&self, node: &str, vmid: u32, plan: &ContainerPlan, rec: &mut Rec) -> anyhow::Result<()> {
        let ct = self.client.ct(node, vmid);
        let keys: Vec<String> = ct
            .pending()
            .await?
            .into_iter()
            .map(|p| if p.delete { format!("{} (delete)", p.key) } else { p.key })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        if !plan.reboot_for_pending {
            rec.warnings.push(
                crate::error::Hinted::new(
                    format!(
                        "pending until the next restart: CT {vmid} applies {} when it starts again; the recreate policy \
                         `never` allows no restart",
                        keys.join(", ")
                    ),
                    crate::error::Hint::AllowRecreate { container: plan.name.clone() },
                )
                .or(crate::error::Hint::on_node(["pct".to_string(), "reboot".into(), vmid.to_string()], node))
                .to_string(),
            );
            return Ok(());
        }
        let started = Instant::now();
        let secs = self.opts.timeouts.shutdown.as_secs().max(1);
        let out = self
            .locked("reboot", || async {
                let upid = ct.reboot(secs).await?;
                let wait = self.opts.timeouts.shutdown + self.opts.timeouts.start;
                self.client.wait_task(&upid, wait, &format!("reboot CT {vmid}")).await
            })
            .await
            .with_context(|| format!("cannot reboot CT {vmid} on node {node} to apply {}", keys.join(", ")))?;
        rec.push("reboot", Some(&out), started, Some(format!("applies {}", keys.join(", "))));
        Ok(())
    }

    async fn resize(&self, node: &str, vmid: u32, disk: &str, gib: u64, rec: &mut Rec) -> anyhow::Result<()> {
        let ct = self.client.ct(node, vmid);
        let started = Instant::now();
        let out = self
            .locked("resize", || async {
                match ct.resize(disk, gib).await {
                    Ok(Some(upid)) => self
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
}

/// Whether PVE's config (pending values applied) shows `c` written. A new volume
/// (`STORAGE:SIZE,mp=…`) shows as the volume PVE allocated (`STORAGE:vm-…,mp=…,size=…`): the
/// key holding a volume of that storage at that path counts, so a repeated write never allocates
/// a second volume.
fn written(c: &crate::model::Change, config: &std::collections::BTreeMap<String, String>) -> bool {
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

/// A plan's action in words for messages (see [`Action::summary`]).
fn summary(action: &Action) -> String {
    action.summary()
}

/// The live config for comparisons: the description without lease lines.
fn lease_free(config: &std::collections::BTreeMap<String, String>) -> std::collections::BTreeMap<String, String> {
    let mut c = config.clone();
    if let Some(d) = c.get_mut("description") {
        *d = without_lease(d);
    }
    c
}

#[derive(Default)]
struct Final {
    address: Option<String>,
    status: Option<String>,
    /// When this run created the container (taken just before its create), `None` when it did
    /// not: [`Provision::created`] and [`Provision::created_at`].
    created_at: Option<time::OffsetDateTime>,
    /// The create started it too (`start=1`), so no start of its own follows.
    started_by_create: bool,
    /// The plan carried out, when it differs from the one given (planned again under the lease).
    replanned: Option<ContainerPlan>,
}

#[cfg(test)]
mod tests {
    use super::written;
    use crate::model::Change;
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
