//! `proxmox-gitops env get|set`: Gitea Actions variables, the seed's `Env.get` / `Env.set`.
//!
//! `get` prints the value of `KEY` from the process environment when set there (as the seed's
//! `Env.get` prefers `ENV`), otherwise the variable of the organization (default `main`) or the
//! repository. `set` creates the variable (`POST`) or, when it exists, updates it (`PUT`).

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
    /// Organization variable of ORG [default: main].
    #[arg(long, conflicts_with = "repo")]
    pub org: Option<String>,
    /// Repository variable of OWNER/REPO.
    #[arg(long, value_name = "OWNER/REPO")]
    pub repo: Option<String>,
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

fn scope(s: &ScopeArgs) -> Result<VariableScope> {
    match &s.repo {
        Some(r) => match r.split_once('/') {
            Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/') => {
                Ok(VariableScope::Repo { owner: o.into(), repo: n.into() })
            }
            _ => Err(Error::input(Location::file("--repo"), format!("expected OWNER/REPO, found `{r}`"))),
        },
        None => Ok(VariableScope::Org { org: s.org.clone().unwrap_or_else(|| "main".into()) }),
    }
}

pub fn run(ctx: &Ctx, args: EnvArgs) -> Result<()> {
    let (key, sc) = match &args.command {
        EnvCommand::Get { key, scope, .. } | EnvCommand::Set { key, scope, .. } => (key.clone(), scope.clone()),
    };
    valid_variable_name(&key).map_err(|m| Error::input(Location::file("KEY"), m))?;
    let target = scope(&sc)?;
    if let EnvCommand::Get { remote: false, .. } = &args.command {
        if let Some(v) = std::env::var(&key).ok().filter(|v| !v.is_empty()) {
            println!("{v}");
            return Ok(());
        }
    }
    let settings = settings(ctx)?;
    let client = Client::from_settings(&settings.gitea, sc.gitea.as_deref()).map_err(|e| Error::Usage(e.to_string()))?;
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
                None => Err(Error::Failed(anyhow::anyhow!("variable {key} is not set in the environment nor on {target}"))),
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
            let _ = ctx;
            eprintln!("{key} on {target}: {word}");
            Ok(())
        }
    }
}
