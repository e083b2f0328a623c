//! Applying a saved plan (`deploy --plan plan.json`, `provision --plan plan.json`): the checks
//! that refuse it when the inputs or the live state moved since it was planned.
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
use crate::backend::{Backend, plan_all};
use crate::inventory::Inventory;
use crate::model::RecreatePolicy;
use crate::steps::plan::{Plan, Step, live_moved};

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
    let mut moved = Vec::new();
    for p in plan_all(backend, specs, policy, jobs).await {
        let Some(saved) = provisioning.iter().find(|c| c.name == p.spec.name) else { continue };
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
