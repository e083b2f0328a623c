//! The `update.json` artifact: per container, the result, the commands with their output tails,
//! the snapshot, the health before and after, the rollback and a timeline of actions.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::plan::PackageManager;
use crate::artifact::Artifact;
use crate::inventory::ContainerSpec;
use crate::live::ContainerHealth;
use crate::model::{ActionRecord, BackendKind, Outcome};

/// Bytes of a command's standard output kept in the artifact (the tail), 8 KiB.
pub const OUTPUT_KEEP: usize = 8 * 1024;

/// The `update.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    /// The stage.
    pub stage: String,
    /// The backend.
    pub backend: BackendKind,
    /// When the run started, RFC 3339 UTC.
    pub started_at: String,
    /// True when no container failed or was rolled back.
    pub ok: bool,
    /// One result per selected container, in selection order.
    pub containers: Vec<ContainerUpdate>,
}

impl Artifact for Update {
    const KIND: &'static str = "update";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// What happened to one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateResult {
    /// Upgraded (rebooted when asked) and healthy afterwards.
    Updated,
    /// The upgrade, the reboot or the health check after it failed: rolled back to the snapshot
    /// (a failure of the run).
    RolledBack,
    /// Not updated (unhealthy before, unsupported distribution, no snapshot), or the rollback
    /// itself failed (a failure of the run).
    Failed,
    /// No such container.
    NotDeployed,
    /// Stopped: not started for an update.
    Skipped,
}

impl UpdateResult {
    /// True for the results that fail the run: `rolled-back` and `failed`.
    pub fn is_failure(self) -> bool {
        matches!(self, UpdateResult::RolledBack | UpdateResult::Failed)
    }

    /// The name in tables and artifacts.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateResult::Updated => "updated",
            UpdateResult::RolledBack => "rolled-back",
            UpdateResult::Failed => "failed",
            UpdateResult::NotDeployed => "not-deployed",
            UpdateResult::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for UpdateResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One upgrade command run in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRun {
    /// The argv, space-joined (constant words only).
    pub command: String,
    /// Exit code; `None` when it was killed, timed out or the transport failed.
    pub exit_code: Option<i32>,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// The last [`OUTPUT_KEEP`] bytes of its standard output (whole lines, redacted).
    pub output_tail: String,
    /// The last lines of its standard error (redacted).
    pub stderr_tail: String,
    /// Why it failed (exit status and stderr, a timeout, the transport), `None` on success.
    pub error: Option<String>,
}

/// The rollback after a failed upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollback {
    /// The snapshot rolled back to.
    pub snapshot: String,
    /// Why (the failure of the upgrade, reboot or health check).
    pub reason: String,
    /// The rollback task's UPID (PVE).
    pub upid: Option<String>,
    /// Whether the rollback succeeded.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One container's update (part of [`Update`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerUpdate {
    /// Container (lib) name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// The result.
    pub result: UpdateResult,
    /// The distribution (`PRETTY_NAME` of `/etc/os-release`), when read.
    pub os: Option<String>,
    /// The package manager used.
    pub package_manager: Option<PackageManager>,
    /// The container snapshot taken before the upgrade.
    pub snapshot: Option<String>,
    /// The upgrade commands run, in order.
    pub commands: Vec<CommandRun>,
    /// True when the container was rebooted because the distribution asked for it.
    pub rebooted: bool,
    /// The health check before the update.
    pub health_before: Option<ContainerHealth>,
    /// The last health check: after the update, or after the rollback.
    pub health: Option<ContainerHealth>,
    /// The rollback, when one was made.
    pub rollback: Option<Rollback>,
    /// Older update snapshots deleted after a successful update.
    pub pruned: Vec<String>,
    /// Every action in order (`check`, `snapshot`, `wait`, `upgrade`, `reboot`, `rollback`,
    /// `prune`) with its UPID (PVE) and result.
    pub actions: Vec<ActionRecord>,
    /// Why it failed, was rolled back or skipped; `None` when updated or not deployed.
    pub error: Option<String>,
    /// Things that did not fail the update (an old snapshot that could not be deleted).
    pub warnings: Vec<String>,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

impl ContainerUpdate {
    pub(super) fn new(spec: &ContainerSpec) -> Self {
        ContainerUpdate {
            name: spec.name.clone(),
            hostname: spec.hostname.clone(),
            vmid: spec.vmid,
            result: UpdateResult::Failed,
            os: None,
            package_manager: None,
            snapshot: None,
            commands: Vec::new(),
            rebooted: false,
            health_before: None,
            health: None,
            rollback: None,
            pruned: Vec::new(),
            actions: Vec::new(),
            error: None,
            warnings: Vec::new(),
            duration_ms: 0,
        }
    }

    /// Records an action that took since `started`: `result` is `Ok(detail)` or `Err(error)`.
    pub(super) fn act(
        &mut self,
        action: &str,
        started: Instant,
        upid: Option<String>,
        result: Result<Option<String>, String>,
    ) {
        let (exit_status, detail) = match result {
            Ok(d) => ("OK".to_string(), d),
            Err(e) => ("failed".to_string(), Some(crate::actions::redact(&e))),
        };
        self.actions.push(ActionRecord {
            action: action.into(),
            upid,
            exit_status: Some(exit_status),
            duration_ms: started.elapsed().as_millis() as u64,
            detail,
        });
    }

    pub(super) fn fail(&mut self, result: UpdateResult, error: String) {
        self.result = result;
        self.error = Some(crate::actions::redact(&error));
    }
}
