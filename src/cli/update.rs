//! `proxmox-gitops update`: an unattended package upgrade per container with a container
//! snapshot before and an automatic rollback when the upgrade, the reboot or the health check
//! after it fails; writes `update.json`, a table (or `--json`) and a Markdown table into the job
//! summary. Exit 0 when no container failed or was rolled back, 1 otherwise, 2 for bad input.

use std::time::Duration;

use clap::Args;
use time::OffsetDateTime;

use super::args::ReachArgs;
use super::run::{Threads, block_on, outputs};
use super::{Ctx, table_of};
use crate::artifact;
use crate::backend::live::{self, LiveOptions};
use crate::error::{Error, Result};
use crate::inventory::{ContainerSpec, NotFound};
use crate::live::CheckOptions;
use crate::steps::update::{self as step, Update, UpdateOptions, UpdateResult};

/// Arguments of `update`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["containers", "all"])))]
pub struct UpdateArgs {
    /// Containers to update (lib name or hostname); repeatable or comma-separated.
    #[arg(long = "container", short = 'c', value_delimiter = ',')]
    containers: Vec<String>,
    /// Every container of the stage (the control plane included).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    #[command(flatten)]
    backend: super::args::BackendArg,
    /// At most this many containers updated at once.
    #[arg(long, short = 'j', default_value_t = 2, env = "PGO_JOBS", value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: u16,
    /// Seconds the whole package upgrade of one container may take.
    #[arg(long, value_name = "SECS", default_value_t = 1800, env = "PGO_UPGRADE_TIMEOUT", value_parser = clap::value_parser!(u64).range(1..))]
    upgrade_timeout: u64,
    /// Seconds a container may take to answer after a start, reboot or rollback.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    boot_timeout: u64,
    /// Seconds the health check after the upgrade is repeated while services come back.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    settle_timeout: u64,
    /// Seconds each part of a health check may take (a backend call, a command in the container).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    check_timeout: u64,
    /// Seconds the clean shutdown of a PVE reboot may take before the container is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 120, env = "PGO_TIMEOUT_SHUTDOWN")]
    timeout_shutdown: u64,
    #[command(flatten)]
    reach: ReachArgs,
    #[command(flatten)]
    pve: super::args::PveSnapshotArgs,
}

pub fn run(ctx: &Ctx, args: UpdateArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let names = if args.all { Vec::new() } else { args.containers.clone() };
    let specs: Vec<ContainerSpec> = inv.select(&names, args.all, NotFound::InStage)?.into_iter().cloned().collect();
    let settings = ctx.settings()?;
    let kind = args.backend.or_default(&settings);
    let mut pve = args.pve.tls.connect()?;
    pve.timeouts.shutdown = Duration::from_secs(args.timeout_shutdown.max(1));
    let live = live::open(
        kind,
        &settings,
        LiveOptions {
            pve,
            snapshot_timeout: args.pve.task_timeout(),
            share: settings.share.clone(),
            artifacts: ctx.artifacts.clone(),
            ssh: args.reach.ssh(),
            ssh_port: args.reach.ssh_port,
        },
    )?;
    ctx.inputs_checked()?;
    let opts = UpdateOptions {
        jobs: usize::from(args.jobs),
        check: CheckOptions {
            timeout: Duration::from_secs(args.check_timeout),
            reach_timeout: Duration::from_secs(args.reach.connect_budget.max(1) + args.check_timeout),
        },
        upgrade_timeout: Duration::from_secs(args.upgrade_timeout),
        boot_timeout: Duration::from_secs(args.boot_timeout),
        settle_timeout: Duration::from_secs(args.settle_timeout),
        now: OffsetDateTime::now_utc(),
        this_host: std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()),
    };
    let report = block_on(
        Threads::Workers(usize::from(args.jobs).clamp(1, 8)),
        step::update_all(&live, &inv.stage, &specs, &opts),
    )?;
    let path = ctx.artifacts.update();
    artifact::write(&path, &report).map_err(|e| Error::Failed(e.into()))?;
    crate::actions::summary(&markdown(&report))
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_STEP_SUMMARY: {e}")))?;
    let names = |r: UpdateResult| {
        report.containers.iter().filter(|c| c.result == r).map(|c| c.name.as_str()).collect::<Vec<_>>().join(",")
    };
    outputs(&[
        ("artifact", path.display().to_string()),
        ("result", if report.ok { "ok" } else { "failed" }.to_string()),
        ("updated", names(UpdateResult::Updated)),
        ("rolled_back", names(UpdateResult::RolledBack)),
        ("failed", names(UpdateResult::Failed)),
    ])?;
    ctx.emit(&report, || {
        let mut s = table(&report);
        let failed = report.containers.iter().filter(|c| c.result.is_failure()).count();
        s.push_str(&format!(
            "\n{} container(s), {} updated, {failed} failed or rolled back; wrote {}\n",
            report.containers.len(),
            report.containers.iter().filter(|c| c.result == UpdateResult::Updated).count(),
            path.display()
        ));
        s
    });
    result(&report)
}

