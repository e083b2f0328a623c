//! `proxmox-gitops artifacts pack|unpack`: hand artifacts between workflow jobs (see
//! [`crate::artifact::pack`]).

use clap::{Args, Subcommand};

use super::Ctx;
use crate::error::{Error, Result};

/// Arguments of `artifacts`.
#[derive(Debug, Args)]
pub struct ArtifactsArgs {
    #[command(subcommand)]
    command: ArtifactsCommand,
}

#[derive(Debug, Subcommand)]
enum ArtifactsCommand {
    /// Pack the artifacts directory into one line (a job output); prints it, or with
    /// `--output KEY` appends `KEY=<bundle>` to $GITHUB_OUTPUT.
    Pack {
        /// The $GITHUB_OUTPUT key to write the bundle to instead of printing it.
        #[arg(long)]
        output: Option<String>,
    },
    /// Unpack bundles (whitespace-separated, later ones win) into the artifacts directory.
    Unpack {
        /// The bundles; read from the environment variable PGO_BUNDLE when not given.
        #[arg(long, env = "PGO_BUNDLE", hide_env_values = true, default_value = "")]
        bundle: String,
    },
}

pub fn run(ctx: &Ctx, args: ArtifactsArgs) -> Result<()> {
    match args.command {
        ArtifactsCommand::Pack { output } => {
            let text = crate::artifact::pack::pack(ctx.artifacts.root()).map_err(|e| Error::Failed(e.into()))?;
            match output {
                Some(key) => super::run::outputs(&[(key.as_str(), text)])?,
                // `--json`: `{"bundle": "pgo1:…"}`.
                None => ctx.emit_json(&serde_json::json!({ "bundle": text }), || format!("{text}\n")),
            }
            Ok(())
        }
        ArtifactsCommand::Unpack { bundle } => {
            let written = crate::artifact::pack::unpack(&bundle, ctx.artifacts.root())
                .map_err(|e| Error::Usage(format!("cannot unpack the artifact bundle (PGO_BUNDLE): {e}")))?;
            tracing::info!(
                "restored {} artifact(s) into {}: {}",
                written.len(),
                ctx.artifacts.root().display(),
                written.join(", ")
            );
            // `--json`: `{"restored": [artifact paths relative to the artifacts directory]}`.
            if ctx.json {
                ctx.emit_json(&serde_json::json!({ "restored": written }), String::new);
            }
            Ok(())
        }
    }
}
