//! The provision model: plain data shared by the backends, the steps, the snapshot code and the
//! ways into a container — the plan per container, the recreate policy, the
//! `provision/<name>.json` artifact and a drifted key.
//!
//! Backends (`pve`, `lxc`) compare a [`crate::inventory::ContainerSpec`] with the live container
//! and produce a [`ContainerPlan`] (pure data, printed before any change); the provision step
//! then executes it and records every action in a [`Provision`] artifact, which `configure` and
//! `snapshot` read without caring which backend made the container. This module sits on the data
//! floor so that all of them import it from below; it imports only other data.

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::inventory::ContainerSpec;

/// Which backend manages the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Proxmox VE over its HTTPS API.
    Pve,
    /// LXC on the local host (lxc-* tools).
    Lxc,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Pve => "pve",
            BackendKind::Lxc => "lxc",
        })
    }
}

/// When an existing container may be destroyed and created again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RecreatePolicy {
    /// Never: a change that needs a recreate is refused (the default).
    #[default]
    Never,
    /// Only when the spec changed in a way that cannot be applied in place (`--allow-recreate`).
    WhenNeeded,
    /// Always recreate existing containers (the seed's behaviour on release).
    Always,
}

impl RecreatePolicy {
    /// The policy as `--recreate` takes it and artifacts write it: `never`, `when-needed`,
    /// `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecreatePolicy::Never => "never",
            RecreatePolicy::WhenNeeded => "when-needed",
            RecreatePolicy::Always => "always",
        }
    }

    /// Whether the policy allows restarting a running container to apply what PVE keeps
    /// pending (a removed or changed mount point, feature flags): a policy that allows
    /// destroying it (`when-needed`, `always`) allows restarting it; `never` does not.
    pub fn allows_restart(self) -> bool {
        self != RecreatePolicy::Never
    }
}

/// Everything a plan may do beyond changes in place, as one value from the command line to the
/// planner: the recreate policy, and whether a container at a lib's vmid that proxmox-gitops did
/// not create is taken over in place (`--adopt`, PVE only) instead of refused as foreign. What
/// the planner decided under it is in the plan ([`ContainerPlan::policy`], [`Action::Adopt`],
/// [`ContainerPlan::reboot_for_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanPolicy {
    /// When an existing container may be destroyed and created again.
    pub recreate: RecreatePolicy,
    /// `--adopt`.
    pub adopt: bool,
}

impl From<RecreatePolicy> for PlanPolicy {
    /// The policy `recreate`, adopting nothing.
    fn from(recreate: RecreatePolicy) -> Self {
        PlanPolicy { recreate, adopt: false }
    }
}

impl PlanPolicy {
    /// The policy to plan `plan`'s container again with (the container changed since): the
    /// recreate policy the plan recorded, adopting only what the plan adopted.
    pub fn of(plan: &ContainerPlan) -> Self {
        PlanPolicy { recreate: plan.policy, adopt: matches!(plan.action, Action::Adopt { .. }) }
    }
}

/// One setting that differs between the spec and the live container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Config key in the backend's terms (PVE `memory`, `cores`, `mp0` …; LXC
    /// `lxc.cgroup2.memory.max` …).
    pub key: String,
    /// Live value, `None` when unset.
    pub from: Option<String>,
    /// Desired value, `None` to delete the key.
    pub to: Option<String>,
}

/// One `container.env` setting (or PVE setting such as `PROXMOX_BRIDGE`) that differs between
/// the live container and the spec, in the user's terms: `MEMORY` in MiB, `DISK` as
/// `STORAGE:SIZE` in GiB, `BOOT` as `yes`/`no`, `MOUNT` entries as written in `container.env`.
/// Made by each backend's planner from its [`Change`]s and [`Resize`]s
/// (`crate::backend::pve::planner::setting_changes`, `crate::backend::lxc::planner::setting_changes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingChange {
    /// The setting's name as the user writes it: `MEMORY`, `CORES`, `SWAP`, `DISK`, `BOOT`, `IP`,
    /// `MOUNT`, `FEATURES`, `PROXMOX_BRIDGE` …; a backend key when it maps to no setting.
    pub setting: String,
    /// Live value in the setting's terms; `None` when unset (or, for `MOUNT`, an entry added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Desired value; `None` when removed (for `MOUNT`, an entry removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// How the change is applied when not a plain in-place update: `resize`, `reboot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
}

