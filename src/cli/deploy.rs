//! `proxmox-gitops deploy`: run the ref's steps for containers, resumably, in parallel.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::args::{PolicyArgs, PveArgs, SshWaitArgs};
use super::run::{Threads, block_on, outputs};
use super::{Ctx, table_of};
use crate::error::{Error, Result};
use crate::model::BackendKind;
use crate::steps::deploy::{BuiltinRunner, DeployOptions, RunResult, RunnerOptions, StepState, deploy};
use crate::steps::plan::Step;

/// Arguments of `deploy`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["containers", "all", "saved_plan"])))]
// The shared SSH-wait options, worded for deploy's steps.
#[command(mut_arg("no_wait_ssh", |a| a.help("Do not wait for SSH after a start (provision)")))]
#[command(mut_arg("ssh_port", |a| a.help("SSH port to wait for and connect to")))]
#[command(mut_arg("ssh_timeout", |a| a.help("Seconds provision waits for SSH (and a DHCP address) after a start")))]
pub struct DeployArgs {
    /// The ref being deployed: refs/heads/release (provision + configure), refs/heads/main
    /// (configure) or refs/heads/snapshot (snapshot).
    /// With --plan: the plan's ref, which this must equal when given.
    #[arg(long = "ref", env = "GITHUB_REF", required_unless_present = "saved_plan")]
    git_ref: Option<String>,
    /// Apply exactly this saved plan (`plan.json` from `proxmox-gitops plan`): its ref, its
    /// containers (-c narrows them) and its recreate policy. Refused, with nothing changed, when
    /// a container's inputs digest or its live state (PVE config digest, provision action) moved
    /// since it was planned. `--step` may narrow it to some of its ref's steps (the pipeline
    /// provisions with the plan, then configures in a step of its own).
    #[arg(long = "plan", value_name = "PLAN_JSON", conflicts_with = "all")]
    saved_plan: Option<PathBuf>,
    /// Containers to deploy (lib name or hostname); repeatable or comma-separated.
    #[arg(long = "container", short = 'c', value_delimiter = ',')]
    containers: Vec<String>,
    /// Deploy every container of the stage.
    #[arg(long, conflicts_with = "containers")]
    all: bool,
    /// Run these steps instead of the ref's (workflow dispatch); repeatable or comma-separated.
    #[arg(long = "step", value_enum, value_delimiter = ',')]
    steps: Vec<StepArg>,
    /// Run steps even when their artifact shows success for the same inputs; configure then also
    /// runs every engine, unchanged or not (see `configure --force`).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    #[command(flatten)]
    backend: super::args::BackendArg,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    /// The workflow run; a snapshot is only skipped when it succeeded in the same run.
    #[arg(long, env = "GITHUB_RUN_ID")]
    run_id: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    ssh: SshWaitArgs,
    /// Seconds all SSH connect attempts of configure may take together.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    connect_budget: u64,
    /// Seconds one configuration run (base role, lib) may take.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    run_timeout: u64,
    /// Snapshot step: keep this many snapshots per lib; older ones are deleted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    keep: Option<u32>,
    /// Recreate/destroy without taking a verified data snapshot first (logged as a warning).
    #[arg(long)]
    no_snapshot: bool,
    #[command(flatten)]
    pve: PveArgs,
}

/// A step name on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StepArg {
    Provision,
    Configure,
    Snapshot,
}

impl From<StepArg> for Step {
    fn from(s: StepArg) -> Step {
        match s {
            StepArg::Provision => Step::Provision,
            StepArg::Configure => Step::Configure,
            StepArg::Snapshot => Step::Snapshot,
        }
    }
}

