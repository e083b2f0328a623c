//! `proxmox-gitops plan`: what a deploy of a ref would do, without changing anything.

use std::path::PathBuf;

use clap::Args;

use super::{Ctx, table};
use crate::artifact;
use crate::error::{Error, Result};
use crate::steps::plan::plan;

/// Arguments of `plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The ref being deployed: refs/heads/release, refs/heads/main or refs/heads/snapshot.
    #[arg(long = "ref", env = "GITHUB_REF", default_value = "refs/heads/release")]
    git_ref: String,
    /// Containers to plan (lib name or hostname); repeatable. Default: all of the stage.
    #[arg(long = "container", short = 'c')]
    containers: Vec<String>,
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long)]
    inventory: Option<PathBuf>,
}

pub fn run(ctx: &Ctx, args: PlanArgs) -> Result<()> {
    let _group = crate::ci::Group::start("plan");
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let p = plan(&inv, &args.git_ref, &args.containers)?;
    artifact::write(&ctx.artifacts.plan(), &p).map_err(|e| Error::Failed(e.into()))?;
    crate::ci::set_outputs(&[
        ("artifact", ctx.artifacts.plan().display().to_string()),
        ("containers", p.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(",")),
        ("steps", crate::steps::plan::steps_for_ref(&p.git_ref)?.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")),
    ])
    .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_OUTPUT: {e}")))?;
    ctx.emit(&p, || {
        let rows: Vec<Vec<String>> = p
            .containers
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.hostname.clone(),
                    c.vmid.to_string(),
                    c.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" + "),
                ]
            })
            .collect();
        let mut s = table(&["NAME", "HOSTNAME", "VMID", "STEPS"], &rows);
        s.push_str(&format!("\n{} container(s) for {} (stage {})\n", p.containers.len(), p.git_ref, p.stage));
        s
    });
    Ok(())
}
