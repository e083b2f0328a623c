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
use crate::backend::{Backend, plan_all};
use crate::error::{Error, Hint, Location, Result};
use crate::inventory::{Inventory, NotFound};
use crate::model::{Action, BackendKind, ContainerPlan, RecreatePolicy, SettingChange};

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
/// live state, what provisioning would do ([`crate::model::ContainerPlan`]).
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
    pub provision: Option<crate::model::ContainerPlan>,
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
    /// The PVE config `digest` the live provision plan was made against (`GET
    /// /nodes/{node}/lxc/{vmid}/config` → `digest`; schema 1.2). Absent when the container did
    /// not exist, on the lxc backend, and without live state. `deploy --plan` and `provision
    /// --plan` refuse when the live digest differs ([`crate::steps::deploy::saved::refuse_moved`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
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
                    p.changes_something()
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
    /// Containers moved to the node their `NODE` names (PVE migrate); also counted by what
    /// happens to their definition (update in place, or neither: not `unchanged`).
    #[serde(default)]
    pub migrate: usize,
    /// Containers whose definition stays as it is (they may still be started or configured).
    pub unchanged: usize,
    /// Containers needing a recreate the policy forbids (the provision step would fail).
    pub refused: usize,
    /// Containers whose change no policy allows (a volume shrink, a volume on another storage,
    /// a root-only change under an API token): the provision step would fail; the reasons say
    /// what to change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blocked: usize,
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
    /// Containers whose definition stays but which provision starts (they are not running).
    #[serde(default)]
    pub start: usize,
    /// Containers whose configure step `deploy` runs (not skipped).
    #[serde(default)]
    pub configure: usize,
    /// Containers whose snapshot step `deploy` runs (not skipped).
    #[serde(default)]
    pub snapshot: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Counts {
    /// The count line: `2 to create, 1 to update in place, 1 to recreate, 3 unchanged`, with
    /// `, N to migrate` after the recreates when not zero, then `, N to adopt`,
    /// `, N refused (needs --allow-recreate)`, `, N refused (see the reasons)` (no policy allows
    /// the change), `, N foreign (not ours; --adopt takes over)`, `, N cannot be planned`,
    /// `, N unknown (no live
    /// state)`, `, N skipped (already provisioned)` when not zero. The first four always appear.
    pub fn line(&self) -> String {
        let mut s =
            format!("{} to create, {} to update in place, {} to recreate", self.create, self.update, self.recreate);
        if self.migrate > 0 {
            s.push_str(&format!(", {} to migrate", self.migrate));
        }
        s.push_str(&format!(", {} unchanged", self.unchanged));
        for (n, what) in [
            (self.adopt, "to adopt"),
            (self.refused, "refused (needs --allow-recreate)"),
            (self.blocked, "refused (see the reasons)"),
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

    /// The steps besides provisioning that a deploy would still run: `1 to start, 2 to
    /// configure, 1 to snapshot` (the parts that are not zero), `None` when there are none.
    /// Together with [`Self::line`] it explains every exit 2 of `plan --detailed-exitcode`.
    pub fn pending_line(&self) -> Option<String> {
        let parts: Vec<String> =
            [(self.start, "to start"), (self.configure, "to configure"), (self.snapshot, "to snapshot")]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
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
    /// The recreate policy the provision plans were made with, when live state was read (schema
    /// 1.2); `deploy --plan` and `provision --plan` apply the plan with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate: Option<RecreatePolicy>,
}

impl Plan {
    /// The provision actions of the containers whose steps include provision, counted.
    pub fn counts(&self) -> Counts {
        let mut n = Counts::default();
        for c in &self.containers {
            let run = c.steps_to_run();
            n.configure += usize::from(run.contains(&Step::Configure));
            n.snapshot += usize::from(run.contains(&Step::Snapshot));
            n.start += usize::from(
                run.contains(&Step::Provision)
                    && c.provision.as_ref().is_some_and(|p| {
                        p.start && !matches!(p.action, Action::Create | Action::Recreate { .. } | Action::Adopt { .. })
                    }),
            );
        }
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
                    Action::Nothing if p.migrate.is_some() => {}
                    Action::Nothing => n.unchanged += 1,
                    Action::Refused { needs_recreate: true, .. } => n.refused += 1,
                    Action::Refused { needs_recreate: false, .. } => n.blocked += 1,
                    Action::Adopt { .. } => n.adopt += 1,
                    Action::Foreign { .. } => n.foreign += 1,
                },
                (None, Some(_)) => n.failed += 1,
                (None, None) => n.unknown += 1,
            }
            if c.provision.as_ref().is_some_and(|p| p.migrate.is_some() && !matches!(p.action, Action::Recreate { .. }))
            {
                n.migrate += 1;
            }
        }
        n
    }

    /// The count line of the human plan and the job summary: what provisioning does
    /// ([`Counts::line`], when the ref provisions), then `; ` and the other steps a deploy would
    /// still run ([`Counts::pending_line`]), e.g. `0 to create, 0 to update in place, 0 to
    /// recreate, 1 unchanged; 1 to configure`. `None` when there is nothing to say.
    pub fn count_line(&self) -> Option<String> {
        let n = self.counts();
        let provision = self.containers.iter().any(|c| c.steps.contains(&Step::Provision)).then(|| n.line());
        match (provision, n.pending_line()) {
            (Some(p), Some(rest)) => Some(format!("{p}; {rest}")),
            (p, rest) => p.or(rest),
        }
    }

    /// Whether some container's live provision plan could not be made (`provision_error`), or
    /// was made and is refused (`refused`, `foreign`): the provision step would fail for it, so
    /// `plan --detailed-exitcode` exits 1, not 2 (changes pending).
    pub fn cannot_plan(&self) -> bool {
        self.containers.iter().any(|c| {
            c.provision_error.is_some()
                || c.provision
                    .as_ref()
                    .is_some_and(|p| matches!(p.action, Action::Refused { .. } | Action::Foreign { .. }))
        })
    }

    /// Whether applying the plan would change anything (see [`PlannedContainer::changes_pending`]);
    /// what `plan --detailed-exitcode` exits 2 for.
    pub fn changes_pending(&self) -> bool {
        self.containers.iter().any(PlannedContainer::changes_pending)
    }
}

