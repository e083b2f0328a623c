//! One actor per vmid, coordinated through PVE itself, and PVE's own locks.
//!
//! **Lease** (no local lock file: two runners on two hosts share nothing but PVE). A run that
//! changes a container first writes the line `proxmox-gitops lease: HOLDER until UNIX_SECS`
//! ([`desired::Lease`]) into its `description` with `PUT /nodes/{node}/lxc/{vmid}/config`,
//! passing the `digest` of the config it read just before: PVE refuses a stale digest
//! ("detected modified configuration"), so of two runs writing at once exactly one succeeds
//! (compare-and-set). A container that does not exist yet is decided by the create itself: the
//! lease goes into the create's `description`, and PVE refuses a second create of the vmid. The
//! other run waits — bounded by [`Timeouts::lease`](super::Timeouts::lease) and
//! [`MAX_POLLS`] polls, logging the holder — while the lease is valid, then plans again. A
//! lease lives [`LEASE_TTL`] by PVE's clock ([`crate::pve::PveClient::server_now`], so runners
//! with skewed clocks agree) and is renewed every [`RENEW_EVERY`] while its run works, so the
//! lease of a process that died (kill -9, a lost runner) expires by itself; the holder removes it
//! at the end, also after a failure. The holder is `HOST:PID` (`:run-ID` with `GITHUB_RUN_ID`)
//! plus a per-process nonce ([`holder`]).
//!
//! **PVE locks** come in two kinds, neither of them a changed config:
//!
//! * the `lock` property (`lock: create|backup|migrate|snapshot|rollback|…` in the config): the
//!   running task of the container is looked up (`GET /nodes/{node}/tasks?vmid=…&source=active`)
//!   and waited for (a `vzcreate`/`vzrestore` up to `Timeouts::create`, others up to
//!   `Timeouts::lock`); a lock without a running task is waited out for `Timeouts::lock`, then
//!   reported with the command that clears it (`pct unlock VMID` on the node);
//! * the config file lock (`/run/lock/lxc/pve-config-VMID.lock`, a `flock` every task and config
//!   write of the container holds while it works, a start for as long as it starts): a write
//!   that meets it is answered HTTP 500 `can't lock file '…' - got timeout` after PVE waited 10 s.
//!   It is waited for, at most `Timeouts::lock` and [`MAX_LOCK_TRIES`] writes, then reported
//!   with the file and how to see who holds it ([`lock_hint`]).
//!
//! Only `detected modified configuration` (a stale `digest`) is a lost compare-and-set, read
//! again at once (at most [`MAX_CONFLICTS`] times in a row).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::PveBackend;
use super::desired::{self, Lease};
use crate::error::{Hint, Hinted, TimeoutOption};
use crate::pve::{PveClient, PveError, TaskFilter};

/// How long a lease is valid after it is written or renewed: 300 s.
pub const LEASE_TTL: Duration = Duration::from_secs(300);

/// How often a held lease is renewed: every 60 s.
pub const RENEW_EVERY: Duration = Duration::from_secs(60);

/// At most this many config reads while waiting for another run's lease.
pub const MAX_POLLS: u32 = 2000;

/// At most this many lease writes refused for a stale digest (another writer won) in a row.
pub const MAX_CONFLICTS: u32 = 20;

/// At most this many lease writes that met PVE's held config file lock (each one waited 10 s
/// on PVE's side), whatever `--timeout-lock` says.
pub const MAX_LOCK_TRIES: u32 = 30;

/// At most this many lease writes whose answer was lost.
pub const MAX_LOST_ANSWERS: u32 = 6;

/// PVE's config file lock of CT `vmid` (pve-container `PVE::LXC::Config::config_file_lock`).
pub fn default_lock_file(vmid: u32) -> String {
    format!("/run/lock/lxc/pve-config-{vmid}.lock")
}

/// How to see who holds PVE's config file lock `file` of CT `vmid` on `node`: the running
/// tasks of the container (`pvenode task list`, or the node's task list in the PVE UI) and the
/// process holding the file (`fuser -v`).
pub fn lock_hint(node: &str, vmid: u32, file: &str) -> String {
    format!(
        "See who holds it on node {node}: `pvenode task list --vmid {vmid} --source active` (or the task list of \
         node {node} in the PVE UI), and the process holding the file: `fuser -v {file}`."
    )
}

