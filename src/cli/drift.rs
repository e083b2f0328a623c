//! `proxmox-gitops drift`: compare the deployed containers with the desired state and report
//! every difference key by key (a value changed by hand in the PVE UI or an LXC config, a
//! stopped or missing container, a container carrying our mark whose lib is gone); write
//! `drift.json`, a table (or `--json`) and a Markdown table into the job summary. Changes
//! nothing.
//!
//! With `--pending-repo DIR` (a checkout of `main` next to the released one the workflow runs
//! in), the changes that checkout would make besides are reported as **pending** (a table of
//! their own, a section of the job summary, `pending` in `drift.json`): not drift, and never
//! part of the exit code.
//!
//! # Exit codes
//!
//! Like `terraform plan`: without `--detailed-exitcode`, 0 whether or not there is drift, 1 on
//! an error (a container that could not be compared), 2 for invalid input. With
//! `--detailed-exitcode`: 0 no drift, **2 drift**, 1 any error — invalid input included, so
//! that 2 means drift only (an unknown option is still reported by the argument parser with 2).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use time::OffsetDateTime;

use super::run::{Threads, block_on, outputs};
use super::{Ctx, table_of};
use crate::artifact;
use crate::backend::live::{self, LiveOptions};
use crate::backend::pve::desired::PveDefaults;
use crate::error::{Error, Result};
use crate::inventory::{ContainerSpec, NotFound};
use crate::model::BackendKind;
use crate::settings::ProcessEnv;
use crate::steps::drift::{self as step, Drift, DriftOptions};
use crate::steps::resolve::{ResolveOptions, resolve};

/// Arguments of `drift`.
#[derive(Debug, Args)]
pub struct DriftArgs {
    /// Containers to compare (lib name or hostname); repeatable or comma-separated [default:
    /// all, and then containers whose lib is gone are reported too].
    #[arg(long = "container", short = 'c', value_delimiter = ',')]
    containers: Vec<String>,
    /// Every container of the stage (the default), and the containers whose lib is gone.
    #[arg(long, conflicts_with = "containers")]
    all: bool,
    /// Exit 2 when there is drift, 0 when there is none, 1 on any error (as `terraform plan
    /// -detailed-exitcode`).
    #[arg(long)]
    detailed_exitcode: bool,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    /// A checkout of the branch whose changes are not released yet (e.g. `main`, while the repo
    /// is the released checkout): its differences from the live containers that the repo's do
    /// not have are reported as pending, never as drift (same stage; the exit code ignores
    /// them).
    #[arg(long, value_name = "DIR")]
    pending_repo: Option<PathBuf>,
    #[command(flatten)]
    backend: super::args::BackendArg,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    #[command(flatten)]
    pve: super::args::PveTlsArgs,
}

/// Runs `drift`; the process exit code on success (0, or 2 for drift with
/// `--detailed-exitcode`).
pub fn run(ctx: &Ctx, args: DriftArgs) -> Result<i32> {
    let detailed = args.detailed_exitcode;
    run_inner(ctx, args).map_err(|e| match e {
        // With --detailed-exitcode, 2 means drift: invalid input is an error (1).
        Error::Input(_) | Error::Usage(_) if detailed => Error::Failed(anyhow::anyhow!("{e}")),
        other => other,
    })
}

