//! `proxmox-gitops destroy`: remove containers, after a verified snapshot of their data.

use std::path::PathBuf;

use clap::Args;

use super::run::{Threads, block_on, step_outputs};
use super::{Ctx, table};
use crate::backend::model::{BackendKind, Outcome};
use crate::error::{Error, Result};
use crate::inventory::NotFound;
use crate::settings::{ProcessEnv, Settings};
use crate::steps::destroy::{self as step, DestroyOptions};

/// Arguments of `destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Container to destroy (lib name or hostname); repeatable.
    #[arg(long = "container", short = 'c', value_name = "NAME", required = true)]
    containers: Vec<String>,
    /// Destroy containers that declare SNAPSHOT paths WITHOUT a data snapshot first (their data
    /// is lost; logged as a warning).
    #[arg(long)]
    no_snapshot: bool,
    /// Backend [default: pve when PROXMOX_HOST is configured, else lxc].
    #[arg(long, value_enum)]
    backend: Option<BackendKind>,
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long)]
    inventory: Option<PathBuf>,
    #[command(flatten)]
    pve: super::args::PveDestroyArgs,
}

pub fn run(ctx: &Ctx, args: DestroyArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs: Vec<_> = inv.select(&args.containers, false, NotFound::InStage)?.into_iter().cloned().collect();
    let settings = Settings::load(&ctx.repo, &ProcessEnv)?;
    let kind = args.backend.unwrap_or_else(|| crate::backend::default_backend(&settings));
    let backend = crate::backend::open(kind, &settings, &args.pve.connect()?)?;
    let opts = DestroyOptions { share: settings.share.clone(), no_snapshot: args.no_snapshot };
    let results = block_on(Threads::Default, step::destroy_all(&backend, &specs, &opts, &ctx.artifacts))??;
    if ctx.json {
        let all: Vec<serde_json::Value> = results.iter().map(crate::artifact::to_value).collect();
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
    } else {
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|d| {
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
                    // The error itself is printed once, in the final error below.
                    match &d.outcome {
                        Outcome::Ok => "ok".into(),
                        Outcome::Failed { .. } => "FAILED".into(),
                    },
                ]
            })
            .collect();
        print!("{}", table(&["NAME", "VMID", "CONTAINER", "PROTECTED BY", "RESULT"], &rows));
    }
    let states: Vec<(&str, bool)> =
        results.iter().map(|d| (d.name.as_str(), matches!(d.outcome, Outcome::Ok))).collect();
    step_outputs("destroy", &ctx.artifacts.destroy_dir(), &states)?;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|d| match &d.outcome {
            Outcome::Failed { error } => Some(format!("{}: {error}", d.name)),
            Outcome::Ok => None,
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Failed(anyhow::anyhow!(
            "{} of {} container(s) failed:\n{}",
            failures.len(),
            results.len(),
            failures.join("\n")
        )))
    }
}
