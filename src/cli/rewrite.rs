//! `proxmox-gitops rewrite`: a working copy whose submodules point at the Gitea control plane,
//! and `remotes.json`.

use std::path::PathBuf;

use clap::Args;

use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Result};
use crate::settings::{ProcessEnv, Settings};
use crate::steps::rewrite::{Remotes, RewriteOptions, WorkflowOptions, rewrite};

/// Arguments shared by `rewrite` and `publish`.
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// Gitea base URL, e.g. `http://10.0.3.2:8080` [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    pub gitea: Option<String>,
    /// Organization of the repositories.
    #[arg(long, default_value = "main")]
    pub org: String,
    /// Where the working copy is built [default: <artifacts>/worktree]. Replaced on every run.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Repository name of the monorepo [default: the checkout's directory name].
    #[arg(long)]
    pub name: Option<String>,
    /// The runner label the installed workflows' jobs run on.
    #[arg(long, default_value = "shell")]
    pub runs_on: String,
    /// Do not install the workflows (the monorepo's pipeline.yml and snapshot.yml, each lib's
    /// pipeline, each task's task.yml under .gitea/workflows/).
    #[arg(long)]
    pub no_workflows: bool,
}

/// Arguments of `rewrite`.
#[derive(Debug, Args)]
pub struct RewriteArgs {
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Loads the settings of the checkout (for HOST / LOGIN / PASSWORD / GITEA_TOKEN).
pub(crate) fn settings(ctx: &Ctx) -> Result<Settings> {
    let root = ctx.repo.canonicalize().unwrap_or_else(|_| ctx.repo.clone());
    Ok(Settings::load(&root, &ProcessEnv)?)
}

/// Runs the rewrite step and writes `remotes.json`.
pub(crate) fn do_rewrite(ctx: &Ctx, target: &TargetArgs, settings: &Settings) -> Result<Remotes> {
    let gitea = target.gitea.clone().or_else(|| settings.gitea.host.clone()).ok_or_else(|| {
        Error::Usage(format!(
            "no Gitea address; {}",
            crate::error::Hint::PassOption { option: "--gitea URL".into(), variable: Some("HOST".into()) }
        ))
    })?;
    let workflows = if target.no_workflows {
        None
    } else {
        // The checkout action (PROXMOX_GITOPS_CHECKOUT) the installed workflows use.
        let root = ctx.repo.canonicalize().unwrap_or_else(|_| ctx.repo.clone());
        let checkout = crate::settings::load_checkout(&root, &ProcessEnv)?;
        Some(WorkflowOptions { runs_on: target.runs_on.clone(), checkout })
    };
    let opts = RewriteOptions {
        repo: ctx.repo.clone(),
        workdir: target.workdir.clone().unwrap_or_else(|| ctx.artifacts.worktree()),
        gitea,
        org: target.org.clone(),
        name: target.name.clone(),
        workflows,
    };
    let remotes = rewrite(&opts)?;
    artifact::write(&ctx.artifacts.remotes(), &remotes).map_err(|e| Error::Failed(e.into()))?;
    Ok(remotes)
}

/// The file names of installed workflows, comma-separated (`-` for none), for the tables.
pub(crate) fn workflow_names(files: &[PathBuf]) -> String {
    if files.is_empty() {
        return "-".into();
    }
    files.iter().map(|f| f.file_name().unwrap_or(f.as_os_str()).to_string_lossy()).collect::<Vec<_>>().join(",")
}

pub fn run(ctx: &Ctx, args: RewriteArgs) -> Result<()> {
    let settings = settings(ctx)?;
    let remotes = do_rewrite(ctx, &args.target, &settings)?;
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
                workflow_names(&m.workflows),
            ]
        });
        s.push_str(&format!(
            "\nmonorepo {} at {} (workflows: {}); working copy {}; wrote {}\n",
            remotes.monorepo.new_url,
            &remotes.monorepo.commit[..10.min(remotes.monorepo.commit.len())],
            workflow_names(&remotes.monorepo.workflows),
            remotes.workdir.display(),
            ctx.artifacts.remotes().display()
        ));
        s
    });
    Ok(())
}