/// This process's lease holder: `HOST:PID` (`/proc/sys/kernel/hostname`), `:run-ID` when
/// `GITHUB_RUN_ID` is set (Gitea and GitHub Actions), and a random 4-hex-digit nonce (two
/// runner containers may share a hostname and a PID).
pub fn holder() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let host: String = host.chars().filter(|c| !c.is_whitespace()).collect();
        let run = crate::actions::run_id().map(|r| format!(":run-{r}")).unwrap_or_default();
        format!("{host}:{}{run}:{:04x}", std::process::id(), rand::random::<u16>())
    })
}

/// Whether `holder` names a process of this host that no longer runs (`/proc/PID` is gone): its
/// lease is dead before it expires (a `kill -9` on the same runner). A holder on another host,
/// or a PID that runs (perhaps reused), counts as alive.
fn holder_is_dead(holder: &str) -> bool {
    let mut parts = holder.split(':');
    let (Some(host), Some(pid)) = (parts.next(), parts.next().and_then(|p| p.parse::<u32>().ok())) else {
        return false;
    };
    let me = self::holder();
    me.split(':').next() == Some(host)
        && pid != std::process::id()
        && std::path::Path::new("/proc/self").exists()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// `UNIX_SECS` as `YYYY-MM-DD HH:MM:SS UTC` for messages.
fn when(secs: u64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .ok()
        .and_then(|t| t.format(fmt).ok())
        .unwrap_or_else(|| secs.to_string())
}

/// A new lease of this process, valid for [`LEASE_TTL`] from `now` (PVE's time,
/// [`crate::pve::PveClient::server_now`], so that runners with different clocks agree).
pub(super) fn new_lease(now: u64) -> Lease {
    Lease { holder: holder().to_string(), until: now + LEASE_TTL.as_secs() }
}

/// A lease this run holds on a container; renewed in the background until
/// [`PveBackend::release`].
pub(super) struct Held {
    node: String,
    vmid: u32,
    renewal: tokio::task::JoinHandle<()>,
}

/// What [`PveBackend::acquire`] found.
pub(super) enum Acquired {
    /// The lease is ours; `before` is the config digest read just before it was written (to
    /// tell whether the container changed since the plan), `after` the digest with our lease.
    Held { held: Held, before: Option<String>, after: Option<String> },
    /// The container does not exist (any more).
    Absent,
}

impl PveBackend {
    /// Starts renewing `lease` on CT `vmid` (every [`RENEW_EVERY`]) and returns the handle that
    /// [`PveBackend::release`] ends.
    pub(super) fn hold(&self, node: &str, vmid: u32) -> Held {
        let client = self.client.clone();
        let (n, lock_wait) = (node.to_string(), self.opts.timeouts.lock);
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                match renew(&client, &n, vmid, lock_wait).await {
                    Ok(true) => tracing::debug!("CT {vmid}: lease renewed"),
                    Ok(false) => {
                        tracing::warn!("CT {vmid}: our lease is gone from its description; no longer renewing it");
                        return;
                    }
                    Err(e) => tracing::info!("CT {vmid}: lease renewal failed ({e:#}); trying again later"),
                }
            }
        });
        Held { node: node.to_string(), vmid, renewal }
    }

    /// [`PveBackend::hold`] after our create, which wrote `lease`: renewed at once when the
    /// create took more than half of [`LEASE_TTL`].
    pub(super) async fn hold_after_create(&self, node: &str, vmid: u32, lease: &Lease) -> Held {
        if lease.until < self.client.server_now() + LEASE_TTL.as_secs() / 2
            && let Err(e) = renew(&self.client, node, vmid, self.opts.timeouts.lock).await
        {
            tracing::info!("CT {vmid}: lease renewal after the create failed ({e:#}); trying again later");
        }
        self.hold(node, vmid)
    }

    /// Takes the lease on CT `vmid` (see the module docs): waits while PVE locks the container
    /// ([`PveBackend::settle_lock`]) or another run's lease is valid, then writes ours with the
    /// digest just read.
    ///
    /// The answers to that write are told apart: a stale digest (`detected modified
    /// configuration`: another writer won the compare-and-set) reads the config again, at most
    /// [`MAX_CONFLICTS`] times; PVE's config file lock held by another task (`can't lock file
    /// '…' - got timeout`, after PVE waited 10 s for it) is waited for — at most
    /// [`super::Timeouts::lock`] and [`MAX_LOCK_TRIES`] writes — then reported with the lock file
    /// and how to see who holds it ([`PveBackend::held_lock_error`]); a lost answer reads the
    /// config again (did the lease get written?), at most [`MAX_LOST_ANSWERS`] times.
    ///
    /// # Errors
    /// Another run's lease still valid after [`super::Timeouts::lease`] or [`MAX_POLLS`] reads
    /// (the message names the holder and its expiry); a PVE lock that does not clear (the config
    /// `lock` property, or the config file lock); a config that keeps changing; API errors.
    pub(super) async fn acquire(&self, node: &str, vmid: u32) -> anyhow::Result<Acquired> {
        let ct = self.client.ct(node, vmid);
        let started = Instant::now();
        let limit = self.opts.timeouts.lease;
        let lock_wait = self.opts.timeouts.lock;
        let mut delay = Duration::from_millis(250);
        let mut waiting_for: Option<String> = None;
        let mut polls = 0u32;
        let (mut conflicts, mut lost) = (0u32, 0u32);
        // The config file lock: since when our writes meet it, how many did, the next pause.
        let mut file_lock: Option<Instant> = None;
        let (mut lock_tries, mut lock_delay) = (0u32, Duration::from_millis(200));
        loop {
            polls += 1;
            if polls > MAX_POLLS {
                return Err(Hinted::new(
                    format!(
                        "CT {vmid}: its lease could not be taken in {MAX_POLLS} reads of its config ({} s)",
                        started.elapsed().as_secs()
                    ),
                    Hint::RerunLater,
                )
                .into());
            }
            let cfg = match ct.config().await {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(Acquired::Absent),
                Err(e) => return Err(e).with_context(|| format!("cannot read CT {vmid} for its lease")),
            };
            if let Some(lock) = cfg.lock() {
                self.settle_lock(node, vmid, lock).await?;
                continue;
            }
            let digest = cfg.digest.clone();
            let desc = cfg.description().to_string();
            if let Some(other) = desired::parse_lease(&desc).filter(|l| l.holder != holder()) {
                if holder_is_dead(&other.holder) {
                    tracing::info!(
                        "CT {vmid}: the lease holder `{}` is a process of this host that no longer runs; taking over",
                        other.holder
                    );
                }
                let now = self.client.server_now();
                if other.live_at(now) && !holder_is_dead(&other.holder) {
                    let waited = started.elapsed();
                    if waited >= limit || polls >= MAX_POLLS {
                        return Err(Hinted::new(
                            format!(
                                "CT {vmid} is busy: proxmox-gitops run `{}` holds its lease until {} ({} s from now); \
                                 waited {} s ({polls} reads) for it (a run that died leaves a lease that expires by \
                                 itself at that time)",
                                other.holder,
                                when(other.until),
                                other.until - now,
                                waited.as_secs()
                            ),
                            Hint::RerunLater,
                        )
                        .or(Hint::RaiseTimeout { option: TimeoutOption::Lease, now_secs: Some(limit.as_secs()) })
                        .into());
                    }
                    if waiting_for.as_deref() != Some(other.holder.as_str()) {
                        tracing::warn!(
                            "CT {vmid}: proxmox-gitops run `{}` is working on it (lease until {}); waiting (at most {} s)",
                            other.holder,
                            when(other.until),
                            limit.as_secs()
                        );
                        waiting_for = Some(other.holder.clone());
                    }
                    tokio::time::sleep(delay.min(limit.saturating_sub(waited)).max(Duration::from_millis(50))).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    continue;
                }
                if !other.live_at(now) {
                    tracing::info!(
                        "CT {vmid}: the lease of `{}` expired at {} (its run died?); taking it over",
                        other.holder,
                        when(other.until)
                    );
                }
            }
            let lease = new_lease(self.client.server_now());
            let params = [("description", desired::with_lease(&desc, &lease))];
            let writing = Instant::now();
            match ct.set_config(&params, digest.as_deref()).await {
                Ok(_) => {}
                Err(e) if e.is_config_changed() => {
                    conflicts += 1;
                    if conflicts > MAX_CONFLICTS {
                        return Err(Hinted::new(
                            format!(
                                "CT {vmid}: its config changed under each of {MAX_CONFLICTS} attempts to take the lease \
                                 (something writes it all the time)"
                            ),
                            Hint::RerunLater,
                        )
                        .because(e)
                        .into());
                    }
                    tracing::info!("CT {vmid}: its config changed while taking the lease ({e}); reading it again");
                    continue;
                }
                Err(e) if e.is_file_lock_timeout() => {
                    let since = *file_lock.get_or_insert(writing);
                    lock_tries += 1;
                    let waited = since.elapsed();
                    if waited >= lock_wait || lock_tries >= MAX_LOCK_TRIES {
                        return Err(self.held_lock_error(node, vmid, &e, waited, lock_tries).await);
                    }
                    if lock_tries == 1 {
                        tracing::warn!(
                            "CT {vmid}: PVE's config lock is held by another task ({e}); waiting for it (at most {} s)",
                            lock_wait.as_secs()
                        );
                    }
                    tokio::time::sleep(lock_delay.min(lock_wait.saturating_sub(waited)).max(Duration::from_millis(50)))
                        .await;
                    lock_delay = (lock_delay * 2).min(Duration::from_secs(5));
                    continue;
                }
                // `CT is locked (…)`: a lock property set since the read; the next read waits for it.
                Err(e) if e.is_locked() => {
                    tracing::info!("CT {vmid}: {e}; reading its config again");
                    continue;
                }
                Err(e @ PveError::Transport { retryable: true, .. }) if lost < MAX_LOST_ANSWERS => {
                    lost += 1;
                    tracing::info!("CT {vmid}: {e}; checking whether the lease was written");
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("cannot write the lease of CT {vmid}")),
            }
            // Read back: the digest with our lease, and proof that it is ours.
            let after = match ct.config().await {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(Acquired::Absent),
                Err(e) => return Err(e).with_context(|| format!("cannot read CT {vmid} after taking its lease")),
            };
            if desired::parse_lease(after.description()).is_none_or(|l| l.holder != holder()) {
                continue;
            }
            if let Some(w) = waiting_for {
                tracing::info!("CT {vmid}: `{w}` is done; lease taken after {} s", started.elapsed().as_secs());
            }
            return Ok(Acquired::Held { held: self.hold(node, vmid), before: digest, after: after.digest });
        }
    }

    /// The failure for PVE's config file lock of CT `vmid` that stayed held for `waited`
    /// (`tries` writes met it): names the lock file, the running task of the container when one
    /// is listed ([`PveBackend::active_task`]), and how to see who holds it ([`lock_hint`]).
    pub(super) async fn held_lock_error(
        &self,
        node: &str,
        vmid: u32,
        e: &PveError,
        waited: Duration,
        tries: u32,
    ) -> anyhow::Error {
        let file = e.locked_file().map_or_else(|| default_lock_file(vmid), str::to_string);
        let task = match self.active_task(node, vmid).await {
            Ok(Some((upid, kind))) => format!(" The running task of CT {vmid} is {upid} ({kind})."),
            Ok(None) => format!(" No task of CT {vmid} is listed as running on node {node}."),
            Err(_) => String::new(),
        };
        Hinted::new(
            format!(
                "CT {vmid}: PVE's config lock {file} stayed held by another task or API call for {} s ({tries} writes \
                 answered `{}`); nothing was changed.{task} {}",
                waited.as_secs(),
                e.message().unwrap_or_default(),
                lock_hint(node, vmid, &file).trim_end_matches('.'),
            ),
            Hint::RerunLater,
        )
        .or(Hint::RaiseTimeout { option: TimeoutOption::Lock, now_secs: Some(self.opts.timeouts.lock.as_secs()) })
        .into()
    }

    /// Ends the renewal of `held` and removes our lease line from the description (with the
    /// digest; repeated after a concurrent change). A container gone by now is fine. A failure is
    /// returned for the caller to report; the lease then expires by itself.
    pub(super) async fn release(&self, held: Held) -> anyhow::Result<()> {
        held.renewal.abort();
        let (node, vmid) = (held.node.as_str(), held.vmid);
        let ct = self.client.ct(node, vmid);
        for _ in 0..6 {
            let Some(cfg) = ct.config().await? else { return Ok(()) };
            let desc = cfg.description();
            if desired::parse_lease(desc).is_none_or(|l| l.holder != holder()) {
                return Ok(());
            }
            let rest = desired::without_lease(desc);
            let params: Vec<(&str, String)> =
                if rest.is_empty() { vec![("delete", "description".into())] } else { vec![("description", rest)] };
            match self.locked("release lease", || ct.set_config(&params, cfg.digest.as_deref())).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_config_changed() => continue,
                Err(PveError::Transport { retryable: true, .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(anyhow!("the config of CT {vmid} kept changing"))
    }

    /// Waits until PVE's config `lock` of CT `vmid` clears: finds the container's running task
    /// (`GET /nodes/{node}/tasks?vmid=…&source=active`) and waits for it (`vzcreate`/`vzrestore`
    /// up to `Timeouts::create`, others up to `Timeouts::lock`; the task's own failure is not
    /// ours); without a running task, polls the config for `Timeouts::lock`. Returns a note for
    /// the artifact (what held the lock, how long it was waited for).
    ///
    /// # Errors
    /// The task still runs after its bound; the lock stays without a task (the message names
    /// `pct unlock VMID` on the node, and never `--allow-recreate`); API errors.
    pub(super) async fn settle_lock(&self, node: &str, vmid: u32, lock: &str) -> anyhow::Result<String> {
        let started = Instant::now();
        let lock_wait = self.opts.timeouts.lock;
        let mut delay = Duration::from_millis(200);
        let mut polls = 0u32;
        loop {
            polls += 1;
            if let Some((upid, kind)) = self.active_task(node, vmid).await? {
                let bound = if matches!(kind.as_str(), "vzcreate" | "vzrestore") {
                    self.opts.timeouts.create
                } else {
                    lock_wait
                };
                tracing::warn!(
                    "CT {vmid} is locked ({lock}) by the running task {upid}; waiting for it (at most {} s)",
                    bound.as_secs()
                );
                match self.client.wait_task(&upid, bound, &format!("{kind} of CT {vmid} (holding lock {lock})")).await {
                    Ok(_) => {}
                    Err(PveError::Task { exit_status, .. }) => {
                        tracing::info!("CT {vmid}: the task {upid} that held the lock failed: {exit_status}")
                    }
                    Err(e @ PveError::Timeout { .. }) => {
                        let option = if bound == lock_wait { TimeoutOption::Lock } else { TimeoutOption::Create };
                        return Err(Hinted::new(
                            format!(
                                "CT {vmid} is locked ({lock}) by the task {upid}, which still runs (see it in the PVE \
                                 UI's task list of node {node})"
                            ),
                            Hint::RerunLater,
                        )
                        .or(Hint::RaiseTimeout { option, now_secs: Some(bound.as_secs()) })
                        .because(e)
                        .into());
                    }
                    Err(e) => return Err(e.into()),
                }
                return Ok(format!(
                    "CT {vmid} was locked ({lock}) by the task {upid}; waited {} s for it",
                    started.elapsed().as_secs()
                ));
            }
            // No task: a lock that clears soon (a writer between tasks), or one left over.
            let Some(cfg) = self.client.ct(node, vmid).config().await? else {
                return Ok(format!("CT {vmid} was locked ({lock}) and is gone now"));
            };
            let Some(now) = cfg.lock() else {
                return Ok(format!(
                    "CT {vmid} was locked ({lock}); waited {} s for the lock to clear",
                    started.elapsed().as_secs()
                ));
            };
            if started.elapsed() >= lock_wait || polls >= MAX_POLLS {
                let create = if now == "create" {
                    format!(
                        " (an interrupted create leaves an unfinished container: after the unlock, check it with \
                         `pct config {vmid}` and remove it with `pct destroy {vmid}` if it is that)"
                    )
                } else {
                    String::new()
                };
                return Err(Hinted::new(
                    format!(
                        "CT {vmid}: PVE says `CT is locked ({now})`, and no task of CT {vmid} runs on node {node} (waited \
                         {} s): the lock is left over from an interrupted operation{create}; make sure nothing works on \
                         it",
                        started.elapsed().as_secs()
                    ),
                    Hint::on_node(["pct".to_string(), "unlock".into(), vmid.to_string()], node),
                )
                .into());
            }
            tokio::time::sleep(delay.min(lock_wait.saturating_sub(started.elapsed())).max(Duration::from_millis(50)))
                .await;
            delay = (delay * 2).min(Duration::from_secs(3));
        }
    }

    /// The running task of CT `vmid` on `node` (`GET /nodes/{node}/tasks` with `vmid`,
    /// `source=active`): its UPID and type; a listed task that has ended (an `endtime` or a
    /// `status`) does not count.
    pub(super) async fn active_task(&self, node: &str, vmid: u32) -> anyhow::Result<Option<(String, String)>> {
        let filter = TaskFilter { vmid: Some(vmid), kind: None, active: true, limit: 50 };
        let tasks = self
            .client
            .node(node)
            .tasks(&filter)
            .await
            .with_context(|| format!("cannot list the tasks of CT {vmid} on node {node}"))?;
        Ok(tasks
            .into_iter()
            .filter(|t| t.running && t.id.as_deref().is_none_or(|id| id == vmid.to_string()))
            .map(|t| (t.upid, t.kind))
            .next())
    }
}

/// Renews our lease on CT `vmid`: `Ok(false)` when it is no longer ours (or the CT is gone).
/// A stale digest (the config changed) reads it again at once; PVE's config lock (the `lock`
/// property, or the config file lock) is waited out a second at a time; both for at most
/// `lock_wait`.
async fn renew(client: &PveClient, node: &str, vmid: u32, lock_wait: Duration) -> anyhow::Result<bool> {
    let ct = client.ct(node, vmid);
    let started = Instant::now();
    let mut last: Option<String> = None;
    let mut conflicts = 0u32;
    for _ in 0..MAX_POLLS {
        let Some(cfg) = ct.config().await? else { return Ok(false) };
        let desc = cfg.description();
        let mut pause = true;
        if let Some(lock) = cfg.lock() {
            last = Some(format!("it stayed locked ({lock})"));
        } else {
            // A create in progress has no description yet: the lease is in the create's.
            if desired::parse_lease(desc).is_none_or(|l| l.holder != holder()) {
                return Ok(false);
            }
            let params = [("description", desired::with_lease(desc, &new_lease(client.server_now())))];
            match ct.set_config(&params, cfg.digest.as_deref()).await {
                Ok(_) => return Ok(true),
                Err(e) if e.is_config_changed() => {
                    last = Some("its config kept changing".into());
                    conflicts += 1;
                    if conflicts > MAX_CONFLICTS {
                        break;
                    }
                    pause = false;
                }
                Err(e) if e.is_locked() => last = Some(format!("PVE kept it locked ({e})")),
                Err(e) => return Err(e.into()),
            }
        }
        if started.elapsed() >= lock_wait {
            break;
        }
        if pause {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    bail!(
        "CT {vmid}: {} for {} s",
        last.unwrap_or_else(|| "the lease could not be renewed".into()),
        started.elapsed().as_secs()
    )
}

impl Held {
    /// Stops renewing without touching the container (it is about to be destroyed, and the
    /// lease with it).
    pub(super) fn stop(self) {
        self.renewal.abort();
    }
}

/// `e`, with [`lock_hint`] appended when its cause is PVE's config file lock of CT
/// `vmid` that stayed held (`can't lock file '…' - got timeout` after [`super::PveBackend::locked`]
/// gave up) and no hint is there yet.
pub(super) fn with_lock_hint(e: anyhow::Error, node: &str, vmid: u32) -> anyhow::Error {
    let file = e
        .chain()
        .filter_map(|c| c.downcast_ref::<PveError>())
        .find(|p| p.is_file_lock_timeout())
        .map(|p| p.locked_file().map_or_else(|| default_lock_file(vmid), str::to_string));
    match file {
        Some(file) if !format!("{e:#}").contains("pvenode task list") => {
            anyhow::anyhow!("{e:#}; PVE's config lock {file} stayed held. {}", lock_hint(node, vmid, &file))
        }
        _ => e,
    }
}