fn run_inner(ctx: &Ctx, args: DriftArgs) -> Result<i32> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    if let Some(dir) = &args.pending_repo
        && !dir.is_dir()
    {
        return Err(Error::Usage(format!(
            "--pending-repo {}: not a directory (expected a checkout of the monorepo, e.g. of main)",
            dir.display()
        )));
    }
    let whole = args.containers.is_empty();
    let specs: Vec<ContainerSpec> =
        inv.select(&args.containers, true, NotFound::InStage)?.into_iter().cloned().collect();
    let settings = ctx.settings()?;
    let kind = args.backend.or_default(&settings);
    let pve = match kind {
        BackendKind::Pve => Some(PveDefaults::from_settings(&settings.pve).ok_or_else(|| {
            Error::from(crate::settings::not_set(
                "PROXMOX_TEMPLATE",
                "not set: drift derives the desired containers from it, e.g. debian-13-standard_13.1-2",
            ))
        })?),
        BackendKind::Lxc => None,
    };
    let live = live::open(
        kind,
        &settings,
        LiveOptions {
            pve: args.pve.connect()?,
            snapshot_timeout: crate::snapshot::pve::DEFAULT_TASK_TIMEOUT,
            share: settings.share.clone(),
            artifacts: ctx.artifacts.clone(),
            ssh: crate::ssh::ConnectOptions {
                connect_timeout: Duration::from_secs(10),
                total_timeout: Duration::from_secs(60),
                attempts: 1,
            },
            ssh_port: 22,
        },
    )?;
    ctx.inputs_checked()?;
    let now = OffsetDateTime::now_utc();
    let opts = DriftOptions { jobs: args.jobs.get(), pve, orphans: whole, now };
    let report = block_on(Threads::Workers(args.jobs.get().clamp(1, 8)), async {
        let mut report = step::check_all(&live, &inv.stage, &specs, &inv.containers, &opts).await;
        if let Some(dir) = &args.pending_repo {
            match resolve(&ResolveOptions { repo: dir.clone(), stage: inv.stage.clone() }, &ProcessEnv) {
                Ok(pending) => {
                    // The same selection: every container of the pending checkout for the whole
                    // stage (new libs included), else the selected names.
                    let specs_pending: Vec<ContainerSpec> = pending
                        .containers
                        .iter()
                        .filter(|p| whole || specs.iter().any(|s| s.name == p.name))
                        .cloned()
                        .collect();
                    let removed: Vec<ContainerSpec> = specs
                        .iter()
                        .filter(|s| !pending.containers.iter().any(|p| p.name == s.name))
                        .cloned()
                        .collect();
                    report.pending = Some(step::check_pending(&live, &report, &specs_pending, &removed, &opts).await);
                }
                Err(e) => {
                    let e = crate::actions::redact(&e.to_string());
                    tracing::warn!("--pending-repo {}: cannot resolve it: {e}", dir.display());
                    report.pending_error = Some(e);
                }
            }
        }
        report
    })?;
    let path = ctx.artifacts.drift();
    artifact::write(&path, &report).map_err(|e| Error::Failed(e.into()))?;
    crate::actions::summary(&markdown(&report))
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_STEP_SUMMARY: {e}")))?;
    let drifted: Vec<&str> = report
        .containers
        .iter()
        .filter(|c| !c.differences.is_empty())
        .map(|c| c.name.as_str())
        .chain(report.orphans.iter().flatten().map(|o| o.hostname.as_str()))
        .collect();
    let pending: Vec<&str> = report.pending.iter().flatten().map(|c| c.name.as_str()).collect();
    outputs(&[
        ("artifact", path.display().to_string()),
        ("result", if report.drifted { "drift" } else { "none" }.to_string()),
        ("drifted", drifted.join(",")),
        ("pending", pending.join(",")),
    ])?;
    ctx.emit(&report, || {
        let mut s = table(&report);
        s.push_str(&pending_table(&report));
        s.push_str(&format!(
            "\n{} container(s) compared, {} with drift{}; wrote {}\n",
            report.containers.len(),
            drifted.len(),
            match &report.orphans {
                Some(o) if !o.is_empty() => format!(" (of which {} without a lib)", o.len()),
                _ => String::new(),
            },
            path.display()
        ));
        s
    });
    if report.drifted {
        // An annotation on the run's page (under Actions), not only a table in the log.
        let msg = format!(
            "drift: {} difference(s) between the live containers and the desired state ({}); see the job summary or {}",
            report.rows().len(),
            drifted.join(", "),
            path.display()
        );
        if args.detailed_exitcode {
            crate::actions::error_message(&msg);
        } else {
            crate::actions::warning_message(&msg);
        }
    }
    result(&report, args.detailed_exitcode)
}

/// The human table: CONTAINER, KEY, DESIRED, LIVE (`no drift` when empty).
fn table(report: &Drift) -> String {
    let rows = report.rows();
    if rows.is_empty() {
        return format!("no drift: {} container(s) as desired\n", report.containers.len());
    }
    table_of(&["CONTAINER", "KEY", "DESIRED", "LIVE"], rows, |r| vec![r.container, r.key, r.desired, r.live])
}