impl SettingChange {
    /// A change of `setting` from `from` to `to`, applied in place.
    pub fn new(setting: &str, from: Option<String>, to: Option<String>) -> Self {
        Self { setting: setting.to_string(), from, to, how: None }
    }

    /// The same change, applied `how` (`resize`, `reboot`).
    pub fn how(mut self, how: &str) -> Self {
        self.how = Some(how.to_string());
        self
    }
}

/// A volume that grows (never shrinks: a shrink is a recreate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resize {
    /// The disk: `rootfs` or `mpN`.
    pub disk: String,
    /// Live size in GiB.
    pub from_gib: u64,
    /// Desired size in GiB.
    pub to_gib: u64,
}

/// What provisioning will do to one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// The container does not exist: create it.
    Create,
    /// The live container matches the spec.
    Nothing,
    /// Settings the backend changes in place, and/or volumes to grow.
    Update {
        /// Config changes (only the keys that differ).
        changes: Vec<Change>,
        /// Volumes to grow.
        resizes: Vec<Resize>,
        /// True when some change only applies after a reboot (PVE `pending`).
        reboot_needed: bool,
    },
    /// The container must be destroyed and created again, and the policy allows it.
    Recreate {
        /// Why (e.g. "ostemplate changed", "rootfs shrinks from 8 to 4 GiB").
        reasons: Vec<String>,
    },
    /// The change cannot be made as the policy stands: nothing is changed, the step fails.
    /// Either a recreate is needed and the policy forbids it (`needs_recreate`, the default),
    /// or no policy allows it (`needs_recreate: false`: a volume shrink, a root-only feature
    /// under an API token, a volume moving storage) and each reason names the fix.
    Refused {
        /// Why (each reason names the key and the values involved).
        reasons: Vec<String>,
        /// True when a recreate would apply the change (`--allow-recreate` does); false when
        /// the user has to change the spec or act on PVE first. Absent in JSON when true.
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        needs_recreate: bool,
    },
    /// `--adopt`: the container at the vmid was not created by proxmox-gitops; our mark (the
    /// `proxmox-gitops` tag and the description naming the lib) is written in place, together
    /// with the in-place changes the spec needs. Never a destroy.
    Adopt {
        /// Config changes, `description` and `tags` (the mark) included.
        changes: Vec<Change>,
        /// Volumes to grow.
        resizes: Vec<Resize>,
        /// True when some change only applies after a reboot (PVE `pending`).
        reboot_needed: bool,
    },
    /// The container at the vmid was not created by proxmox-gitops for this lib (it lacks our
    /// mark): it is never stopped, changed, destroyed or recreated; the step fails. `--adopt`
    /// takes it over in place.
    Foreign {
        /// What is there and why it is not ours.
        reason: String,
    },
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Action {
    /// A refusal because a recreate is needed and the policy forbids it.
    pub fn refused_recreate(reasons: Vec<String>) -> Action {
        Action::Refused { reasons, needs_recreate: true }
    }

    /// A refusal no recreate policy lifts (the reasons name the fix).
    pub fn refused_blocked(reasons: Vec<String>) -> Action {
        Action::Refused { reasons, needs_recreate: false }
    }

    /// True when executing the action changes something.
    pub fn changes_something(&self) -> bool {
        !matches!(self, Action::Nothing | Action::Refused { .. } | Action::Foreign { .. })
    }

    /// The action in words for messages: `nothing to do`, `update in place (memory, cores)`,
    /// `recreate (reasons)` ….
    pub fn summary(&self) -> String {
        let keys = |c: &[Change], r: &[Resize]| {
            c.iter()
                .map(|c| c.key.clone())
                .chain(r.iter().map(|r| format!("resize {}", r.disk)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Action::Create => "create".into(),
            Action::Nothing => "nothing to do".into(),
            Action::Update { changes, resizes, .. } => format!("update in place ({})", keys(changes, resizes)),
            Action::Adopt { changes, resizes, .. } => format!("adopt ({})", keys(changes, resizes)),
            Action::Recreate { reasons } => format!("recreate ({})", reasons.join("; ")),
            Action::Refused { reasons, .. } => format!("refused ({})", reasons.join("; ")),
            Action::Foreign { reason } => format!("foreign ({reason})"),
        }
    }
}

/// A move of an existing container to another PVE node (`POST /nodes/{node}/lxc/{vmid}/migrate`),
/// planned when the container is found on a node other than the one its `NODE` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// The node the container is on now (from `GET /cluster/resources?type=vm`).
    pub from: String,
    /// The node `NODE` names.
    pub to: String,
    /// True for a running container: PVE's restart mode (shut down, move, start again on `to`);
    /// false moves a stopped container offline.
    pub restart: bool,
}

/// The plan for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    /// Container (lib) name.
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// Hostname.
    pub hostname: String,
    /// What will be done to the container's definition.
    #[serde(flatten)]
    pub action: Action,
    /// True when the container will be started (it is not running, or is created).
    pub start: bool,
    /// PVE: the node the container is on once the plan is applied (its `NODE`, the node it is
    /// found on, or the node chosen for it by `NODE=auto`); `None` for the lxc backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// PVE: why a new container goes to [`Self::node`] when `NODE=auto` (or unset on a cluster
    /// with several online nodes) chose it, e.g. `most free memory (6.0 GiB) of the online nodes
    /// with storage local-lvm: pve1 4.0 GiB, pve2 6.0 GiB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// PVE: the container is moved to [`Self::node`] first (then [`Self::action`] is applied
    /// there); never a reason to recreate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate: Option<Migration>,
    /// The recreate policy the plan was made under. The executor never takes another one: when
    /// the container changed since the plan, it plans again under this policy (plans saved by
    /// earlier versions lack it and are read as `never`).
    #[serde(default)]
    pub policy: RecreatePolicy,
    /// The plan's decision for what PVE keeps pending after an in-place change of a running
    /// container (a changed mount point, feature flags): true, it is applied by a reboot right
    /// after the change (`POST …/status/reboot`, the policy allows a restart); false, it stays
    /// pending until the next restart, and the provision artifact says so with the command to
    /// restart now. Absent in JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reboot_for_pending: bool,
}

