//! `proxmox-gitops render-workflows`: write the per-lib pipeline into lib trees.

use clap::Args;

use super::{Ctx, table_of};
use crate::error::Result;
use crate::steps::render_workflows::{RenderOptions, render_workflows};

/// Arguments of `render-workflows`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["libs", "all"])))]
pub struct RenderWorkflowsArgs {
    /// The lib to render for; repeatable or comma-separated.
    #[arg(long = "lib", value_delimiter = ',')]
    libs: Vec<String>,
    /// Render for every lib of the stage.
    #[arg(long)]
    all: bool,
    /// The monorepo on Gitea as owner/repo (the lib pipelines check it out).
    #[arg(long, env = "GITHUB_REPOSITORY")]
    monorepo: String,
    /// The runner label the jobs run on.
    #[arg(long, default_value = "shell")]
    runs_on: String,
}

pub fn run(ctx: &Ctx, args: RenderWorkflowsArgs) -> Result<()> {
    let inv = ctx.inventory(None)?;
    let written = render_workflows(
        &ctx.repo,
        &inv,
        &RenderOptions {
            libs: if args.all { Vec::new() } else { args.libs },
            monorepo: args.monorepo,
            runs_on: args.runs_on,
        },
    )?;
    print!(
        "{}",
        table_of(&["LIB", "FILE", "STATE"], &written, |r| {
            vec![r.lib.clone(), r.path.display().to_string(), if r.changed { "written" } else { "unchanged" }.into()]
        })
    );
    Ok(())
}