impl Artifact for Plan {
    const KIND: &'static str = "plan";
    const SCHEMA_VERSION: (u32, u32) = (1, 2);
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
            config_digest: None,
        })
        .collect();
    Ok(Plan { git_ref: git_ref.to_string(), stage: inv.stage.clone(), containers, backend: None, recreate: None })
}

/// Adds each container's live provision plan to `plan` (only when its steps include
/// provision), the settings it changes in the user's terms and the PVE config digest it was
/// planned against, planning at most `jobs` containers at a time; records the backend and
/// `policy` in [`Plan::backend`] and [`Plan::recreate`]. Reads only; nothing changes.
pub async fn with_live_state(
    plan: &mut Plan,
    inv: &Inventory,
    backend: &Backend,
    policy: impl Into<crate::model::PlanPolicy>,
    jobs: usize,
) {
    let policy = policy.into();
    let specs: Vec<crate::inventory::ContainerSpec> = plan
        .containers
        .iter()
        .filter(|c| c.steps.contains(&Step::Provision))
        .filter_map(|c| inv.container(&c.name).cloned())
        .collect();
    let planned = plan_all(backend, specs, policy, jobs).await;
    plan.backend = Some(backend.kind());
    plan.recreate = Some(policy.recreate);
    for p in planned {
        if let Some(c) = plan.containers.iter_mut().find(|c| c.name == p.spec.name) {
            match p.plan {
                Ok(cp) => {
                    c.settings = match backend.kind() {
                        BackendKind::Pve => {
                            crate::backend::pve::planner::setting_changes(&p.spec, &cp.action, policy.recreate)
                        }
                        BackendKind::Lxc => crate::backend::lxc::planner::setting_changes(&p.spec, &cp),
                    };
                    c.config_digest = backend.config_digest(cp.vmid);
                    if let Some(m) = &cp.migrate {
                        let how = match (&cp.action, m.restart) {
                            (Action::Recreate { .. }, _) => "recreate",
                            (_, true) => "migrate, restart",
                            (_, false) => "migrate",
                        };
                        c.settings
                            .insert(0, SettingChange::new("NODE", Some(m.from.clone()), Some(m.to.clone())).how(how));
                    }
                    c.provision = Some(cp);
                }
                Err(e) => c.provision_error = Some(crate::actions::redact(&format!("{e:#}"))),
            }
        }
    }
}

