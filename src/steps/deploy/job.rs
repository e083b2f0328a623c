//! One container's run within a deploy ([`ContainerJob`]): its steps in order, skipped when their
//! artifact shows success for the same inputs, blocked after a failed provision, stopped at the
//! first failure.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::digest::inputs_digest;
use super::records::{ContainerRecord, RunResult, StepRecord, StepState};
use super::runner::{StepContext, StepRunner, step_artifact};
use super::status::{read_step_status, stamp_digest};
use super::{DeployOptions, render_error, run_digest};
use crate::inventory::{ContainerSpec, Inventory};
use crate::steps::plan::Step;

pub(super) struct ContainerJob<R> {
    pub(super) runner: Arc<R>,
    pub(super) inventory: Arc<Inventory>,
    pub(super) spec: ContainerSpec,
    pub(super) steps: Vec<Step>,
    pub(super) opts: DeployOptions,
    pub(super) semaphore: Arc<tokio::sync::Semaphore>,
    pub(super) previous: Arc<BTreeMap<String, String>>,
}

/// From an earlier `deploy.json` (e.g. the provision step's, in the same job): container
/// name → inputs digest, for every container whose `provision` failed or was blocked there.
pub(super) fn previous_failures(path: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else { return out };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return out };
    for c in value.get("containers").and_then(|c| c.as_array()).into_iter().flatten() {
        let (Some(name), Some(digest)) =
            (c.get("name").and_then(|v| v.as_str()), c.get("inputs_digest").and_then(|v| v.as_str()))
        else {
            continue;
        };
        let failed = c.get("steps").and_then(|s| s.as_array()).into_iter().flatten().any(|s| {
            s.get("step").and_then(|v| v.as_str()) == Some("provision")
                && matches!(s.get("state").and_then(|v| v.as_str()), Some("failed" | "blocked"))
        });
        if failed {
            out.insert(name.to_string(), digest.to_string());
        }
    }
    out
}

/// True when `step` comes after provision and the container's provision artifact was written
/// after `step`'s own artifact (`path`): the container was (re)provisioned since that success —
/// created again, say — so its success no longer says anything about this container.
fn provisioned_since(artifacts: &crate::artifact::ArtifactDir, step: Step, name: &str, path: &Path) -> bool {
    if step == Step::Provision {
        return false;
    }
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(&step_artifact(artifacts, Step::Provision, name)), modified(path)) {
        (Some(provisioned), Some(done)) => provisioned > done,
        _ => false,
    }
}

