//! `proxmox-gitops plan`: what a deploy of a ref would do, without changing anything.

use std::path::PathBuf;

use clap::Args;

use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Result};
use crate::steps::plan::plan;

/// Arguments of `plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The ref being deployed: refs/heads/release, refs/heads/main or refs/heads/snapshot.
    #[arg(long = "ref", env = "GITHUB_REF", default_value = "refs/heads/release")]
    git_ref: String,
    /// Containers to plan (lib name or hostname); repeatable. Default: all of the stage.
    #[arg(long = "container", short = 'c')]
    containers: Vec<String>,
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// Do not contact PVE: plan the steps only (the default when PROXMOX_HOST is not set).
    #[arg(long)]
    offline: bool,
    /// How many containers are planned against PVE at the same time.
    #[arg(long, short = 'j', default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: u16,
    #[command(flatten)]
    policy: super::args::PolicyArgs,
    /// PVE API trust (plan only reads: no task timeouts).
    #[command(flatten)]
    pve: super::args::PveTlsArgs,
}

pub fn run(ctx: &Ctx, args: PlanArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let mut p = plan(&inv, &args.git_ref, &args.containers)?;
    let settings = crate::settings::Settings::load(&ctx.repo, &crate::settings::ProcessEnv)?;
    let provisions = p.containers.iter().any(|c| c.steps.contains(&crate::steps::plan::Step::Provision));
    // Without PVE (or with --offline) nothing is contacted: the provision actions stay unknown,
    // and the human output says so and why.
    let offline = match (provisions, args.offline, settings.pve.host.is_some()) {
        (false, _, _) => None,
        (true, true, _) => Some("--offline"),
        (true, false, false) => Some("PROXMOX_HOST is not set"),
        (true, false, true) => None,
    };
    let backend = match offline.is_none() && provisions {
        true => Some(crate::backend::open(crate::backend::model::BackendKind::Pve, &settings, &args.pve.connect()?)?),
        false => None,
    };
    ctx.inputs_checked()?;
    if let Some(backend) = backend {
        // Live state: what provision would do to each container (reads only).
        let live =
            crate::steps::plan::with_live_state(&mut p, &inv, &backend, args.policy.policy(), usize::from(args.jobs));
        super::run::block_on(super::run::Threads::Default, live)?;
    }
    let path = ctx.artifacts.plan();
    artifact::write(&path, &p).map_err(|e| Error::Failed(e.into()))?;
    let names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
    super::run::outputs(&[
        ("artifact", path.display().to_string()),
        ("plan", path.display().to_string()),
        ("containers", names.join(",")),
        ("containers_json", serde_json::to_string(&names).expect("strings serialize")),
        (
            "steps",
            crate::steps::plan::steps_for_ref(&p.git_ref)?.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
        ),
    ])?;
    ctx.emit(&p, || human(&p, offline));
    Ok(())
}

/// The human summary of `p`. `offline` is why the provision actions were not computed (no PVE
/// was contacted); the PROVISION column then shows `-` for provisioning containers and a footer
/// line explains it.
fn human(p: &crate::steps::plan::Plan, offline: Option<&str>) -> String {
    let mut s = table_of(&["NAME", "HOSTNAME", "VMID", "STEPS", "PROVISION"], &p.containers, |c| {
        vec![
            c.name.clone(),
            c.hostname.clone(),
            c.vmid.to_string(),
            c.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" + "),
            match (&c.provision, &c.provision_error) {
                (Some(cp), _) => super::describe::describe(cp),
                (None, Some(e)) => format!("cannot plan: {}", e.lines().next().unwrap_or("")),
                (None, None) if c.steps.contains(&crate::steps::plan::Step::Provision) => "-".into(),
                (None, None) => String::new(),
            },
        ]
    });
    s.push_str(&format!("\n{} container(s) for {} (stage {})\n", p.containers.len(), p.git_ref, p.stage));
    if let Some(why) = offline {
        s.push_str(&format!(
            "provision actions: not computed (offline plan: {why}; run `proxmox-gitops provision --all --dry-run` to \
             compare with the live host)\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::plan::{Plan, PlannedContainer, Step};

    fn plan(steps: Vec<Step>) -> Plan {
        Plan {
            git_ref: "refs/heads/release".into(),
            stage: "main".into(),
            containers: vec![PlannedContainer {
                name: "broker".into(),
                hostname: "broker".into(),
                vmid: 101,
                steps,
                provision: None,
                provision_error: None,
            }],
        }
    }

    #[test]
    fn offline_plan_says_why_provision_is_empty() {
        assert_eq!(
            human(&plan(vec![Step::Provision, Step::Configure]), Some("PROXMOX_HOST is not set")),
            "NAME    HOSTNAME  VMID  STEPS                  PROVISION\n\
             broker  broker    101   provision + configure  -\n\
             \n\
             1 container(s) for refs/heads/release (stage main)\n\
             provision actions: not computed (offline plan: PROXMOX_HOST is not set; run `proxmox-gitops provision \
             --all --dry-run` to compare with the live host)\n"
        );
        // A ref without provision has nothing to explain.
        assert_eq!(
            human(&plan(vec![Step::Configure]), None),
            "NAME    HOSTNAME  VMID  STEPS      PROVISION\n\
             broker  broker    101   configure\n\
             \n\
             1 container(s) for refs/heads/release (stage main)\n"
        );
    }
}