impl ContainerPlan {
    /// The plan of `name`/`vmid`/`hostname`: `action`, `start`, on no particular node (no
    /// placement, no migration).
    pub fn new(name: &str, vmid: u32, hostname: &str, action: Action, start: bool) -> Self {
        ContainerPlan {
            name: name.to_string(),
            vmid,
            hostname: hostname.to_string(),
            action,
            start,
            node: None,
            placement: None,
            migrate: None,
            policy: RecreatePolicy::Never,
            reboot_for_pending: false,
        }
    }

    /// True when applying the plan changes something: its action does, it starts the container,
    /// or it moves it to another node.
    pub fn changes_something(&self) -> bool {
        self.action.changes_something() || self.start || self.migrate.is_some()
    }
}

/// One action taken, with its PVE task when there was one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// What was done: `download`, `create`, `config`, `resize`, `reboot`, `start`, `shutdown`, `stop`,
    /// `destroy`, `snapshot`, `wait-ssh` ….
    pub action: String,
    /// The PVE task's UPID, when the call was asynchronous.
    pub upid: Option<String>,
    /// The task's exit status (`OK`, `WARNINGS: n`, or the error).
    pub exit_status: Option<String>,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Free-form detail (e.g. the changed keys).
    pub detail: Option<String>,
}

/// Final outcome of a step for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum Outcome {
    /// Done.
    Ok,
    /// Failed; `error` says why (secrets redacted).
    Failed {
        /// The error message with its causes.
        error: String,
    },
}

