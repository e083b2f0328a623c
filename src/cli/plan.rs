//! `proxmox-gitops plan`: what a deploy of a ref would do, without changing anything.

use clap::Args;

use super::Ctx;
use super::describe::plan::{Offline, human, markdown, no_pve_host};
use crate::artifact;
use crate::error::{Error, Result};
use crate::model::BackendKind;
use crate::steps::plan::{Plan, Step, plan};

/// Arguments of `plan`.
#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 planned, 1 failure, 2 invalid input. With --detailed-exitcode (as \
Terraform's): 0 no changes, 2 changes pending, 1 any error (invalid input, a container that cannot be planned, \
a refused or foreign container).")]
pub struct PlanArgs {
    /// The ref being deployed: refs/heads/release, refs/heads/main or refs/heads/snapshot.
    #[arg(long = "ref", env = "GITHUB_REF", default_value = "refs/heads/release")]
    git_ref: String,
    /// Containers to plan (lib name or hostname); repeatable or comma-separated. Default: all of the stage.
    #[arg(long = "container", short = 'c')]
    containers: Vec<String>,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    /// Do not read live state: plan the steps only (the default when PROXMOX_HOST is not set
    /// and no --backend is given).
    #[arg(long)]
    offline: bool,
    /// Read the live state from this backend [default: pve when PROXMOX_HOST is configured; else
    /// none (an offline plan)]. `lxc` plans against the local LXC containers.
    #[arg(long, value_enum, env = "PGO_BACKEND")]
    backend: Option<BackendKind>,
    /// Exit 0 when a deploy would change nothing, 2 when changes are pending, 1 on any error
    /// (invalid input, a container that cannot be planned, a refused or foreign container: the
    /// provision step would fail), as `terraform plan -detailed-exitcode`.
    #[arg(long)]
    detailed_exitcode: bool,
    /// The workflow run; a snapshot step counts as done only when it succeeded in the same run.
    #[arg(long, env = "GITHUB_RUN_ID")]
    run_id: Option<String>,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    /// Wait for a container PVE has locked (a running create, backup, migration …) as
    /// `provision` does — its task, up to 600 s for a create and 120 s for anything else —
    /// instead of reporting it busy.
    #[arg(long)]
    wait_for_locks: bool,
    #[command(flatten)]
    policy: super::args::PolicyArgs,
    /// PVE API trust (plan only reads: no task timeouts).
    #[command(flatten)]
    pve: super::args::PveTlsArgs,
}

/// Runs `plan` and returns the process exit code: see [`PlanArgs`]'s help (with
/// `--detailed-exitcode`, a container that could not be planned, or is refused or foreign, is an
/// error: 1). `report` prints
/// an error and returns its ordinary exit code.
pub fn main(ctx: &Ctx, args: PlanArgs, report: impl Fn(&Error) -> i32) -> i32 {
    let detailed = args.detailed_exitcode;
    let result = run(ctx, args).and_then(|p| ctx.inputs_checked().map(|()| (p.changes_pending(), p.cannot_plan())));
    match result {
        // Terraform's 1 for an error: a container that could not be planned (or is refused) is one.
        Ok((_, true)) if detailed => crate::error::EXIT_FAILURE,
        Ok((true, _)) if detailed => 2,
        Ok(_) => crate::error::EXIT_OK,
        Err(e) => {
            let code = report(&e);
            if detailed { crate::error::EXIT_FAILURE } else { code }
        }
    }
}

/// Plans, writes `plan.json`, the outputs and the job summary, prints the plan; returns the plan.
pub fn run(ctx: &Ctx, args: PlanArgs) -> Result<Plan> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let mut p = plan(&inv, &args.git_ref, &args.containers)?;
    let settings = ctx.settings()?;
    let provisions = p.containers.iter().any(|c| c.steps.contains(&Step::Provision));
    let kind = args.backend.or(settings.pve.host.is_some().then_some(BackendKind::Pve));
    // Without live state nothing is contacted: the provision actions stay unknown, and the human
    // output says so and why.
    let offline_because = |why: String, no_host: bool| Offline {
        why,
        no_host,
        lxc: kind == Some(BackendKind::Lxc),
        containers: args.containers.clone(),
    };
    let mut offline: Option<Offline> = match (provisions, args.offline, kind) {
        (false, _, _) => None,
        (true, true, _) => Some(offline_because("--offline".into(), false)),
        (true, false, None) => Some(offline_because(no_pve_host(), true)),
        (true, false, Some(BackendKind::Pve)) if settings.pve.host.is_none() => {
            Some(offline_because(no_pve_host(), true))
        }
        (true, false, Some(_)) => None,
    };
    let backend = match (offline.is_none() && provisions, kind) {
        (true, Some(BackendKind::Pve)) => {
            let connect = crate::backend::PveConnect { wait_for_locks: args.wait_for_locks, ..args.pve.connect()? };
            Some(crate::backend::open(BackendKind::Pve, &settings, &connect)?)
        }
        (true, Some(BackendKind::Lxc)) => match crate::backend::lxc_backend(&settings) {
            Ok(b) => Some(crate::backend::Backend::Lxc(b)),
            Err(e) => {
                offline = Some(offline_because(format!("the lxc backend cannot be used here: {e}"), false));
                None
            }
        },
        _ => None,
    };
    ctx.inputs_checked()?;
    if let Some(backend) = backend {
        // Live state: what provision would do to each container (reads only).
        let live =
            crate::steps::plan::with_live_state(&mut p, &inv, &backend, args.policy.plan_policy(), args.jobs.get());
        super::run::block_on(super::run::Threads::Default, live)?;
    }
    crate::steps::deploy::mark_done_steps(
        &ctx.repo,
        &ctx.artifacts,
        &inv,
        &mut p,
        args.run_id.as_deref().filter(|r| !r.is_empty()),
    );
    let path = ctx.artifacts.plan();
    artifact::write(&path, &p).map_err(|e| Error::Failed(e.into()))?;
    let names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
    let pending = p.changes_pending();
    super::run::outputs(&[
        ("artifact", path.display().to_string()),
        ("plan", path.display().to_string()),
        ("containers", names.join(",")),
        ("containers_json", serde_json::to_string(&names).expect("strings serialize")),
        (
            "steps",
            crate::steps::plan::steps_for_ref(&p.git_ref)?.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
        ),
        ("changes", pending.to_string()),
    ])?;
    let md =
        markdown(&p, &|name| inv.container(name).and_then(|s| s.node.clone()).unwrap_or_default(), offline.as_ref());
    super::describe::job_summary("plan", &md);
    crate::actions::end_group();
    ctx.emit(&p, || human(&p, offline.as_ref()));
    Ok(p)
}
