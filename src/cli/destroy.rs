//! `proxmox-gitops destroy`: remove containers, after a verified snapshot of their data.

use clap::Args;

use super::run::{Threads, block_on, step_outputs};
use super::{Ctx, all_ok, failures, result_cell, table_of};
use crate::error::Result;
use crate::inventory::NotFound;
use crate::model::Outcome;
use crate::steps::destroy::{self as step, DestroyOptions};

/// Arguments of `destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Container to destroy (lib name or hostname); repeatable or comma-separated.
    #[arg(long = "container", short = 'c', value_name = "NAME", required = true)]
    containers: Vec<String>,
    /// Destroy containers that declare SNAPSHOT paths WITHOUT a data snapshot first (their data
    /// is lost; logged as a warning).
    #[arg(long)]
    no_snapshot: bool,
    #[command(flatten)]
    backend: super::args::BackendArg,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    #[command(flatten)]
    pve: super::args::PveDestroyArgs,
}

pub fn run(ctx: &Ctx, args: DestroyArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs: Vec<_> = inv.select(&args.containers, false, NotFound::InStage)?.into_iter().cloned().collect();
    let settings = ctx.settings()?;
    let kind = args.backend.or_default(&settings);
    let backend = crate::backend::open(kind, &settings, &args.pve.connect()?)?;
    ctx.inputs_checked()?;
    let opts = DestroyOptions { share: settings.share.clone(), no_snapshot: args.no_snapshot };
    let results = block_on(Threads::Default, step::destroy_all(&backend, &specs, &opts, &ctx.artifacts))??;
    ctx.emit_all(&results, || {
        table_of(&["NAME", "VMID", "CONTAINER", "PROTECTED BY", "RESULT"], &results, |d| {
            vec![
                d.name.clone(),
                d.vmid.to_string(),
                if !d.existed {
                    "absent".into()
                } else if d.destroyed {
                    "destroyed".into()
                } else {
                    "kept".into()
                },
                d.protected_by.clone().unwrap_or_else(|| "-".into()),
                result_cell(&d.outcome),
            ]
        })
    });
    let states: Vec<(&str, bool)> =
        results.iter().map(|d| (d.name.as_str(), matches!(d.outcome, Outcome::Ok))).collect();
    step_outputs("destroy", &ctx.artifacts.destroy_dir(), &states)?;
    let failures = failures(results.iter().map(|d| (d.name.as_str(), &d.outcome)));
    all_ok(&failures, results.len())
}