/// The `provision/<name>.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provision {
    /// Backend that manages the container.
    pub backend: BackendKind,
    /// Container (lib) name.
    pub name: String,
    /// PVE node (`None` for the lxc backend).
    pub node: Option<String>,
    /// vmid.
    pub vmid: u32,
    /// Hostname (also the LXC container name for the lxc backend).
    pub hostname: String,
    /// The address `configure` connects to (static address, or the one read back from DHCP).
    pub address: Option<String>,
    /// SSH port at `address`.
    pub ssh_port: u16,
    /// The plan that was executed.
    pub plan: ContainerPlan,
    /// Every action taken, in order.
    pub actions: Vec<ActionRecord>,
    /// Warnings (task `WARNINGS`, ignored spec settings, pending changes …).
    pub warnings: Vec<String>,
    /// Live status afterwards (`running`, `stopped`).
    pub status: Option<String>,
    /// True when this run created or re-created the container. Workflows read it as "this run
    /// made it"; `configure` decides on host keys by [`Self::created_at`], which outlives the run.
    pub created: bool,
    /// When proxmox-gitops last created (or re-created) this container, RFC 3339 UTC: taken just
    /// before this run's create when [`Self::created`], else carried over from the artifact of
    /// the previous run ([`Provision::carry_created_at`]). `configure` replaces a recorded SSH
    /// host key only when it was recorded before this time
    /// ([`crate::ssh::recreated_since_recorded`], through [`Provision::last_creation`]). Absent
    /// when unknown — an artifact of schema 1.0, a container found absent, destroyed or not made
    /// by us — and a changed key is then refused (for a 1.0 artifact that says `created`, see
    /// [`Provision::last_creation`]).
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub created_at: Option<time::OffsetDateTime>,
    /// The data snapshot that protected a destroy, when one was taken.
    pub protected_by: Option<String>,
    /// Digest of the inputs (spec + lib tree + base tree) this result is for, used by `deploy` to
    /// skip work already done.
    pub inputs_digest: Option<String>,
    /// Result.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Provision {
    /// The artifact of `spec` on `backend` before anything is done: `plan`, no node, no address,
    /// no actions, warnings or status, not created (no creation time), outcome `ok`. Each backend
    /// fills in the rest.
    pub fn new(backend: BackendKind, spec: &ContainerSpec, plan: ContainerPlan, opts: &ApplyOptions) -> Self {
        Provision {
            backend,
            name: spec.name.clone(),
            node: None,
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            address: None,
            ssh_port: opts.ssh_port,
            plan,
            actions: vec![],
            warnings: vec![],
            status: None,
            created: false,
            created_at: None,
            protected_by: None,
            inputs_digest: None,
            outcome: Outcome::Ok,
        }
    }

    /// Carries [`Self::created_at`] over from `previous` (the artifact the previous run wrote for
    /// this container) when this run did not create the container, so that a run that leaves a
    /// recreated container alone does not make `configure` refuse its new host key.
    ///
    /// Carried only while `previous` describes the same container, one this run found in place
    /// and ours: the same backend and vmid, the same node where both name one (on PVE, the node
    /// a migration started from), and on lxc the same host name (the container's name there);
    /// `previous` not marked destroyed; and a plan of this run that does not create (the
    /// container was found absent), nor recreate — unless the recreate did nothing at all (no
    /// action: refused by the protect-before-destroy guard, or before its first action), as a
    /// recreate that failed midway may have left nothing — nor finds a container that is not
    /// ours (`foreign`, `adopt`). Otherwise the time is unknown (`None`).
    pub fn carry_created_at(&mut self, previous: Option<&Provision>) {
        if self.created {
            return;
        }
        self.created_at = previous.filter(|p| self.continues(p)).and_then(|p| p.created_at);
    }

    /// When proxmox-gitops last created this container, for the host-key decision
    /// ([`crate::ssh::recreated_since_recorded`]): [`Self::created_at`], or, for an artifact
    /// written before schema 1.1 (no `created_at`) that says [`Self::created`], the modification
    /// time of that artifact at `path` — the rule of those versions, so that a container an older
    /// build re-created still gets its new key accepted. `None` when unknown.
    pub fn last_creation(&self, path: &std::path::Path) -> Option<time::OffsetDateTime> {
        if self.created_at.is_some() || !self.created {
            return self.created_at;
        }
        let written = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
        Some(time::OffsetDateTime::from(written))
    }

    /// True when `previous` describes the container this run found in place (see
    /// [`Provision::carry_created_at`]).
    fn continues(&self, previous: &Provision) -> bool {
        let found_on = match &self.plan.migrate {
            Some(m) => Some(m.from.as_str()),
            None => self.node.as_deref(),
        };
        let same_node = match (found_on, previous.node.as_deref()) {
            (Some(now), Some(before)) => now == before,
            _ => true,
        };
        let same_name = self.backend != BackendKind::Lxc || self.hostname == previous.hostname;
        let in_place = match self.plan.action {
            Action::Recreate { .. } => self.actions.is_empty(),
            Action::Create | Action::Foreign { .. } | Action::Adopt { .. } => false,
            Action::Nothing | Action::Update { .. } | Action::Refused { .. } => true,
        };
        previous.backend == self.backend
            && previous.vmid == self.vmid
            && same_node
            && same_name
            && previous.status.as_deref() != Some("destroyed")
            && in_place
    }
}

impl Artifact for Provision {
    const KIND: &'static str = "provision";
    /// 1.1 adds `created_at`.
    const SCHEMA_VERSION: (u32, u32) = (1, 1);
}

