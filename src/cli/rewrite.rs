//! `proxmox-gitops rewrite`: a working copy whose submodules point at the Gitea control plane,
//! and `remotes.json`.

use clap::Args;

use super::args::TargetArgs;
use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Result};
use crate::steps::rewrite::rewrite;

/// Arguments of `rewrite`.
#[derive(Debug, Args)]
pub struct RewriteArgs {
    #[command(flatten)]
    pub target: TargetArgs,
}

pub fn run(ctx: &Ctx, args: RewriteArgs) -> Result<()> {
    let settings = ctx.settings()?;
    let remotes = rewrite(&args.target.rewrite_options(&ctx.repo, ctx.artifacts.worktree(), &settings)?)?;
    artifact::write(&ctx.artifacts.remotes(), &remotes).map_err(|e| Error::Failed(e.into()))?;
    super::run::outputs(&[
        ("remotes", ctx.artifacts.remotes().display().to_string()),
        ("workdir", remotes.workdir.display().to_string()),
    ])?;
    ctx.emit(&remotes, || {
        let mut s = table_of(&["PATH", "OLD URL", "NEW URL", "COMMIT", "WORKFLOWS"], &remotes.modules, |m| {
            vec![
                m.path.display().to_string(),
                m.old_url.as_ref().map_or_else(|| "(directory)".into(), |u| u.to_string()),
                m.new_url.clone(),
                m.commit[..m.commit.len().min(10)].to_string(),
                super::describe::workflow_names(&m.workflows),
            ]
        });
        s.push_str(&format!(
            "\nmonorepo {} at {} (workflows: {}); working copy {}; wrote {}\n",
            remotes.monorepo.new_url,
            &remotes.monorepo.commit[..10.min(remotes.monorepo.commit.len())],
            super::describe::workflow_names(&remotes.monorepo.workflows),
            remotes.workdir.display(),
            ctx.artifacts.remotes().display()
        ));
        s
    });
    Ok(())
}
