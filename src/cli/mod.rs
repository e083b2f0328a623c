//! Command-line interface: argument parsing, logging set-up, exit codes and human output.
//!
//! One file per subcommand; each turns its arguments into a step's options and calls the step
//! (see [`crate::steps`]). Exit codes: 0 success, 1 operational failure, 2 invalid input or
//! usage (see [`crate::error`]).
//!
//! # Nothing written on bad input
//!
//! A run that ends with exit 2 leaves the artifacts directory as it found it. Each subcommand
//! checks all its inputs (settings, credentials, selection, arguments) before its step writes
//! anything, and the one artifact written on the way (`inventory.json`, when a command resolves
//! the repository itself) is held back by `Ctx::inventory` until `Ctx::inputs_checked` — or,
//! for commands whose step validates the selection itself, until the command ends without an
//! input error ([`main`]).

pub(crate) mod args;
mod artifacts;
mod auto_merge;
mod completions;
mod configure;
mod deploy;
pub mod describe;
mod destroy;
mod drift;
mod env;
mod health;
mod help;
mod plan;
pub(crate) mod provision;
mod publish;
mod release_pr;
mod render_workflows;
mod resolve;
mod rewrite;
pub(crate) mod run;
mod snapshot;
mod update;

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::error::{Error, Result};
use crate::inventory::Inventory;
use crate::model::Outcome;
use crate::settings::{ProcessEnv, Settings};
use crate::steps::resolve::{ResolveOptions, resolve};

