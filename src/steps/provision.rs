//! Step `provision`: plan and apply the inventory's containers on a backend, concurrently.
//!
//! 1. [`plan_all`] reads live state and plans every selected container (bounded parallelism);
//!    the caller prints the plans **before** anything changes;
//! 2. [`apply_all`] executes them (same bound), writing `provision/<name>.json` atomically as
//!    each container finishes. A failing container does not stop the others.
//!
//! One backend instance — and so one PVE client and session — serves every container.
//!
//! **No destroy without a snapshot**: before a plan that recreates a container is executed,
//! [`Backend::apply`] calls [`protect`], which applies [`crate::snapshot::guard::before_destroy`]
//! — in this one place, for every backend (the backends' own `apply`/`destroy` do not repeat it,
//! so callers go through [`Backend`]). A container that
//! declares `SNAPSHOT` paths gets a verified data snapshot first; when it cannot be reached or the
//! snapshot fails, the recreate is refused and nothing is touched, unless `--no-snapshot`
//! ([`ApplyOptions::no_snapshot`]). `Provision.protected_by` records the outcome. The `destroy`
//! step ([`crate::steps::destroy`]) uses the same [`protect`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;

use crate::artifact::{self, ArtifactDir};
use crate::backend::lxc::{LxcBackend, LxcOptions};
use crate::backend::model::{
    Action, ActionRecord, ApplyOptions, BackendKind, ContainerPlan, Outcome, Provision, RecreatePolicy,
};
use crate::backend::pve::{PveBackend, PveBackendOptions, Timeouts, desired::PveDefaults};
use crate::error::{Error, Location, Problems, Result};
use crate::inventory::ContainerSpec;
use crate::pve::{Auth, ClientOptions, PveClient, TlsMode};
use crate::settings::Settings;
use crate::snapshot::guard::{self, Protection, Refused, Unreachable};
use crate::snapshot::remote::{CommandExec, RemoteExec};
use crate::snapshot::store::Store;

/// A provisioning backend. The provision step dispatches over the variants; each implements
/// `plan`, `apply` and `destroy` with the same signatures.
pub enum Backend {
    /// Proxmox VE over its API.
    Pve(PveBackend),
    /// LXC on this host.
    Lxc(LxcBackend),
}

impl Backend {
    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Pve(_) => BackendKind::Pve,
            Backend::Lxc(_) => BackendKind::Lxc,
        }
    }

    /// Plans one container (reads only). See [`PveBackend::plan`].
    ///
    /// # Errors
    /// The backend's planning errors.
    pub async fn plan(&self, spec: &ContainerSpec, policy: RecreatePolicy) -> anyhow::Result<ContainerPlan> {
        match self {
            Backend::Pve(b) => b.plan(spec, policy).await,
            Backend::Lxc(b) => b.plan(spec, policy).await,
        }
    }

    /// Applies a plan; never panics, failures are in the outcome. See [`PveBackend::apply`].
    ///
    /// A plan that recreates the container runs only after [`protect`] allowed it (the safety
    /// rule: a verified data snapshot first, or `--no-snapshot`); a refusal is a failed outcome
    /// with nothing changed. `artifacts` holds the container's last `provision/<name>.json`
    /// (how PVE containers are reached for the snapshot).
    pub async fn apply(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        artifacts: &ArtifactDir,
    ) -> Provision {
        if !matches!(plan.action, Action::Recreate { .. }) {
            return self.apply_unguarded(spec, plan, opts).await;
        }
        match protect(self, spec, artifacts, &opts.share, opts.no_snapshot).await {
            Ok(guarded) => {
                let mut prov = self.apply_unguarded(spec, plan, opts).await;
                prov.protected_by = Some(guarded.protection.protected_by());
                if let Some(r) = guarded.record {
                    prov.actions.insert(0, r);
                }
                prov
            }
            Err(refused) => {
                let error = crate::ci::redact(&refused.to_string());
                tracing::error!("{error}");
                let mut prov = failed_before_plan(self.kind(), spec, opts, &anyhow::anyhow!("{error}"));
                prov.plan = plan.clone();
                prov.outcome = Outcome::Failed { error };
                prov
            }
        }
    }

    async fn apply_unguarded(&self, spec: &ContainerSpec, plan: &ContainerPlan, opts: &ApplyOptions) -> Provision {
        match self {
            Backend::Pve(b) => b.apply(spec, plan, opts).await,
            Backend::Lxc(b) => b.apply(spec, plan, opts).await,
        }
    }

    /// Destroys a container. See [`PveBackend::destroy`]. This does **not** apply the safety
    /// rule: destroy through [`crate::steps::destroy`], which calls [`protect`] first.
    ///
    /// # Errors
    /// The backend's errors.
    pub async fn destroy(&self, spec: &ContainerSpec) -> anyhow::Result<Vec<ActionRecord>> {
        match self {
            Backend::Pve(b) => b.destroy(spec).await,
            Backend::Lxc(b) => b.destroy(spec).await,
        }
    }
}

