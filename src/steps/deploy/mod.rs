//! Step `deploy`: run the pipeline steps of a ref for a set of containers, resumably.
//!
//! What runs is decided by [`crate::steps::plan::steps_for_ref`] (the seed's branch model:
//! `release` → provision + configure, `main` → configure, `snapshot` → snapshot) unless the caller
//! names the steps explicitly (a workflow dispatch). A data snapshot before a recreate is part of
//! `provision` itself (its artifact records it in `protected_by`), not a separate step here.
//!
//! # Orchestration
//!
//! * Per container the steps run **in order**; a failed step stops that container (its later steps
//!   are recorded as `not-run`), never the others.
//! * Containers run concurrently, at most `jobs` at a time (a tokio semaphore).
//! * The run's summary is written atomically as `deploy.json` ([`Deploy`]) whatever happened, and
//!   the result says whether any container failed (the CLI exits 1 then).
//!
//! # Resume
//!
//! Each container gets an **inputs digest** ([`inputs_digest`]): SHA-256 over its
//! [`ContainerSpec`] as JSON, the files of its lib tree and of the base tree. A step whose artifact
//! (`provision/<name>.json`, `configure/<name>.json`, `snapshot/<name>.json`) shows success for the
//! same digest is skipped, unless `force`. Artifacts are read as loose JSON ([`read_step_status`]):
//! any step artifact with an `inputs_digest` and a `result` field takes part, whatever else it
//! holds. After a successful step whose artifact lacks the digest, deploy stamps it in (atomically),
//! so resume works even for a step that does not know about digests.
//!
//! Snapshots capture data that changes without any input changing: a snapshot step is only skipped
//! when it already succeeded for the same digest **in the same workflow run** (`run_id`, from
//! `GITHUB_RUN_ID`), i.e. when a failed run is re-run. Without a run id it always runs.
//!
//! A `configure` whose container's `provision` artifact shows a *failure* for the same digest is
//! `blocked` (the container is in an unknown state); `force` runs it anyway. This keeps the
//! per-container failure isolation when provision and configure run in separate workflow jobs.
//!
//! # Outputs become variables
//!
//! After a container's `configure` succeeded (or was skipped as already done), its lib's outputs
//! are set as variables of the lib's Gitea repository when the runner has Gitea settings
//! ([`StepRunner::output_variables`]); what was set, or why not, is the container's `variables`
//! in `deploy.json`. A failure there is a warning, never a failed deploy (see `variables`).
//!
//! # Steps are pluggable
//!

mod digest;
mod job;
mod records;
mod runner;
pub mod saved;
mod status;
mod variables;

pub use digest::{ShapingSettings, inputs_digest, run_digest};
pub use records::{ContainerRecord, Deploy, RunResult, StepRecord, StepState};
pub use runner::{BuiltinRunner, RunnerOptions, StepContext, StepResult, StepRunner, StepSuccess, step_artifact};
pub use status::{StepStatus, mark_done_steps, read_step_status};
pub use variables::{OutputVariables, VariableRecord, VariablesRecord, set_outputs};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::artifact::{self, ArtifactDir};
use crate::error::{Error, Location, Result};
use crate::inventory::{ContainerSpec, Inventory, NotFound};
use crate::model::BackendKind;
use crate::steps::plan::{Step, steps_for_ref};

use job::{ContainerJob, previous_failures};

/// Options of [`deploy`].
#[derive(Debug, Clone)]
pub struct DeployOptions {
    /// The monorepo checkout whose trees are hashed and deployed. When the inventory was resolved
    /// elsewhere (another workflow job), its `root` is replaced by this path.
    pub repo: PathBuf,
    /// The artifacts directory.
    pub artifacts: ArtifactDir,
    /// The ref; decides the steps unless `steps` is non-empty.
    pub git_ref: String,
    /// Explicit steps (workflow dispatch); run in pipeline order (provision, configure, snapshot).
    pub steps: Vec<Step>,
    /// Container names (lib name or hostname); empty = all of the stage.
    pub containers: Vec<String>,
    /// Run steps even when their artifact shows success for the same inputs.
    pub force: bool,
    /// At most this many containers at once (≥ 1).
    pub jobs: usize,
    /// Backend for provisioning.
    pub backend: BackendKind,
    /// The workflow run (`GITHUB_RUN_ID`), which makes snapshot steps resumable within a run.
    pub run_id: Option<String>,
}

/// The steps a deploy runs: the explicit ones in pipeline order, or the ref's.
///
/// # Errors
/// [`Error::Input`] for a ref that does not deploy (when no steps are given).
pub fn steps_to_run(git_ref: &str, explicit: &[Step]) -> Result<Vec<Step>> {
    if explicit.is_empty() {
        return steps_for_ref(git_ref);
    }
    let mut s = explicit.to_vec();
    s.sort();
    s.dedup();
    Ok(s)
}

