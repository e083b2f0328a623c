//! `proxmox-gitops snapshot`: take (or restore) verified data snapshots.

use std::path::PathBuf;

use clap::Args;

use super::{Ctx, table};
use crate::artifact;
use crate::error::{Error, Location, Result};
use crate::provision::Outcome;
use crate::steps::snapshot::{self as step, SnapshotOptions};

/// Arguments of `snapshot`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["containers", "all"])))]
pub struct SnapshotArgs {
    /// Containers to snapshot (lib name or hostname); repeatable.
    #[arg(long = "container", short = 'c')]
    containers: Vec<String>,
    /// Every container of the stage that declares SNAPSHOT paths.
    #[arg(long)]
    all: bool,
    /// Restore the newest verified snapshot (by time) instead of taking one.
    #[arg(long)]
    restore: bool,
    /// With --restore: the snapshot time to restore, YYYYMMDD-HHMMSS[-N] (UTC), or the snapshot
    /// id <lib>-YYYYMMDD-HHMMSS[-N].
    #[arg(long, requires = "restore", value_parser = parse_at)]
    at: Option<String>,
    /// Keep this many snapshots per lib (archives, and container snapshots named pgo-…); older
    /// ones are deleted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "restore")]
    keep: Option<u32>,
    /// Share directory holding `snapshots/` [default: PROXMOX_SHARE or /share].
    #[arg(long, env = "PROXMOX_SHARE")]
    share: Option<PathBuf>,
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// How to reach containers: `auto` (lxc-attach for the lxc backend, SSH otherwise) or `ssh`
    /// (SSH for every container).
    #[arg(long, value_enum, default_value = "auto")]
    transport: TransportArg,
    /// Seconds for one SSH connect attempt.
    #[arg(long, default_value_t = 10)]
    connect_timeout: u64,
    /// Seconds all SSH connect attempts may take together.
    #[arg(long, default_value_t = 60)]
    connect_budget: u64,
    /// PVE API trust (for container snapshots of `pve` containers; used when PROXMOX_HOST is set).
    #[command(flatten)]
    pve: super::provision::PveTlsArgs,
    /// Seconds a PVE container-snapshot task (create, rollback, delete) may take.
    #[arg(long, value_name = "SECS", default_value_t = 600, alias = "timeout-create")]
    timeout_snapshot: u64,
}

/// Checks `--at` while the command line is parsed, so a malformed one is a usage error (exit 2)
/// before anything runs ([`crate::snapshot::store::parse_at`]).
fn parse_at(s: &str) -> std::result::Result<String, String> {
    crate::snapshot::store::parse_at(s).map(|_| s.to_string()).map_err(|_| crate::snapshot::store::AT_EXPECTED.into())
}

/// `--transport`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum TransportArg {
    Auto,
    Ssh,
}

pub fn run(ctx: &Ctx, args: SnapshotArgs) -> Result<()> {
    let _group = crate::ci::Group::start("snapshot");
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs: Vec<_> = if args.all {
        inv.containers.iter().filter(|c| !c.snapshot_paths.is_empty()).collect()
    } else {
        crate::steps::plan::select(&inv, &args.containers)?
    };
    if specs.is_empty() {
        return Err(Error::input(Location::file("--all"), "no container of this stage declares SNAPSHOT paths"));
    }
    // A snapshot id names its lib: it must be one of the selected containers.
    if let Some(at) = &args.at
        && let Ok(Some(lib)) = crate::snapshot::store::parse_at(at)
        && !specs.iter().any(|s| s.name == lib)
    {
        return Err(Error::Usage(format!(
            "--at `{at}` is a snapshot id of `{lib}`, which is not among the selected containers ({}); give a \
             snapshot time YYYYMMDD-HHMMSS[-N] or an id of a selected container",
            specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let share = args.share.clone().unwrap_or_else(|| inv.settings.share.clone());
    let opts = SnapshotOptions {
        share: share.clone(),
        keep: args.keep.map(|k| k as usize),
        now: time::OffsetDateTime::now_utc(),
    };
    // Container snapshots of `pve` containers go through the API when it is configured.
    let settings = crate::settings::Settings::load(&ctx.repo, &crate::settings::ProcessEnv)?;
    let pve = match settings.pve.host {
        Some(_) => Some(step::PveCtAccess {
            client: std::sync::Arc::new(crate::steps::provision::pve_client(&settings, &args.pve.connect()?)?),
            task_timeout: std::time::Duration::from_secs(args.timeout_snapshot),
        }),
        None => None,
    };
    let connect = step::ConnectOptions {
        transport: match args.transport {
            TransportArg::Auto => step::Transport::Auto,
            TransportArg::Ssh => step::Transport::Ssh,
        },
        ssh: crate::ssh::ConnectOptions {
            connect_timeout: std::time::Duration::from_secs(args.connect_timeout.max(1)),
            total_timeout: std::time::Duration::from_secs(args.connect_budget.max(1)),
            attempts: 8,
        },
        pve,
    };
    let rt = tokio::runtime::Runtime::new().map_err(|e| Error::Failed(e.into()))?;
    let mut results = Vec::new();
    for spec in specs {
        let result = match rt.block_on(step::connect(spec, &ctx.artifacts, &share, &connect)) {
            Ok(conn) => rt.block_on(async {
                if args.restore {
                    step::restore(spec, conn.exec.as_ref(), &opts, args.at.as_deref()).await
                } else {
                    step::snapshot(spec, conn.exec.as_ref(), conn.ct.as_deref(), &opts).await
                }
            }),
            Err(reason) => {
                let op = if args.restore { step::Operation::Restore } else { step::Operation::Snapshot };
                let mut a = step::Snapshot::new(spec, op);
                a.outcome = Outcome::Failed { error: reason };
                a
            }
        };
        artifact::write(&ctx.artifacts.snapshot(&spec.name), &result).map_err(|e| Error::Failed(e.into()))?;
        for w in &result.warnings {
            tracing::warn!("{}: {w}", result.name);
        }
        ctx.emit(&result, String::new);
        results.push(result);
    }
    if !ctx.json {
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                vec![
                    r.name.clone(),
                    format!("{:?}", r.operation).to_lowercase(),
                    r.snapshot_id.clone().unwrap_or_else(|| "-".into()),
                    r.entry_count.to_string(),
                    r.bytes.to_string(),
                    format!("{:?}", r.verification).to_lowercase(),
                    match &r.outcome {
                        Outcome::Ok => "ok".into(),
                        Outcome::Failed { .. } => "FAILED".into(),
                    },
                ]
            })
            .collect();
        print!("{}", table(&["NAME", "OPERATION", "SNAPSHOT", "ENTRIES", "BYTES", "VERIFICATION", "RESULT"], &rows));
    }
    let states: Vec<(&str, bool)> =
        results.iter().map(|r| (r.name.as_str(), matches!(r.outcome, Outcome::Ok))).collect();
    crate::ci::set_step_outputs("snapshot", &ctx.artifacts.root().join("snapshot"), &states)
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_OUTPUT: {e}")))?;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Failed { error } => Some(format!("{}: {error}", r.name)),
            Outcome::Ok => None,
        })
        .collect();
    if failures.is_empty() { Ok(()) } else { Err(Error::Failed(anyhow::anyhow!("{}", failures.join("\n")))) }
}
