//! The artifact of a container that could not be planned.

use crate::inventory::ContainerSpec;
use crate::model::{Action, ApplyOptions, BackendKind, ContainerPlan, Outcome, Provision};

/// The `provision/<name>.json` artifact of a container that could not be planned (or whose
/// recreate was refused before anything changed): outcome `failed` with `e` (redacted, with its
/// causes), a `refused` plan naming the failure, no actions; the address is the spec's static
/// one, if any.
pub fn failed_before_plan(
    kind: BackendKind,
    spec: &ContainerSpec,
    opts: &ApplyOptions,
    e: &anyhow::Error,
) -> Provision {
    let error = crate::actions::redact(&format!("{e:#}"));
    let action = Action::refused_blocked(vec![format!("planning failed: {error}")]);
    let plan = ContainerPlan::new(&spec.name, spec.vmid, &spec.hostname, action, false);
    Provision {
        node: spec.node.clone(),
        address: spec.ip.address().map(|a| a.to_string()),
        outcome: Outcome::Failed { error },
        ..Provision::new(kind, spec, plan, opts)
    }
}
