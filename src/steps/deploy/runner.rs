//! The step seam: [`StepRunner`] runs one pipeline step for one container; [`BuiltinRunner`] is
//! the binary's implementation (it calls the `provision`, `configure` and `snapshot` library
//! functions), tests plug in fakes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::render_error;
use crate::artifact::{self, ArtifactDir};
use crate::error::{Error, Result};
use crate::inventory::{ContainerSpec, Inventory};
use crate::model::BackendKind;
use crate::settings::Settings;
use crate::steps::plan::Step;

/// Everything a step needs besides the container's spec.
#[derive(Debug, Clone)]
pub struct StepContext {
    /// The inventory (its `root` is the current checkout, see [`super::deploy`]).
    pub inventory: Arc<Inventory>,
    /// Where the step reads and writes its artifacts.
    pub artifacts: ArtifactDir,
    /// The ref being deployed (`refs/heads/release` …).
    pub git_ref: String,
    /// The backend provisioning uses.
    pub backend: BackendKind,
    /// The inputs digest of this container (`sha256:<hex>`); the step records it as
    /// `inputs_digest` in its artifact.
    pub digest: String,
}

/// What a successful step reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepSuccess {
    /// The artifact the step wrote (e.g. `provision/<name>.json`), if any.
    pub artifact: Option<PathBuf>,
}

/// A step's result: success, or the step's error (input problems keep their locations).
pub type StepResult = std::result::Result<StepSuccess, Error>;

/// Runs one pipeline step for one container. Implemented by [`BuiltinRunner`] for the binary and by
/// fakes in tests.
///
/// Contract: the step writes its artifact at the path [`step_artifact`] names, with
/// `inputs_digest` = `ctx.digest` and a `result` of `ok` or `failed` (as
/// [`crate::model::Provision`] does). It must not panic; a panic is recorded as a failure of
/// that container only.
pub trait StepRunner: Send + Sync + 'static {
    /// Runs `step` for `spec`.
    fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> impl Future<Output = StepResult> + Send;

    /// Where the outputs of a successful `configure` go as variables of the lib's Gitea
    /// repository (see `super::variables`); `None`, the default: nowhere.
    fn output_variables(&self) -> Option<&super::variables::OutputVariables> {
        None
    }

    /// True when `step` must run for `spec` although its artifact shows success for the same
    /// inputs: the live state says there is work (a saved plan that creates, updates or
    /// recreates the container, e.g. one removed by hand since). The default: never.
    fn live_work(&self, step: Step, spec: &ContainerSpec) -> bool {
        let _ = (step, spec);
        false
    }
}

/// How [`BuiltinRunner`] runs the steps: the options the `provision`, `configure` and `snapshot`
/// subcommands take, for one deploy.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// PVE TLS and timeouts (backend `pve`).
    pub pve: crate::backend::PveConnect,
    /// When an existing container may be destroyed and created again, and whether one we did
    /// not create is adopted (provision).
    pub policy: crate::model::PlanPolicy,
    /// Wait until SSH answers after a start (provision).
    pub wait_ssh: bool,
    /// SSH port to wait for and connect to (22).
    pub ssh_port: u16,
    /// How long provision waits for SSH (and a DHCP address) after a start.
    pub ssh_timeout: Duration,
    /// SSH connect tuning (configure).
    pub connect: crate::ssh::ConnectOptions,
    /// Upper bound of one engine run (base role, lib) in configure.
    pub run_timeout: Duration,
    /// Snapshots kept per lib (`None`: keep all).
    pub keep: Option<usize>,
    /// Let provision recreate without a verified data snapshot first (`--no-snapshot`).
    pub no_snapshot: bool,
    /// How the `plan: …` log line of provision words a plan. Human wording is the CLI's
    /// (`cli::describe::describe`, which the binary passes here); a step never imports the CLI,
    /// so the default is the plan's action as data.
    pub plan_wording: fn(&crate::model::ContainerPlan) -> String,
    /// A saved plan being applied (`deploy --plan`): provision refuses a container whose fresh
    /// plan or PVE config digest differs from the saved one ([`crate::steps::plan::live_moved`])
    /// instead of applying it; [`RunnerOptions::policy`] should be the plan's policy.
    pub saved_plan: Option<Arc<crate::steps::plan::Plan>>,
    /// Configure runs every engine even when the stamp in the container shows nothing changed
    /// ([`crate::steps::configure::ConfigureOptions::full`]).
    pub configure_full: bool,
}

