//! `proxmox-gitops completions <shell>` and `proxmox-gitops man`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen), generated from the same command definition the
//! parser uses ([`super::command`]), so they never drift from the options.

use std::path::PathBuf;

use clap::Args;

use super::Ctx;
use crate::error::{Error, Result};

/// Arguments of `completions`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    proxmox-gitops completions bash > /etc/bash_completion.d/proxmox-gitops\n  \
    proxmox-gitops completions zsh > \"${fpath[1]}/_proxmox-gitops\"\n  \
    proxmox-gitops completions fish > ~/.config/fish/completions/proxmox-gitops.fish")]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `man`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    proxmox-gitops man | man -l -\n  \
    proxmox-gitops man --dir /usr/local/share/man/man1")]
pub struct ManArgs {
    /// Write proxmox-gitops.1 and one proxmox-gitops-SUBCOMMAND.1 per subcommand into DIR
    /// (created when missing) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// The binary's name as the completion scripts and man pages know it.
const BIN: &str = "proxmox-gitops";

/// Prints the completion script for the shell on stdout (with `--json`:
/// `{"shell": "bash", "script": "…"}`).
///
/// # Errors
/// None in practice (writing to stdout is not checked, as for every other output).
pub fn completions(ctx: &Ctx, args: CompletionsArgs) -> Result<()> {
    let mut cmd = super::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, BIN, &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    ctx.emit_json(&serde_json::json!({ "shell": args.shell.to_string(), "script": script }), || script.clone());
    Ok(())
}

/// Prints the main man page (roff) on stdout, or writes every page into `--dir` and lists them
/// (with `--json`: `{"page": "proxmox-gitops.1", "roff": "…"}`, or `{"written": [paths]}`).
///
/// # Errors
/// [`Error::Failed`] when the directory or a page cannot be written.
pub fn man(ctx: &Ctx, args: ManArgs) -> Result<()> {
    let cmd = super::command();
    match args.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page).map_err(|e| Error::Failed(e.into()))?;
            let page = String::from_utf8_lossy(&page).into_owned();
            ctx.emit_json(&serde_json::json!({ "page": format!("{BIN}.1"), "roff": page }), || page.clone());
        }
        Some(dir) => {
            let failed = |e: std::io::Error| Error::Failed(anyhow::anyhow!("man --dir {}: {e}", dir.display()));
            std::fs::create_dir_all(&dir).map_err(failed)?;
            clap_mangen::generate_to(cmd, &dir).map_err(failed)?;
            let mut written: Vec<String> = std::fs::read_dir(&dir)
                .map_err(failed)?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(BIN) && n.ends_with(".1"))
                .map(|n| dir.join(n).display().to_string())
                .collect();
            written.sort();
            ctx.emit_json(&serde_json::json!({ "written": written }), || {
                written.iter().map(|w| format!("{w}\n")).collect()
            });
        }
    }
    Ok(())
}
