//! `proxmox-gitops provision`: create, update and start the containers (PVE API or local LXC).

use std::path::PathBuf;

use clap::Args;

use super::args::{PolicyArgs, PveArgs, SshWaitArgs};
use super::run::{Threads, block_on, outputs};
use super::{Ctx, all_ok, failures, table, table_of};
use crate::backend;
use crate::error::Result;
use crate::inventory::NotFound;
use crate::model::{ApplyOptions, BackendKind, Outcome};
use crate::steps::provision as step;

/// Arguments of `provision`.
#[derive(Debug, Args)]
pub struct ProvisionArgs {
    /// Container to provision (lib name or hostname); repeatable or comma-separated.
    #[arg(long = "container", short = 'c', value_name = "NAME")]
    containers: Vec<String>,
    /// Provision every container of the stage.
    #[arg(long, conflicts_with = "containers")]
    all: bool,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    #[command(flatten)]
    backend: super::args::BackendArg,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    /// Only show the plan; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apply exactly this saved plan (`plan.json` from `proxmox-gitops plan --ref
    /// refs/heads/release`): its containers (-c narrows them) and its recreate policy. Refused,
    /// with nothing changed, when a container's inputs digest or live state (PVE config digest,
    /// provision action) moved since it was planned.
    #[arg(long = "plan", value_name = "PLAN_JSON", conflicts_with = "all")]
    saved_plan: Option<PathBuf>,
    #[command(flatten)]
    ssh: SshWaitArgs,
    /// Destroy/recreate containers that declare SNAPSHOT paths WITHOUT taking a verified data
    /// snapshot first (their data is lost; logged as a warning).
    #[arg(long)]
    no_snapshot: bool,
    #[command(flatten)]
    pve: PveArgs,
}

/// Rows of the plan table.
pub(crate) fn plan_rows(planned: &[backend::Planned]) -> Vec<Vec<String>> {
    planned
        .iter()
        .map(|p| {
            let (what, start) = match &p.plan {
                Ok(cp) => (super::describe::describe(cp), if cp.start { "yes" } else { "no" }.to_string()),
                Err(e) => (format!("cannot plan: {}", crate::actions::redact(&format!("{e:#}"))), "-".into()),
            };
            vec![p.spec.name.clone(), p.spec.hostname.clone(), p.spec.vmid.to_string(), what, start]
        })
        .collect()
}

/// One container of `provision --dry-run --json`, output kind `container-plan` (1.0; every
/// object carries `kind` and `schema_version` like an artifact, so a reader can tell it from
/// `provision --json`'s `provision` artifacts).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum DryRunEntry {
    /// The container's plan ([`crate::model::ContainerPlan`]: `name`, `vmid`,
    /// `hostname`, the action's fields, `start`).
    Planned(crate::model::ContainerPlan),
    /// The container could not be planned, and why (secrets redacted).
    Failed {
        /// Container name.
        name: String,
        /// Hostname.
        hostname: String,
        /// vmid.
        vmid: u32,
        /// The error.
        error: String,
    },
}

