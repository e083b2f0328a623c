//! `proxmox-gitops env get|set|list|delete`: Gitea Actions variables, the seed's `Env.get` /
//! `Env.set`, plus listing and deleting them.
//!
//! `get` prints the value of `KEY` from the process environment when set there (as the seed's
//! `Env.get` prefers `ENV`), otherwise the variable of the organization (default `main`) or the
//! repository. `set` creates the variable (`POST`) or, when it exists, updates it (`PUT`).
//! `list` prints every variable of the scope (all pages of `getOrgVariablesList` /
//! `getRepoVariablesList`) as a NAME/VALUE table, or with `--json` as a JSON array of
//! `{"name", "value", "description"}`; `delete` removes one (`deleteOrgVariable` /
//! `deleteRepoVariable`; a variable that does not exist is an error, exit 1). Variable values are
//! not secrets (secrets are Actions secrets, which this tool never reads), but they are shown
//! terminal-safe: control characters escaped.
//!
//! With `--json` each prints one JSON value on stdout: `get` `{"name", "value", "source":
//! "environment"|"gitea", "scope"}`, `set` and `delete` `{"name", "scope", "action":
//! "created"|"updated"|"unchanged"|"deleted"}`, `list` the array; `scope` is `{"org": ORG}` or
//! `{"repo": "OWNER/REPO"}`.
//!
//! `--gitea-repo OWNER/REPO` selects a repository variable instead (it excludes `--org`); the
//! settings (Gitea host, credentials) then still come from the monorepo at the global
//! `--repo DIR`, as for every other subcommand. The short form the seed's users know,
//! `env … --repo OWNER/REPO`, works too: the global `--repo` with a value of the form
//! `owner/name` that is not an existing directory names the Gitea repository, and the settings
//! are then read from the current directory.

use std::io::Read;

use clap::{Args, Subcommand};

use super::{Ctx, table_of};
use crate::error::{Error, Location, Result};
use crate::gitea::{Client, VariableScope, valid_variable_name};
use crate::steps::publish::{ItemAction, ensure_variable};

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
    #[arg(long, conflicts_with = "gitea_repo")]
    pub org: Option<String>,
    /// Repository variable of the Gitea repository OWNER/REPO instead of an organization's.
    #[arg(long, value_name = "OWNER/REPO")]
    pub gitea_repo: Option<String>,
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
    /// Print every variable of the organization or repository (NAME/VALUE table, or --json).
    List {
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Delete the variable KEY.
    Delete {
        /// Variable name.
        key: String,
        #[command(flatten)]
        scope: ScopeArgs,
    },
}

/// One variable as `env list --json` prints it.
#[derive(Debug, serde::Serialize)]
struct Listed<'a> {
    name: &'a str,
    value: &'a str,
    description: &'a str,
}

/// The scope as `--json` output names it: `{"org": "main"}` or `{"repo": "owner/name"}`.
fn scope_json(scope: &VariableScope) -> serde_json::Value {
    match scope {
        VariableScope::Org { org } => serde_json::json!({ "org": org }),
        VariableScope::Repo { owner, repo } => serde_json::json!({ "repo": format!("{owner}/{repo}") }),
    }
}

/// `Some("owner/name")` when the global `--repo` value names a Gitea repository rather than a
/// directory (the seed's `env … --repo OWNER/REPO`).
fn repo_flag_as_gitea_repo(ctx: &Ctx) -> Option<String> {
    let text = ctx.repo.to_str()?;
    (text.contains('/') && !text.starts_with(['/', '.']) && !ctx.repo.is_dir()).then(|| text.to_string())
}

