//! `proxmox-gitops health`: check that each container of the stage is deployed, running,
//! answering and that its services are active; write `health.json`, a table (or `--json`), a
//! Markdown table into the job summary and, with Gitea settings, each lib repository's
//! description. Exit 0 when every container is healthy or not deployed, 1 otherwise, 2 for bad
//! input.

use std::time::Duration;

use clap::Args;
use time::OffsetDateTime;

use super::run::{Threads, block_on, outputs};
use super::{Ctx, table_of};
use crate::artifact;
use crate::backend::live::{self, LiveOptions};
use crate::error::{Error, Location, Result};
use crate::gitea::Client;
use crate::inventory::{ContainerSpec, NotFound};
use crate::live::{CheckOptions, HealthState};
use crate::model::Outcome;
use crate::settings::{GiteaAuthKind, Settings};
use crate::steps::health::{self as step, Health, HealthOptions};

/// Arguments of `health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Containers to check (lib name or hostname); repeatable or comma-separated [default: all].
    #[arg(long = "container", short = 'c', value_delimiter = ',')]
    containers: Vec<String>,
    /// Every container of the stage (the default; the control plane included).
    #[arg(long, conflicts_with = "containers")]
    all: bool,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    #[command(flatten)]
    backend: super::args::BackendArg,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    /// Seconds each part of a check may take (a backend call, a command in the container).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    check_timeout: u64,
    #[command(flatten)]
    reach: super::args::ReachArgs,
    /// Do not write the lib repositories' descriptions on Gitea.
    #[arg(long)]
    no_describe: bool,
    /// Organization of lib repositories published as directories or relative submodule URLs
    /// [default: the owner in PROXMOX_GITOPS_MONOREPO, else main].
    #[arg(long)]
    org: Option<String>,
    /// Gitea base URL [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    gitea: Option<String>,
    #[command(flatten)]
    pve: super::args::PveTlsArgs,
}

/// The organization: `--org`, else the owner of `PROXMOX_GITOPS_MONOREPO` (`owner/repo`, set
/// in task workflows), else `main`.
///
/// # Errors
/// [`Error::Input`] for a `PROXMOX_GITOPS_MONOREPO` that is not `OWNER/REPO`.
pub(crate) fn org(given: Option<&str>, monorepo: Option<&str>) -> Result<String> {
    if let Some(o) = given {
        return Ok(o.to_string());
    }
    match monorepo {
        None => Ok("main".into()),
        Some(v) => match v.split_once('/') {
            Some((owner, repo)) if !owner.is_empty() && !repo.is_empty() && !repo.contains('/') => Ok(owner.into()),
            _ => Err(Error::input(
                Location::environment("PROXMOX_GITOPS_MONOREPO"),
                format!("expected OWNER/REPO (the monorepo on Gitea), found `{v}`"),
            )),
        },
    }
}

/// The Gitea client for the descriptions, when settings allow it: an address (`--gitea` or
/// `HOST`) and credentials (`GITEA_TOKEN`, or `LOGIN` and `PASSWORD`); `None` otherwise (logged).
///
/// # Errors
/// [`Error::Usage`] for an address that is not a valid Gitea URL.
fn gitea_client(settings: &Settings, base: Option<&str>) -> Result<Option<Client>> {
    let host = base.map(str::to_string).or_else(|| settings.gitea.host.clone());
    if host.is_none() || settings.gitea.auth_kind() == GiteaAuthKind::None {
        tracing::info!(
            "no Gitea address and credentials (HOST with GITEA_TOKEN or LOGIN/PASSWORD, or host with token or \
             login/password in local/config.json): descriptions not written"
        );
        return Ok(None);
    }
    Client::from_settings(&settings.gitea, base).map(Some).map_err(|e| Error::Usage(e.to_string()))
}

