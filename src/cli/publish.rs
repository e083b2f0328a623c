//! `proxmox-gitops publish`: rewrite, then push the monorepo and its submodules to Gitea, fork
//! into `stage`, open the release pull request, set the variables and secrets (from
//! `globals*.json`, the configure outputs and the settings publish runs with); writes
//! `publish.json`.

use std::path::PathBuf;

use clap::Args;

use super::args::TargetArgs;
use super::run::{Threads, block_on, outputs};
use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Result};
use crate::gitea::Client;
use crate::steps::publish::{PublishOptions, publish, require_credentials};
use crate::steps::rewrite::Remotes;

/// Arguments of `publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Publish an existing rewrite (its `remotes.json`) instead of rewriting first.
    #[arg(long, value_name = "FILE")]
    pub remotes: Option<PathBuf>,
    /// Write every Actions secret again, even those the record of written secrets says are
    /// unchanged (e.g. after one was changed in Gitea's UI).
    #[arg(long)]
    pub rewrite_secrets: bool,
    /// When this publish creates the monorepo's `release` branch, start it at the monorepo's
    /// first commit instead of at `main`: the release pull request then holds the whole monorepo
    /// and accepting it is the first deploy (what `local/run.sh config` does). An existing
    /// `release` is never moved.
    #[arg(long)]
    pub release_from_root: bool,
}

pub fn run(ctx: &Ctx, args: PublishArgs) -> Result<()> {
    let settings = ctx.settings()?;
    let client = |gitea: Option<&str>| {
        let client = Client::from_settings(&settings.gitea, gitea).map_err(|e| Error::Usage(e.to_string()))?;
        require_credentials(&client).map(|()| client)
    };
    let (remotes, client): (Remotes, _) = match &args.remotes {
        Some(p) => {
            let remotes: Remotes = artifact::read(p).map_err(|e| Error::Failed(e.into()))?;
            let client = client(Some(&remotes.gitea))?;
            (remotes, client)
        }
        None => {
            // Address and credentials are checked before the rewrite writes anything.
            let client = client(args.target.gitea.as_deref())?;
            let opts = args.target.rewrite_options(&ctx.repo, ctx.artifacts.worktree(), &settings)?;
            let remotes = crate::steps::rewrite::rewrite(&opts)?;
            artifact::write(&ctx.artifacts.remotes(), &remotes).map_err(|e| Error::Failed(e.into()))?;
            (remotes, client)
        }
    };
    let opts = PublishOptions {
        repo: ctx.repo.clone(),
        artifacts: ctx.artifacts.clone(),
        settings: settings.clone(),
        record: crate::steps::publish::record::default_record_dir(),
        rewrite_secrets: args.rewrite_secrets,
        release_from_root: args.release_from_root,
    };
    let report = block_on(Threads::Current, publish(&client, &remotes, &opts))??;
    let path = ctx.artifacts.publish();
    artifact::write(&path, &report).map_err(|e| Error::Failed(e.into()))?;
    outputs(&[("publish", path.display().to_string())])?;
    ctx.emit(&report, || {
        let word = |a: crate::steps::publish::ItemAction| format!("{a:?}").to_lowercase();
        let mut s =
            table_of(&["REPOSITORY", "REPO", "BRANCHES", "FORK", "RELEASE PR", "WORKFLOWS"], &report.repos, |r| {
                let changed: Vec<String> = r
                    .refs
                    .iter()
                    .filter(|x| x.action != crate::steps::publish::ItemAction::Unchanged)
                    .map(|x| format!("{}:{}", x.branch, word(x.action)))
                    .collect();
                vec![
                    r.full_name.clone(),
                    word(r.action),
                    if changed.is_empty() { "-".into() } else { changed.join(",") },
                    r.fork.as_ref().map(|f| word(f.action)).unwrap_or_else(|| "-".into()),
                    r.pull
                        .as_ref()
                        .and_then(|p| p.number.map(|n| format!("#{n} {}", word(p.action))))
                        .unwrap_or_else(|| "-".into()),
                    super::describe::workflow_names(&r.workflows),
                ]
            });
        let rows: Vec<[String; 4]> = report
            .variables
            .iter()
            .map(|v| ["variable".to_string(), v.scope.to_string(), v.name.clone(), word(v.action)])
            .chain(
                report
                    .secrets
                    .iter()
                    .map(|v| ["secret".to_string(), v.scope.to_string(), v.name.clone(), word(v.action)]),
            )
            .collect();
        if !rows.is_empty() {
            s.push('\n');
            s.push_str(&table_of(&["KIND", "SCOPE", "NAME", "ACTION"], &rows, |r| r.to_vec()));
        }
        s.push_str(&format!(
            "\n{} created, {} updated, {} unchanged ({} variables, {} secrets); wrote {}\n",
            report.summary.created,
            report.summary.updated,
            report.summary.unchanged,
            report.variables.len(),
            report.secrets.len(),
            path.display()
        ));
        s
    });
    Ok(())
}
