//! Installing the workflows into the working copy, so that a published monorepo runs by itself:
//!
//! * the monorepo: `.gitea/workflows/pipeline.yml` and `.gitea/workflows/snapshot.yml`, from its
//!   `workflows/` (built-in copies when it has none);
//! * each top-level lib repository (`libs/<name>`, a converted directory or a submodule): its
//!   pipeline `.gitea/workflows/pipeline.yml`, rendered from `lib_pipeline.yml.hbs`;
//! * each task repository (`tasks/<name>`): `.gitea/workflows/task.yml`, rendered from
//!   `task.yml.hbs` for the script the task's rules choose (with `on.schedule` when it has a cron
//!   line).
//!
//! Templates and workflow files are read from the working copy (the commit being published, not
//! uncommitted edits of the checkout). Every file is rendered and checked before anything is
//! written. A repository whose files already have this content gets no commit; otherwise one tool
//! commit (`[skip ci]`, dated like its `HEAD`, so the same input gives the same commit), the libs
//! and tasks before the monorepo, which records their new commits.

use std::path::{Path, PathBuf};

use super::{ModuleRemote, failed};
use crate::error::{Error, Problems, Result};
use crate::git::Git;
use crate::settings::CheckoutAction;
use crate::workflows::{self, LibPipelineVars, Source, TaskVars};

/// What to install the workflows with.
#[derive(Debug, Clone)]
pub struct WorkflowOptions {
    /// The runner label the jobs run on (`shell` for the seed's host-mode runner).
    pub runs_on: String,
    /// The checkout action of every checkout step (setting `PROXMOX_GITOPS_CHECKOUT`).
    pub checkout: CheckoutAction,
}

/// One file to install: in the repository at `repo` (relative to the working copy; empty for the
/// monorepo), at `file` (relative to that repository).
#[derive(Debug)]
struct Planned {
    /// Index into the modules, `None` for the monorepo.
    module: Option<usize>,
    file: PathBuf,
    text: String,
}

/// The top-level `libs/<name>` or `tasks/<name>` a module is, with its name.
fn top_level<'a>(m: &'a ModuleRemote, dir: &str) -> Option<&'a str> {
    if m.parent.is_some() {
        return None;
    }
    let mut c = m.path.components();
    match (c.next(), c.next(), c.next()) {
        (Some(first), Some(name), None) if first.as_os_str() == dir => name.as_os_str().to_str(),
        _ => None,
    }
}

/// Renders every workflow of the working copy `wc` for the monorepo `monorepo` (`owner/repo`).
fn plan(wc: &Path, monorepo: &str, modules: &[ModuleRemote], opts: &WorkflowOptions) -> Result<Vec<Planned>> {
    let lib_template = workflows::source(wc, workflows::LIB_TEMPLATE_PATH, workflows::LIB_TEMPLATE)?;
    let task_template = workflows::source(wc, workflows::TASK_TEMPLATE_PATH, workflows::TASK_TEMPLATE)?;
    let script = workflows::checkout_script(wc)?;
    let mut problems = Problems::new();
    let mut out = Vec::new();
    for (i, m) in modules.iter().enumerate() {
        if let Some(lib) = top_level(m, "libs") {
            let vars = LibPipelineVars {
                lib: lib.to_string(),
                lib_dir: workflows::slash_path(&m.path),
                monorepo: monorepo.to_string(),
                runs_on: opts.runs_on.clone(),
                checkout: opts.checkout.uses().to_string(),
            };
            let text = workflows::render(Path::new(lib_template.path), &lib_template.text, &vars)?;
            let text = workflows::finish_checkout(Path::new(lib_template.path), text, &opts.checkout, &script)?;
            out.push(Planned { module: Some(i), file: workflows::LIB_OUTPUT.into(), text });
        } else if top_level(m, "tasks").is_some() {
            let Some(task) = crate::inventory::scheduled::read_task(wc, &m.path, &mut problems) else { continue };
            let vars = TaskVars::new(&task, monorepo, &opts.runs_on, &opts.checkout);
            let text = workflows::render(Path::new(task_template.path), &task_template.text, &vars)?;
            let text = workflows::finish_checkout(Path::new(task_template.path), text, &opts.checkout, &script)?;
            out.push(Planned { module: Some(i), file: workflows::TASK_OUTPUT.into(), text });
        }
    }
    problems.into_result()?;
    for (file, rel, builtin) in workflows::MONOREPO_FILES {
        let source: Source = workflows::source(wc, rel, builtin)?;
        let text = workflows::install_static(&source, &opts.checkout, &script)?;
        out.push(Planned { module: None, file: file.into(), text });
    }
    Ok(out)
}

