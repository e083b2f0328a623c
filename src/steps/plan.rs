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
use crate::backend::model::{Action, BackendKind, RecreatePolicy, SettingChange};
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
    /// The settings an in-place update changes, in the user's terms (`MEMORY 2048 → 1024`),
    /// from the backend's planner (schema 1.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<SettingChange>,
    /// The container's inputs digest (see `crate::steps::deploy::inputs_digest`), when it was
    /// computed (schema 1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_digest: Option<String>,
    /// Steps `deploy` would skip because their artifact shows success for the same inputs digest
    /// (schema 1.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_steps: Vec<Step>,
}

impl PlannedContainer {
    /// The steps `deploy` would run: [`Self::steps`] without [`Self::skipped_steps`].
    pub fn steps_to_run(&self) -> Vec<Step> {
        self.steps.iter().copied().filter(|s| !self.skipped_steps.contains(s)).collect()
    }

    /// Whether a deploy would change something: a step other than provision runs, or provision
    /// runs and its live plan changes something (or starts the container), or is unknown.
    pub fn changes_pending(&self) -> bool {
        self.steps_to_run().iter().any(|s| match s {
            Step::Provision => match &self.provision {
                Some(p) => {
                    p.action.changes_something()
                        || p.start
                        || matches!(p.action, Action::Refused { .. } | Action::Foreign { .. })
                }
                None => true,
            },
            Step::Configure | Step::Snapshot => true,
        })
    }
}

/// How many containers each kind of provision action concerns (see [`Plan::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Containers to create.
    pub create: usize,
    /// Containers updated in place (settings and/or volume resizes).
    pub update: usize,
    /// Containers destroyed and created again.
    pub recreate: usize,
    /// Containers whose definition stays as it is (they may still be started or configured).
    pub unchanged: usize,
    /// Containers needing a recreate the policy forbids (the provision step would fail).
    pub refused: usize,
    /// Containers not created by proxmox-gitops to take over in place (`--adopt`).
    #[serde(default)]
    pub adopt: usize,
    /// Containers at a lib's vmid that are not ours (no `--adopt`: the provision step fails).
    #[serde(default)]
    pub foreign: usize,
    /// Containers that could not be planned (`provision_error`).
    pub failed: usize,
    /// Containers whose provision action is unknown (no live state: offline plan).
    pub unknown: usize,
    /// Containers whose provision step `deploy` skips (already succeeded for the same inputs).
    pub skipped: usize,
}

impl Counts {
    /// The count line: `2 to create, 1 to update in place, 1 to recreate, 3 unchanged`, then
    /// `, N to adopt`, `, N refused (needs --allow-recreate)`, `, N foreign (not ours; --adopt takes
    /// over)`, `, N cannot be planned`, `, N unknown (no live
    /// state)`, `, N skipped (already provisioned)` when not zero. The first four always appear.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{} to create, {} to update in place, {} to recreate, {} unchanged",
            self.create, self.update, self.recreate, self.unchanged
        );
        for (n, what) in [
            (self.adopt, "to adopt"),
            (self.refused, "refused (needs --allow-recreate)"),
            (self.foreign, "foreign (not ours; --adopt takes over)"),
            (self.failed, "cannot be planned"),
            (self.unknown, "unknown (no live state)"),
            (self.skipped, "skipped (already provisioned for the same inputs)"),
        ] {
            if n > 0 {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        s
    }
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
    /// The backend whose live state the provision plans come from; `None` when no live state
    /// was read (offline plan, or a ref that does not provision) (schema 1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
}

impl Plan {
    /// The provision actions of the containers whose steps include provision, counted.
    pub fn counts(&self) -> Counts {
        let mut n = Counts::default();
        for c in self.containers.iter().filter(|c| c.steps.contains(&Step::Provision)) {
            if c.skipped_steps.contains(&Step::Provision) {
                n.skipped += 1;
                continue;
            }
            match (&c.provision, &c.provision_error) {
                (Some(p), _) => match p.action {
                    Action::Create => n.create += 1,
                    Action::Update { .. } => n.update += 1,
                    Action::Recreate { .. } => n.recreate += 1,
                    Action::Nothing => n.unchanged += 1,
                    Action::Refused { .. } => n.refused += 1,
                    Action::Adopt { .. } => n.adopt += 1,
                    Action::Foreign { .. } => n.foreign += 1,
                },
                (None, Some(_)) => n.failed += 1,
                (None, None) => n.unknown += 1,
            }
        }
        n
    }

    /// Whether some container's live provision plan could not be made (`provision_error`).
    pub fn cannot_plan(&self) -> bool {
        self.containers.iter().any(|c| c.provision_error.is_some())
    }

    /// Whether applying the plan would change anything (see [`PlannedContainer::changes_pending`]);
    /// what `plan --detailed-exitcode` exits 2 for.
    pub fn changes_pending(&self) -> bool {
        self.containers.iter().any(PlannedContainer::changes_pending)
    }
}

impl Artifact for Plan {
    const KIND: &'static str = "plan";
    const SCHEMA_VERSION: (u32, u32) = (1, 1);
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
            settings: Vec::new(),
            inputs_digest: None,
            skipped_steps: Vec::new(),
        })
        .collect();
    Ok(Plan { git_ref: git_ref.to_string(), stage: inv.stage.clone(), containers, backend: None })
}

/// Adds each container's live provision plan to `plan` (only when its steps include
/// provision) and the settings it changes in the user's terms, planning at most `jobs`
/// containers at a time; records the backend in [`Plan::backend`]. Reads only; nothing changes.
pub async fn with_live_state(plan: &mut Plan, inv: &Inventory, backend: &Backend, policy: RecreatePolicy, jobs: usize) {
    let specs: Vec<crate::inventory::ContainerSpec> = plan
        .containers
        .iter()
        .filter(|c| c.steps.contains(&Step::Provision))
        .filter_map(|c| inv.container(&c.name).cloned())
        .collect();
    let planned = plan_all(backend, specs, policy, jobs).await;
    plan.backend = Some(backend.kind());
    for p in planned {
        if let Some(c) = plan.containers.iter_mut().find(|c| c.name == p.spec.name) {
            match p.plan {
                Ok(cp) => {
                    c.settings = match backend.kind() {
                        BackendKind::Pve => crate::backend::pve::planner::setting_changes(&p.spec, &cp.action),
                        BackendKind::Lxc => crate::backend::lxc::planner::setting_changes(&p.spec, &cp),
                    };
                    c.provision = Some(cp);
                }
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