/// Options for executing a plan, common to every backend.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// The share directory holding `.keys/<vmid>` (see [`crate::ssh::keys`]).
    pub share: std::path::PathBuf,
    /// Wait until the container's SSH port answers after start.
    pub wait_ssh: bool,
    /// SSH port to wait for (22).
    pub ssh_port: u16,
    /// How long to wait for SSH, e.g. 120 s.
    pub ssh_timeout: std::time::Duration,
    /// `--no-snapshot`: destroy/recreate a container that declares data without taking a data
    /// snapshot first (logged loudly; see [`crate::snapshot::guard`]). Applied by the provision
    /// step, not by the backends.
    pub no_snapshot: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            share: "/share".into(),
            wait_ssh: true,
            ssh_port: 22,
            ssh_timeout: std::time::Duration::from_secs(120),
            no_snapshot: false,
        }
    }
}

/// One difference: the key in the user's terms (`MEMORY`, `DISK`, `MOUNT (mp0)`, `NODE`,
/// `STATE`, `container` …), the value the spec wants and the one found, as the user writes them
/// (MiB, GiB, `yes`/`no`; `(unset)` for a key the container does not have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDrift {
    /// The key.
    pub key: String,
    /// What the spec (and settings) want.
    pub desired: String,
    /// What the container has.
    pub live: String,
}

