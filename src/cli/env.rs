//! `proxmox-gitops env get|set`: Gitea Actions variables, the seed's `Env.get` / `Env.set`.
//!
//! `get` prints the value of `KEY` from the process environment when set there (as the seed's
//! `Env.get` prefers `ENV`), otherwise the variable of the organization (default `main`) or the
//! repository. `set` creates the variable (`POST`) or, when it exists, updates it (`PUT`).
//!
//! `--repo OWNER/REPO` selects a repository variable. That flag is the global `--repo` (the
//! monorepo checkout for every other subcommand): for `env`, a value of the form `owner/name`
//! that is not an existing directory names the Gitea repository, and the settings are then
//! read from the current directory.

use std::io::Read;

use clap::{Args, Subcommand};

use super::Ctx;
use super::rewrite::settings;
use crate::error::{Error, Location, Result};
use crate::gitea::{Client, VariableScope, valid_variable_name};
use crate::steps::publish::{Action, ensure_variable};

/// Arguments of `env`.
#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(subcommand)]
    pub command: EnvCommand,
}

/// Where the variable lives.
#[derive(Debug, Args, Clone)]
pub struct ScopeArgs {
    /// Organization variable of ORG [default: main]. (`--repo OWNER/REPO`, the global flag,
    /// selects a repository variable instead.)
    #[arg(long)]
    pub org: Option<String>,
    /// Gitea base URL [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    pub gitea: Option<String>,
}

/// `env` subcommands.
#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Print the value of KEY (environment first, then the Gitea variable).
    Get {
        /// Variable name.
        key: String,
        /// Read only from Gitea, ignoring the process environment.
        #[arg(long)]
        remote: bool,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Create or update KEY with VALUE (`-` reads the value from stdin).
    Set {
        /// Variable name.
        key: String,
        /// The value; `-` reads it from stdin (trailing newline removed).
        value: String,
        #[command(flatten)]
        scope: ScopeArgs,
    },
}

/// `Some((owner, repo))` when the global `--repo` value names a Gitea repository.
fn gitea_repo(ctx: &Ctx) -> Option<(String, String)> {
    let text = ctx.repo.to_str()?;
    let (o, n) = text.split_once('/')?;
    let name_ok = |x: &str| {
        !x.is_empty() && x != "." && x != ".." && x.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    (name_ok(o) && name_ok(n) && !ctx.repo.is_dir()).then(|| (o.to_string(), n.to_string()))
}

fn scope(ctx: &Ctx, s: &ScopeArgs) -> Result<VariableScope> {
    match (gitea_repo(ctx), &s.org) {
        (Some(_), Some(_)) => Err(Error::Usage("--org and --repo OWNER/REPO exclude each other".into())),
        (Some((owner, repo)), None) => Ok(VariableScope::Repo { owner, repo }),
        (None, org) => {
            let text = ctx.repo.to_string_lossy();
            if text.contains('/') && !ctx.repo.is_dir() {
                return Err(Error::input(
                    Location::file("--repo"),
                    format!("expected OWNER/REPO or a directory, found `{text}`"),
                ));
            }
            Ok(VariableScope::Org { org: org.clone().unwrap_or_else(|| "main".into()) })
        }
    }
}

pub fn run(ctx: &Ctx, args: EnvArgs) -> Result<()> {
    let (key, sc) = match &args.command {
        EnvCommand::Get { key, scope, .. } | EnvCommand::Set { key, scope, .. } => (key.clone(), scope.clone()),
    };
    valid_variable_name(&key).map_err(|m| Error::input(Location::file("KEY"), m))?;
    let target = scope(ctx, &sc)?;
    if let EnvCommand::Get { remote: false, .. } = &args.command
        && let Some(v) = std::env::var(&key).ok().filter(|v| !v.is_empty())
    {
        println!("{v}");
        return Ok(());
    }
    let settings = if gitea_repo(ctx).is_some() {
        crate::settings::Settings::load(std::path::Path::new("."), &crate::settings::ProcessEnv)?
    } else {
        settings(ctx)?
    };
    let client =
        Client::from_settings(&settings.gitea, sc.gitea.as_deref()).map_err(|e| Error::Usage(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot start the async runtime: {e}")))?;
    match args.command {
        EnvCommand::Get { .. } => {
            let v = rt.block_on(client.get_variable(&target, &key)).map_err(|e| Error::Failed(e.into()))?;
            match v {
                Some(v) => {
                    println!("{}", v.data);
                    Ok(())
                }
                None => {
                    Err(Error::Failed(anyhow::anyhow!("variable {key} is not set in the environment nor on {target}")))
                }
            }
        }
        EnvCommand::Set { value, .. } => {
            let value = if value == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .map_err(|e| Error::Failed(anyhow::anyhow!("cannot read the value from stdin: {e}")))?;
                s.trim_end_matches(['\n', '\r']).to_string()
            } else {
                value
            };
            if value.is_empty() {
                return Err(Error::input(Location::file("VALUE"), "empty value (Gitea refuses empty variables)"));
            }
            let action = rt.block_on(ensure_variable(&client, &target, &key, &value)).map_err(Error::Failed)?;
            let word = match action {
                Action::Created => "created",
                Action::Updated => "updated",
                Action::Unchanged => "unchanged",
            };
            eprintln!("{key} on {target}: {word}");
            Ok(())
        }
    }
}