/// How to reach PVE besides the settings: TLS and timeouts.
#[derive(Debug, Clone)]
pub struct PveConnect {
    /// Certificate verification.
    pub tls: TlsMode,
    /// Per-operation timeouts.
    pub timeouts: Timeouts,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
}

impl Default for PveConnect {
    fn default() -> Self {
        Self { tls: TlsMode::System, timeouts: Timeouts::default(), request_timeout: Duration::from_secs(60) }
    }
}

fn env_problem(key: &str, msg: impl Into<String>) -> Problems {
    let mut p = Problems::new();
    p.add(Location::file("environment").with_key(key), msg);
    p
}

/// The backend chosen by default: `pve` when `PROXMOX_HOST` is configured, else `lxc`.
pub fn default_backend(settings: &Settings) -> BackendKind {
    if settings.pve.host.is_some() { BackendKind::Pve } else { BackendKind::Lxc }
}

/// Builds the PVE API client from the settings (`PROXMOX_HOST`, `PROXMOX_PORT`, credentials)
/// and the TLS/request options of `connect` (the provision backend and the `snapshot` step's
/// container snapshots share this).
///
/// # Errors
/// [`Error::Input`] naming the missing setting (host, credentials); [`Error::Failed`] for an
/// unusable TLS set-up (unreadable CA file …).
pub fn pve_client(settings: &Settings, connect: &PveConnect) -> Result<PveClient> {
    let s = &settings.pve;
    let host =
        s.host.clone().ok_or_else(|| env_problem("PROXMOX_HOST", "not set: the PVE API host (name or address)"))?;
    let auth = if let Some(pw) = &s.password {
        Auth::Ticket { user: s.user.clone().unwrap_or_else(|| "root@pam".into()), password: pw.clone() }
    } else if let (Some(token), Some(secret)) = (&s.token, &s.secret) {
        let user = s.user.clone().ok_or_else(|| {
            env_problem(
                "PROXMOX_USER",
                "not set: an API token needs its user, e.g. root@pam (PROXMOX_USER) with PROXMOX_TOKEN=ID",
            )
        })?;
        Auth::Token { user, token: token.clone(), secret: secret.clone() }
    } else {
        return Err(env_problem(
            "PROXMOX_PASSWORD",
            "no PVE credentials: set PROXMOX_PASSWORD (ticket auth) or PROXMOX_TOKEN and PROXMOX_SECRET (API token)",
        )
        .into());
    };
    let mut opts = ClientOptions::new(host);
    opts.port = s.port;
    opts.tls = connect.tls.clone();
    opts.request_timeout = connect.request_timeout;
    PveClient::new(opts, auth).map_err(|e| Error::Failed(e.into()))
}