pub fn run(ctx: &Ctx, args: DeployArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let settings = ctx.settings()?;
    let backend = args.backend.or_default(&settings);
    let saved =
        args.saved_plan.as_deref().map(|path| saved_plan(path, &args, &inv, &ctx.stage, backend)).transpose()?;
    let (git_ref, containers, recreate) = match &saved {
        Some(s) => (s.plan.git_ref.clone(), s.containers.clone(), s.recreate),
        None => (
            args.git_ref.clone().unwrap_or_default(),
            if args.all { Vec::new() } else { args.containers.clone() },
            args.policy.policy(),
        ),
    };
    let secs = std::time::Duration::from_secs;
    let runner_opts = RunnerOptions {
        pve: args.pve.connect()?,
        policy: crate::model::PlanPolicy { recreate, adopt: args.policy.adopt },
        wait_ssh: args.ssh.wait(),
        ssh_port: args.ssh.ssh_port,
        ssh_timeout: args.ssh.timeout(),
        connect: crate::ssh::ConnectOptions {
            connect_timeout: secs(10),
            total_timeout: secs(args.connect_budget),
            attempts: 10,
        },
        run_timeout: secs(args.run_timeout),
        keep: args.keep.map(|k| k as usize),
        no_snapshot: args.no_snapshot,
        plan_wording: super::describe::describe,
        saved_plan: saved.as_ref().map(|s| Arc::new(s.plan.clone())),
        // `--force` re-runs configure fully too.
        configure_full: args.force
            || crate::settings::configure_full(&crate::settings::ProcessEnv).map_err(crate::error::Error::Input)?,
    };
    let opts = DeployOptions {
        repo: ctx.repo.clone(),
        artifacts: ctx.artifacts.clone(),
        git_ref,
        steps: args.steps.into_iter().map(Step::from).collect(),
        containers,
        force: args.force,
        jobs: args.jobs.get(),
        backend,
        run_id: args.run_id.filter(|r| !r.is_empty()),
    };
    // The ref, the selection and the PVE settings are input: refuse them (missing credentials
    // too) before anything runs or is written, not once per container as a failure. The step
    // checks the first two again; the runner opens its own backend.
    let steps = crate::steps::deploy::steps_to_run(&opts.git_ref, &opts.steps)?;
    inv.select(&opts.containers, true, crate::inventory::NotFound::InStage)?;
    if backend == crate::model::BackendKind::Pve && steps.contains(&Step::Provision) {
        crate::backend::open(backend, &settings, &runner_opts.pve)?;
    }
    ctx.inputs_checked()?;
    if let Some(s) = &saved {
        check_saved_plan(ctx, s, &inv, &settings, &runner_opts, opts.jobs)?;
    }
    let nodes: std::collections::BTreeMap<String, String> =
        inv.containers.iter().filter_map(|c| Some((c.name.clone(), c.node.clone()?))).collect();
    let runner = BuiltinRunner::with_options(settings, runner_opts);
    let summary = block_on(Threads::Workers(opts.jobs.clamp(1, 8)), deploy(Arc::new(runner), inv, &opts))??;
    let path = ctx.artifacts.deploy();
    let names = |f: &dyn Fn(&crate::steps::deploy::ContainerRecord) -> bool| {
        summary.containers.iter().filter(|c| f(c)).map(|c| c.name.as_str()).collect::<Vec<_>>().join(",")
    };
    outputs(&[
        ("artifact", path.display().to_string()),
        ("result", if summary.result == RunResult::Ok { "ok" } else { "failed" }.to_string()),
        ("steps", summary.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")),
        ("containers", names(&|_| true)),
        ("succeeded", names(&|c| c.result == RunResult::Ok)),
        ("failed", names(&|c| c.result == RunResult::Failed)),
        ("skipped", names(&|c| !c.skipped_steps.is_empty())),
    ])?;
    super::describe::job_summary("deploy", &summary_markdown(&summary, &nodes, &ctx.artifacts));
    crate::actions::end_group();
    ctx.emit(&summary, || {
        let mut s = table_of(&["NAME", "VMID", "STEPS", "TIME", "RESULT"], &summary.containers, |c| {
            vec![
                c.name.clone(),
                c.vmid.to_string(),
                c.steps
                    .iter()
                    .map(|s| {
                        let state = match s.state {
                            StepState::Ok => "ok",
                            StepState::Failed => "FAILED",
                            StepState::Skipped => "skipped",
                            StepState::Blocked => "BLOCKED",
                            StepState::NotRun => "not run",
                        };
                        format!("{} {state}", s.step)
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{:.1}s", c.duration_ms as f64 / 1000.0),
                match c.result {
                    RunResult::Ok => "ok".into(),
                    RunResult::Failed => "FAILED".into(),
                },
            ]
        });
        s.push_str(&format!(
            "\n{} container(s) for {} (stage {}), {} failed; wrote {}\n",
            summary.containers.len(),
            summary.git_ref,
            summary.stage,
            summary.failed().len(),
            path.display()
        ));
        s
    });
    let failed = summary.failed();
    if failed.is_empty() {
        Ok(())
    } else {
        let details: Vec<String> =
            summary.containers.iter().filter_map(|c| c.error.as_ref().map(|e| format!("{}: {e}", c.name))).collect();
        Err(Error::Failed(anyhow::anyhow!(
            "{} of {} container(s) failed: {}\n  {}",
            failed.len(),
            summary.containers.len(),
            failed.join(", "),
            details.join("\n  ")
        )))
    }
}

/// A saved plan to apply (`--plan`), checked against the run's options.
struct SavedPlan {
    path: PathBuf,
    /// The plan, narrowed to the containers `-c` names (all of it without `-c`).
    plan: crate::steps::plan::Plan,
    /// The containers to deploy.
    containers: Vec<String>,
    /// The plan's recreate policy.
    recreate: crate::model::RecreatePolicy,
}

/// Reads the saved plan at `path` and checks it against the run: the same ref (when `--ref` is
/// given), stage, backend and recreate policy ([`crate::steps::plan::applicable`]); `-c` may only
/// narrow its containers, `--step` only its ref's steps.
///
/// # Errors
/// [`Error::Usage`] (exit 2) for an unreadable plan or any mismatch.
fn saved_plan(
    path: &std::path::Path,
    args: &DeployArgs,
    inv: &crate::inventory::Inventory,
    stage: &str,
    backend: BackendKind,
) -> Result<SavedPlan> {
    let plan = crate::steps::deploy::saved::read(path, args.git_ref.as_deref(), &args.containers, inv)?;
    let planned = crate::steps::plan::steps_for_ref(&plan.git_ref)?;
    if let Some(other) = args.steps.iter().map(|s| Step::from(*s)).find(|s| !planned.contains(s)) {
        return Err(Error::Usage(format!(
            "--step {other}: {} plans ref {}, whose steps are {}; a saved plan only narrows to those",
            path.display(),
            plan.git_ref,
            planned.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    let recreate = crate::steps::plan::applicable(&plan, path, stage, backend, args.policy.given())?;
    let containers = plan.containers.iter().map(|c| c.name.clone()).collect();
    Ok(SavedPlan { path: path.to_path_buf(), plan, containers, recreate })
}

/// Refuses the saved plan, before anything runs, when a container's inputs digest or live state
/// moved since it was planned ([`crate::steps::deploy::saved`]).
///
/// # Errors
/// [`Error::Failed`] naming each container that moved and the command that plans again.
fn check_saved_plan(
    ctx: &Ctx,
    saved: &SavedPlan,
    inv: &crate::inventory::Inventory,
    settings: &crate::settings::Settings,
    runner: &RunnerOptions,
    jobs: usize,
) -> Result<()> {
    use crate::steps::deploy::saved::{live_moved_all, refuse_moved};
    let provisions = saved.plan.containers.iter().any(|c| c.steps_to_run().contains(&Step::Provision));
    let live = match (provisions, saved.plan.backend) {
        (true, Some(kind)) => {
            let backend = crate::backend::open(kind, settings, &runner.pve)?;
            block_on(Threads::Default, live_moved_all(&saved.plan, inv, &backend, saved.recreate, jobs.max(1)))?
        }
        _ => Vec::new(),
    };
    refuse_moved(&saved.plan, &saved.path, inv, &ctx.repo, &ctx.artifacts, live)
}

/// The job summary of a deploy: one row per container (failed first) whose action lists each
/// step with the actions its artifact records and its state, e.g. `provision (create, start) ok,
/// configure failed`; the node is the one its provision artifact in `artifacts` records, else
/// its lib's `NODE` (`nodes`: container name → node).
fn summary_markdown(
    d: &crate::steps::deploy::Deploy,
    nodes: &std::collections::BTreeMap<String, String>,
    artifacts: &crate::artifact::ArtifactDir,
) -> String {
    let rows: Vec<super::describe::ResultRow> = d
        .containers
        .iter()
        .map(|c| super::describe::ResultRow {
            name: c.name.clone(),
            vmid: c.vmid,
            node: super::describe::node_of(artifacts, &c.name, nodes.get(&c.name).map(String::as_str)),
            action: c
                .steps
                .iter()
                .map(|s| {
                    let actions =
                        if s.actions.is_empty() { String::new() } else { format!(" ({})", s.actions.join(", ")) };
                    let state = match s.state {
                        StepState::Ok => "ok",
                        StepState::Failed => "failed",
                        StepState::Skipped => "skipped (done for these inputs)",
                        StepState::Blocked => "blocked",
                        StepState::NotRun => "not run",
                    };
                    format!("{}{actions} {state}", s.step)
                })
                .collect::<Vec<_>>()
                .join(", "),
            ok: c.result == RunResult::Ok,
            duration_ms: Some(c.duration_ms),
            error: c.error.clone(),
        })
        .collect();
    super::describe::results_markdown(&format!("deploy {} (stage {})", d.git_ref, d.stage), &rows)
}