/// [`RunnerOptions::plan_wording`] when the caller gives none: the action's debug form.
fn plan_as_data(plan: &crate::model::ContainerPlan) -> String {
    format!("{:?}", plan.action)
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            pve: crate::backend::PveConnect::default(),
            policy: crate::model::PlanPolicy::default(),
            wait_ssh: true,
            ssh_port: 22,
            ssh_timeout: Duration::from_secs(120),
            connect: crate::ssh::ConnectOptions::default(),
            run_timeout: Duration::from_secs(1800),
            keep: None,
            no_snapshot: false,
            plan_wording: plan_as_data,
            saved_plan: None,
            configure_full: false,
        }
    }
}

/// The runner the binary ships: each arm calls the step's library function for one container.
///
/// * `provision`: [`crate::steps::provision`] on the backend of `ctx.backend`, built once per
///   deploy (one PVE session for every container): plan with [`RunnerOptions::policy`], apply,
///   write `provision/<name>.json`;
/// * `configure`: [`crate::steps::configure::configure`] for the container (it reads
///   `provision/<name>.json` and writes `configure/<name>.json`);
/// * `snapshot`: [`crate::steps::snapshot::snapshot`] through the container's transport
///   ([`crate::access::open`]); a container without `SNAPSHOT` paths gets an `ok`
///   artifact with a warning and is not contacted.
///
/// Every artifact records `inputs_digest` = `ctx.digest` (failures too); a step whose outcome is
/// `failed` returns [`Error::Failed`] with the artifact's error.
///
/// With Gitea settings (`HOST` and credentials) a successful configure's outputs become variables
/// of the lib's repository ([`StepRunner::output_variables`]); the organization of libs whose
/// submodule URL names none is the owner of `PROXMOX_GITOPS_MONOREPO` (read from the process
/// environment when the runner is built), else `main`. [`BuiltinRunner::with_output_variables`]
/// overrides that.
pub struct BuiltinRunner {
    /// Settings with secrets (PVE, Gitea, share), loaded once by the CLI.
    pub settings: Arc<Settings>,
    /// Step options.
    pub options: RunnerOptions,
    backend: tokio::sync::OnceCell<crate::backend::Backend>,
    variables: Option<super::variables::OutputVariables>,
}

impl std::fmt::Debug for BuiltinRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinRunner")
            .field("settings", &self.settings)
            .field("options", &self.options)
            .field("backend", &self.backend.get().map(|b| b.kind()))
            .field("variables", &self.variables)
            .finish()
    }
}

impl BuiltinRunner {
    /// A runner using `settings` and default step options.
    pub fn new(settings: Settings) -> Self {
        Self::with_options(settings, RunnerOptions::default())
    }

    /// A runner using `settings` and `options`.
    pub fn with_options(settings: Settings, options: RunnerOptions) -> Self {
        let variables =
            super::variables::OutputVariables::from_settings(&settings.gitea, settings.gitea.monorepo.as_deref());
        Self { settings: Arc::new(settings), options, backend: tokio::sync::OnceCell::new(), variables }
    }

    /// Sends configure outputs to `variables` instead (`None`: keep them local).
    pub fn with_output_variables(mut self, variables: Option<super::variables::OutputVariables>) -> Self {
        self.variables = variables;
        self
    }

    async fn backend(&self, kind: BackendKind) -> Result<&crate::backend::Backend> {
        let b = self
            .backend
            .get_or_try_init(|| async { crate::backend::open(kind, &self.settings, &self.options.pve) })
            .await?;
        if b.kind() != kind {
            return Err(Error::Failed(anyhow::anyhow!(
                "one deploy uses one backend; asked for {kind}, built {}",
                b.kind()
            )));
        }
        Ok(b)
    }

