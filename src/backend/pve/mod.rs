//! The Proxmox VE backend: plans and applies a container over the PVE API.
//!
//! * [`desired`](mod@desired) maps a spec to PVE's parameters (pure);
//! * [`planner`] compares desired and live state (pure, exhaustively unit-tested);
//! * [`placement`] finds the container in the cluster and plans its node: migrate to a named
//!   `NODE`, place a new one for `NODE=auto` (pure, unit-tested);
//! * [`PveBackend`] (this file) reads live state and plans;
//! * `executor` — [`PveBackend::apply`]: runs a plan (migration, config update, resize, start, address)
//!   and records every action;
//! * `lifecycle` — template download, create, shutdown and destroy ([`PveBackend::destroy`]);
//! * [`lease`] — one actor per vmid (a lease line in the description, written with the config
//!   digest; the create itself for a new container) and waiting out PVE's own locks.
//!
//! Ownership: a container at a lib's vmid without our mark ([`desired::marked_for`]) is planned
//! as `foreign` and never touched; `--adopt` ([`crate::model::PlanPolicy::adopt`]) plans it as `adopt`
//! (our mark written in place), never as a recreate.
//!
//! Execution rules (PVE behaviour handled here, each covered by `tests/suite/provision_pve.rs`):
//!
//! * a container PVE locks when it is planned (`lock` in its config) is planned after its running
//!   task ended ([`lease`] module docs); a leftover lock fails naming `pct unlock VMID`;
//! * every apply that writes holds the container's lease from before its first write until after
//!   its last (also on failure), and plans again under it when the config changed since the plan;
//! * `CT is locked (…)` / `can't lock file … got timeout` — the operation is repeated with
//!   capped exponential backoff for at most [`Timeouts::lock`] (wall-clock) and
//!   [`lease::MAX_LOCK_TRIES`] attempts, whether the error came as an HTTP answer or as a task's
//!   exit status; a config file lock that stays held fails naming the lock file and how to see
//!   who holds it ([`lease::lock_hint`]). A lock is never taken for a changed config (`detected
//!   modified configuration`), nor the other way round;
//! * a create that got no answer is repeated; "already exists" after such a repeat means the
//!   first attempt went through — its `vzcreate` task is looked up and waited for;
//! * "already running" for a start and "not running" for a shutdown/stop are success;
//!   "does not exist" means absent;
//! * `PUT …/config` carries the digest read by `plan`, so a concurrent change fails instead of
//!   being overwritten; when its answer is lost the config is read again and only what is still
//!   missing is written;
//! * concurrent provisions of the same node share one template download (and its failure:
//!   the others get the same error, no second request) and one `GET /nodes/{node}/status`;
//! * a missing template is downloaded over https with the checksum of the node's signed
//!   template index (`GET /nodes/{node}/aplinfo`, see [`desired::template`]); a template the
//!   index does not list for the node's architecture is an error naming the architecture.
//! * the container is looked up in `GET /cluster/resources` first, and read on the node it is
//!   on (for `root@pam`, who sees every guest there, a vmid not listed is absent without a
//!   read); a migration (`POST …/migrate`, restart mode for a running container) is waited for
//!   like any task, and the rest of the plan is applied on the new node.

mod address;
pub mod desired;
mod executor;
pub mod lease;
mod lifecycle;
pub mod live;
mod migration;
pub mod placement;
pub mod planner;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use tokio::sync::OnceCell;

use self::desired::{Desired, PveDefaults, desired};
use self::placement::{NodeDecision, NodePlan, Wish};
use self::planner::{LiveCt, PveObserved};
use crate::error::{Hint, Hinted};
use crate::inventory::ContainerSpec;
use crate::model::PlanPolicy;
use crate::model::{Action, ActionRecord, ContainerPlan};
use crate::pve::{PveClient, PveError, TaskOutcome};

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
    /// `vzmigrate` to another node (PVE copies local volumes): 1800 s.
    pub migrate: Duration,
    /// How long to wait while another proxmox-gitops run holds a container's lease: 900 s.
    pub lease: Duration,
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
            migrate: Duration::from_secs(1800),
            lease: Duration::from_secs(900),
        }
    }
}