/// `yes` after a reboot, else `-`.
fn reboot_cell(c: &step::ContainerUpdate) -> String {
    if c.rebooted { "yes".into() } else { "-".into() }
}

/// The health after the update (or the rollback): its state, `-` when not checked.
fn health_cell(c: &step::ContainerUpdate) -> String {
    c.health.as_ref().map(|h| h.state.to_string()).unwrap_or_else(|| "-".into())
}

/// The human table: CONTAINER, RESULT, SNAPSHOT, REBOOT, HEALTH, DETAIL.
fn table(report: &Update) -> String {
    table_of(&["CONTAINER", "RESULT", "SNAPSHOT", "REBOOT", "HEALTH", "DETAIL"], &report.containers, |c| {
        vec![
            c.name.clone(),
            c.result.to_string(),
            c.snapshot.clone().unwrap_or_else(|| "-".into()),
            reboot_cell(c),
            health_cell(c),
            c.error.clone().unwrap_or_default(),
        ]
    })
}

/// The Markdown block for the job summary.
pub(crate) fn markdown(report: &Update) -> String {
    use crate::actions::markdown_cell as cell;
    let count = |r: UpdateResult| report.containers.iter().filter(|c| c.result == r).count();
    let mut s = format!(
        "### Update of stage `{}`: {} updated, {} rolled back, {} failed\n\n\
         | Container | Result | Snapshot | Reboot | Health | Detail |\n|---|---|---|---|---|---|\n",
        cell(&report.stage),
        count(UpdateResult::Updated),
        count(UpdateResult::RolledBack),
        count(UpdateResult::Failed),
    );
    for c in &report.containers {
        let result = if c.result.is_failure() { format!("**{}**", c.result) } else { c.result.to_string() };
        s.push_str(&format!(
            "| {} | {result} | {} | {} | {} | {} |\n",
            cell(&c.name),
            cell(c.snapshot.as_deref().unwrap_or("-")),
            reboot_cell(c),
            health_cell(c),
            cell(c.error.as_deref().unwrap_or(""))
        ));
    }
    s.push_str(&format!("\nStarted {} ({} backend).\n", report.started_at, report.backend));
    s
}

/// Exit 0 unless a container failed or was rolled back; the failure names each.
fn result(report: &Update) -> Result<()> {
    let bad: Vec<String> = report
        .containers
        .iter()
        .filter(|c| c.result.is_failure())
        .map(|c| format!("{}: {} — {}", c.name, c.result, c.error.as_deref().unwrap_or("")))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::Failed(anyhow::anyhow!(
        "{} of {} container(s) failed or were rolled back:\n  {}",
        bad.len(),
        report.containers.len(),
        bad.join("\n  ")
    )))
}