    async fn provision(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::model::{ApplyOptions, Outcome};
        let path = ctx.artifacts.provision(&spec.name);
        let opts = ApplyOptions {
            share: self.settings.share.clone(),
            wait_ssh: self.options.wait_ssh,
            ssh_port: self.options.ssh_port,
            ssh_timeout: self.options.ssh_timeout,
            no_snapshot: self.options.no_snapshot,
        };
        let _group = crate::actions::Group::start(&format!("provision {}", spec.name));
        // Do not create a container that the ref's configure step could not configure.
        let configures = crate::steps::plan::steps_for_ref(&ctx.git_ref).is_ok_and(|s| s.contains(&Step::Configure));
        let contract = crate::steps::configure::Contract::from_settings(&self.settings.gitea);
        let missing = crate::steps::configure::missing_requirements(&ctx.inventory, spec, &contract);
        let mut prov = if configures && !missing.is_empty() {
            let e = anyhow::anyhow!("{}", crate::steps::configure::requirements_error(spec, &missing));
            crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e)
        } else {
            match self.backend(ctx.backend).await {
                Ok(backend) => match backend.plan(spec, self.options.policy).await {
                    Ok(plan) => {
                        tracing::info!("{}: plan: {}", spec.name, (self.options.plan_wording)(&plan));
                        match self.moved_since_saved_plan(spec, &plan, backend) {
                            Some(e) => crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e),
                            None => backend.apply(spec, &plan, &opts, &ctx.artifacts).await,
                        }
                    }
                    Err(e) => crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e),
                },
                // A backend that cannot be built (missing PROXMOX_HOST …) fails every container.
                Err(e) => {
                    let e = anyhow::anyhow!("{}", render_error(&e));
                    crate::backend::failed_before_plan(ctx.backend, spec, &opts, &e)
                }
            }
        };
        prov.inputs_digest = Some(ctx.digest.clone());
        crate::steps::provision::carry_created_at(&mut prov, &path);
        for w in &prov.warnings {
            tracing::warn!("{}: {w}", spec.name);
        }
        artifact::write(&path, &prov)
            .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        match prov.outcome {
            Outcome::Ok => Ok(StepSuccess { artifact: Some(path) }),
            Outcome::Failed { error } => Err(Error::Failed(anyhow::anyhow!("{error}"))),
        }
    }

    /// With a saved plan: why `plan` (just made) does not apply it for `spec`, as the error that
    /// fails the container before anything changes; `None` when it does, or without a saved plan.
    fn moved_since_saved_plan(
        &self,
        spec: &ContainerSpec,
        plan: &crate::model::ContainerPlan,
        backend: &crate::backend::Backend,
    ) -> Option<anyhow::Error> {
        let saved = self.options.saved_plan.as_ref()?;
        let why = match saved.containers.iter().find(|c| c.name == spec.name) {
            Some(c) => crate::steps::plan::live_moved(c, plan, backend.config_digest(spec.vmid).as_deref())?,
            None => "not in the saved plan".to_string(),
        };
        Some(anyhow::anyhow!(
            "{} (vmid {}): refusing to apply the saved plan: {why}; nothing was changed; re-plan: {}",
            spec.name,
            spec.vmid,
            crate::steps::plan::plan_command(None, &saved.git_ref, &[spec.name.as_str()])
        ))
    }

    async fn configure(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::steps::configure::{ConfigureOptions, Contract, configure};
        let g = &self.settings.gitea;
        let opts = ConfigureOptions {
            containers: vec![spec.name.clone()],
            jobs: 1,
            artifacts: ctx.artifacts.clone(),
            contract: Contract::from_settings(g),
            connect: self.options.connect.clone(),
            run_timeout: self.options.run_timeout,
            control_plane: self.settings.control_plane.clone(),
            deploys_to_pve: self.settings.pve.host.is_some(),
            full: self.options.configure_full,
            ..ConfigureOptions::default()
        };
        let results = configure(&ctx.inventory, &opts).await?;
        let path = ctx.artifacts.configure(&spec.name);
        force_digest(&path, &ctx.digest);
        let Some(c) = results.into_iter().next() else {
            return Err(Error::Failed(anyhow::anyhow!("configure returned no result for {}", spec.name)));
        };
        match c.outcome {
            crate::model::Outcome::Ok => Ok(StepSuccess { artifact: Some(path) }),
            crate::model::Outcome::Failed { error } => {
                // The last lines of the engine's output (the error itself is reported by deploy).
                for l in c.log_tail.iter().filter(|l| !l.starts_with("error: ")) {
                    tracing::error!("{}: {l}", spec.name);
                }
                Err(Error::Failed(anyhow::anyhow!("{error}")))
            }
        }
    }

    async fn snapshot(&self, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        use crate::steps::snapshot::{self as step, Operation, SnapshotOptions};
        let opts = SnapshotOptions {
            share: self.settings.share.clone(),
            keep: self.options.keep,
            now: time::OffsetDateTime::now_utc(),
        };
        let result = if spec.snapshot_paths.is_empty() {
            let mut a = step::Snapshot::new(spec, Operation::Snapshot);
            a.warnings.push(format!("{} declares no SNAPSHOT paths: nothing to snapshot", spec.name));
            a
        } else {
            let pve = match ctx.backend {
                crate::model::BackendKind::Pve if self.settings.pve.host.is_some() => {
                    match crate::backend::pve_client(&self.settings, &self.options.pve) {
                        Ok(client) => Some(step::PveCtAccess {
                            client: std::sync::Arc::new(client),
                            task_timeout: self.options.pve.timeouts.create,
                        }),
                        Err(e) => {
                            tracing::warn!("{}: no PVE container snapshot: {}", spec.name, render_error(&e));
                            None
                        }
                    }
                }
                _ => None,
            };
            let connect =
                step::AccessOptions { transport: step::Transport::Auto, ssh: self.options.connect.clone(), pve };
            match step::open(spec, &ctx.artifacts, &opts.share, &connect).await {
                Ok(conn) => step::snapshot(spec, conn.exec.as_ref(), conn.ct.as_deref(), &opts).await,
                Err(reason) => {
                    let mut a = step::Snapshot::new(spec, Operation::Snapshot);
                    a.outcome = crate::model::Outcome::Failed { error: reason.to_string() };
                    a
                }
            }
        };
        for w in &result.warnings {
            tracing::warn!("{}: {w}", spec.name);
        }
        let path = ctx.artifacts.snapshot(&spec.name);
        artifact::write(&path, &result)
            .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        force_digest(&path, &ctx.digest);
        match result.outcome {
            crate::model::Outcome::Ok => {
                if let Some(id) = &result.snapshot_id {
                    tracing::info!(
                        "{}: snapshot {id} verified ({} entries, {} bytes)",
                        spec.name,
                        result.entry_count,
                        result.bytes
                    );
                }
                Ok(StepSuccess { artifact: Some(path) })
            }
            crate::model::Outcome::Failed { error } => Err(Error::Failed(anyhow::anyhow!("{error}"))),
        }
    }
}