/// Builds the PVE backend from the settings (`PROXMOX_*`).
///
/// # Errors
/// [`Error::Input`] naming the missing setting (host, credentials, template);
/// [`Error::Failed`] for an unusable TLS set-up (unreadable CA file …).
pub fn pve_backend(settings: &Settings, connect: &PveConnect) -> Result<PveBackend> {
    let s = &settings.pve;
    let client = pve_client(settings, connect)?;
    let template = s.template.clone().ok_or_else(|| {
        env_problem(
            "PROXMOX_TEMPLATE",
            "not set: the container template without arch and extension, e.g. debian-13-standard_13.1-2",
        )
    })?;
    Ok(PveBackend::new(
        Arc::new(client),
        PveBackendOptions {
            defaults: PveDefaults {
                storage: s.storage.clone().unwrap_or_else(|| "local".into()),
                template,
                gateway: s.gateway.clone(),
                mask: s.mask,
                interface: s.interface.clone(),
                bridge: s.bridge.clone(),
            },
            node: s.node.clone(),
            timeouts: connect.timeouts.clone(),
        },
    ))
}

/// Builds the backend of `kind`.
///
/// # Errors
/// See [`pve_backend`] and [`lxc_backend`].
pub fn backend(kind: BackendKind, settings: &Settings, connect: &PveConnect) -> Result<Backend> {
    match kind {
        BackendKind::Pve => Ok(Backend::Pve(pve_backend(settings, connect)?)),
        BackendKind::Lxc => Ok(Backend::Lxc(lxc_backend(settings)?)),
    }
}

/// Builds the local LXC backend: LXC path from `$PGO_LXC_PATH` (else `lxc-config
/// lxc.lxcpath`), the share directory from the settings (`PROXMOX_SHARE`), bridge `lxcbr0`, the
/// cached base container from `$PGO_LXC_BASE` (default `pgo-base-bookworm`).
///
/// # Errors
/// [`Error::Failed`] when the host cannot run it (not root, LXC tools missing — the message says
/// what to install).
pub fn lxc_backend(settings: &Settings) -> Result<LxcBackend> {
    let mut opts = LxcOptions { share: settings.share.clone(), ..LxcOptions::default() };
    if let Some(base) = std::env::var("PGO_LXC_BASE").ok().filter(|b| !b.trim().is_empty()) {
        opts.base = base.trim().to_string();
    }
    LxcBackend::open(opts).map_err(Error::Failed)
}

/// One container's plan, or why it could not be planned.
#[derive(Debug)]
pub struct Planned {
    /// The container.
    pub spec: ContainerSpec,
    /// Its plan.
    pub plan: anyhow::Result<ContainerPlan>,
}

/// Plans `specs` with at most `jobs` at a time, in the given order.
pub async fn plan_all(
    backend: &Backend,
    specs: Vec<ContainerSpec>,
    policy: RecreatePolicy,
    jobs: usize,
) -> Vec<Planned> {
    futures_util::stream::iter(specs.into_iter().map(|spec| async move {
        let plan = backend.plan(&spec, policy).await;
        Planned { spec, plan }
    }))
    .buffered(jobs.max(1))
    .collect()
    .await
}

/// Applies the plans with at most `jobs` at a time; writes `provision/<name>.json` for each
/// as it finishes, and returns the artifacts in the given order. A container whose planning
/// failed gets a failed artifact (with a `refused` plan: nothing was changed).
///
/// # Errors
/// Only when an artifact cannot be written.
pub async fn apply_all(
    backend: &Backend,
    planned: Vec<Planned>,
    opts: &ApplyOptions,
    jobs: usize,
    artifacts: &ArtifactDir,
) -> Result<Vec<Provision>> {
    let results: Vec<anyhow::Result<Provision>> = futures_util::stream::iter(planned.into_iter().map(|p| async move {
        let _group = crate::ci::Group::start(&format!("provision {}", p.spec.name));
        let prov = match &p.plan {
            Ok(plan) => backend.apply(&p.spec, plan, opts, artifacts).await,
            Err(e) => failed_before_plan(backend.kind(), &p.spec, opts, e),
        };
        write_artifact(&artifacts.provision(&prov.name), &prov)?;
        Ok(prov)
    }))
    .buffered(jobs.max(1))
    .collect()
    .await;
    results.into_iter().map(|r| r.map_err(Error::Failed)).collect()
}