impl<R: StepRunner> ContainerJob<R> {
    pub(super) async fn run(self) -> ContainerRecord {
        let _permit = self.semaphore.clone().acquire_owned().await.expect("the semaphore is never closed");
        let started = Instant::now();
        let name = self.spec.name.clone();
        let mut rec = ContainerRecord {
            name: name.clone(),
            hostname: self.spec.hostname.clone(),
            vmid: self.spec.vmid,
            inputs_digest: None,
            result: RunResult::Ok,
            duration_ms: 0,
            steps: Vec::new(),
            skipped_steps: Vec::new(),
            error: None,
            variables: None,
        };
        let root = self.inventory.root.clone();
        let inv = self.inventory.clone();
        let spec = self.spec.clone();
        let artifacts =
            self.opts.artifacts.root().canonicalize().unwrap_or_else(|_| self.opts.artifacts.root().to_path_buf());
        let digest = match tokio::task::spawn_blocking(move || inputs_digest(&root, &inv, &spec, &artifacts)).await {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return self.fail_all(rec, render_error(&e), started),
            Err(e) => return self.fail_all(rec, format!("computing the inputs digest crashed: {e}"), started),
        };
        rec.inputs_digest = Some(digest.clone());
        let ctx = StepContext {
            inventory: self.inventory.clone(),
            artifacts: self.opts.artifacts.clone(),
            git_ref: self.opts.git_ref.clone(),
            backend: self.opts.backend,
            digest: digest.clone(),
        };
        let mut stopped: Option<String> = None;
        for &step in &self.steps {
            let path = step_artifact(&self.opts.artifacts, step, &name);
            let rel = |p: &Path| p.strip_prefix(self.opts.artifacts.root()).unwrap_or(p).to_string_lossy().into_owned();
            let mut record = StepRecord {
                step,
                state: StepState::NotRun,
                duration_ms: 0,
                artifact: None,
                actions: Vec::new(),
                reason: None,
                error: None,
            };
            if let Some(why) = &stopped {
                record.reason = Some(why.clone());
                rec.steps.push(record);
                continue;
            }
            // The key this step's success is recorded under (snapshots: per run).
            let step_digest = match step {
                Step::Snapshot => self.opts.run_id.as_ref().map(|run| run_digest(&digest, run)),
                _ => Some(digest.clone()),
            };
            if !self.opts.force {
                if let Some(why) = self.blocked(step, &digest) {
                    tracing::error!("{name}: {step} blocked: {why}");
                    record.state = StepState::Blocked;
                    record.reason = Some(why.clone());
                    rec.result = RunResult::Failed;
                    rec.error.get_or_insert(format!("{step}: {why}"));
                    stopped = Some(format!("{step} was blocked"));
                    rec.steps.push(record);
                    continue;
                }
                if let Some(status) = read_step_status(&path)
                    && status.ok == Some(true)
                    && step_digest.is_some()
                    && status.digest == step_digest
                    && !self.runner.live_work(step, &self.spec)
                    && !provisioned_since(&self.opts.artifacts, step, &name, &path)
                {
                    tracing::info!("{name}: {step} skipped: already succeeded for inputs {digest}");
                    record.state = StepState::Skipped;
                    record.reason = Some("already succeeded for the same inputs".into());
                    record.artifact = Some(rel(&path));
                    record.actions = status.actions;
                    rec.skipped_steps.push(step);
                    rec.steps.push(record);
                    if step == Step::Configure {
                        rec.variables = self.outputs_to_variables(&path).await;
                    }
                    continue;
                }
            }
            let step_ctx = StepContext { digest: step_digest.clone().unwrap_or_else(|| digest.clone()), ..ctx.clone() };
            tracing::info!("{name}: {step}");
            let t = Instant::now();
            let result = self.runner.run(step, &self.spec, &step_ctx).await;
            record.duration_ms = t.elapsed().as_millis() as u64;
            let written = match &result {
                Ok(s) => s.artifact.clone().unwrap_or_else(|| path.clone()),
                Err(_) => path.clone(),
            };
            if let Some(status) = read_step_status(&written) {
                record.artifact = Some(rel(&written));
                record.actions = status.actions;
            }
            match result {
                Ok(_) => {
                    if written.is_file() {
                        stamp_digest(&written, &step_ctx.digest);
                    }
                    record.state = StepState::Ok;
                    tracing::info!("{name}: {step} ok in {:.1}s", record.duration_ms as f64 / 1000.0);
                }
                Err(e) => {
                    let msg = render_error(&e);
                    tracing::error!("{name}: {step} failed: {msg}");
                    record.state = StepState::Failed;
                    record.error = Some(msg.clone());
                    rec.result = RunResult::Failed;
                    rec.error.get_or_insert(format!("{step}: {msg}"));
                    stopped = Some(format!("{step} failed"));
                }
            }
            let configured = step == Step::Configure && record.state == StepState::Ok;
            rec.steps.push(record);
            if configured {
                rec.variables = self.outputs_to_variables(&written).await;
            }
        }
        rec.duration_ms = started.elapsed().as_millis() as u64;
        rec
    }

    /// Sets the outputs in the configure artifact at `artifact` as variables of the lib's
    /// repository, when the runner has somewhere to put them (see [`super::variables`]).
    async fn outputs_to_variables(&self, artifact: &Path) -> Option<super::variables::VariablesRecord> {
        let target = self.runner.output_variables()?;
        super::variables::set_outputs(target, &self.inventory, &self.spec, artifact).await
    }

    /// Why `step` must not run for these inputs, if so (see the module docs).
    fn blocked(&self, step: Step, digest: &str) -> Option<String> {
        if step != Step::Configure || self.steps.contains(&Step::Provision) {
            return None;
        }
        let name = &self.spec.name;
        let artifact = read_step_status(&self.opts.artifacts.provision(name));
        let by_artifact = artifact.as_ref().is_some_and(|s| s.ok == Some(false) && s.digest.as_deref() == Some(digest));
        // A provision that failed before writing its artifact is only known from deploy.json.
        let by_summary = !artifact.as_ref().is_some_and(|s| s.ok == Some(true) && s.digest.as_deref() == Some(digest))
            && self.previous.get(name).is_some_and(|d| d == digest);
        let force = crate::error::Hint::Force;
        if by_artifact {
            Some(format!("provision failed for the same inputs (see provision/{name}.json); fix it first, or {force}"))
        } else if by_summary {
            Some(format!(
                "provision failed for the same inputs (see deploy.json of the provision run); fix it first, or {force}"
            ))
        } else {
            None
        }
    }

    fn fail_all(&self, mut rec: ContainerRecord, msg: String, started: Instant) -> ContainerRecord {
        tracing::error!("{}: {msg}", rec.name);
        rec.result = RunResult::Failed;
        rec.error = Some(msg.clone());
        rec.steps = self
            .steps
            .iter()
            .map(|&step| StepRecord {
                step,
                state: StepState::NotRun,
                duration_ms: 0,
                artifact: None,
                actions: Vec::new(),
                reason: Some(msg.clone()),
                error: None,
            })
            .collect();
        rec.duration_ms = started.elapsed().as_millis() as u64;
        rec
    }
}
