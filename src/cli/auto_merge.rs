//! `proxmox-gitops auto-merge`: merge the open release pull requests whose deploy needs no refused
//! recreate, when `AUTO_DEPLOY` is true (see [`crate::steps::auto_merge`]).
//!
//! Off unless the environment variable `AUTO_DEPLOY` is `true`, `1` or `yes` (the task workflow
//! passes the Actions variable of that name) or `--force` is given: then it says so, writes an
//! `auto-merge.json` that records it, and exits 0. Otherwise the monorepo (`--monorepo`, else
//! `PROXMOX_GITOPS_MONOREPO`) and its lib repositories are searched for open release pull
//! requests, every container of the stage is planned with the recreate policy (`--recreate`,
//! else `PROXMOX_GITOPS_RECREATE`, else `never`) on the backend (`--backend`, else
//! `PROXMOX_GITOPS_BACKEND`, else pve when `PROXMOX_HOST` is set, else lxc), and what may be
//! merged is merged. Output: a table (or `--json`, the artifact), `auto-merge.json`, the job
//! summary, and `$GITHUB_OUTPUT` (`artifact`, `merged`, `blocked`, `failed`: `owner/repo#N`
//! lists). Exit 0 unless a merge failed (blocked pull requests are not failures).

use std::time::Duration;

use clap::Args;

use super::args::{PveTlsArgs, from_env};
use super::{Ctx, table_of};
use crate::artifact;
use crate::error::{Error, Location, Result};
use crate::gitea::{CREATE_PULL_PATIENCE, Client, Patience};
use crate::model::{BackendKind, RecreatePolicy};
use crate::settings::{EnvSource, ProcessEnv};
use crate::steps::auto_merge::{AutoMerge, AutoMergeOptions, MergeResult, RepoRef, Verdict, auto_deploy, auto_merge};

/// Arguments of `auto-merge`. The three settings that fall back to an environment variable read
/// it here ([`from_env`]) rather than through clap: a workflow passes an unset Actions variable as
/// an empty value, which must mean "not set".
#[derive(Debug, Args)]
pub struct AutoMergeArgs {
    /// The monorepo on Gitea [default: PROXMOX_GITOPS_MONOREPO].
    #[arg(long, value_name = "OWNER/REPO")]
    monorepo: Option<String>,
    /// Recreate policy of the plan, as provision's: never (a change that needs a recreate blocks
    /// the merge), when-needed, always [default: PROXMOX_GITOPS_RECREATE, else never].
    #[arg(long, value_enum)]
    recreate: Option<RecreatePolicy>,
    /// Decide and report, merge nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run although AUTO_DEPLOY is not true.
    #[arg(long)]
    force: bool,
    /// Backend that plans [default: PROXMOX_GITOPS_BACKEND, else pve when PROXMOX_HOST is
    /// configured, else lxc].
    #[arg(long, value_enum, env = "PGO_BACKEND")]
    backend: Option<BackendKind>,
    /// Gitea base URL [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    gitea: Option<String>,
    #[command(flatten)]
    jobs: super::args::JobsArg,
    /// How long a merge waits, in seconds, while Gitea answers 405 "Please try again later" (its
    /// mergeable check runs in the background after a pull request changes; a conflicting pull
    /// request gets the same answer, and fails after the wait).
    #[arg(long, value_name = "SECS", default_value_t = 20, env = "PGO_MERGE_WAIT", value_parser = clap::value_parser!(u64).range(1..=600))]
    merge_wait: u64,
    /// PVE API trust (the plan only reads).
    #[command(flatten)]
    pve: PveTlsArgs,
}