impl KeyDrift {
    /// A difference.
    pub fn new(key: impl Into<String>, desired: impl Into<String>, live: impl Into<String>) -> Self {
        KeyDrift { key: key.into(), desired: desired.into(), live: live.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The artifact of `broker` (vmid 101) on pve1 after a run that planned `action`.
    fn prov(action: Action) -> Provision {
        Provision {
            backend: BackendKind::Pve,
            name: "broker".into(),
            node: Some("pve1".into()),
            vmid: 101,
            hostname: "broker".into(),
            address: Some("10.0.0.5".into()),
            ssh_port: 22,
            plan: ContainerPlan::new("broker", 101, "broker", action, false),
            actions: vec![],
            warnings: vec![],
            status: Some("running".into()),
            created: false,
            created_at: None,
            protected_by: None,
            inputs_digest: None,
            outcome: Outcome::Ok,
        }
    }

    fn created(at: time::OffsetDateTime) -> Provision {
        Provision { created: true, created_at: Some(at), ..prov(Action::Create) }
    }

    /// `p`'s `created_at` once carried over from `previous`.
    fn unknown_or(mut p: Provision, previous: &Provision) -> Option<time::OffsetDateTime> {
        p.carry_created_at(Some(previous));
        p.created_at
    }

    #[test]
    fn the_last_creation_is_carried_over_by_runs_that_leave_the_container_in_place() {
        let at = time::macros::datetime!(2026-05-01 10:00:00.25 UTC);
        let before = created(at);
        for action in [
            Action::Nothing,
            Action::Update { changes: vec![], resizes: vec![], reboot_needed: false },
            Action::refused_recreate(vec!["ostemplate changes".into()]),
            Action::refused_blocked(vec!["planning failed: PVE unreachable".into()]),
        ] {
            let mut p = prov(action.clone());
            p.carry_created_at(Some(&before));
            assert_eq!(p.created_at, Some(at), "{action:?}");
            // … and on to the run after it.
            let mut next = prov(Action::Nothing);
            next.carry_created_at(Some(&p));
            assert_eq!(next.created_at, Some(at), "{action:?}");
        }
        // A failed run that changed nothing keeps it too, as does a recreate the snapshot guard
        // refused (no action, and no node) and a migration from that node.
        let mut p = Provision { outcome: Outcome::Failed { error: "x".into() }, ..prov(Action::Nothing) };
        p.carry_created_at(Some(&before));
        assert_eq!(p.created_at, Some(at));
        let refused = Provision {
            node: None,
            outcome: Outcome::Failed { error: "refusing to destroy broker".into() },
            ..prov(Action::Recreate { reasons: vec!["x".into()] })
        };
        assert_eq!(unknown_or(refused, &before), Some(at));
        let mut p = Provision { node: Some("pve2".into()), ..prov(Action::Nothing) };
        p.plan.migrate = Some(Migration { from: "pve1".into(), to: "pve2".into(), restart: true });
        p.carry_created_at(Some(&before));
        assert_eq!(p.created_at, Some(at));
        // This run's own creation wins.
        let later = at + time::Duration::hours(1);
        let mut p = created(later);
        p.carry_created_at(Some(&before));
        assert_eq!(p.created_at, Some(later));
    }

    #[test]
    fn the_last_creation_is_unknown_when_the_container_may_be_another_one() {
        let at = time::macros::datetime!(2026-05-01 10:00:00 UTC);
        let before = created(at);
        let unknown = unknown_or;
        assert_eq!(unknown(prov(Action::Nothing), &prov(Action::Nothing)), None, "never known");
        assert_eq!(prov(Action::Nothing).created_at, None);
        let mut none = prov(Action::Nothing);
        none.carry_created_at(None);
        assert_eq!(none.created_at, None, "no previous artifact");
        // Found absent, or a recreate that acted but did not create: nothing of ours may be left.
        assert_eq!(unknown(prov(Action::Create), &before), None);
        let mut halfway = prov(Action::Recreate { reasons: vec!["x".into()] });
        halfway.actions.push(ActionRecord {
            action: "shutdown".into(),
            upid: None,
            exit_status: None,
            duration_ms: 1,
            detail: None,
        });
        assert_eq!(unknown(halfway, &before), None);
        // Not ours at that vmid.
        assert_eq!(unknown(prov(Action::Foreign { reason: "x".into() }), &before), None);
        let adopt = Action::Adopt { changes: vec![], resizes: vec![], reboot_needed: false };
        assert_eq!(unknown(prov(adopt), &before), None);
        // Destroyed since (`destroy` marks the artifact).
        let destroyed = Provision { status: Some("destroyed".into()), ..before.clone() };
        assert_eq!(unknown(prov(Action::Nothing), &destroyed), None);
        // Another container: vmid, node, backend, lxc name.
        assert_eq!(unknown(Provision { vmid: 102, ..prov(Action::Nothing) }, &before), None);
        assert_eq!(unknown(Provision { node: Some("pve2".into()), ..prov(Action::Nothing) }, &before), None);
        let lxc = |p: Provision| Provision { backend: BackendKind::Lxc, node: None, ..p };
        assert_eq!(unknown(lxc(prov(Action::Nothing)), &before), None);
        assert_eq!(
            unknown(Provision { hostname: "other".into(), ..lxc(prov(Action::Nothing)) }, &lxc(before.clone())),
            None
        );
        assert_eq!(unknown(lxc(prov(Action::Nothing)), &lxc(before.clone())), Some(at));
    }

    #[test]
    fn created_at_is_rfc3339_absent_when_unknown_and_old_artifacts_still_read() {
        let at = time::macros::datetime!(2026-05-01 10:00:00.25 UTC);
        let v = crate::artifact::to_value(&created(at));
        assert_eq!(v["schema_version"], "1.1");
        assert_eq!(v["created_at"], "2026-05-01T10:00:00.25Z");
        let v = crate::artifact::to_value(&prov(Action::Nothing));
        assert!(v.get("created_at").is_none(), "{v}");
        // A 1.0 artifact (no `created_at`) reads as unknown.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.json");
        let mut old = v.clone();
        old["schema_version"] = "1.0".into();
        old["created"] = true.into();
        std::fs::write(&path, old.to_string()).unwrap();
        let read: Provision = crate::artifact::read(&path).unwrap();
        assert!(read.created);
        assert_eq!(read.created_at, None);
        let path = dir.path().join("created.json");
        crate::artifact::write(&path, &created(at)).unwrap();
        assert_eq!(crate::artifact::read::<Provision>(&path).unwrap().created_at, Some(at));
    }

    #[test]
    fn the_last_creation_of_an_artifact_from_before_1_1_is_when_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.json");
        std::fs::write(&path, "{}").unwrap();
        let written = time::macros::datetime!(2026-05-01 10:00:00 UTC);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(written.into()).unwrap();
        // 1.0 said `created` and nothing more: the old rule (the artifact's time) holds.
        let old = Provision { created: true, ..prov(Action::Create) };
        assert_eq!(old.last_creation(&path), Some(written));
        // A known time wins; a run that did not create, with no known time, knows none.
        let at = time::macros::datetime!(2026-04-01 09:00:00 UTC);
        assert_eq!(created(at).last_creation(&path), Some(at));
        assert_eq!(prov(Action::Nothing).last_creation(&path), None);
        assert_eq!(old.last_creation(&dir.path().join("missing.json")), None);
    }
}