impl crate::artifact::Artifact for DryRunEntry {
    const KIND: &'static str = "container-plan";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

/// The plan as JSON (`provision --dry-run --json`): an array with one [`DryRunEntry`] per
/// container, in order, each with `kind` and `schema_version`.
pub(crate) fn plan_json(planned: &[backend::Planned]) -> serde_json::Value {
    planned
        .iter()
        .map(|p| {
            crate::artifact::to_value(&match &p.plan {
                Ok(cp) => DryRunEntry::Planned(cp.clone()),
                Err(e) => DryRunEntry::Failed {
                    name: p.spec.name.clone(),
                    hostname: p.spec.hostname.clone(),
                    vmid: p.spec.vmid,
                    error: crate::actions::redact(&format!("{e:#}")),
                },
            })
        })
        .collect()
}

pub fn run(ctx: &Ctx, args: ProvisionArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let settings = ctx.settings()?;
    let kind = args.backend.or_default(&settings);
    let saved = match &args.saved_plan {
        Some(path) => {
            let mut plan = crate::steps::deploy::saved::read(path, None, &args.containers, &inv)?;
            plan.containers.retain(|c| c.steps.contains(&crate::steps::plan::Step::Provision));
            if plan.containers.is_empty() {
                return Err(crate::error::Error::Usage(format!(
                    "{} provisions no container (its ref {} runs no provision step); plan the release: {}",
                    path.display(),
                    plan.git_ref,
                    crate::steps::plan::plan_command(None, "refs/heads/release", &[])
                )));
            }
            let policy = crate::steps::plan::applicable(&plan, path, &ctx.stage, kind, args.policy.given())?;
            Some((path.clone(), plan, policy))
        }
        None => None,
    };
    let specs: Vec<_> = match &saved {
        Some((_, plan, _)) => {
            let names: Vec<String> = plan.containers.iter().map(|c| c.name.clone()).collect();
            inv.select(&names, false, NotFound::InStage)?.into_iter().cloned().collect()
        }
        None => inv.select(&args.containers, args.all, NotFound::InStage)?.into_iter().cloned().collect(),
    };
    let backend = backend::open(kind, &settings, &args.pve.connect()?)?;
    ctx.inputs_checked()?;
    let jobs = args.jobs.get();
    let recreate = saved.as_ref().map_or_else(|| args.policy.policy(), |(_, _, p)| *p);
    let policy = crate::model::PlanPolicy { recreate, adopt: args.policy.adopt };
    let opts = ApplyOptions {
        share: settings.share.clone(),
        wait_ssh: args.ssh.wait(),
        ssh_port: args.ssh.ssh_port,
        ssh_timeout: args.ssh.timeout(),
        no_snapshot: args.no_snapshot,
    };
    block_on(Threads::Default, async {
        let planned = backend::plan_all(&backend, specs, policy, jobs).await;
        if !ctx.json {
            let mut s = table(&["NAME", "HOSTNAME", "VMID", "PLAN", "START"], &plan_rows(&planned));
            s.push_str(&format!(
                "\nplan for {} container(s) on {kind} (recreate policy {})\n",
                planned.len(),
                recreate.as_str()
            ));
            print!("{s}");
        }
        if let Some((path, plan, _)) = &saved {
            let live = crate::steps::deploy::saved::live_moved_of(plan, &planned, &backend);
            crate::steps::deploy::saved::refuse_moved(plan, path, &inv, &ctx.repo, &ctx.artifacts, live)?;
        }
        if args.dry_run {
            if ctx.json {
                ctx.emit_json(&plan_json(&planned), String::new);
            }
            return Ok(());
        }
        let results = step::apply_all(&backend, planned, &opts, jobs, &ctx.artifacts).await?;
        let failed: Vec<&str> =
            results.iter().filter(|p| matches!(p.outcome, Outcome::Failed { .. })).map(|p| p.name.as_str()).collect();
        let names = |f: &dyn Fn(&crate::model::Provision) -> bool| {
            results.iter().filter(|p| f(p)).map(|p| p.name.as_str()).collect::<Vec<_>>().join(",")
        };
        outputs(&[
            ("provisioned", names(&|p| matches!(p.outcome, Outcome::Ok))),
            ("failed", failed.join(",")),
            ("created", names(&|p| p.created)),
            ("provision_dir", ctx.artifacts.provision_dir().display().to_string()),
        ])?;
        super::describe::job_summary("provision", &summary_markdown(&results, kind));
        crate::actions::end_group();
        ctx.emit_all(&results, || {
            format!(
                "\n{}",
                table_of(&["NAME", "VMID", "ACTIONS", "ADDRESS", "RESULT"], &results, |p| {
                    vec![
                        p.name.clone(),
                        p.vmid.to_string(),
                        p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>().join(","),
                        p.address.clone().unwrap_or_default(),
                        match &p.outcome {
                            Outcome::Ok => "ok".into(),
                            Outcome::Failed { error } => format!("FAILED: {}", error.lines().next().unwrap_or("")),
                        },
                    ]
                })
            )
        });
        if !ctx.json {
            for p in &results {
                for w in &p.warnings {
                    eprintln!("warning: {}: {}", p.name, crate::error::terminal_safe(w));
                }
            }
        }
        all_ok(&failures(results.iter().map(|p| (p.name.as_str(), &p.outcome))), results.len())
    })?
}

/// The job summary of a provision run on `kind`: one row per container (failed first) with its
/// node, the actions taken (or the plan's action in a word when none was, e.g. `nothing`), the
/// sum of the actions' durations and the error of a failed container.
fn summary_markdown(results: &[crate::model::Provision], kind: BackendKind) -> String {
    let rows: Vec<super::describe::ResultRow> = results
        .iter()
        .map(|p| super::describe::ResultRow {
            name: p.name.clone(),
            vmid: p.vmid,
            node: p.node.clone(),
            action: if p.actions.is_empty() {
                super::describe::action_word(&p.plan.action).to_string()
            } else {
                p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>().join(", ")
            },
            ok: matches!(p.outcome, Outcome::Ok),
            duration_ms: Some(p.actions.iter().map(|a| a.duration_ms).sum()),
            error: match &p.outcome {
                Outcome::Ok => None,
                Outcome::Failed { error } => Some(error.clone()),
            },
        })
        .collect();
    super::describe::results_markdown(&format!("provision on {kind}"), &rows)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The `--timeout-*` options each subcommand shows in its help.
    fn timeouts(sub: &str) -> Vec<String> {
        let cmd = super::super::Cli::command();
        let sub = cmd.find_subcommand(sub).unwrap_or_else(|| panic!("{sub}"));
        sub.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| l.starts_with("timeout-") || l.starts_with("pve-") || *l == "insecure")
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn each_subcommand_shows_only_the_pve_options_it_uses() {
        let tls = ["pve-ca", "pve-fingerprint", "insecure", "timeout-read", "timeout-write"];
        let all = [
            "timeout-create",
            "timeout-start",
            "timeout-shutdown",
            "timeout-stop",
            "timeout-destroy",
            "timeout-lock",
            "timeout-download",
            "timeout-migrate",
            "timeout-lease",
        ];
        let with = |extra: &[&str]| tls.iter().chain(extra).map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(timeouts("plan"), with(&[]));
        assert_eq!(timeouts("snapshot"), with(&["timeout-snapshot"]));
        assert_eq!(timeouts("destroy"), with(&["timeout-shutdown", "timeout-stop", "timeout-destroy", "timeout-lock"]));
        assert_eq!(timeouts("provision"), with(&all));
        assert_eq!(timeouts("deploy"), with(&all));
    }
}