pub fn run(ctx: &Ctx, args: AutoMergeArgs) -> Result<()> {
    // Checked below, once auto-merge is on (an unusable value must not fail a run that does nothing).
    let policy = match args.recreate {
        Some(p) => Ok(p),
        None => from_env("PROXMOX_GITOPS_RECREATE").map(Option::unwrap_or_default),
    };
    let monorepo_text = args.monorepo.clone().or_else(|| crate::settings::monorepo(&ProcessEnv));
    let path = ctx.artifacts.auto_merge();
    let enabled = match auto_deploy(ProcessEnv.get("AUTO_DEPLOY").as_deref()) {
        Ok(on) => on,
        Err(other) => {
            tracing::warn!("AUTO_DEPLOY=`{other}` is not true, 1 or yes: auto-merge stays off");
            false
        }
    };
    if !enabled && !args.force {
        let note = "auto-merge is off: AUTO_DEPLOY is not true, so no pull request was merged. For the deploy task, \
                    turn it on with `proxmox-gitops env set AUTO_DEPLOY true --org tasks` (the task workflows read the \
                    variables of the tasks organization); by hand, run `AUTO_DEPLOY=true proxmox-gitops auto-merge \
                    --monorepo OWNER/REPO` (or add `--force`) with HOST and LOGIN/PASSWORD (or GITEA_TOKEN) set."
            .to_string();
        let monorepo = monorepo_text.filter(|m| !m.trim().is_empty());
        let mut report = AutoMerge::off(&ctx.stage, monorepo, policy.unwrap_or_default(), note);
        report.dry_run = args.dry_run;
        return finish(ctx, &report, &path);
    }
    // Every missing or bad setting is reported in one run: each check adds its problems, and the
    // run stops after all of them (an operational failure still stops at once).
    let mut problems = crate::error::Problems::new();
    let policy = gather(policy, "PROXMOX_GITOPS_RECREATE", &mut problems)?;
    let monorepo = match monorepo_text.as_deref().filter(|m| !m.trim().is_empty()) {
        Some(m) => gather(RepoRef::parse(m, "--monorepo / PROXMOX_GITOPS_MONOREPO"), "--monorepo", &mut problems)?,
        None => {
            problems.add_hinted(
                Location::setting("--monorepo or PROXMOX_GITOPS_MONOREPO"),
                "not set: which monorepo? (the task workflow sets PROXMOX_GITOPS_MONOREPO)",
                crate::error::Hint::PassOption {
                    option: "--monorepo OWNER/REPO".into(),
                    variable: Some("PROXMOX_GITOPS_MONOREPO".into()),
                },
            );
            None
        }
    };
    let inv = gather(ctx.inventory(None), "the monorepo", &mut problems)?;
    let settings = gather(ctx.settings(), "", &mut problems)?.unwrap_or_default();
    let client = gather(
        Client::from_settings(&settings.gitea, args.gitea.as_deref()).map_err(|e| Error::Usage(e.to_string())),
        &crate::settings::setting_names("HOST"),
        &mut problems,
    )?
    .map(|c| c.with_patience(CREATE_PULL_PATIENCE, Patience::within(Duration::from_secs(args.merge_wait))));
    if !args.dry_run && crate::gitea::Auth::from_settings(&settings.gitea).is_none() {
        gather(
            Err::<(), _>(crate::steps::publish::no_credentials()),
            "GITEA_TOKEN or LOGIN and PASSWORD",
            &mut problems,
        )?;
    }
    let kind = match args.backend {
        Some(k) => Some(k),
        None => gather(from_env("PROXMOX_GITOPS_BACKEND"), "PROXMOX_GITOPS_BACKEND", &mut problems)?
            .map(|k| k.unwrap_or_else(|| crate::backend::default_backend(&settings))),
    };
    let connect = args.pve.connect()?;
    let backend = match kind {
        Some(kind) => gather(crate::backend::open(kind, &settings, &connect), "the backend", &mut problems)?,
        None => None,
    };
    // The settings are read by resolve too: a bad setting is one problem, not two.
    let mut seen = Vec::new();
    problems.0.retain(|p| {
        !seen.contains(p) && {
            seen.push(p.clone());
            true
        }
    });
    problems.into_result()?;
    let (Some(policy), Some(monorepo), Some(inv), Some(client), Some(backend)) =
        (policy, monorepo, inv, client, backend)
    else {
        return Err(Error::Failed(anyhow::anyhow!("auto-merge: a setting was missing but no problem was recorded")));
    };
    ctx.inputs_checked()?;
    let opts = AutoMergeOptions { monorepo, policy, dry_run: args.dry_run, jobs: args.jobs.get() };
    let mut report = super::run::block_on(super::run::Threads::Default, auto_merge(&client, &backend, &inv, &opts))??;
    report.forced = args.force && !enabled;
    finish(ctx, &report, &path)?;
    match report.result {
        MergeResult::Ok => Ok(()),
        MergeResult::Failed => {
            let failed: Vec<String> = report
                .pulls_with(Verdict::Failed)
                .iter()
                .map(|p| format!("{}#{}: {}", p.repository, p.number, p.reason))
                .collect();
            Err(Error::Failed(anyhow::anyhow!("{} merge(s) failed:\n{}", failed.len(), failed.join("\n"))))
        }
    }
}

