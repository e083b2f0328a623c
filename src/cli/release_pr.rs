//! `proxmox-gitops release-pr`: open or update the monorepo's release pull request with the plan
//! of the release as its description (see [`crate::steps::release_pr`]).
//!
//! The monorepo is `--monorepo`, else `PROXMOX_GITOPS_MONOREPO`, else `GITHUB_REPOSITORY` (the
//! pipeline's own repository). When `main` on Gitea has commits that `release` lacks, every
//! container of the stage is planned from this checkout (it is `main`) as a release would
//! provision it: on the backend (`--backend`, else `PROXMOX_GITOPS_BACKEND`, else pve when
//! `PROXMOX_HOST` is set, else lxc) with the recreate policy (`--recreate`, else
//! `PROXMOX_GITOPS_RECREATE`, else `never`); reads only. The plan is the `plan` command's job
//! summary. Output: a line (or `--json`, the artifact), `release-pr.json`, a job summary line,
//! and `$GITHUB_OUTPUT` (`artifact`, `pull_url`, `pull_number`, `pull_action`). Exit 0 when the
//! pull request is as it should be, 1 when Gitea or the plan failed, 2 for bad input.

use clap::Args;

use super::Ctx;
use super::args::{PveTlsArgs, from_env};
use crate::artifact;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::gitea::Client;
use crate::model::{BackendKind, RecreatePolicy};
use crate::settings::ProcessEnv;
use crate::steps::auto_merge::RepoRef;
use crate::steps::plan::{plan, with_live_state};
use crate::steps::release_pr::{PlanText, ReleasePr, ReleasePrOptions, release_pr};

/// The ref a release pull request deploys once merged.
const RELEASE_REF: &str = "refs/heads/release";

/// Arguments of `release-pr`. Settings that fall back to an Actions variable read it here
/// ([`from_env`]): a workflow passes an unset variable as an empty value, which means "not set".
#[derive(Debug, Args)]
pub struct ReleasePrArgs {
    /// The monorepo on Gitea [default: PROXMOX_GITOPS_MONOREPO, else GITHUB_REPOSITORY].
    #[arg(long, value_name = "OWNER/REPO")]
    monorepo: Option<String>,
    /// Recreate policy of the plan, as provision's: never, when-needed, always
    /// [default: PROXMOX_GITOPS_RECREATE, else never].
    #[arg(long, value_enum)]
    recreate: Option<RecreatePolicy>,
    /// Backend that plans [default: PROXMOX_GITOPS_BACKEND, else pve when PROXMOX_HOST is
    /// configured, else lxc].
    #[arg(long, value_enum, env = "PGO_BACKEND")]
    backend: Option<BackendKind>,
    /// Gitea base URL [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    gitea: Option<String>,
    #[command(flatten)]
    inventory: super::args::InventoryArg,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    /// PVE API trust (the plan only reads).
    #[command(flatten)]
    pve: PveTlsArgs,
}

/// The monorepo: `given`, else `PROXMOX_GITOPS_MONOREPO`, else `GITHUB_REPOSITORY` (empty values
/// count as unset).
///
/// # Errors
/// [`Error::Usage`] when none is set; [`Error::Input`] when it is not `OWNER/REPO`.
fn monorepo(given: Option<String>) -> Result<RepoRef> {
    let found = [
        (given, "--monorepo"),
        (crate::settings::monorepo(&ProcessEnv), "PROXMOX_GITOPS_MONOREPO"),
        (crate::actions::repository(), "GITHUB_REPOSITORY"),
    ]
    .into_iter()
    .find_map(|(v, what)| v.filter(|v| !v.trim().is_empty()).map(|v| (v, what)));
    match found {
        Some((v, what)) => RepoRef::parse(&v, what),
        None => Err(Error::Usage(format!(
            "which monorepo? {} (inside a workflow, GITHUB_REPOSITORY is used)",
            crate::error::Hint::PassOption {
                option: "--monorepo OWNER/REPO".into(),
                variable: Some("PROXMOX_GITOPS_MONOREPO".into()),
            }
        ))),
    }
}