/// The pending changes for the log (empty without a pending checkout): a title line, then
/// CONTAINER, KEY, PENDING (the pending checkout's value), LIVE, and the containers that could
/// not be compared.
fn pending_table(report: &Drift) -> String {
    if let Some(e) = &report.pending_error {
        return format!("\npending: the pending checkout could not be resolved: {e}\n");
    }
    let Some(pending) = &report.pending else { return String::new() };
    let rows = report.pending_rows();
    let mut s = if rows.is_empty() {
        "\npending: nothing (the pending checkout changes nothing more)\n".to_string()
    } else {
        format!(
            "\npending: {} change(s) not released yet (not drift; the release pull request shows them):\n{}",
            rows.len(),
            table_of(&["CONTAINER", "KEY", "PENDING", "LIVE"], rows, |r| vec![r.container, r.key, r.desired, r.live])
        )
    };
    for c in pending.iter().filter(|c| c.error.is_some()) {
        s.push_str(&format!("pending: {} could not be compared: {}\n", c.name, c.error.as_deref().unwrap_or("")));
    }
    s
}

/// The Markdown block for the job summary: the verdict, one row per difference, the errors;
/// then, with a pending checkout, the pending section.
pub(crate) fn markdown(report: &Drift) -> String {
    use crate::actions::markdown_cell as cell;
    let rows = report.rows();
    let mut s = format!(
        "### Drift of stage `{}`: {}\n\n",
        cell(&report.stage),
        if report.drifted {
            format!("{} difference(s)", rows.len())
        } else {
            format!("none ({} container(s) as desired)", report.containers.len() - report.errors().len())
        }
    );
    if !rows.is_empty() {
        s.push_str("| Container | Key | Desired | Live |\n|---|---|---|---|\n");
        for r in &rows {
            s.push_str(&format!(
                "| {} | {} | {} | **{}** |\n",
                cell(&r.container),
                cell(&r.key),
                cell(&r.desired),
                cell(&r.live)
            ));
        }
    }
    for c in report.errors() {
        s.push_str(&format!(
            "\n- `{}` could not be compared: {}\n",
            cell(&c.name),
            cell(c.error.as_deref().unwrap_or(""))
        ));
    }
    if let Some(e) = &report.orphans_error {
        s.push_str(&format!("\n- containers without a lib could not be listed: {}\n", cell(e)));
    }
    s.push_str(&pending_markdown(report));
    s.push_str(&format!("\nChecked {} ({} backend).\n", report.checked_at, report.backend));
    s
}

/// The job summary's pending section (empty without a pending checkout).
fn pending_markdown(report: &Drift) -> String {
    use crate::actions::markdown_cell as cell;
    if let Some(e) = &report.pending_error {
        return format!("\n### Pending release: unknown\n\nThe pending checkout could not be resolved: {}\n", cell(e));
    }
    let Some(pending) = &report.pending else { return String::new() };
    let rows = report.pending_rows();
    if rows.is_empty() && report.pending_errors().is_empty() {
        return "\n### Pending release: nothing\n".into();
    }
    let mut s = format!(
        "\n### Pending release: {} change(s)\n\nNot drift: changes not released yet (the release pull request shows them).\n\n",
        rows.len()
    );
    if !rows.is_empty() {
        s.push_str("| Container | Key | Pending | Live |\n|---|---|---|---|\n");
        for r in &rows {
            s.push_str(&format!(
                "| {} | {} | **{}** | {} |\n",
                cell(&r.container),
                cell(&r.key),
                cell(&r.desired),
                cell(&r.live)
            ));
        }
    }
    for c in pending.iter().filter(|c| c.error.is_some()) {
        s.push_str(&format!(
            "\n- `{}` could not be compared with the pending checkout: {}\n",
            cell(&c.name),
            cell(c.error.as_deref().unwrap_or(""))
        ));
    }
    s
}