/// Options of the backend.
#[derive(Debug, Clone)]
pub struct PveBackendOptions {
    /// Template, network and storage settings.
    pub defaults: PveDefaults,
    /// The configured node (`PROXMOX_NODE`); a spec's `NODE` wins; `None` discovers it (the
    /// only online node) or, on a cluster with several online nodes, places a new container
    /// (as `auto` does: see [`placement`]).
    pub node: Option<String>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Whether [`PveBackend::plan`] waits for a container PVE has locked (its running task,
    /// bounded: see [`lease`]) before it reads it — what `provision` and `deploy` need to carry
    /// out the plan. `false` (the `plan` subcommand) fails the container's plan at once as busy,
    /// naming the lock and its task.
    pub wait_for_locks: bool,
}

#[derive(Debug, Clone, Default)]
struct Cached {
    digest: Option<String>,
    warnings: Vec<String>,
}

/// The outcome of providing one template on one node, set once (an error as its message).
type TemplateCell = Arc<OnceCell<Result<(), String>>>;

/// The PVE backend. Share one instance (and so one client session) across concurrent provisions.
pub struct PveBackend {
    client: Arc<PveClient>,
    opts: PveBackendOptions,
    discovered: OnceCell<String>,
    arches: tokio::sync::Mutex<HashMap<String, String>>,
    /// One template provision per `node/volid`, its outcome shared by every waiter (an error
    /// as its message, so a failed download is not repeated by the others).
    templates: Mutex<HashMap<String, TemplateCell>>,
    cache: Mutex<HashMap<u32, Cached>>,
    /// Bytes of memory promised per node to containers placed by this run (see [`placement`]).
    reserved: Mutex<BTreeMap<String, u64>>,
    /// The cluster view of the current planning round ([`PveBackend::begin_plan_round`]): one
    /// `GET /cluster/resources` for every container the round plans; `None` outside a round.
    round: Mutex<Option<Arc<crate::pve::ClusterResources>>>,
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
            // A UPID ends with its own colon: `UPID:…:root@pam: OK`.
            task.map(|t| format!(" {} {}", t.upid, t.exit_status)).unwrap_or_default(),
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

/// The only online node of the cluster (`GET /nodes`), for runs where neither a spec's `NODE`
/// nor `PROXMOX_NODE` names one.
///
/// # Errors
/// API errors; no online node, or several (the message says to set `PROXMOX_NODE`).
pub async fn discover_node(client: &PveClient) -> anyhow::Result<String> {
    let online: Vec<String> = client.nodes().await?.into_iter().filter(|n| n.online).map(|n| n.node).collect();
    match online.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(anyhow!("GET /nodes lists no online node; set PROXMOX_NODE")),
        many => Err(anyhow!(
            "the cluster has several online nodes ({}); set PROXMOX_NODE, or NODE in a lib's container.env",
            many.join(", ")
        )),
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
            reserved: Mutex::new(BTreeMap::new()),
            round: Mutex::new(None),
        }
    }