/// Runs the deploy and writes `deploy.json`.
///
/// Input problems (a ref that does not deploy, an unknown container, `jobs` = 0) are returned
/// before anything runs. Otherwise the run always completes and returns the [`Deploy`] summary —
/// check [`Deploy::result`]; step failures are recorded in it, not returned.
///
/// # Errors
/// [`Error::Input`] as above; [`Error::Failed`] when `deploy.json` cannot be written.
pub async fn deploy<R: StepRunner>(runner: Arc<R>, inventory: Inventory, opts: &DeployOptions) -> Result<Deploy> {
    let steps = steps_to_run(&opts.git_ref, &opts.steps)?;
    if opts.jobs == 0 {
        return Err(Error::input(Location::file("--jobs"), "expected at least 1 container at a time, found 0"));
    }
    let selected: Vec<ContainerSpec> =
        inventory.select(&opts.containers, true, NotFound::InStage)?.into_iter().cloned().collect();

    let mut inventory = inventory;
    let root = opts
        .repo
        .canonicalize()
        .map_err(|e| Error::input(Location::file(&opts.repo), format!("cannot open the repository directory: {e}")))?;
    if inventory.root != root {
        tracing::info!(
            "inventory was resolved in {}; deploying the checkout at {}",
            inventory.root.display(),
            root.display()
        );
        inventory.root = root.clone();
    }
    let artifacts_dir = opts.artifacts.root();
    std::fs::create_dir_all(artifacts_dir).and_then(|_| artifacts_dir.canonicalize()).map_err(|e| {
        Error::Failed(anyhow::anyhow!("cannot create the artifacts directory {}: {e}", artifacts_dir.display()))
    })?;
    let inventory = Arc::new(inventory);
    let previous = Arc::new(previous_failures(&opts.artifacts.deploy()));
    let started_at = time::OffsetDateTime::now_utc();
    let started = Instant::now();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(opts.jobs));
    let mut set = tokio::task::JoinSet::new();
    let mut task_index = BTreeMap::new();
    for (i, spec) in selected.iter().enumerate() {
        let job = ContainerJob {
            runner: runner.clone(),
            inventory: inventory.clone(),
            spec: spec.clone(),
            steps: steps.clone(),
            opts: opts.clone(),
            semaphore: semaphore.clone(),
            previous: previous.clone(),
        };
        let handle = set.spawn(async move { (i, job.run().await) });
        task_index.insert(handle.id(), i);
    }
    let mut records: Vec<Option<ContainerRecord>> = vec![None; selected.len()];
    let overall = crate::progress::Overall::start("deploy", selected.len());
    while let Some(joined) = set.join_next_with_id().await {
        overall.done(!matches!(&joined, Ok((_, (_, rec))) if rec.result == RunResult::Ok));
        match joined {
            Ok((_, (i, rec))) => records[i] = Some(rec),
            Err(e) => {
                let Some(&i) = task_index.get(&e.id()) else { continue };
                let spec = &selected[i];
                tracing::error!("{}: the deploy task crashed: {e}", spec.name);
                records[i] = Some(ContainerRecord {
                    name: spec.name.clone(),
                    hostname: spec.hostname.clone(),
                    vmid: spec.vmid,
                    inputs_digest: None,
                    result: RunResult::Failed,
                    duration_ms: 0,
                    steps: Vec::new(),
                    skipped_steps: Vec::new(),
                    error: Some(format!("the deploy task crashed: {e}")),
                    variables: None,
                });
            }
        }
    }
    let containers: Vec<ContainerRecord> = records.into_iter().flatten().collect();
    let result =
        if containers.iter().any(|c| c.result == RunResult::Failed) { RunResult::Failed } else { RunResult::Ok };
    let summary = Deploy {
        git_ref: opts.git_ref.clone(),
        stage: inventory.stage.clone(),
        backend: opts.backend,
        steps,
        explicit_steps: !opts.steps.is_empty(),
        force: opts.force,
        jobs: opts.jobs,
        started_at,
        duration_ms: started.elapsed().as_millis() as u64,
        result,
        containers,
    };
    artifact::write(&opts.artifacts.deploy(), &summary).map_err(|e| Error::Failed(e.into()))?;
    Ok(summary)
}

fn render_error(e: &Error) -> String {
    let text = match e {
        Error::Failed(e) => format!("{e:#}"),
        other => other.to_string(),
    };
    crate::actions::redact(text.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_steps_are_ordered_and_override_the_ref() {
        assert_eq!(
            steps_to_run("refs/heads/feature", &[Step::Snapshot, Step::Provision, Step::Snapshot]).unwrap(),
            vec![Step::Provision, Step::Snapshot]
        );
        assert_eq!(steps_to_run("refs/heads/release", &[]).unwrap(), vec![Step::Provision, Step::Configure]);
        assert_eq!(steps_to_run("refs/heads/feature", &[]).unwrap_err().exit_code(), 2);
    }
}
