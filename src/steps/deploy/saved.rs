//! Applying a saved plan (`deploy --plan plan.json`, `provision --plan plan.json`): reading it
//! for a run ([`read`]) and the checks that refuse it when the inputs or the live state moved
//! since it was planned ([`refuse_moved`]). Both commands call these once; neither has its own.
//!
//! * **Inputs**: each container's [`inputs_digest`] (spec, lib and base trees, globals, shaping
//!   settings) must equal the `inputs_digest` the plan recorded;
//! * **Live state**: each container whose provision step the plan runs is planned again with the
//!   plan's recreate policy; its PVE config `digest` and its action must equal the plan's
//!   ([`crate::steps::plan::live_moved`]). The deploy runner repeats the live check per container
//!   right before it applies ([`super::RunnerOptions::saved_plan`]), and an in-place update then
//!   writes with that same digest, so a change made in between is refused by PVE itself.

use std::path::Path;

use super::inputs_digest;
use crate::artifact::ArtifactDir;
use crate::backend::{Backend, Planned, plan_all};
use crate::error::{Error, Result};
use crate::inventory::{Inventory, NotFound};
use crate::model::RecreatePolicy;
use crate::steps::plan::{Plan, Step, live_moved, stale_error};

/// A container of a saved plan that moved: `(name, vmid, reason)`.
pub type Moved = (String, u32, String);

/// The containers of `plan` whose inputs digest now differs from the one the plan recorded (or
/// cannot be computed, or was not recorded). `root` is the canonical monorepo checkout,
/// `artifacts` the canonical artifacts directory (left out of the digest).
pub fn inputs_moved(plan: &Plan, inv: &Inventory, root: &Path, artifacts: &Path) -> Vec<Moved> {
    let mut moved = Vec::new();
    for c in &plan.containers {
        let why = match (inv.container(&c.name), &c.inputs_digest) {
            (None, _) => Some(format!("no container `{}` in the inventory of stage {} any more", c.name, inv.stage)),
            (Some(_), None) => Some("the plan records no inputs digest for it".to_string()),
            (Some(spec), Some(want)) => match inputs_digest(root, inv, spec, artifacts) {
                Ok(now) if &now == want => None,
                Ok(_) => Some("its inputs (container.env, lib or base files, globals, settings) changed".to_string()),
                Err(e) => Some(format!("cannot compute its inputs digest: {e}")),
            },
        };
        if let Some(why) = why {
            moved.push((c.name.clone(), c.vmid, why));
        }
    }
    moved
}

/// Plans again, on `backend` with `policy` and at most `jobs` at a time, every container of
/// `plan` whose provision step the plan runs, and returns those whose live state moved (see
/// [`live_moved`]; a container that cannot be planned now moved too). Reads only.
///
/// Containers the saved plan itself could not plan (`provision_error`: PVE unreachable, a node
/// down) are left out: nothing was reviewed for them, so they cannot move, and they must not stop
/// the others (a failing container never does). The deploy runner fails each of them on its own:
/// with the same error when it still cannot be planned, and refused ("the plan holds no live
/// provision plan for it") when it now can: never applied unreviewed.
pub async fn live_moved_all(
    plan: &Plan,
    inv: &Inventory,
    backend: &Backend,
    policy: RecreatePolicy,
    jobs: usize,
) -> Vec<Moved> {
    let provisioning: Vec<_> = plan
        .containers
        .iter()
        .filter(|c| c.provision_error.is_none() && c.steps_to_run().contains(&Step::Provision))
        .collect();
    let specs = provisioning.iter().filter_map(|c| inv.container(&c.name).cloned()).collect();
    let fresh = plan_all(backend, specs, policy, jobs).await;
    let names: Vec<&str> = provisioning.iter().map(|c| c.name.as_str()).collect();
    live_moved_of(plan, &fresh, backend).into_iter().filter(|m| names.contains(&m.0.as_str())).collect()
}

