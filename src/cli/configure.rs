//! `proxmox-gitops configure`: apply the base role and each lib's configuration over SSH.

use std::time::Duration;

use clap::Args;

use super::run::{Threads, block_on, step_outputs};
use super::{Ctx, result_cell, table_of};
use crate::error::{Error, Result};
use crate::model::Outcome;
use crate::ssh::ConnectOptions;
use crate::steps::configure::{Configure, ConfigureOptions, Contract, check_requirements, configure};

/// Arguments of `configure`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["containers", "all"])))]
pub struct ConfigureArgs {
    /// Container to configure (lib name or hostname); repeatable or comma-separated.
    #[arg(long = "container", short = 'c')]
    containers: Vec<String>,
    /// Configure every container of the inventory.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    /// Seconds for one SSH connect attempt.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    connect_timeout: u64,
    /// Seconds all SSH connect attempts may take together.
    #[arg(long, default_value_t = 120)]
    connect_budget: u64,
    /// Seconds one engine run (base role, lib) may take.
    #[arg(long, default_value_t = 1800)]
    run_timeout: u64,
    /// Only check that what each lib's `REQUIRES` names is set (no container is contacted);
    /// exit 2 naming what is missing and where to set it. With `--container config`, also find
    /// the control plane's programs (downloaded from Gitea's release site and verified when
    /// PGO_GITEA_BINARY/PGO_RUNNER_BINARY are not set).
    #[arg(long)]
    check: bool,
    /// Run the base role and the lib's engine even when nothing changed since the container's
    /// last successful configure (by default that is proven with a stamp in the container and the
    /// engines are skipped; see docs/configure.md). The environment's
    /// `PROXMOX_GITOPS_CONFIGURE=full` does the same.
    #[arg(long)]
    force: bool,
}

/// What `configure --check --json` prints, output kind `requirements-check` (1.0): every
/// checked container's `REQUIRES` is met (a failed check exits 2 with the problems instead).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RequirementsCheck {
    /// Always true when printed.
    requirements_met: bool,
    /// How many containers were checked.
    checked: usize,
}

impl crate::artifact::Artifact for RequirementsCheck {
    const KIND: &'static str = "requirements-check";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

pub fn run(ctx: &Ctx, args: ConfigureArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let settings = ctx.settings()?;
    let opts = ConfigureOptions {
        containers: if args.all { Vec::new() } else { args.containers },
        jobs: args.jobs.get(),
        artifacts: ctx.artifacts.clone(),
        contract: Contract::from_settings(&settings.gitea),
        connect: ConnectOptions {
            connect_timeout: Duration::from_secs(args.connect_timeout),
            total_timeout: Duration::from_secs(args.connect_budget),
            attempts: 10,
        },
        run_timeout: Duration::from_secs(args.run_timeout),
        control_plane: settings.control_plane.clone(),
        deploys_to_pve: settings.pve.host.is_some(),
        full: args.force || crate::settings::configure_full(&crate::settings::ProcessEnv).map_err(Error::Input)?,
        ..ConfigureOptions::default()
    };
    if args.check {
        check_requirements(&inv, &opts)?;
        // The control plane named on its own (`local/run.sh config`): its programs are found, or
        // downloaded and verified, now, so that a missing one stops the run before anything is
        // created.
        if opts.containers.iter().any(|c| c == crate::inventory::CONTROL_PLANE)
            && inv
                .container(crate::inventory::CONTROL_PLANE)
                .is_some_and(|s| s.engine == crate::inventory::Engine::Ansible)
        {
            let versions = crate::control_plane::Versions::read(&inv.root)?;
            block_on(Threads::Default, crate::control_plane::binaries(&opts.control_plane, &versions))?
                .map_err(Error::Failed)?;
        }
        let checked = if opts.containers.is_empty() { inv.containers.len() } else { opts.containers.len() };
        if ctx.json {
            let check = RequirementsCheck { requirements_met: true, checked };
            ctx.emit_json(&crate::artifact::to_value(&check), String::new);
        } else {
            eprintln!("requirements met ({checked} container(s) checked)");
        }
        return Ok(());
    }
    let results = block_on(Threads::Default, configure(&inv, &opts))??;
    for c in &results {
        if let Outcome::Failed { error } = &c.outcome {
            crate::actions::error_message(&format!("{}: {error}", c.name));
        }
    }
    let failed: Vec<&Configure> = results.iter().filter(|c| !c.ok()).collect();
    let states: Vec<(&str, bool)> = results.iter().map(|c| (c.name.as_str(), c.ok())).collect();
    step_outputs("configure", &ctx.artifacts.configure_dir(), &states)?;
    let rows: Vec<super::describe::ResultRow> = results
        .iter()
        .map(|c| super::describe::ResultRow {
            name: c.name.clone(),
            vmid: c.vmid,
            node: super::describe::node_of(
                &ctx.artifacts,
                &c.name,
                inv.container(&c.name).and_then(|s| s.node.as_deref()),
            ),
            action: format!("configure ({})", format!("{:?}", c.engine).to_lowercase()),
            ok: c.ok(),
            duration_ms: Some(c.duration_ms),
            error: match &c.outcome {
                Outcome::Ok => None,
                Outcome::Failed { error } => Some(error.clone()),
            },
        })
        .collect();
    super::describe::job_summary("configure", &super::describe::results_markdown("configure", &rows));
    crate::actions::end_group();
    if ctx.json {
        let mut out = String::from("[\n");
        let docs: Vec<String> = results.iter().map(|c| crate::artifact::to_string(c).trim_end().to_string()).collect();
        out.push_str(&docs.join(",\n"));
        out.push_str("\n]\n");
        print!("{out}");
    } else {
        print!(
            "{}",
            table_of(
                &["NAME", "ADDRESS", "USER", "BASE CHANGED", "ENGINE", "OUTPUTS", "TIME", "RESULT"],
                &results,
                |c| {
                    vec![
                        c.name.clone(),
                        c.address.clone().unwrap_or_default(),
                        c.user.clone().unwrap_or_default(),
                        match &c.base {
                            Some(b) if b.skipped => "skipped".into(),
                            b => b.as_ref().and_then(|b| b.changed).map(|n| n.to_string()).unwrap_or("-".into()),
                        },
                        format!("{:?}", c.engine).to_lowercase(),
                        c.outputs.keys().cloned().collect::<Vec<_>>().join(","),
                        format!("{:.1}s", c.duration_ms as f64 / 1000.0),
                        result_cell(&c.outcome),
                    ]
                }
            )
        );
        for c in &failed {
            eprintln!("\n{} failed; last log lines:", c.name);
            // The container's own output: shown, never executed by the terminal.
            for l in &c.log_tail {
                eprintln!("  {}", crate::error::terminal_safe_line(l));
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Failed(anyhow::anyhow!(
            "{} of {} container(s) failed to configure: {} (see configure/<name>.json)",
            failed.len(),
            results.len(),
            failed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        )))
    }
}
