//! `proxmox-gitops render-workflows`: write the per-lib pipeline into lib trees and the task
//! workflow into task trees.

use clap::Args;

use super::{Ctx, table_of};
use crate::error::Result;
use crate::steps::render_workflows::{RenderOptions, WorkflowKind, render_workflows};

/// Arguments of `render-workflows`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["libs", "tasks", "all"])))]
pub struct RenderWorkflowsArgs {
    /// The lib to render the pipeline for; repeatable or comma-separated.
    #[arg(long = "lib", value_delimiter = ',')]
    libs: Vec<String>,
    /// The task to render the workflow for; repeatable or comma-separated.
    #[arg(long = "task", value_delimiter = ',')]
    tasks: Vec<String>,
    /// Render for every lib and every task of the stage.
    #[arg(long)]
    all: bool,
    /// The monorepo on Gitea as owner/repo (the workflows check it out).
    #[arg(long, env = "GITHUB_REPOSITORY")]
    monorepo: String,
    /// The runner label the jobs run on.
    #[arg(long, default_value = "shell")]
    runs_on: String,
}

pub fn run(ctx: &Ctx, args: RenderWorkflowsArgs) -> Result<()> {
    let inv = ctx.inventory(None)?;
    // The checkout action (PROXMOX_GITOPS_CHECKOUT) is a setting: resolve checked it already.
    let root = ctx.repo.canonicalize().unwrap_or_else(|_| ctx.repo.clone());
    let checkout = crate::settings::load_checkout(&root, &crate::settings::ProcessEnv)?;
    let written = render_workflows(
        &ctx.repo,
        &inv,
        &RenderOptions {
            libs: args.libs,
            tasks: args.tasks,
            all: args.all,
            monorepo: args.monorepo,
            runs_on: args.runs_on,
            checkout,
        },
    )?;
    // `--json`: one array of `{"kind": "lib"|"task", "name", "path", "changed"}`.
    let json = serde_json::to_value(&written).unwrap_or_default();
    ctx.emit_json(&json, || {
        table_of(&["NAME", "KIND", "FILE", "STATE"], &written, |r| {
            vec![
                r.name.clone(),
                match r.kind {
                    WorkflowKind::Lib => "lib",
                    WorkflowKind::Task => "task",
                }
                .into(),
                r.path.display().to_string(),
                if r.changed { "written" } else { "unchanged" }.into(),
            ]
        })
    });
    Ok(())
}
