//! `proxmox-gitops snapshot`: take (or restore) verified data snapshots.

use std::path::PathBuf;

use clap::Args;

use super::run::{Threads, runtime, step_outputs};
use super::{Ctx, failures, result_cell, table, table_of};
use crate::artifact;
use crate::error::{Error, Location, Result};
use crate::model::Outcome;
use crate::steps::snapshot::{self as step, SnapshotOptions};

/// Arguments of `snapshot`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["containers", "all"])))]
pub struct SnapshotArgs {
    /// Containers to snapshot (lib name or hostname); repeatable or comma-separated.
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
    /// List the lib's data archives and the container's snapshots instead (nothing is taken or
    /// changed; no SSH).
    #[arg(long, conflicts_with_all = ["restore", "keep", "rollback"])]
    list: bool,
    /// Roll ONE container back to its container snapshot NAME (PVE `…/snapshot/{NAME}/rollback`,
    /// or `lxc-snapshot -r`): its current state is discarded, so when the lib declares SNAPSHOT
    /// paths a verified data snapshot is taken first (refused if that fails, unless
    /// --no-snapshot).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["restore", "keep", "all"])]
    rollback: Option<String>,
    /// With --rollback: do not take a data snapshot first.
    #[arg(long, requires = "rollback")]
    no_snapshot: bool,
    /// Take only the verified data snapshot of the SNAPSHOT paths, no container snapshot (a
    /// running LXC container's is a copy of its whole rootfs).
    #[arg(long, conflicts_with_all = ["restore", "list", "rollback"])]
    data_only: bool,
    /// Keep this many snapshots per lib (archives, and container snapshots named pgo-…); older
    /// ones are deleted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "restore")]
    keep: Option<u32>,
    /// Share directory holding `snapshots/` [default: PROXMOX_SHARE or /share].
    #[arg(long, env = "PROXMOX_SHARE")]
    share: Option<PathBuf>,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    /// How to reach containers: `auto` (lxc-attach for the lxc backend, SSH otherwise) or `ssh`
    /// (SSH for every container).
    #[arg(long, value_enum, default_value = "auto")]
    transport: TransportArg,
    /// Seconds for one SSH connect attempt.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    connect_timeout: u64,
    /// Seconds all SSH connect attempts may take together.
    #[arg(long, default_value_t = 60)]
    connect_budget: u64,
    #[command(flatten)]
    pve: super::args::PveSnapshotArgs,
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
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs: Vec<_> = if args.all {
        inv.containers.iter().filter(|c| !c.snapshot_paths.is_empty()).collect()
    } else {
        inv.select(&args.containers, true, crate::inventory::NotFound::InStage)?
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
    let settings = ctx.settings()?;
    let pve = match settings.pve.host {
        Some(_) => Some(step::PveCtAccess {
            client: std::sync::Arc::new(crate::backend::pve_client(&settings, &args.pve.tls.connect()?)?),
            task_timeout: args.pve.task_timeout(),
        }),
        None => None,
    };
    let connect = step::AccessOptions {
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
    let rt = runtime(Threads::Default)?;
    if args.list {
        return list(ctx, &specs, &share, &connect, &rt);
    }
    if let Some(name) = &args.rollback {
        let [spec] = specs.as_slice() else {
            return Err(Error::Usage(format!(
                "--rollback takes exactly one --container (given: {})",
                specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        };
        return rollback(ctx, spec, name, args.no_snapshot, &opts, &connect, &rt);
    }
    let mut results = Vec::new();
    let mut rows = Vec::new();
    for spec in specs {
        let started = std::time::Instant::now();
        let result = match rt.block_on(step::open(spec, &ctx.artifacts, &share, &connect)) {
            Ok(conn) => rt.block_on(async {
                if args.restore {
                    step::restore(spec, conn.exec.as_ref(), &opts, args.at.as_deref()).await
                } else {
                    let ct = if args.data_only { None } else { conn.ct.as_deref() };
                    step::snapshot(spec, conn.exec.as_ref(), ct, &opts).await
                }
            }),
            Err(reason) => {
                let op = if args.restore { step::Operation::Restore } else { step::Operation::Snapshot };
                let mut a = step::Snapshot::new(spec, op);
                a.outcome = Outcome::Failed { error: reason.to_string() };
                a
            }
        };
        artifact::write(&ctx.artifacts.snapshot(&spec.name), &result).map_err(|e| Error::Failed(e.into()))?;
        for w in &result.warnings {
            tracing::warn!("{}: {w}", result.name);
        }
        ctx.emit(&result, String::new);
        rows.push(super::describe::ResultRow {
            name: result.name.clone(),
            vmid: result.vmid,
            node: super::describe::node_of(&ctx.artifacts, &spec.name, spec.node.as_deref()),
            action: match (&result.snapshot_id, result.operation) {
                (Some(id), op) => format!("{} {id}", format!("{op:?}").to_lowercase()),
                (None, op) => format!("{op:?}").to_lowercase(),
            },
            ok: matches!(result.outcome, Outcome::Ok),
            duration_ms: Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)),
            error: match &result.outcome {
                Outcome::Ok => None,
                Outcome::Failed { error } => Some(error.clone()),
            },
        });
        results.push(result);
    }
    let what = if args.restore { "restore" } else { "snapshot" };
    super::describe::job_summary(what, &super::describe::results_markdown(what, &rows));
    crate::actions::end_group();
    ctx.emit_all(&results, || {
        table_of(&["NAME", "OPERATION", "SNAPSHOT", "ENTRIES", "BYTES", "VERIFICATION", "RESULT"], &results, |r| {
            vec![
                r.name.clone(),
                format!("{:?}", r.operation).to_lowercase(),
                r.snapshot_id.clone().unwrap_or_else(|| "-".into()),
                r.entry_count.to_string(),
                r.bytes.to_string(),
                format!("{:?}", r.verification).to_lowercase(),
                result_cell(&r.outcome),
            ]
        })
    });
    let states: Vec<(&str, bool)> =
        results.iter().map(|r| (r.name.as_str(), matches!(r.outcome, Outcome::Ok))).collect();
    step_outputs("snapshot", &ctx.artifacts.snapshot_dir(), &states)?;
    let failures = failures(results.iter().map(|r| (r.name.as_str(), &r.outcome)));
    if failures.is_empty() { Ok(()) } else { Err(Error::Failed(anyhow::anyhow!("{}", failures.join("\n")))) }
}

/// `--list`: per container, the data archives in the share (id, time, entries, bytes) and the
/// container snapshots (name, description), from the store and the backend only.
fn list(
    ctx: &Ctx,
    specs: &[&crate::inventory::ContainerSpec],
    share: &std::path::Path,
    connect: &step::AccessOptions,
    rt: &tokio::runtime::Runtime,
) -> Result<()> {
    let store = crate::snapshot::store::Store::new(share);
    let mut rows = Vec::new();
    let mut json = Vec::new();
    for spec in specs {
        let archives = store
            .list(&spec.name)
            .map_err(|e| Error::Failed(anyhow::anyhow!("{}: cannot list its snapshots: {e}", spec.name)))?;
        for a in &archives {
            let bytes = std::fs::metadata(&a.archive).map(|m| m.len()).unwrap_or(0);
            rows.push(vec![spec.name.clone(), "data".into(), a.id.clone(), bytes.to_string()]);
            json.push(serde_json::json!({"container": spec.name, "kind": "data", "id": a.id,
                "archive": a.archive, "manifest": a.manifest, "bytes": bytes}));
        }
        let cts = step::read_provision(spec, &ctx.artifacts)
            .ok()
            .and_then(|prov| step::ct_snapshots(&prov, connect.pve.as_ref()).ok().flatten());
        match cts {
            Some(ct) => {
                let listed =
                    rt.block_on(ct.list()).map_err(|e| Error::Failed(anyhow::anyhow!("{}: {e}", spec.name)))?;
                for c in listed {
                    rows.push(vec![spec.name.clone(), "container".into(), c.name.clone(), "-".into()]);
                    json.push(serde_json::json!({"container": spec.name, "kind": "container", "id": c.name,
                        "description": c.description, "snaptime": c.snaptime}));
                }
            }
            None => tracing::info!(
                "{}: container snapshots not listed (no provision artifact, or a pve container without {})",
                spec.name,
                crate::settings::setting_names("PROXMOX_HOST")
            ),
        }
    }
    if ctx.json {
        println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    } else {
        print!("{}", table(&["NAME", "KIND", "SNAPSHOT", "BYTES"], &rows));
    }
    Ok(())
}

/// `--rollback NAME` for one container: a verified data snapshot first when the lib declares
/// SNAPSHOT paths (unless `no_snapshot`), then the container snapshot rollback.
fn rollback(
    ctx: &Ctx,
    spec: &crate::inventory::ContainerSpec,
    name: &str,
    no_snapshot: bool,
    opts: &SnapshotOptions,
    connect: &step::AccessOptions,
    rt: &tokio::runtime::Runtime,
) -> Result<()> {
    let prov = step::read_provision(spec, &ctx.artifacts).map_err(|e| Error::Failed(anyhow::anyhow!("{e}")))?;
    let Some(ct) = step::ct_snapshots(&prov, connect.pve.as_ref()).map_err(|e| Error::Failed(e.into()))? else {
        return Err(Error::Failed(anyhow::anyhow!(
            "{}: container snapshots of this pve container need the PVE API: set {}",
            spec.name,
            crate::settings::setting_names("PROXMOX_HOST")
        )));
    };
    if !spec.snapshot_paths.is_empty() && !no_snapshot {
        let taken = rt.block_on(async {
            match step::open(spec, &ctx.artifacts, &opts.share, connect).await {
                Ok(conn) => step::snapshot(spec, conn.exec.as_ref(), None, opts).await,
                Err(reason) => {
                    let mut a = step::Snapshot::new(spec, step::Operation::Snapshot);
                    a.outcome = Outcome::Failed { error: reason.to_string() };
                    a
                }
            }
        });
        artifact::write(&ctx.artifacts.snapshot(&spec.name), &taken).map_err(|e| Error::Failed(e.into()))?;
        if let Outcome::Failed { error } = &taken.outcome {
            return Err(crate::error::Hinted::new(
                format!("{}: no rollback: the data snapshot taken first failed ({error})", spec.name),
                crate::error::Hint::NoSnapshot {
                    container: spec.name.clone(),
                    then: crate::error::WithoutSnapshot::RollBack,
                },
            )
            .into());
        }
        eprintln!("{}: data snapshot {} taken first", spec.name, taken.snapshot_id.as_deref().unwrap_or("-"));
    }
    let upid = rt
        .block_on(crate::snapshot::ct::rollback(ct.as_ref(), name))
        .map_err(|e| Error::Failed(anyhow::anyhow!("{}: {e}", spec.name)))?;
    match upid {
        Some(u) => eprintln!("{}: rolled back to {name} (task {u})", spec.name),
        None => eprintln!("{}: rolled back to {name}", spec.name),
    }
    Ok(())
}