pub fn run(ctx: &Ctx, args: HealthArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs: Vec<ContainerSpec> =
        inv.select(&args.containers, true, NotFound::InStage)?.into_iter().cloned().collect();
    let settings = ctx.settings()?;
    let kind = args.backend.or_default(&settings);
    let org = org(args.org.as_deref(), settings.gitea.monorepo.as_deref())?;
    let gitea = if args.no_describe { None } else { gitea_client(&settings, args.gitea.as_deref())? };
    let live = live::open(
        kind,
        &settings,
        LiveOptions {
            pve: args.pve.connect()?,
            snapshot_timeout: crate::snapshot::pve::DEFAULT_TASK_TIMEOUT,
            share: settings.share.clone(),
            artifacts: ctx.artifacts.clone(),
            ssh: args.reach.ssh(),
            ssh_port: args.reach.ssh_port,
        },
    )?;
    ctx.inputs_checked()?;
    let now = OffsetDateTime::now_utc();
    let opts = HealthOptions {
        jobs: args.jobs.get(),
        check: CheckOptions {
            timeout: Duration::from_secs(args.check_timeout),
            reach_timeout: Duration::from_secs(args.reach.connect_budget.max(1) + args.check_timeout),
        },
        now,
    };
    let report = block_on(Threads::Workers(args.jobs.get().clamp(1, 8)), async {
        let mut report = step::check_all(&live, &inv.stage, &specs, &opts).await;
        if let Some(client) = &gitea {
            step::describe(client, &inv, &mut report, &org, now).await;
        }
        report
    })?;
    let path = ctx.artifacts.health();
    artifact::write(&path, &report).map_err(|e| Error::Failed(e.into()))?;
    crate::actions::summary(&markdown(&report, now))
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_STEP_SUMMARY: {e}")))?;
    outputs(&[
        ("artifact", path.display().to_string()),
        ("result", if report.healthy { "healthy" } else { "unhealthy" }.to_string()),
        ("unhealthy", report.unhealthy().iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(",")),
    ])?;
    ctx.emit(&report, || {
        let mut s = table(&report);
        s.push_str(&format!(
            "\n{} container(s) checked, {} not healthy; wrote {}\n",
            report.containers.len(),
            report.unhealthy().len(),
            path.display()
        ));
        s
    });
    result(&report)
}

/// The human table: CONTAINER, STATE, SERVICES, DETAIL.
fn table(report: &Health) -> String {
    table_of(&["CONTAINER", "STATE", "SERVICES", "DETAIL"], &report.containers, |c| {
        vec![c.name.clone(), c.state.to_string(), c.services_text(), c.detail.clone().unwrap_or_default()]
    })
}

/// The Markdown block for the job summary: a heading with the verdict, one row per container
/// (a state that fails the run in bold), and the descriptions written.
pub(crate) fn markdown(report: &Health, now: OffsetDateTime) -> String {
    use crate::actions::markdown_cell as cell;
    let bad = report.unhealthy().len();
    let mut s = format!(
        "### Health of stage `{}`: {}\n\n| Container | State | Services | Detail |\n|---|---|---|---|\n",
        cell(&report.stage),
        if bad == 0 {
            format!("all {} container(s) healthy", report.containers.len())
        } else {
            format!("{bad} of {} container(s) not healthy", report.containers.len())
        }
    );
    for c in &report.containers {
        let state = if c.state == HealthState::Healthy { c.state.to_string() } else { format!("**{}**", c.state) };
        s.push_str(&format!(
            "| {} | {state} | {} | {} |\n",
            cell(&c.name),
            cell(&c.services_text()),
            cell(c.detail.as_deref().unwrap_or(""))
        ));
    }
    s.push_str(&format!("\nChecked {} ({} backend).\n", step::human_time(now), report.backend));
    let failed: Vec<String> = report
        .descriptions
        .iter()
        .filter_map(|d| match &d.outcome {
            Outcome::Failed { error } => Some(format!("- `{}`: {}\n", cell(&d.repository), cell(error))),
            Outcome::Ok => None,
        })
        .collect();
    if !report.descriptions.is_empty() {
        s.push_str(&format!(
            "\nRepository descriptions written: {} of {}.\n",
            report.descriptions.len() - failed.len(),
            report.descriptions.len()
        ));
        for f in failed {
            s.push_str(&f);
        }
    }
    s
}