/// What [`protect`] decided, with the `snapshot` action to record when one was taken.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// What protects the destroy (`Provision.protected_by` is its [`Protection::protected_by`]).
    pub protection: Protection,
    /// `snapshot` action (detail: the archive) when a verified data snapshot was taken.
    pub record: Option<ActionRecord>,
}

/// The transport to `spec`'s live container for the guard's data snapshot, or why there is
/// none and what to do about it: the lxc backend attaches to the running container on this host
/// (`lxc-attach`), so the remedy is `lxc-start`; PVE containers are reached the way the
/// `snapshot` step reaches them ([`crate::steps::snapshot::connect`], over SSH from the
/// container's last `provision` artifact), so the remedy is starting the CT and making SSH work.
async fn reach(
    backend: &Backend,
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
) -> std::result::Result<Box<dyn RemoteExec>, Unreachable> {
    match backend {
        Backend::Lxc(b) => {
            let name = spec.hostname.as_str();
            match b.client().state(name).await {
                Ok(crate::lxc::State::Running) => Ok(Box::new(CommandExec::lxc_attach(name))),
                Ok(state) => Err(Unreachable::new(
                    format!("LXC container `{name}` is {}, not running", state.as_str()),
                    lxc_remedy(b.client().path(), name, state),
                )),
                Err(e) => Err(Unreachable::new(
                    format!("cannot read the state of LXC container `{name}`: {e:#}"),
                    format!("check it with `{}`", lxc_command(b.client().path(), "lxc-info", name)),
                )),
            }
        }
        Backend::Pve(_) => {
            let remedy = format!(
                "start it (`pct start {}` on {}, or the PVE API) and make SSH work",
                spec.vmid,
                spec.node.as_deref().map(|n| format!("node {n}")).unwrap_or_else(|| "its node".into())
            );
            // The last provision run may have failed (e.g. this recreate was refused before):
            // the container still exists at the address it recorded.
            let prov = crate::steps::snapshot::read_provision(spec, artifacts)
                .map_err(|reason| Unreachable::new(reason, remedy.clone()))?;
            let opts = crate::steps::snapshot::ConnectOptions::default();
            crate::steps::snapshot::connect_to(spec, &prov, artifacts, share, &opts)
                .await
                .map(|c| c.exec)
                .map_err(|reason| Unreachable::new(reason, remedy))
        }
    }
}

/// `<tool> [-P <lxcpath>] -n <name>` as the user would type it (`-P` only when the LXC path is
/// not LXC's default `/var/lib/lxc`).
fn lxc_command(lxc_path: &Path, tool: &str, name: &str) -> String {
    if lxc_path == Path::new("/var/lib/lxc") {
        format!("{tool} -n {name}")
    } else {
        format!("{tool} -P {} -n {name}", lxc_path.display())
    }
}

/// What makes a non-running LXC container reachable through `lxc-attach` (no SSH involved).
fn lxc_remedy(lxc_path: &Path, name: &str, state: crate::lxc::State) -> String {
    match state {
        crate::lxc::State::Stopped => format!("start it (`{}`)", lxc_command(lxc_path, "lxc-start", name)),
        crate::lxc::State::Starting => "wait until it is running".into(),
        _ => format!(
            "bring it to RUNNING (`{}` shows its state; `lxc-unfreeze` a frozen one)",
            lxc_command(lxc_path, "lxc-info", name)
        ),
    }
}