/// The variable's scope: `--gitea-repo OWNER/REPO` (or the global `--repo OWNER/REPO`), else
/// `--org ORG` (default `main`).
///
/// # Errors
/// [`Error::Input`] naming the flag when the repository is not `OWNER/REPO` (names of letters,
/// digits, `-`, `_`, `.`, as Gitea accepts); [`Error::Usage`] when both it and `--org` are given.
fn scope(ctx: &Ctx, s: &ScopeArgs) -> Result<VariableScope> {
    let (flag, text) = match (&s.gitea_repo, repo_flag_as_gitea_repo(ctx)) {
        (Some(t), _) => ("--gitea-repo", t.clone()),
        (None, Some(t)) => ("--repo", t),
        (None, None) => return Ok(VariableScope::Org { org: s.org.clone().unwrap_or_else(|| "main".into()) }),
    };
    if s.org.is_some() {
        return Err(Error::Usage(format!("--org and {flag} OWNER/REPO exclude each other")));
    }
    let name_ok = |x: &str| {
        !x.is_empty() && x != "." && x != ".." && x.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match text.split_once('/') {
        Some((owner, repo)) if name_ok(owner) && name_ok(repo) => {
            Ok(VariableScope::Repo { owner: owner.to_string(), repo: repo.to_string() })
        }
        _ => Err(Error::input(Location::file(flag), format!("expected OWNER/REPO, found `{text}`"))),
    }
}

pub fn run(ctx: &Ctx, args: EnvArgs) -> Result<()> {
    let (key, sc) = match &args.command {
        EnvCommand::Get { key, scope, .. } | EnvCommand::Set { key, scope, .. } | EnvCommand::Delete { key, scope } => {
            (Some(key.clone()), scope.clone())
        }
        EnvCommand::List { scope } => (None, scope.clone()),
    };
    if let Some(key) = &key {
        valid_variable_name(key).map_err(|m| Error::input(Location::file("KEY"), m.to_string()))?;
    }
    let target = scope(ctx, &sc)?;
    if let (EnvCommand::Get { remote: false, .. }, Some(key)) = (&args.command, &key)
        && let Some(v) = std::env::var(key).ok().filter(|v| !v.is_empty())
    {
        let json = serde_json::json!({ "name": key, "value": v, "source": "environment" });
        ctx.emit_json(&json, || format!("{v}\n"));
        return Ok(());
    }
    let settings = if sc.gitea_repo.is_none() && repo_flag_as_gitea_repo(ctx).is_some() {
        crate::settings::Settings::load(std::path::Path::new("."), &crate::settings::ProcessEnv)?
    } else {
        ctx.settings()?
    };
    let client =
        Client::from_settings(&settings.gitea, sc.gitea.as_deref()).map_err(|e| Error::Usage(e.to_string()))?;
    if !matches!(&args.command, EnvCommand::Get { .. }) {
        // Writing, and listing (Gitea shows an organization's variables to its admins only).
        crate::steps::publish::require_credentials(&client)?;
    }
    let rt = super::run::runtime(super::run::Threads::Current)?;
    let key = key.unwrap_or_default();
    match args.command {
        EnvCommand::Get { .. } => {
            let v = rt.block_on(client.get_variable(&target, &key)).map_err(|e| Error::Failed(e.into()))?;
            match v {
                Some(v) => {
                    let json = serde_json::json!({
                        "name": key, "value": v.data, "source": "gitea", "scope": scope_json(&target),
                    });
                    ctx.emit_json(&json, || format!("{}\n", v.data));
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
                ItemAction::Created => "created",
                ItemAction::Updated => "updated",
                ItemAction::Unchanged => "unchanged",
            };
            if ctx.json {
                let json = serde_json::json!({ "name": key, "scope": scope_json(&target), "action": word });
                ctx.emit_json(&json, String::new);
            } else {
                eprintln!("{key} on {target}: {word}");
            }
            Ok(())
        }
        EnvCommand::List { .. } => {
            let mut vars = rt.block_on(client.list_variables(&target)).map_err(|e| Error::Failed(e.into()))?;
            vars.sort_by(|a, b| a.name.cmp(&b.name));
            let listed: Vec<Listed> =
                vars.iter().map(|v| Listed { name: &v.name, value: &v.data, description: &v.description }).collect();
            let json = serde_json::to_value(&listed).expect("strings serialize");
            ctx.emit_json(&json, || table_of(&["NAME", "VALUE"], &vars, |v| vec![v.name.clone(), v.data.clone()]));
            if !ctx.json {
                eprintln!("{} variable(s) on {target}", vars.len());
            }
            Ok(())
        }
        EnvCommand::Delete { .. } => {
            let deleted = rt.block_on(client.delete_variable(&target, &key)).map_err(|e| Error::Failed(e.into()))?;
            if deleted {
                if ctx.json {
                    let json = serde_json::json!({ "name": key, "scope": scope_json(&target), "action": "deleted" });
                    ctx.emit_json(&json, String::new);
                } else {
                    eprintln!("{key} on {target}: deleted");
                }
                Ok(())
            } else {
                Err(Error::Failed(anyhow::anyhow!(
                    "variable {key} does not exist on {target} (list them: proxmox-gitops env list{})",
                    match &target {
                        VariableScope::Org { org } => format!(" --org {org}"),
                        VariableScope::Repo { owner, repo } => format!(" --gitea-repo {owner}/{repo}"),
                    }
                )))
            }
        }
    }
}