/// The exit code: errors fail (1); drift is 2 with `detailed`, else 0.
fn result(report: &Drift, detailed: bool) -> Result<i32> {
    let mut errors: Vec<String> =
        report.errors().iter().map(|c| format!("{}: {}", c.name, c.error.as_deref().unwrap_or(""))).collect();
    if let Some(e) = &report.orphans_error {
        errors.push(format!("containers without a lib: {e}"));
    }
    if !errors.is_empty() {
        return Err(Error::Failed(anyhow::anyhow!(
            "drift could not be checked for {} container(s):\n  {}",
            errors.len(),
            errors.join("\n  ")
        )));
    }
    Ok(if report.drifted && detailed { 2 } else { crate::error::EXIT_OK })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::live::{KeyDrift, Orphan};
    use crate::steps::drift::ContainerDrift;

    fn report() -> Drift {
        Drift {
            stage: "main".into(),
            backend: BackendKind::Pve,
            checked_at: "2026-12-01T17:00:00Z".into(),
            drifted: true,
            containers: vec![
                ContainerDrift {
                    name: "broker".into(),
                    vmid: 101,
                    hostname: "broker".into(),
                    differences: vec![
                        KeyDrift::new("MEMORY", "1024", "2048"),
                        KeyDrift::new("STATE", "running", "stopped"),
                    ],
                    error: None,
                },
                ContainerDrift {
                    name: "proxy".into(),
                    vmid: 102,
                    hostname: "proxy".into(),
                    differences: vec![],
                    error: None,
                },
            ],
            orphans: Some(vec![Orphan {
                vmid: 105,
                hostname: "old".into(),
                lib: "old".into(),
                node: Some("pve1".into()),
                state: "running".into(),
            }]),
            orphans_error: None,
            pending: None,
            pending_error: None,
        }
    }

    #[test]
    fn table_and_summary() {
        assert_eq!(
            table(&report()),
            "CONTAINER  KEY     DESIRED                      LIVE\n\
             broker     MEMORY  1024                         2048\n\
             broker     STATE   running                      stopped\n\
             old        lib     (none: no lib in the stage)  old (CT 105 on pve1, running)\n"
        );
        assert_eq!(
            markdown(&report()),
            "### Drift of stage `main`: 3 difference(s)\n\n\
             | Container | Key | Desired | Live |\n|---|---|---|---|\n\
             | broker | MEMORY | 1024 | **2048** |\n\
             | broker | STATE | running | **stopped** |\n\
             | old | lib | (none: no lib in the stage) | **old (CT 105 on pve1, running)** |\n\
             \nChecked 2026-12-01T17:00:00Z (pve backend).\n"
        );
    }

    /// Pending changes get their own table and summary section, and never change the verdict or
    /// the exit code.
    #[test]
    fn pending_changes_are_reported_apart_and_never_fail() {
        let mut r = report();
        r.drifted = false;
        r.containers[0].differences.clear();
        r.orphans = Some(vec![]);
        r.pending = Some(vec![ContainerDrift {
            name: "broker".into(),
            vmid: 101,
            hostname: "broker".into(),
            differences: vec![KeyDrift::new("MEMORY", "256", "512")],
            error: None,
        }]);
        assert_eq!(table(&r), "no drift: 2 container(s) as desired\n");
        assert_eq!(
            pending_table(&r),
            "\npending: 1 change(s) not released yet (not drift; the release pull request shows them):\n\
             CONTAINER  KEY     PENDING  LIVE\n\
             broker     MEMORY  256      512\n"
        );
        assert_eq!(
            markdown(&r),
            "### Drift of stage `main`: none (2 container(s) as desired)\n\n\
             \n### Pending release: 1 change(s)\n\n\
             Not drift: changes not released yet (the release pull request shows them).\n\n\
             | Container | Key | Pending | Live |\n|---|---|---|---|\n\
             | broker | MEMORY | **256** | 512 |\n\
             \nChecked 2026-12-01T17:00:00Z (pve backend).\n"
        );
        assert_eq!(result(&r, true).unwrap(), 0);
        // A pending container that cannot be compared, or a pending checkout that does not
        // resolve, is reported and fails nothing either.
        r.pending.as_mut().unwrap()[0].error = Some("GET failed".into());
        assert!(
            pending_table(&r).ends_with("pending: broker could not be compared: GET failed\n"),
            "{}",
            pending_table(&r)
        );
        assert_eq!(result(&r, true).unwrap(), 0);
        r.pending = None;
        r.pending_error = Some("libs/x/container.env:1: MEMORY: expected MiB".into());
        assert!(markdown(&r).contains("### Pending release: unknown"), "{}", markdown(&r));
        assert_eq!(result(&r, true).unwrap(), 0);
        // Without a pending checkout: nothing about it.
        r.pending_error = None;
        assert_eq!(pending_table(&r), "");
        assert!(!markdown(&r).contains("Pending"));
    }

    #[test]
    fn exit_codes_follow_terraform() {
        assert_eq!(result(&report(), true).unwrap(), 2);
        assert_eq!(result(&report(), false).unwrap(), 0);
        let mut none = report();
        none.drifted = false;
        assert_eq!(result(&none, true).unwrap(), 0);
        let mut failed = report();
        failed.containers[1].error = Some("GET failed".into());
        assert_eq!(result(&failed, true).unwrap_err().exit_code(), 1);
    }
}