/// Adds the problems of a failed check to `problems` and returns `Ok(None)`: an input error's
/// problems as they are, a usage error as one problem at the setting `at` names; an operational
/// failure is returned as it is.
fn gather<T>(r: Result<T>, at: &str, problems: &mut crate::error::Problems) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Input(p)) => {
            problems.extend(p);
            Ok(None)
        }
        Err(Error::Usage(m)) => {
            problems.add(Location::setting(at), m);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Writes the artifact, the job summary and the step outputs, and prints the report.
fn finish(ctx: &Ctx, report: &AutoMerge, path: &std::path::Path) -> Result<()> {
    artifact::write(path, report).map_err(|e| Error::Failed(e.into()))?;
    crate::actions::summary(&summary(report))
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write the job summary: {e}")))?;
    let list = |v: Verdict| {
        report.pulls_with(v).iter().map(|p| format!("{}#{}", p.repository, p.number)).collect::<Vec<_>>().join(",")
    };
    super::run::outputs(&[
        ("artifact", path.display().to_string()),
        ("merged", list(if report.dry_run { Verdict::WouldMerge } else { Verdict::Merged })),
        ("blocked", list(Verdict::Blocked)),
        ("failed", list(Verdict::Failed)),
    ])?;
    ctx.emit(report, || human(report, path));
    Ok(())
}

/// The human report: one row per open release pull request, then a summary line.
fn human(r: &AutoMerge, path: &std::path::Path) -> String {
    let mut s = String::new();
    if !r.pulls.is_empty() {
        s.push_str(&table_of(&["REPOSITORY", "PR", "VERDICT", "REASON"], &r.pulls, |p| {
            vec![p.repository.clone(), format!("#{}", p.number), p.verdict.to_string(), p.reason.clone()]
        }));
        s.push('\n');
    }
    if let Some(note) = &r.note {
        s.push_str(note);
        s.push('\n');
    }
    if r.enabled {
        let merged = if r.dry_run { r.pulls_with(Verdict::WouldMerge) } else { r.pulls_with(Verdict::Merged) };
        s.push_str(&format!(
            "{} pull request(s): {} {}, {} blocked, {} failed (recreate policy {}{}); wrote {}\n",
            r.pulls.len(),
            merged.len(),
            if r.dry_run { "would be merged" } else { "merged" },
            r.pulls_with(Verdict::Blocked).len(),
            r.pulls_with(Verdict::Failed).len(),
            r.recreate.as_str(),
            if r.forced { ", --force: AUTO_DEPLOY is not true" } else { "" },
            path.display()
        ));
    }
    s
}

/// The job summary (Markdown): the table of pull requests, or the note.
fn summary(r: &AutoMerge) -> String {
    let cell = crate::actions::markdown_cell;
    let mut md = String::from("### proxmox-gitops auto-merge\n\n");
    if let Some(note) = &r.note {
        md.push_str(&cell(note));
        md.push_str("\n\n");
    }
    if !r.pulls.is_empty() {
        md.push_str("| Repository | Pull request | Verdict | Reason |\n|---|---|---|---|\n");
        for p in &r.pulls {
            md.push_str(&format!(
                "| {} | [#{}]({}) | {} | {} |\n",
                cell(&p.repository),
                p.number,
                cell(&p.url),
                p.verdict,
                cell(&p.reason)
            ));
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::auto_merge::{PullKind, PullVerdict};

    #[test]
    fn summary_escapes_cells() {
        let mut r = AutoMerge::off("main", Some("main/mono".into()), RecreatePolicy::Never, "off".into());
        r.note = None;
        r.enabled = true;
        r.pulls.push(PullVerdict {
            repository: "main/web".into(),
            kind: PullKind::Lib,
            number: 3,
            title: "Release Pull Request".into(),
            url: "http://g/main/web/pulls/3".into(),
            head: "abc".into(),
            containers: vec!["web".into()],
            verdict: Verdict::Blocked,
            reason: "a | b\nc <d>".into(),
            merge_commit: None,
        });
        assert_eq!(
            summary(&r),
            "### proxmox-gitops auto-merge\n\n| Repository | Pull request | Verdict | Reason |\n|---|---|---|---|\n\
             | main/web | [#3](http://g/main/web/pulls/3) | blocked | a \\| b c &lt;d&gt; |\n\n"
        );
        assert_eq!(
            human(&r, std::path::Path::new("a/auto-merge.json")),
            "REPOSITORY  PR  VERDICT  REASON\nmain/web    #3  blocked  a | b\\nc <d>\n\n1 pull request(s): 0 merged, 1 \
             blocked, 0 failed (recreate policy never); wrote a/auto-merge.json\n"
        );
    }
}