/// Turn a Git monorepo into running Proxmox VE containers.
#[derive(Debug, Parser)]
#[command(name = "proxmox-gitops", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
struct GlobalArgs {
    /// The monorepo's working tree.
    #[arg(long, global = true, default_value = ".", env = "PGO_REPO")]
    repo: PathBuf,
    /// Directory for the JSON artifacts [default: <repo>/.proxmox-gitops].
    #[arg(long, global = true, env = "PGO_ARTIFACTS")]
    artifacts: Option<PathBuf>,
    /// Stage whose `container.<stage>.env` files apply; hostnames become `<stage>-<lib>`.
    #[arg(long, global = true, default_value = "main", env = "PGO_STAGE")]
    stage: String,
    /// Print the step's artifact as JSON on stdout instead of the human summary.
    #[arg(long, global = true)]
    json: bool,
    /// More log output (-v debug, -vv trace). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less log output (warnings and errors only).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read the monorepo and its submodules into inventory.json.
    Resolve(resolve::ResolveArgs),
    /// Show what a deploy of a ref would do, per container, without changing anything.
    Plan(plan::PlanArgs),
    /// Create, update and start containers through the Proxmox VE API (or local LXC).
    Provision(provision::ProvisionArgs),
    /// Make a working copy whose submodules point at Gitea; write remotes.json.
    Rewrite(rewrite::RewriteArgs),
    /// Publish the monorepo and its submodules to Gitea (repos, forks, release PR, variables).
    Publish(publish::PublishArgs),
    /// Get, set, list or delete Gitea Actions variables (the seed's Env.get / Env.set).
    Env(env::EnvArgs),
    /// Run the ref's steps (or the given ones) for containers, resumably and in parallel.
    Deploy(deploy::DeployArgs),
    /// Render the lib pipelines and task workflows into their `.gitea/workflows/`.
    RenderWorkflows(render_workflows::RenderWorkflowsArgs),
    /// Pack or unpack artifacts handed between workflow jobs.
    Artifacts(artifacts::ArtifactsArgs),
    /// Take (or restore) verified data snapshots of containers.
    Snapshot(snapshot::SnapshotArgs),
    /// Apply the base role and each lib's configuration over SSH.
    Configure(configure::ConfigureArgs),
    /// Destroy containers, after a verified snapshot of their data.
    Destroy(destroy::DestroyArgs),
    /// Merge the open release pull requests whose deploy needs no refused recreate (AUTO_DEPLOY).
    AutoMerge(auto_merge::AutoMergeArgs),
    /// Open or update the release pull request (main → release) with the release's plan as its description.
    ReleasePr(release_pr::ReleasePrArgs),
    /// Check that containers run, answer and have their services active (exit 1 when not).
    Health(health::HealthArgs),
    /// Upgrade containers' packages with a snapshot first and an automatic rollback on failure.
    Update(update::UpdateArgs),
    /// Compare the deployed containers with the desired state, key by key (changes nothing).
    Drift(drift::DriftArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Print the man page, or write all of them into a directory.
    Man(completions::ManArgs),
}

/// The command definition the parser, the help, the completion scripts and the man pages share:
/// the derived [`Cli`] with the conventions every subcommand follows applied — every container
/// selection (`--container`/`-c`, argument id `containers`) takes comma-separated names as well
/// as repeated options (`-c a,b` = `-c a -c b`); options are grouped under the same headings
/// everywhere ([`help::heading`]: Selection, Recreate policy, SSH, PVE connection, PVE task
/// timeouts, Global options); the main subcommands show examples after their options
/// ([`help::EXAMPLES`]).
pub(crate) fn command() -> clap::Command {
    fn conventions(cmd: clap::Command, path: &str) -> clap::Command {
        let selects = cmd.get_arguments().any(|a| a.get_id() == "containers");
        let cmd = if selects { cmd.mut_arg("containers", |a| a.value_delimiter(',')) } else { cmd };
        let mut cmd = help::with_examples(help::with_headings(cmd), path);
        let subs: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
        for name in subs {
            let sub_path = if path.is_empty() { name.clone() } else { format!("{path} {name}") };
            cmd = cmd.mut_subcommand(name, |c| conventions(c, &sub_path));
        }
        cmd
    }
    conventions(Cli::command(), "")
}

/// What every subcommand gets: the global options, resolved.
pub(crate) struct Ctx {
    /// The monorepo root as given.
    pub repo: PathBuf,
    /// The artifacts directory.
    pub artifacts: ArtifactDir,
    /// The stage.
    pub stage: String,
    /// `--json`.
    pub json: bool,
    /// A freshly resolved inventory not yet written to `inventory.json` (see the module docs).
    pending_inventory: std::cell::RefCell<Option<Inventory>>,
    /// The settings, once loaded ([`Ctx::settings`]).
    settings: std::cell::OnceCell<Settings>,
}

impl Ctx {
    /// The inventory: read from `inventory` when given (an artifact from an earlier job),
    /// otherwise resolved fresh from the repo; that one is written to `inventory.json` only once
    /// the command's inputs are checked ([`Ctx::inputs_checked`]), or when the command ends
    /// without an input error.
    pub fn inventory(&self, inventory: Option<&Path>) -> Result<Inventory> {
        if let Some(path) = inventory {
            // The file was named on the command line: a missing, foreign or too new artifact is
            // bad input (exit 2), not an operational failure.
            return artifact::read::<Inventory>(path).map_err(|e| Error::Usage(format!("--inventory {e}")));
        }
        let inv = resolve(&ResolveOptions { repo: self.repo.clone(), stage: self.stage.clone() }, &ProcessEnv)?;
        *self.pending_inventory.borrow_mut() = Some(inv.clone());
        Ok(inv)
    }

    /// The settings of the checkout at `--repo` (`local/config.json`, `local/config.local.json`
    /// and the environment, [`Settings::load`]): loaded on the first call, the same value after.
    /// The one place a command gets its settings.
    ///
    /// # Errors
    /// [`Error::Input`] with every problem of the config files or variables (file and line, or
    /// the variable's name).
    pub fn settings(&self) -> Result<Settings> {
        if let Some(s) = self.settings.get() {
            return Ok(s.clone());
        }
        let loaded = Settings::load(&self.repo, &ProcessEnv)?;
        Ok(self.settings.get_or_init(|| loaded).clone())
    }

    /// Declares the command's inputs checked: writes the inventory [`Ctx::inventory`] resolved
    /// (if any, and not yet written). Call it before the step's first effect.
    ///
    /// # Errors
    /// [`Error::Failed`] when the artifact cannot be written.
    pub fn inputs_checked(&self) -> Result<()> {
        match self.pending_inventory.borrow_mut().take() {
            Some(inv) => artifact::write(&self.artifacts.inventory(), &inv).map_err(|e| Error::Failed(e.into())),
            None => Ok(()),
        }
    }