pub fn run(ctx: &Ctx, args: ReleasePrArgs) -> Result<()> {
    let policy = match args.recreate {
        Some(p) => p,
        None => from_env("PROXMOX_GITOPS_RECREATE")?.unwrap_or_default(),
    };
    let monorepo = monorepo(args.monorepo)?;
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let settings = ctx.settings()?;
    let client =
        Client::from_settings(&settings.gitea, args.gitea.as_deref()).map_err(|e| Error::Usage(e.to_string()))?;
    crate::steps::publish::require_credentials(&client)?;
    let kind = match args.backend {
        Some(k) => k,
        None => from_env("PROXMOX_GITOPS_BACKEND")?.unwrap_or_else(|| crate::backend::default_backend(&settings)),
    };
    // A PVE backend that cannot be configured is bad input; a host that cannot run LXC plans
    // without live state, and the description says why.
    let backend: std::result::Result<Backend, String> = match kind {
        BackendKind::Pve => Ok(crate::backend::open(kind, &settings, &args.pve.connect()?)?),
        BackendKind::Lxc => crate::backend::lxc_backend(&settings).map(Backend::Lxc).map_err(|e| format!("{e:#}")),
    };
    ctx.inputs_checked()?;
    let jobs = args.jobs.get();
    let inv = &inv;
    let planned = async {
        let mut p = plan(inv, RELEASE_REF, &[])?;
        let offline = match &backend {
            Ok(b) => {
                with_live_state(&mut p, inv, b, policy, jobs).await;
                None
            }
            Err(why) => Some(super::describe::plan::Offline {
                why: format!("the {kind} backend cannot be used here: {why}"),
                no_host: false,
                lxc: kind == BackendKind::Lxc,
                containers: Vec::new(),
            }),
        };
        crate::steps::deploy::mark_done_steps(&ctx.repo, &ctx.artifacts, inv, &mut p, None);
        let node_of = |name: &str| inv.container(name).and_then(|s| s.node.clone()).unwrap_or_default();
        let against = match &offline {
            None => format!("the live {kind} backend (recreate policy `{}`)", policy.as_str()),
            Some(o) => format!("no live state ({})", crate::actions::markdown_cell(&o.why)),
        };
        Ok(PlanText {
            markdown: super::describe::plan::markdown(&p, &node_of, offline.as_ref()),
            commit: inv.head.clone(),
            against,
        })
    };
    let opts = ReleasePrOptions { monorepo };
    let report = super::run::block_on(super::run::Threads::Default, release_pr(&client, &opts, planned))??;
    finish(ctx, &report)
}

/// Writes the artifact, the job summary line and the step outputs, and prints the report.
fn finish(ctx: &Ctx, report: &ReleasePr) -> Result<()> {
    let path = ctx.artifacts.release_pr();
    artifact::write(&path, report).map_err(|e| Error::Failed(e.into()))?;
    super::describe::job_summary("release-pr", &format!("### Release pull request\n\n{}\n\n", report.summary_line()));
    super::run::outputs(&[
        ("artifact", path.display().to_string()),
        ("pull_url", report.url.clone().unwrap_or_default()),
        ("pull_number", report.number.map(|n| n.to_string()).unwrap_or_default()),
        ("pull_action", report.action.to_string()),
    ])?;
    ctx.emit(report, || human(report, &path));
    Ok(())
}

/// The human report: what was done, the pull request's page, the note; then where the artifact is.
fn human(r: &ReleasePr, path: &std::path::Path) -> String {
    let pr = match (r.number, &r.url) {
        (Some(n), Some(u)) => format!("{}#{n} ({u})", r.repository),
        (Some(n), None) => format!("{}#{n}", r.repository),
        _ => r.repository.clone(),
    };
    let mut s = match r.action {
        crate::steps::release_pr::PrAction::Opened => format!("release pull request {pr}: opened with the plan\n"),
        crate::steps::release_pr::PrAction::Updated => format!("release pull request {pr}: plan updated\n"),
        crate::steps::release_pr::PrAction::Unchanged => {
            format!("release pull request {pr}: unchanged (it already shows this plan)\n")
        }
        crate::steps::release_pr::PrAction::None => format!("{}: no release pull request needed\n", r.repository),
    };
    if let Some(n) = &r.note {
        s.push_str(n);
        s.push('\n');
    }
    s.push_str(&format!("wrote {}\n", path.display()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::release_pr::PrAction;

    #[test]
    fn human_lines() {
        let r = ReleasePr {
            repository: "main/mono".into(),
            action: PrAction::Unchanged,
            number: Some(2),
            url: Some("http://g/main/mono/pulls/2".into()),
            head: None,
            planned: None,
            ahead: 1,
            note: None,
        };
        assert_eq!(
            human(&r, std::path::Path::new("a/release-pr.json")),
            "release pull request main/mono#2 (http://g/main/mono/pulls/2): unchanged (it already shows this plan)\n\
             wrote a/release-pr.json\n"
        );
        let none = ReleasePr {
            action: PrAction::None,
            number: None,
            url: None,
            note: Some("main has no commit that release lacks: nothing to release".into()),
            ..r
        };
        assert_eq!(
            human(&none, std::path::Path::new("a/release-pr.json")),
            "main/mono: no release pull request needed\nmain has no commit that release lacks: nothing to \
             release\nwrote a/release-pr.json\n"
        );
    }
}
