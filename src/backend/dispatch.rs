//! The [`Backend`] enum: one type over the `pve` and `lxc` backends, so that steps hold "the
//! backend of this run" without generics, and the one place where the safety rule is applied
//! before a recreate.
//!
//! **No destroy without a snapshot**: before a plan that recreates a container is executed,
//! [`Backend::apply`] calls [`guard::protect`] — in this one place, for every backend (the
//! backends' own `apply`/`destroy` do not repeat it, so callers go through [`Backend`]). The
//! `destroy` step calls the same [`guard::protect`] before [`Backend::destroy`].
//!
//! [`plan_all`] plans many containers with bounded parallelism over one backend instance (one
//! PVE client and session); the `plan` and `provision` steps both use it.

use futures_util::StreamExt;

use super::failed_before_plan;
use super::lxc::LxcBackend;
use super::pve::PveBackend;
use crate::artifact::ArtifactDir;
use crate::inventory::ContainerSpec;
use crate::model::PlanPolicy;
use crate::model::{Action, ActionRecord, ApplyOptions, BackendKind, ContainerPlan, Outcome, Provision};
use crate::snapshot::guard;

/// A provisioning backend, opened once per run ([`super::open`]). The steps dispatch over the
/// variants; each implements `plan`, `apply` and `destroy` with the same signatures.
// One value per run (or per container): the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
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

    /// The way into `spec`'s live container for the protect-before-destroy guard's data
    /// snapshot, or why there is none with the remedy ([`crate::access::for_guard`]: the lxc
    /// backend attaches through its own client; PVE containers over SSH from their last
    /// provision artifact in `artifacts`, keys in `share`). Nothing happens until awaited.
    ///
    /// # Errors
    /// [`guard::Unreachable`] naming the reason and the remedy.
    pub async fn guard_access(
        &self,
        spec: &ContainerSpec,
        artifacts: &ArtifactDir,
        share: &std::path::Path,
    ) -> Result<Box<dyn crate::exec::RemoteExec>, guard::Unreachable> {
        let lxc = match self {
            Backend::Lxc(b) => Some(b.client()),
            Backend::Pve(_) => None,
        };
        crate::access::for_guard(self.kind(), lxc, spec, artifacts, share).await
    }

    /// Plans one container (reads only). See [`PveBackend::plan`].
    ///
    /// # Errors
    /// The backend's planning errors.
    pub async fn plan(&self, spec: &ContainerSpec, policy: impl Into<PlanPolicy>) -> anyhow::Result<ContainerPlan> {
        let policy = policy.into();
        match self {
            Backend::Pve(b) => b.plan(spec, policy).await,
            Backend::Lxc(b) => b.plan(spec, policy).await,
        }
    }

    /// The PVE config `digest` (`GET /nodes/{node}/lxc/{vmid}/config` → `digest`) read by the
    /// last [`Backend::plan`] of CT `vmid` on this instance; `None` when the CT did not exist,
    /// was not planned here, or on the lxc backend (LXC has no config digest).
    pub fn config_digest(&self, vmid: u32) -> Option<String> {
        match self {
            Backend::Pve(b) => b.planned_digest(vmid),
            Backend::Lxc(_) => None,
        }
    }

    /// Applies a plan; never panics, failures are in the outcome. See [`PveBackend::apply`].
    ///
    /// A plan that recreates the container runs only after [`guard::protect`] allowed it (the safety
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
        let reach = self.guard_access(spec, artifacts, &opts.share);
        match guard::protect(spec, &opts.share, opts.no_snapshot, reach).await {
            Ok(guarded) => {
                let mut prov = self.apply_unguarded(spec, plan, opts).await;
                prov.protected_by = Some(guarded.protection.protected_by());
                if let Some(r) = guarded.record {
                    prov.actions.insert(0, r);
                }
                prov
            }
            Err(refused) => {
                let refused = refused.during(crate::error::WithoutSnapshot::Recreate);
                let error = crate::actions::redact(&refused.to_string());
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
    /// rule: destroy through the `destroy` step, which calls [`guard::protect`] first.
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

/// One container's plan, or why it could not be planned.
#[derive(Debug)]
pub struct Planned {
    /// The container.
    pub spec: ContainerSpec,
    /// Its plan.
    pub plan: anyhow::Result<ContainerPlan>,
}

/// Runs `work` with at most `jobs` futures at a time and returns their outputs in the given
/// order. The next one starts as soon as any running one ends — not only when the oldest of
/// the window has ended, as `StreamExt::buffered` does, where one slow container (a long boot,
/// a lock waited out) would stall every slot behind it until it ended.
pub async fn pooled<F: std::future::Future>(work: impl IntoIterator<Item = F>, jobs: usize) -> Vec<F::Output> {
    let mut done: Vec<(usize, F::Output)> =
        futures_util::stream::iter(work.into_iter().enumerate().map(|(i, f)| async move { (i, f.await) }))
            .buffer_unordered(jobs.max(1))
            .collect()
            .await;
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, out)| out).collect()
}

/// Plans `specs` on `backend` with at most `jobs` at a time (reads live state only, nothing
/// changes); the result is in the given order, one [`Planned`] per spec, planning errors included.
/// On PVE the plans are one planning round: the cluster is read once for all of them
/// ([`PveBackend::begin_plan_round`]); when that read fails, each plan reads (and reports) on its
/// own.
pub async fn plan_all(
    backend: &Backend,
    specs: Vec<ContainerSpec>,
    policy: impl Into<PlanPolicy>,
    jobs: usize,
) -> Vec<Planned> {
    let policy = policy.into();
    let round = match backend {
        Backend::Pve(b) if specs.len() > 1 => b.begin_plan_round().await.is_ok(),
        _ => false,
    };
    let planned = pooled(
        specs.into_iter().map(|spec| async move {
            let plan = backend.plan(&spec, policy).await;
            Planned { spec, plan }
        }),
        jobs,
    )
    .await;
    if let (true, Backend::Pve(b)) = (round, backend) {
        b.end_plan_round();
    }
    planned
}