    /// Prints the artifact (with `--json`) or the human summary on stdout.
    pub fn emit<A: Artifact>(&self, a: &A, human: impl FnOnce() -> String) {
        stdout(&if self.json { artifact::to_string(a) } else { human() });
    }

    /// Prints `value` as pretty JSON (with `--json`) or the human summary on stdout: for output
    /// that is not an artifact (a dry-run plan, the files `render-workflows` wrote).
    pub fn emit_json(&self, value: &serde_json::Value, human: impl FnOnce() -> String) {
        if self.json {
            stdout(&format!("{}\n", serde_json::to_string_pretty(value).unwrap_or_default()));
        } else {
            stdout(&human());
        }
    }

    /// Prints the artifacts of a per-container step: with `--json` one pretty JSON array of them,
    /// otherwise the human summary.
    pub fn emit_all<A: Artifact>(&self, all: &[A], human: impl FnOnce() -> String) {
        if self.json {
            let all: Vec<serde_json::Value> = all.iter().map(artifact::to_value).collect();
            stdout(&format!("{}\n", serde_json::to_string_pretty(&all).unwrap_or_default()));
        } else {
            stdout(&human());
        }
    }
}

/// Writes `text` to stdout. A closed pipe (`proxmox-gitops completions bash | head`) ends the
/// output quietly, as for other Unix tools, instead of the panic `print!` would raise; the
/// command's work is done by then.
fn stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The RESULT cell of a container's row: `ok` or `FAILED` (the error itself is printed once, in
/// the command's final error).
pub(crate) fn result_cell(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok => "ok".into(),
        Outcome::Failed { .. } => "FAILED".into(),
    }
}

/// One `<name>: <error>` line per failed container, in order.
pub(crate) fn failures<'a>(outcomes: impl IntoIterator<Item = (&'a str, &'a Outcome)>) -> Vec<String> {
    outcomes
        .into_iter()
        .filter_map(|(name, outcome)| match outcome {
            Outcome::Failed { error } => Some(format!("{name}: {error}")),
            Outcome::Ok => None,
        })
        .collect()
}

/// Ok when `failures` (from [`failures`]) is empty, else the command's final error:
/// `N of TOTAL container(s) failed:` and one line per failure.
pub(crate) fn all_ok(failures: &[String], total: usize) -> Result<()> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Failed(anyhow::anyhow!(
            "{} of {} container(s) failed:\n{}",
            failures.len(),
            total,
            failures.join("\n")
        )))
    }
}