/// The action of a provision plan as `plan.json` names it (`create`, `update`, `recreate` …).
fn action_name(action: &Action) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_string))
        .unwrap_or_else(|| format!("{action:?}"))
}

/// The short form of a config digest in messages (its first 12 characters).
fn short(digest: Option<&str>) -> String {
    match digest {
        Some(d) => d.chars().take(12).collect(),
        None => "none".into(),
    }
}

/// Why applying the saved plan of one container now would not apply exactly that plan: `fresh`
/// is a new plan of it made with the saved plan's recreate policy, `digest` the PVE config
/// digest read with it ([`crate::backend::Backend::config_digest`]). `None` when the live state
/// is as planned: same config digest (same absence of the CT) and the same provision action.
/// The PVE rule: `GET /nodes/{node}/lxc/{vmid}/config` returns `digest`, which changes with
/// every change of the config.
pub fn live_moved(saved: &PlannedContainer, fresh: &ContainerPlan, digest: Option<&str>) -> Option<String> {
    let Some(planned) = &saved.provision else {
        return Some(
            "the plan holds no live provision plan for it (an offline plan, or it could not be planned)".into(),
        );
    };
    let was = saved.config_digest.as_deref();
    match (was, digest) {
        (Some(a), Some(b)) if a != b => {
            return Some(format!("its PVE config changed since the plan (digest {} → {})", short(was), short(digest)));
        }
        (None, Some(_)) if matches!(planned.action, Action::Create) => {
            return Some("CT exists now, but did not when planned (the plan creates it)".into());
        }
        (None, Some(_)) => {
            return Some("the plan records no PVE config digest for it (made by an older proxmox-gitops)".into());
        }
        (Some(_), None) => return Some("CT no longer exists (it did when planned)".into()),
        _ => {}
    }
    if planned.action != fresh.action || planned.start != fresh.start {
        let word = |p: &ContainerPlan| format!("{}{}", action_name(&p.action), if p.start { " + start" } else { "" });
        return Some(format!("what provision would do changed since the plan ({} → {})", word(planned), word(fresh)));
    }
    None
}

/// Checks that the saved plan `plan` (read from `path`) can be applied by a run for `stage` on
/// `backend`, and returns the recreate policy to apply it with: the plan's, which `given` (the
/// run's `--recreate`/`--allow-recreate`, when given) must equal.
///
/// # Errors
/// [`Error::Usage`] (exit 2) naming `path` when the plan is for another stage, another backend,
/// another recreate policy, or provisions without live state (an offline plan).
pub fn applicable(
    plan: &Plan,
    path: &std::path::Path,
    stage: &str,
    backend: BackendKind,
    given: Option<RecreatePolicy>,
) -> Result<RecreatePolicy> {
    let file = path.display();
    if plan.stage != stage {
        return Err(Error::Usage(format!(
            "{file} was made for stage `{}`; this run is for stage `{stage}` ({})",
            plan.stage,
            Hint::PassOption { option: format!("--stage {}", plan.stage), variable: None }
        )));
    }
    let provisions = plan.containers.iter().any(|c| c.steps.contains(&Step::Provision));
    if provisions {
        match plan.backend {
            None => {
                return Err(Error::Usage(format!(
                    "{file} provisions but was made without live state (an offline plan): re-plan with PVE \
                     configured (PROXMOX_HOST) or --backend lxc: {}",
                    plan_command(None, &plan.git_ref, &[])
                )));
            }
            Some(b) if b != backend => {
                return Err(Error::Usage(format!(
                    "{file} was planned against the {b} backend; this run uses {backend} ({})",
                    Hint::PassOption { option: format!("--backend {b}"), variable: None }
                )));
            }
            Some(_) => {}
        }
    }
    let planned = plan.recreate.unwrap_or_default();
    match given {
        Some(g) if g != planned => Err(Error::Usage(format!(
            "{file} was planned with --recreate {}; this run asks for --recreate {} (drop the option to apply \
             the plan as made, or re-plan with it)",
            policy_name(planned),
            policy_name(g)
        ))),
        _ => Ok(planned),
    }
}

