//! Step `plan`: what a deploy of a ref would do, per container, without changing anything.
//!
//! The ref decides the steps (the seed's branch model):
//!
//! | ref | steps |
//! |---|---|
//! | `refs/heads/release` | provision, configure |
//! | `refs/heads/main` | configure |
//! | `refs/heads/snapshot` | snapshot |
//!
//! Any other ref is an input error. With live state (a backend), `provision` steps are refined
//! into create / update in place / resize / recreate / nothing by the backend's planner
//! ([`crate::backend::plan_all`]).

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::backend::model::RecreatePolicy;
use crate::backend::{Backend, plan_all};
use crate::error::{Error, Location, Result};
use crate::inventory::{Inventory, NotFound};

/// A pipeline step a deploy may run for a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// Create/update/start the container.
    Provision,
    /// Apply the base role and the lib's configuration.
    Configure,
    /// Take a verified data snapshot.
    Snapshot,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Provision => "provision",
            Step::Configure => "configure",
            Step::Snapshot => "snapshot",
        })
    }
}

/// The steps a push to `git_ref` runs.
///
/// # Errors
/// [`Error::Input`] for a ref outside `refs/heads/{release,main,snapshot}` (short branch names
/// are accepted too).
pub fn steps_for_ref(git_ref: &str) -> Result<Vec<Step>> {
    let branch = git_ref.strip_prefix("refs/heads/").unwrap_or(git_ref);
    match branch {
        "release" => Ok(vec![Step::Provision, Step::Configure]),
        "main" => Ok(vec![Step::Configure]),
        "snapshot" => Ok(vec![Step::Snapshot]),
        _ => Err(Error::input(
            Location::file("--ref").with_key(git_ref),
            format!(
                "ref `{git_ref}` does not deploy: expected refs/heads/release (provision + configure), \
                 refs/heads/main (configure) or refs/heads/snapshot (snapshot)"
            ),
        )),
    }
}

/// One container's entry in `plan.json`: the steps a deploy of the ref runs for it and, with
/// live state, what provisioning would do ([`crate::backend::model::ContainerPlan`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedContainer {
    /// Container name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// Steps, in order.
    pub steps: Vec<Step>,
    /// The live provision plan (create / update / resize / recreate / nothing …), when a
    /// backend was reachable and the ref provisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision: Option<crate::backend::model::ContainerPlan>,
    /// Why the live provision plan could not be made (API unreachable, root-only option …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_error: Option<String>,
}

/// The `plan.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The ref planned for, as given.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Stage.
    pub stage: String,
    /// One entry per selected container, in inventory order.
    pub containers: Vec<PlannedContainer>,
}

impl Artifact for Plan {
    const KIND: &'static str = "plan";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// Plans `git_ref` for the selected containers (all when `names` is empty).
///
/// # Errors
/// See [`steps_for_ref`] and [`Inventory::select`].
pub fn plan(inv: &Inventory, git_ref: &str, names: &[String]) -> Result<Plan> {
    let steps = steps_for_ref(git_ref)?;
    let containers = inv
        .select(names, true, NotFound::InStage)?
        .into_iter()
        .map(|c| PlannedContainer {
            name: c.name.clone(),
            hostname: c.hostname.clone(),
            vmid: c.vmid,
            steps: steps.clone(),
            provision: None,
            provision_error: None,
        })
        .collect();
    Ok(Plan { git_ref: git_ref.to_string(), stage: inv.stage.clone(), containers })
}

/// Adds each container's live provision plan to `plan` (only when its steps include
/// provision), planning at most `jobs` containers at a time. Reads only; nothing changes.
pub async fn with_live_state(plan: &mut Plan, inv: &Inventory, backend: &Backend, policy: RecreatePolicy, jobs: usize) {
    let specs: Vec<crate::inventory::ContainerSpec> = plan
        .containers
        .iter()
        .filter(|c| c.steps.contains(&Step::Provision))
        .filter_map(|c| inv.container(&c.name).cloned())
        .collect();
    let planned = plan_all(backend, specs, policy, jobs).await;
    for p in planned {
        if let Some(c) = plan.containers.iter_mut().find(|c| c.name == p.spec.name) {
            match p.plan {
                Ok(cp) => c.provision = Some(cp),
                Err(e) => c.provision_error = Some(crate::actions::redact(&format!("{e:#}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs() {
        assert_eq!(steps_for_ref("refs/heads/release").unwrap(), vec![Step::Provision, Step::Configure]);
        assert_eq!(steps_for_ref("main").unwrap(), vec![Step::Configure]);
        assert_eq!(steps_for_ref("refs/heads/snapshot").unwrap(), vec![Step::Snapshot]);
        let e = steps_for_ref("refs/heads/feature").unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