/// Exit 0 when every container is healthy or not deployed and every description was written;
/// otherwise the failure naming each container (and repository).
fn result(report: &Health) -> Result<()> {
    let mut lines: Vec<String> = report
        .unhealthy()
        .iter()
        .map(|c| match &c.detail {
            Some(d) => format!("{}: {} — {d}", c.name, c.state),
            None => format!("{}: {}", c.name, c.state),
        })
        .collect();
    let down = lines.len();
    lines.extend(report.descriptions.iter().filter_map(|d| match &d.outcome {
        Outcome::Failed { error } => Some(error.clone()),
        Outcome::Ok => None,
    }));
    if lines.is_empty() {
        return Ok(());
    }
    let head = if down > 0 {
        format!("{down} of {} container(s) not healthy:", report.containers.len())
    } else {
        "the health check passed, but descriptions could not be written:".to_string()
    };
    Err(Error::Failed(anyhow::anyhow!("{head}\n  {}", lines.join("\n  "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{ContainerHealth, HealthState, ServiceCheck};
    use crate::steps::health::Description;

    fn report() -> Health {
        let h = |name: &str, state, detail: Option<&str>| ContainerHealth {
            name: name.into(),
            hostname: name.into(),
            vmid: 120,
            state,
            system: None,
            services: vec![],
            failed_units: None,
            detail: detail.map(str::to_string),
            duration_ms: 1,
        };
        let mut broker = h("broker", HealthState::Down, Some("mosquitto inactive"));
        broker.services = vec![ServiceCheck { unit: "mosquitto.service".into(), state: "inactive".into() }];
        let mut proxy = h("proxy", HealthState::Healthy, None);
        proxy.failed_units = Some(vec![]);
        Health {
            stage: "main".into(),
            backend: crate::model::BackendKind::Lxc,
            checked_at: "2026-12-01T17:00:00Z".into(),
            healthy: false,
            containers: vec![h("config", HealthState::NotDeployed, None), broker, proxy],
            descriptions: vec![
                Description {
                    container: "broker".into(),
                    repository: "main/broker".into(),
                    text: "x".into(),
                    outcome: Outcome::Ok,
                },
                Description {
                    container: "proxy".into(),
                    repository: "main/proxy".into(),
                    text: "y".into(),
                    outcome: Outcome::Failed { error: "cannot set the description of main/proxy: 500 | boom".into() },
                },
            ],
        }
    }

    #[test]
    fn markdown_summary() {
        let now = time::macros::datetime!(2026-12-01 17:00:00 UTC);
        assert_eq!(
            markdown(&report(), now),
            "### Health of stage `main`: 2 of 3 container(s) not healthy\n\n\
             | Container | State | Services | Detail |\n|---|---|---|---|\n\
             | config | **not-deployed** | - |   |\n\
             | broker | **down** | mosquitto inactive | mosquitto inactive |\n\
             | proxy | healthy | no failed units |   |\n\
             \nChecked 2026-12-01 17:00 UTC (lxc backend).\n\
             \nRepository descriptions written: 1 of 2.\n\
             - `main/proxy`: cannot set the description of main/proxy: 500 \\| boom\n"
        );
    }

    #[test]
    fn failures_name_containers_and_repositories() {
        let e = result(&report()).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_FAILURE);
        assert_eq!(
            format!("{e}"),
            "2 of 3 container(s) not healthy:\n  config: not-deployed\n  broker: down — mosquitto inactive\n  cannot \
             set the description of main/proxy: 500 | boom"
        );
        let mut ok = report();
        ok.containers.retain(|c| c.state == HealthState::Healthy);
        ok.descriptions.truncate(1);
        assert!(result(&ok).is_ok());
    }

    #[test]
    fn organization() {
        assert_eq!(org(Some("srv"), Some("infra/mono")).unwrap(), "srv");
        assert_eq!(org(None, Some("infra/mono")).unwrap(), "infra");
        assert_eq!(org(None, None).unwrap(), "main");
        assert!(org(None, Some("infra")).is_err());
    }
}
