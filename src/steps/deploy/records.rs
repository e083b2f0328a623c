//! The `deploy.json` artifact ([`Deploy`]): one record per container and per step.

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::model::BackendKind;
use crate::steps::plan::Step;

/// What happened to one step of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepState {
    /// The step ran and succeeded.
    Ok,
    /// The step ran and failed.
    Failed,
    /// Not run: its artifact already shows success for the same inputs.
    Skipped,
    /// Not run: a `provision` failure for the same inputs leaves the container in an unknown state.
    Blocked,
    /// Not run: an earlier step of this container failed or was blocked.
    NotRun,
}

/// One step of one container in `deploy.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step.
    pub step: Step,
    /// What happened.
    pub state: StepState,
    /// Wall time in milliseconds (0 when not run).
    pub duration_ms: u64,
    /// The step's artifact, relative to the artifacts directory, when it exists.
    pub artifact: Option<String>,
    /// The actions the step's artifact lists (e.g. `create`, `start`, `wait-ssh`).
    pub actions: Vec<String>,
    /// Why it was skipped, blocked or not run.
    pub reason: Option<String>,
    /// The error, for a failed step (secrets redacted).
    pub error: Option<String>,
}

/// Final result of one container, or of the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    /// Every step succeeded or was skipped.
    Ok,
    /// Some step failed or was blocked.
    Failed,
}

/// One container in `deploy.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// Container name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// The inputs digest the steps ran for (`sha256:<hex>`); `None` when it could not be computed.
    pub inputs_digest: Option<String>,
    /// Result.
    pub result: RunResult,
    /// Wall time of all its steps, in milliseconds.
    pub duration_ms: u64,
    /// The steps, in order.
    pub steps: Vec<StepRecord>,
    /// The steps skipped because their artifact already showed success (shortcut for `steps`).
    pub skipped_steps: Vec<Step>,
    /// The first error, when the container failed.
    pub error: Option<String>,
    /// The lib's configure outputs set as variables of its Gitea repository, when configure
    /// succeeded (or was skipped) with Gitea settings and the lib has outputs (see
    /// `super::variables`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<super::variables::VariablesRecord>,
}

/// The `deploy.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deploy {
    /// The ref deployed.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Stage.
    pub stage: String,
    /// Backend used by provisioning.
    pub backend: BackendKind,
    /// The steps run per container, in order.
    pub steps: Vec<Step>,
    /// True when the steps were given explicitly (workflow dispatch) instead of by the ref.
    pub explicit_steps: bool,
    /// `--force`: nothing was skipped.
    pub force: bool,
    /// Maximum containers in parallel.
    pub jobs: usize,
    /// Start time, RFC 3339 UTC.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: time::OffsetDateTime,
    /// Wall time of the run in milliseconds.
    pub duration_ms: u64,
    /// `failed` when any container failed.
    pub result: RunResult,
    /// One entry per container, in inventory order.
    pub containers: Vec<ContainerRecord>,
}

impl Artifact for Deploy {
    const KIND: &'static str = "deploy";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl Deploy {
    /// Names of the containers that failed.
    pub fn failed(&self) -> Vec<&str> {
        self.containers.iter().filter(|c| c.result == RunResult::Failed).map(|c| c.name.as_str()).collect()
    }
}