    /// Starts a planning round: reads `GET /cluster/resources` (everything: containers, nodes,
    /// storages) once, and every [`PveBackend::plan`] until [`PveBackend::end_plan_round`] places
    /// its container with that view instead of reading it again — one request per run of `plan`
    /// instead of one per container. The plans of a round share one moment of the cluster, as a
    /// reviewed plan should; memory promised to containers placed in the round still counts
    /// ([`placement`]). Outside a round (provision, and the plan made again under the lease
    /// before a write) every plan reads the cluster fresh.
    ///
    /// # Errors
    /// API errors reading the cluster: no round is started (each plan then reads, and fails, on
    /// its own).
    pub async fn begin_plan_round(&self) -> anyhow::Result<()> {
        let res =
            self.client.cluster_resources(None).await.context("cannot read the cluster (GET /cluster/resources)")?;
        *self.round.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(res));
        Ok(())
    }

    /// Ends the planning round started by [`PveBackend::begin_plan_round`]: later plans read
    /// the cluster again.
    pub fn end_plan_round(&self) {
        *self.round.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The cluster view: the round's, else a fresh `GET /cluster/resources` (with `type=kind`).
    async fn cluster(&self, kind: Option<&str>) -> Result<Arc<crate::pve::ClusterResources>, crate::pve::PveError> {
        if let Some(res) = self.round.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(res);
        }
        Ok(Arc::new(self.client.cluster_resources(kind).await?))
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

    /// The node for `spec` without a cluster view: its `NODE`, else `PROXMOX_NODE`, else the
    /// only online node of `GET /nodes`.
    ///
    /// # Errors
    /// API errors; several or no online nodes without a configured one; `NODE=auto` (only a
    /// plan chooses that node: see [`PveBackend::plan`]).
    pub async fn node_for(&self, spec: &ContainerSpec) -> anyhow::Result<String> {
        match Wish::of(spec.node.as_deref(), self.opts.node.as_deref()) {
            Wish::Named(n) => Ok(n),
            Wish::Auto => bail!(
                "{}: NODE=auto is resolved when the container is planned (GET /cluster/resources); \
                 plan it first (proxmox-gitops provision -c {} plans and applies)",
                spec.name,
                spec.name
            ),
            Wish::Unset => Ok(self.discovered.get_or_try_init(|| discover_node(&self.client)).await?.clone()),
        }
    }

    /// Where `spec`'s container is and where it goes: `GET /cluster/resources` (with
    /// `type=vm` when `NODE` names a node; everything when a placement may be needed), then
    /// [`placement::plan_node`]. A container placed here has its `MEMORY` promised on the chosen
    /// node for the rest of the run, so that concurrent plans spread out.
    ///
    /// # Errors
    /// API errors; the container is on an offline node; no node can take a new container.
    pub async fn node_plan(&self, spec: &ContainerSpec) -> anyhow::Result<NodePlan> {
        let wish = Wish::of(spec.node.as_deref(), self.opts.node.as_deref());
        let kind = if matches!(wish, Wish::Named(_)) { Some("vm") } else { None };
        let res = self.cluster(kind).await.with_context(|| {
            format!("{}: cannot look CT {} up in the cluster (GET /cluster/resources)", spec.name, spec.vmid)
        })?;
        if let Some(node) = res.vm_node(spec.vmid) {
            bail!(
                "{}: vmid {} is a QEMU VM on node {node}, not a container; proxmox-gitops never touches it. Give the lib \
                 a free ID in {}",
                spec.name,
                spec.vmid,
                spec.sources.first().cloned().unwrap_or_else(|| spec.dir.join("container.env")).display()
            );
        }
        let decision = {
            let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            let d = placement::plan_node(&wish, spec.vmid, &res, &spec.rootfs.storage, spec.memory_mib, &reserved)
                .map_err(|e| anyhow!("{} (vmid {}): {e}", spec.name, spec.vmid))?;
            if let NodeDecision::Ready(NodePlan { node, placement: Some(_), .. }) = &d {
                *reserved.entry(node.clone()).or_default() += spec.memory_mib * 1024 * 1024;
            }
            d
        };
        match decision {
            NodeDecision::Ready(p) => Ok(p),
            NodeDecision::Discover => {
                Ok(NodePlan { node: self.node_for(spec).await?, live_node: None, placement: None, migrate: None })
            }
        }
    }

    /// The node `spec`'s container is on now (`GET /cluster/resources?type=vm`); when it is not
    /// listed, its named node (an identity without `VM.Audit` sees no entry), the only online
    /// node when none is named, `None` for `NODE=auto` (nothing to find).
    ///
    /// # Errors
    /// API errors, node discovery errors.
    pub async fn live_node(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        let res = self
            .cluster(Some("vm"))
            .await
            .with_context(|| format!("cannot look CT {} up in the cluster (GET /cluster/resources)", spec.vmid))?;
        if let Some(ct) = res.ct(spec.vmid) {
            return Ok(Some(ct.node.clone()));
        }
        match Wish::of(spec.node.as_deref(), self.opts.node.as_deref()) {
            Wish::Auto => Ok(None),
            _ => self.node_for(spec).await.map(Some),
        }
    }

    /// The template arch of `node` from `GET /nodes/{node}/status` (`current-kernel.machine`),
    /// fetched once per node.
    async fn arch(&self, node: &str) -> anyhow::Result<String> {
        let mut map = self.arches.lock().await;
        if let Some(a) = map.get(node) {
            return Ok(a.clone());
        }
        let machine = self.client.node(node).machine().await?;
        let arch = desired::arch_of_machine(&machine).to_string();
        map.insert(node.to_string(), arch.clone());
        Ok(arch)
    }

    async fn desired_for(&self, spec: &ContainerSpec, node: &str) -> anyhow::Result<Desired> {
        let arch = self.arch(node).await?;
        Ok(desired(spec, &self.opts.defaults, &arch)?)
    }

    /// Reads the live container: config (pending values applied) with its digest, the pending
    /// keys and whether it runs.
    async fn read_live(&self, node: &str, vmid: u32) -> Result<(PveObserved, Option<String>), PveError> {
        let handle = self.client.ct(node, vmid);
        let Some(config) = handle.config().await? else { return Ok((PveObserved::Absent, None)) };
        let (pending, status) = tokio::try_join!(handle.pending(), handle.status())?;
        let ct = LiveCt {
            config: config.values,
            pending: pending.into_iter().map(|p| p.key).collect(),
            running: status.is_some_and(|s| s.running()),
        };
        Ok((PveObserved::Present(ct), config.digest))
    }

    /// [`PveBackend::read_live`], after PVE's own `lock` on the container has cleared: its
    /// running task is waited for ([`PveBackend::settle_lock`], bounded), so a re-run after a
    /// `kill -9` during a create sees the finished container and converges. Returns notes for
    /// the artifact (what held the lock).
    async fn read_settled(
        &self,
        spec: &ContainerSpec,
        node: &str,
    ) -> anyhow::Result<(PveObserved, Option<String>, Vec<String>)> {
        let mut notes = Vec::new();
        for _ in 0..5 {
            let (live, digest) = self
                .read_live(node, spec.vmid)
                .await
                .with_context(|| format!("{}: cannot read CT {} on node {node}", spec.name, spec.vmid))?;
            let lock = match &live {
                PveObserved::Present(ct) => ct.config.get("lock").cloned(),
                PveObserved::Absent => None,
            };
            let Some(lock) = lock else { return Ok((live, digest, notes)) };
            if !self.opts.wait_for_locks {
                return Err(self.busy(spec, node, &lock).await);
            }
            let note = self.settle_lock(node, spec.vmid, &lock).await.with_context(|| spec.name.clone())?;
            tracing::info!("{}: {note}", spec.name);
            notes.push(note);
        }
        Err(Hinted::new(
            format!("{}: CT {} on node {node} was locked again and again while it was planned", spec.name, spec.vmid),
            Hint::RerunLater,
        )
        .into())
    }

    /// The failure of a plan that does not wait ([`PveBackendOptions::wait_for_locks`]) for CT
    /// `spec.vmid`, which PVE has locked (`lock`): names the running task holding it, when one is
    /// listed, or the leftover lock and `pct unlock`.
    async fn busy(&self, spec: &ContainerSpec, node: &str, lock: &str) -> anyhow::Error {
        let vmid = spec.vmid;
        match self.active_task(node, vmid).await {
            Ok(Some((upid, kind))) => Hinted::new(
                format!(
                    "{}: CT {vmid} is busy: PVE has it locked ({lock}) by the running task {upid} ({kind}) on node {node}",
                    spec.name
                ),
                Hint::RerunLater,
            )
            .or(Hint::WaitForLocks)
            .into(),
            Ok(None) => Hinted::new(
                format!(
                    "{}: CT {vmid} is locked ({lock}) on node {node}, and no task of it runs: the lock is left over from \
                     an interrupted operation; make sure nothing works on it",
                    spec.name
                ),
                Hint::on_node(["pct".to_string(), "unlock".into(), vmid.to_string()], node),
            )
            .into(),
            Err(e) => e.context(format!("{}: CT {vmid} is busy: PVE has it locked ({lock}) on node {node}", spec.name)),
        }
    }

    /// Plans `spec` against the live container under `policy` (reads only; a container PVE
    /// locks is waited for first: its running task, bounded; see the [`lease`] module — or,
    /// without [`PveBackendOptions::wait_for_locks`], reported busy).
    ///
    /// # Errors
    /// Root-only options under a non-root identity (before any API call), spec problems
    /// ([`crate::error::Problems`] inside the `anyhow::Error`), API errors.
    pub async fn plan(&self, spec: &ContainerSpec, policy: impl Into<PlanPolicy>) -> anyhow::Result<ContainerPlan> {
        let PlanPolicy { recreate: policy, adopt } = policy.into();
        self.check_permissions(spec)?;
        let np = self.node_plan(spec).await?;
        let node = np.node.clone();
        let d = self.desired_for(spec, &node).await?;
        // root@pam sees every guest of the cluster in `GET /cluster/resources`, so a vmid it
        // does not list does not exist: there is no config to read. (Should one appear before
        // the create, PVE refuses the create — `CT … already exists` — and nothing is written.)
        // Other identities see only what they may audit, and read the config.
        let (live, digest, notes) = match &np.live_node {
            None if self.client.auth().is_root() => (PveObserved::Absent, None, Vec::new()),
            live_node => self.read_settled(spec, live_node.as_deref().unwrap_or(&node)).await?,
        };
        let mut planned = planner::plan_with(&d, &live, policy, self.client.auth().is_root(), adopt);
        planned.warnings.splice(0..0, notes);
        // A node change alone is a migration; a recreate (for other reasons) destroys on the
        // node the container is on and creates on the new one, so the migration stays in the
        // plan to name both; a refused or foreign plan moves nothing.
        let migrate = match (&planned.action, np.migrate) {
            (Action::Refused { .. } | Action::Foreign { .. } | Action::Create, _) => None,
            (_, m) => m,
        };
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
            node: Some(node),
            placement: np.placement,
            migrate,
            policy,
            reboot_for_pending: planned.reboot_for_pending,
        })
    }

    /// The config `digest` the last [`PveBackend::plan`] of CT `vmid` read (`GET
    /// /nodes/{node}/lxc/{vmid}/config` → `digest`); `None` when it did not exist or was not
    /// planned by this instance. An update applies with exactly this digest.
    pub fn planned_digest(&self, vmid: u32) -> Option<String> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&vmid).and_then(|c| c.digest.clone())
    }

    /// Whether the live CT `spec.vmid` on its node carries our mark for `spec`'s lib
    /// ([`desired::marked_for`]; lease lines ignored) and its hostname
    /// (`GET /nodes/{node}/lxc/{vmid}/config`): `None` when the CT does not exist.
    ///
    /// # Errors
    /// Node discovery and API errors.
    pub async fn live_mark(&self, spec: &ContainerSpec) -> anyhow::Result<Option<(String, bool)>> {
        let Some(node) = self.live_node(spec).await? else { return Ok(None) };
        let config = self
            .client
            .ct(&node, spec.vmid)
            .config()
            .await
            .with_context(|| format!("cannot read CT {} on node {node}", spec.vmid))?;
        Ok(config.map(|c| {
            let marked = desired::marked_for(&desired::without_lease(c.description()), &spec.name);
            (c.hostname().to_string(), marked)
        }))
    }

    /// The hostname of the live CT `spec.vmid` on its node (`GET /nodes/{node}/lxc/{vmid}/config`),
    /// `None` when the CT does not exist (PVE's "does not exist"); an empty string when its
    /// config has no `hostname`.
    ///
    /// # Errors
    /// Node discovery and API errors.
    pub async fn live_hostname(&self, spec: &ContainerSpec) -> anyhow::Result<Option<String>> {
        Ok(self.live_mark(spec).await?.map(|(hostname, _)| hostname))
    }
}