impl StepRunner for BuiltinRunner {
    async fn run(&self, step: Step, spec: &ContainerSpec, ctx: &StepContext) -> StepResult {
        match step {
            Step::Provision => self.provision(spec, ctx).await,
            Step::Configure => self.configure(spec, ctx).await,
            Step::Snapshot => self.snapshot(spec, ctx).await,
        }
    }

    fn output_variables(&self) -> Option<&super::variables::OutputVariables> {
        self.variables.as_ref()
    }

    /// Provision has live work when the saved plan being applied plans more than nothing for
    /// the container (without a saved plan, the artifact's digest decides).
    fn live_work(&self, step: Step, spec: &ContainerSpec) -> bool {
        step == Step::Provision
            && self.options.saved_plan.as_ref().is_some_and(|p| {
                p.containers.iter().any(|c| {
                    c.name == spec.name
                        && c.provision.as_ref().is_some_and(|cp| {
                            !matches!(cp.action, crate::model::Action::Nothing) || cp.migrate.is_some()
                        })
                })
            })
    }
}

/// Sets `inputs_digest` = `digest` in the artifact at `path` (atomic rewrite), whatever it held:
/// for steps whose artifact type has no such field.
fn force_digest(path: &Path, digest: &str) {
    let Ok(text) = std::fs::read_to_string(path) else { return };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&text) else { return };
    let Some(obj) = value.as_object_mut() else { return };
    obj.insert("inputs_digest".into(), digest.into());
    let mut s = serde_json::to_string_pretty(&value).expect("JSON values render");
    s.push('\n');
    if let Err(e) = artifact::write_bytes(path, s.as_bytes()) {
        tracing::warn!("cannot record the inputs digest in {}: {e}", path.display());
    }
}

/// The artifact path of `step` for container `name`.
pub fn step_artifact(dir: &ArtifactDir, step: Step, name: &str) -> PathBuf {
    match step {
        Step::Provision => dir.provision(name),
        Step::Configure => dir.configure(name),
        Step::Snapshot => dir.snapshot(name),
    }
}