/// The containers of `plan` whose live state moved, judged from `fresh` plans made on `backend`
/// with the plan's recreate policy (see [`live_moved`]; one that cannot be planned now moved
/// too). Containers without a fresh plan are not judged.
pub fn live_moved_of(plan: &Plan, fresh: &[Planned], backend: &Backend) -> Vec<Moved> {
    let mut moved = Vec::new();
    for p in fresh {
        let Some(saved) = plan.containers.iter().find(|c| c.name == p.spec.name) else { continue };
        let why = match &p.plan {
            Ok(fresh) => live_moved(saved, fresh, backend.config_digest(p.spec.vmid).as_deref()),
            Err(e) => Some(format!("cannot be planned now: {}", crate::actions::redact(&format!("{e:#}")))),
        };
        if let Some(why) = why {
            moved.push((saved.name.clone(), saved.vmid, why));
        }
    }
    moved
}

/// Reads the saved plan at `path` for a run: it must plan `git_ref` (when the run names one), and
/// it is narrowed to the containers `selection` names (`-c`; all of the plan's when empty).
///
/// # Errors
/// [`Error::Usage`] (exit 2) naming the file for an unreadable plan, another ref, or a selected
/// container the plan does not hold; the inventory's error for an unknown container.
pub fn read(path: &Path, git_ref: Option<&str>, selection: &[String], inv: &Inventory) -> Result<Plan> {
    let mut plan: Plan = crate::artifact::read(path).map_err(|e| {
        Error::Usage(format!(
            "--plan {e}; write a plan first: {} (it writes {})",
            crate::steps::plan::plan_command(None, git_ref.unwrap_or("refs/heads/release"), &[]),
            path.display()
        ))
    })?;
    if let Some(r) = git_ref.filter(|r| *r != plan.git_ref) {
        return Err(Error::Usage(format!(
            "{} plans ref {}, but this run is for {r} (--ref or GITHUB_REF); plan that ref: {}",
            path.display(),
            plan.git_ref,
            crate::steps::plan::plan_command(None, r, &[])
        )));
    }
    if !selection.is_empty() {
        let names: Vec<String> =
            inv.select(selection, true, NotFound::InStage)?.into_iter().map(|c| c.name.clone()).collect();
        if let Some(missing) = names.iter().find(|n| !plan.containers.iter().any(|c| &c.name == *n)) {
            return Err(Error::Usage(format!(
                "container `{missing}` is not in {} (it plans {}); plan it: {}",
                path.display(),
                plan.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
                crate::steps::plan::plan_command(None, &plan.git_ref, &[missing.as_str()])
            )));
        }
        plan.containers.retain(|c| names.contains(&c.name));
    }
    Ok(plan)
}

/// Refuses the saved plan `plan` (read from `path`) before anything changes when a container's
/// inputs digest moved ([`inputs_moved`], over the monorepo `repo` and the artifacts directory)
/// or it is among `live` (the live-state check's findings, [`live_moved_all`] or
/// [`live_moved_of`]); logs that it applies otherwise.
///
/// # Errors
/// [`Error::Usage`] for a monorepo path that cannot be resolved; [`Error::Failed`] when the
/// artifacts directory cannot be made, or naming each container that moved and the command that
/// plans again ([`stale_error`]).
pub fn refuse_moved(
    plan: &Plan,
    path: &Path,
    inv: &Inventory,
    repo: &Path,
    artifacts: &ArtifactDir,
    live: Vec<Moved>,
) -> Result<()> {
    let root = repo.canonicalize().map_err(|e| Error::Usage(format!("{}: {e}", repo.display())))?;
    let dir = artifacts.root();
    let dir = std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot create {}: {e}", dir.display())))?;
    let mut moved = inputs_moved(plan, inv, &root, &dir);
    for m in live {
        if !moved.iter().any(|(n, _, _)| *n == m.0) {
            moved.push(m);
        }
    }
    if moved.is_empty() {
        tracing::info!("{}: inputs and live state as planned; applying it", path.display());
        Ok(())
    } else {
        Err(stale_error(plan, path, &moved))
    }
}