/// Writes `text` to `dir/file` when it differs and stages it; true when it was written.
fn put(git: &Git, dir: &Path, file: &Path, text: &str) -> Result<bool> {
    let abs = dir.join(file);
    if std::fs::read(&abs).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    crate::artifact::write_bytes(&abs, text.as_bytes())
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write {}: {e}", abs.display())))?;
    git.run(dir, [std::ffi::OsStr::new("add"), "--".as_ref(), file.as_os_str()]).map_err(failed)?;
    Ok(true)
}

/// Commits what is staged in `dir` (when anything is) as the tool, dated like its `HEAD`.
fn commit_staged(git: &Git, dir: &Path, message: &str) -> Result<()> {
    if git.check(dir, ["diff", "--cached", "--quiet"]).map_err(failed)? {
        return Ok(());
    }
    let date = super::submodules::head_date(git, dir)?;
    git.commit(dir, message, &date).map_err(failed)?;
    Ok(())
}

/// Installs the workflows into the working copy `wc` (see the module docs): updates each
/// module's `commit` and `workflows`, and returns the monorepo's installed files.
///
/// # Errors
/// [`Error::Input`] for a broken template or workflow file (naming it), a task without a
/// script or with an invalid cron line, a value that cannot be embedded; [`Error::Failed`] when
/// a file cannot be written or git fails.
pub(super) fn install(
    git: &Git,
    wc: &Path,
    monorepo: &str,
    modules: &mut [ModuleRemote],
    opts: &WorkflowOptions,
) -> Result<Vec<PathBuf>> {
    let planned = plan(wc, monorepo, modules, opts)?;
    let mut monorepo_files = Vec::new();
    // Libs and tasks first (one file each), then the monorepo records their commits.
    for p in &planned {
        let Some(i) = p.module else { continue };
        let m = &mut modules[i];
        let dir = wc.join(&m.path);
        if put(git, &dir, &p.file, &p.text)? {
            let message = format!("Install {} [skip ci]", workflows::slash_path(&p.file));
            commit_staged(git, &dir, &message)?;
            m.commit = git.run(&dir, ["rev-parse", "HEAD"]).map_err(failed)?;
            git.run(wc, [std::ffi::OsStr::new("add"), "--".as_ref(), m.path.as_os_str()]).map_err(failed)?;
        }
        m.workflows.push(p.file.clone());
    }
    for p in planned.iter().filter(|p| p.module.is_none()) {
        put(git, wc, &p.file, &p.text)?;
        monorepo_files.push(p.file.clone());
    }
    commit_staged(git, wc, "Install the proxmox-gitops workflows [skip ci]")?;
    Ok(monorepo_files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::rewrite::tests::module;

    #[test]
    fn only_top_level_libs_and_tasks_get_a_workflow() {
        let mut nested = module("libs/e/vendor/f", "f", "2", false);
        nested.parent = Some("libs/e".into());
        assert_eq!(top_level(&module("libs/a", "a", "1", false), "libs"), Some("a"));
        assert_eq!(top_level(&module("tasks/nightly", "nightly", "1", true), "tasks"), Some("nightly"));
        assert_eq!(top_level(&module("tasks/nightly", "nightly", "1", true), "libs"), None);
        assert_eq!(top_level(&nested, "libs"), None);
        assert_eq!(top_level(&module("base", "base", "1", false), "libs"), None);
        assert_eq!(top_level(&module("config/libraries", "libraries", "1", true), "libs"), None);
        assert_eq!(top_level(&module("libs/a/b", "b", "1", false), "libs"), None);
    }
}