fn policy_name(p: RecreatePolicy) -> String {
    serde_json::to_value(p).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{p:?}"))
}

/// The error refusing a saved plan that no longer matches: `stale` holds `(name, vmid, reason)`
/// per container that moved. Names the plan file, each container and the command that plans
/// them again. An operational failure (exit 1): nothing was changed.
pub fn stale_error(plan: &Plan, path: &std::path::Path, stale: &[(String, u32, String)]) -> Error {
    let lines: Vec<String> = stale.iter().map(|(name, vmid, why)| format!("  {name} (vmid {vmid}): {why}")).collect();
    let names: Vec<&str> = stale.iter().map(|(n, _, _)| n.as_str()).collect();
    let stage = (plan.stage != "main").then_some(plan.stage.as_str());
    Error::Failed(anyhow::anyhow!(
        "refusing to apply {}: the live state or the inputs moved since it was planned; nothing was changed:\n{}\n\
         re-plan, review and apply the new plan: {} (it writes plan.json)",
        path.display(),
        lines.join("\n"),
        plan_command(stage, &plan.git_ref, &names)
    ))
}

/// The hint to write a plan: run `proxmox-gitops [--stage STAGE] plan --ref GIT_REF [-c A,B]`
/// (`-c` when `containers` is not empty).
pub fn plan_command(stage: Option<&str>, git_ref: &str, containers: &[&str]) -> Hint {
    let mut argv = vec!["proxmox-gitops".to_string()];
    if let Some(stage) = stage {
        argv.extend(["--stage".to_string(), stage.to_string()]);
    }
    argv.extend(["plan".to_string(), "--ref".to_string(), git_ref.to_string()]);
    if !containers.is_empty() {
        argv.extend(["-c".to_string(), containers.join(",")]);
    }
    Hint::command(argv)
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

    fn saved(action: Action, digest: Option<&str>) -> (PlannedContainer, ContainerPlan) {
        let cp = ContainerPlan::new("broker", 101, "broker", action, false);
        let c = PlannedContainer {
            name: "broker".into(),
            hostname: "broker".into(),
            vmid: 101,
            steps: vec![Step::Provision],
            provision: Some(cp.clone()),
            provision_error: None,
            settings: vec![],
            inputs_digest: None,
            skipped_steps: vec![],
            config_digest: digest.map(str::to_string),
        };
        (c, cp)
    }

    #[test]
    fn a_saved_plan_moved_when_digest_existence_or_action_differ() {
        let (c, fresh) = saved(Action::Nothing, Some("aaaaaaaaaaaaaaaa"));
        assert_eq!(live_moved(&c, &fresh, Some("aaaaaaaaaaaaaaaa")), None);
        assert_eq!(
            live_moved(&c, &fresh, Some("bbbbbbbbbbbbbbbb")).unwrap(),
            "its PVE config changed since the plan (digest aaaaaaaaaaaa → bbbbbbbbbbbb)"
        );
        assert!(live_moved(&c, &fresh, None).unwrap().contains("no longer exists"));
        let (c, fresh) = saved(Action::Create, None);
        assert_eq!(live_moved(&c, &fresh, None), None);
        assert!(live_moved(&c, &fresh, Some("x")).unwrap().contains("exists now"));
        // Same digest (the lxc backend has none), another action: moved.
        let (c, _) = saved(Action::Nothing, None);
        let (_, fresh) = saved(Action::refused_recreate(vec!["ostemplate changed".into()]), None);
        assert_eq!(
            live_moved(&c, &fresh, None).unwrap(),
            "what provision would do changed since the plan (nothing → refused)"
        );
        let offline = PlannedContainer { provision: None, ..c };
        assert!(live_moved(&offline, &fresh, None).unwrap().contains("offline plan"));
    }
}