fn init_logging(global: &GlobalArgs) {
    use tracing_subscriber::EnvFilter;
    let default = if global.quiet {
        "warn"
    } else {
        match global.verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},hyper=warn,rustls=warn,reqwest=warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Above the progress display, when one is drawn (crate::progress).
        .with_writer(crate::progress::LogWriter::make)
        // Colours only where they render: a terminal, or an Actions log; not in files or pipes.
        .with_ansi(
            (std::io::IsTerminal::is_terminal(&std::io::stderr()) || crate::actions::in_actions())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_target(false)
        .without_time()
        .try_init();
}

/// Reports an error on stderr (and as Actions annotations) and returns its exit code. Secrets
/// are redacted and control characters escaped ([`crate::error::terminal_safe`]): the text
/// quotes user files and remote systems.
fn report(err: &Error, repo: &Path) -> i32 {
    use crate::error::terminal_safe;
    match err {
        Error::Input(problems) => {
            for p in problems.iter() {
                crate::actions::error_annotation(&crate::actions::workspace_relative(p, repo));
            }
            eprint!("error: {}", terminal_safe(&crate::actions::redact(&problems.to_string())));
        }
        Error::Usage(msg) => {
            crate::actions::error_message(msg);
            eprintln!("error: {}", terminal_safe(&crate::actions::redact(msg)));
        }
        Error::Failed(e) => {
            let msg = format!("{e:#}");
            crate::actions::error_message(&msg);
            eprintln!("error: {}", terminal_safe(&crate::actions::redact(&msg)));
        }
    }
    err.exit_code()
}

/// Runs the CLI with the process arguments; returns the exit code.
///
/// Under Actions the whole subcommand, including its error report, runs inside one
/// `::group::<subcommand>` (subcommands do not open their own).
pub fn main() -> i32 {
    let parsed = command().try_get_matches().and_then(|m| {
        let name = m.subcommand_name().unwrap_or("proxmox-gitops").to_string();
        Cli::from_arg_matches(&m).map(|c| (c, name))
    });
    let (cli, name) = match parsed {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { crate::error::EXIT_INPUT } else { crate::error::EXIT_OK };
        }
    };
    let _group = crate::actions::Group::start(&name);
    crate::error::set_entry_point(crate::settings::entry_point(&crate::settings::ProcessEnv));
    init_logging(&cli.global);
    let artifacts = cli.global.artifacts.clone().unwrap_or_else(|| cli.global.repo.join(".proxmox-gitops"));
    let ctx = Ctx {
        repo: cli.global.repo.clone(),
        artifacts: ArtifactDir::new(artifacts),
        stage: cli.global.stage.clone(),
        json: cli.global.json,
        pending_inventory: Default::default(),
        settings: Default::default(),
    };
    // A subcommand's own exit code on success (`drift --detailed-exitcode`: 2 for drift).
    let mut code = crate::error::EXIT_OK;
    let result = match cli.command {
        Command::Resolve(args) => resolve::run(&ctx, args),
        Command::Plan(args) => return plan::main(&ctx, args, |e| report(e, &cli.global.repo)),
        Command::Provision(args) => provision::run(&ctx, args),
        Command::Rewrite(args) => rewrite::run(&ctx, args),
        Command::Publish(args) => publish::run(&ctx, args),
        Command::Env(args) => env::run(&ctx, args),
        Command::Deploy(args) => deploy::run(&ctx, args),
        Command::RenderWorkflows(args) => render_workflows::run(&ctx, args),
        Command::Artifacts(args) => artifacts::run(&ctx, args),
        Command::Snapshot(args) => snapshot::run(&ctx, args),
        Command::Configure(args) => configure::run(&ctx, args),
        Command::Destroy(args) => destroy::run(&ctx, args),
        Command::AutoMerge(args) => auto_merge::run(&ctx, args),
        Command::ReleasePr(args) => release_pr::run(&ctx, args),
        Command::Health(args) => health::run(&ctx, args),
        Command::Update(args) => update::run(&ctx, args),
        Command::Drift(args) => drift::run(&ctx, args).map(|c| code = c),
        Command::Completions(args) => completions::completions(&ctx, args),
        Command::Man(args) => completions::man(&ctx, args),
    };
    // The inputs were good unless the command says otherwise: write what was held back.
    let result = match result {
        Err(e @ (Error::Input(_) | Error::Usage(_))) => Err(e),
        other => {
            let written = ctx.inputs_checked();
            other.and(written)
        }
    };
    match result {
        Ok(()) => code,
        Err(e) => report(&e, &cli.global.repo),
    }
}

/// Renders `items` as a left-aligned text table with a header, one row (`row(item)`, a cell per
/// header column) per item.
pub(crate) fn table_of<T>(
    header: &[&str],
    items: impl IntoIterator<Item = T>,
    row: impl FnMut(T) -> Vec<String>,
) -> String {
    let rows: Vec<Vec<String>> = items.into_iter().map(row).collect();
    table(header, &rows)
}

/// Renders rows as a left-aligned text table with a header. Every cell is shown with control
/// characters (newlines too) escaped ([`crate::error::terminal_safe_line`]): cells quote user
/// files, remote systems and tool output.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| crate::error::terminal_safe_line(c).into_owned()).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells.iter().enumerate().map(|(i, c)| format!("{c:<w$}", w = widths[i])).collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in &rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_are_escaped_and_aligned() {
        let rows = vec![
            vec!["a\u{1b}[2Jb".to_string(), "x".to_string()],
            vec!["two\nlines".to_string(), "\u{202e}cba".to_string()],
            vec!["plain".to_string(), "y".to_string()],
        ];
        let t = table(&["NAME", "VALUE"], &rows);
        assert!(!t.contains('\u{1b}') && !t.contains('\u{202e}'), "{t}");
        assert_eq!(
            t,
            "NAME         VALUE\n\
             a\\u{1b}[2Jb  x\n\
             two\\nlines   \\u{202e}cba\n\
             plain        y\n"
        );
    }
}