/// Applies the safety rule before `spec`'s container is destroyed (a recreate included):
/// [`guard::before_destroy`] with a data snapshot into `<share>/snapshots/<lib>/` when the lib
/// declares `SNAPSHOT` paths (through [`reach`]ing the container), nothing when it declares none,
/// a loud warning with `no_snapshot`.
///
/// # Errors
/// [`Refused`]: the container declares data and cannot be reached, or its snapshot failed or
/// could not be verified — the caller must not destroy it.
pub async fn protect(
    backend: &Backend,
    spec: &ContainerSpec,
    artifacts: &ArtifactDir,
    share: &Path,
    no_snapshot: bool,
) -> std::result::Result<Guarded, Refused> {
    let store = Store::new(share);
    let now = time::OffsetDateTime::now_utc();
    if spec.snapshot_paths.is_empty() || no_snapshot {
        // before_destroy decides without touching the container.
        let protection =
            guard::before_destroy(spec, Err(Unreachable::new("not needed", "")), &store, no_snapshot, now).await?;
        return Ok(Guarded { protection, record: None });
    }
    let started = std::time::Instant::now();
    let exec = reach(backend, spec, artifacts, share).await;
    let protection = guard::before_destroy(spec, exec.as_deref().map_err(Clone::clone), &store, false, now).await?;
    let record = match &protection {
        Protection::Snapshot { id, archive } => Some(ActionRecord {
            action: "snapshot".into(),
            upid: None,
            exit_status: Some("verified".into()),
            duration_ms: started.elapsed().as_millis() as u64,
            detail: Some(format!("{id}: {}", archive.display())),
        }),
        _ => None,
    };
    Ok(Guarded { protection, record })
}

fn write_artifact(path: &Path, prov: &Provision) -> anyhow::Result<()> {
    artifact::write(path, prov).with_context(|| format!("cannot write {}", path.display()))
}

/// The artifact of a container that could not be planned.
pub fn failed_before_plan(
    kind: BackendKind,
    spec: &ContainerSpec,
    opts: &ApplyOptions,
    e: &anyhow::Error,
) -> Provision {
    let error = crate::ci::redact(&format!("{e:#}"));
    Provision {
        backend: kind,
        name: spec.name.clone(),
        node: spec.node.clone(),
        vmid: spec.vmid,
        hostname: spec.hostname.clone(),
        address: spec.ip.address().map(|a| a.to_string()),
        ssh_port: opts.ssh_port,
        plan: ContainerPlan {
            name: spec.name.clone(),
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            action: Action::Refused { reasons: vec![format!("planning failed: {error}")] },
            start: false,
        },
        actions: vec![],
        warnings: vec![],
        status: None,
        created: false,
        protected_by: None,
        inputs_digest: None,
        outcome: Outcome::Failed { error },
    }
}

/// One line of a printed plan: what will happen to the container.
pub fn describe(plan: &ContainerPlan) -> String {
    match &plan.action {
        Action::Create => "create".into(),
        Action::Nothing => "nothing".into(),
        Action::Update { changes, resizes, reboot_needed } => {
            let mut parts: Vec<String> = changes
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.key,
                        match &c.to {
                            Some(v) if c.key == "description" || v.len() > 40 => "…".to_string(),
                            Some(v) => v.clone(),
                            None => "(delete)".into(),
                        }
                    )
                })
                .collect();
            parts.extend(resizes.iter().map(|r| format!("resize {} {}→{} GiB", r.disk, r.from_gib, r.to_gib)));
            format!("update {}{}", parts.join(" "), if *reboot_needed { " (reboot needed)" } else { "" })
        }
        Action::Recreate { reasons } => format!("RECREATE: {}", reasons.join("; ")),
        Action::Refused { reasons } => format!("refused (needs --allow-recreate): {}", reasons.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lxc::State;

    #[test]
    fn lxc_remedy_names_lxc_start_not_ssh() {
        let default = Path::new("/var/lib/lxc");
        assert_eq!(lxc_remedy(default, "broker", State::Stopped), "start it (`lxc-start -n broker`)");
        assert_eq!(
            lxc_remedy(Path::new("/srv/lxc"), "broker", State::Stopped),
            "start it (`lxc-start -P /srv/lxc -n broker`)"
        );
        assert_eq!(lxc_remedy(default, "broker", State::Starting), "wait until it is running");
        assert_eq!(
            lxc_remedy(default, "broker", State::Other),
            "bring it to RUNNING (`lxc-info -n broker` shows its state; `lxc-unfreeze` a frozen one)"
        );
    }
}
