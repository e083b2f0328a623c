//! Step `render-workflows`: the per-lib pipelines and the task workflows, written into a checkout.
//!
//! As in the seed (which renders `repo_pipeline.yml` into every lib), a push to a lib's own
//! repository deploys that lib: its workflow is rendered from
//! `workflows/templates/lib_pipeline.yml.hbs` into `<lib>/.gitea/workflows/pipeline.yml`. Each
//! task repository gets `<task>/.gitea/workflows/task.yml` from
//! `workflows/templates/task.yml.hbs`: it runs the task's script on dispatch, on a push to its
//! `main` and, when the script has a cron line, on that schedule. The monorepo's templates are
//! used when it has them, built-in copies otherwise (see [`crate::workflows`], which also holds
//! the rendering, its escaping and checks; `publish` installs the same files through `rewrite`).
//!
//! Variables: lib pipeline `lib`, `lib_dir`, `monorepo`, `runs_on`, `checkout`; task workflow
//! `task`, `task_dir`, `script`, `cron` (absent without a cron line), `monorepo`, `runs_on`,
//! `checkout`. Every selected workflow is rendered and checked before any file is written; files
//! are written atomically, only when their content changes.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Location, Problems, Result};
use crate::inventory::{CONTROL_PLANE, Inventory};
use crate::settings::CheckoutAction;
pub use crate::workflows::{
    LIB_OUTPUT as OUTPUT_PATH, LIB_TEMPLATE as BUILTIN_TEMPLATE, LIB_TEMPLATE_PATH as TEMPLATE_PATH, LibPipelineVars,
    TASK_OUTPUT, TASK_TEMPLATE, TASK_TEMPLATE_PATH, TaskVars, render, yaml_escape,
};
use crate::workflows::{is_repo_name, slash_path};

/// Options of [`render_workflows`].
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Libs to render (names).
    pub libs: Vec<String>,
    /// Tasks to render (names).
    pub tasks: Vec<String>,
    /// Render every lib (all containers but the control plane) and every task, besides the
    /// ones named.
    pub all: bool,
    /// `owner/repo` of the monorepo.
    pub monorepo: String,
    /// Runner label.
    pub runs_on: String,
    /// The checkout action (setting `PROXMOX_GITOPS_CHECKOUT`).
    pub checkout: CheckoutAction,
}

/// What a rendered workflow is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowKind {
    /// A lib's pipeline.
    Lib,
    /// A task's workflow.
    Task,
}

/// One rendered file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rendered {
    /// Lib pipeline or task workflow.
    pub kind: WorkflowKind,
    /// The lib's or task's name.
    pub name: String,
    /// The file, relative to the monorepo root.
    pub path: PathBuf,
    /// False when the file already had this content.
    pub changed: bool,
}

/// The names `known` as a message tail.
fn known(names: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = names.collect();
    if v.is_empty() { "there are none".into() } else { format!("known: {}", v.join(", ")) }
}

/// Renders the selected lib pipelines and task workflows of `inv` into the checkout at `repo` and
/// returns what was written (libs first, then tasks, in inventory order).
///
/// # Errors
/// [`Error::Input`]: an unknown lib or task, the control plane named as a lib, a `monorepo` that
/// is not `owner/repo`, an unreadable or broken template, a value that cannot be embedded;
/// [`Error::Failed`] when a file cannot be written.
pub fn render_workflows(repo: &Path, inv: &Inventory, opts: &RenderOptions) -> Result<Vec<Rendered>> {
    let mut problems = Problems::new();
    if !is_repo_name(&opts.monorepo) {
        problems.add(
            Location::file("--monorepo"),
            format!("expected the monorepo as owner/repo (letters, digits, `-_.`), found `{}`", opts.monorepo),
        );
    }
    let libs_known = || inv.containers.iter().filter(|c| c.name != CONTROL_PLANE).map(|c| c.name.clone());
    let mut libs: Vec<&crate::inventory::ContainerSpec> = Vec::new();
    for n in &opts.libs {
        match inv.container(n) {
            Some(c) if c.name == CONTROL_PLANE => problems.add(
                Location::file("--lib").with_key(n),
                "the control plane is the monorepo itself; it runs workflows/pipeline.yml, not a lib pipeline",
            ),
            Some(c) => libs.push(c),
            None => problems.add(Location::file("--lib").with_key(n), format!("no lib `{n}`; {}", known(libs_known()))),
        }
    }
    let mut tasks: Vec<&crate::inventory::Task> = Vec::new();
    for n in &opts.tasks {
        match inv.tasks.iter().find(|t| &t.name == n) {
            Some(t) => tasks.push(t),
            None => problems.add(
                Location::file("--task").with_key(n),
                format!("no task `{n}`; {}", known(inv.tasks.iter().map(|t| t.name.clone()))),
            ),
        }
    }
    if opts.all {
        libs = inv.containers.iter().filter(|c| c.name != CONTROL_PLANE).collect();
        tasks = inv.tasks.iter().collect();
    }
    let templates = (
        crate::workflows::source(repo, TEMPLATE_PATH, BUILTIN_TEMPLATE),
        crate::workflows::source(repo, TASK_TEMPLATE_PATH, TASK_TEMPLATE),
    );
    let (lib_template, task_template) = match templates {
        (Ok(l), Ok(t)) => {
            problems.into_result()?;
            (l, t)
        }
        (l, t) => {
            for e in [l.err(), t.err()].into_iter().flatten() {
                match e {
                    Error::Input(p) => problems.extend(p),
                    other => return Err(other),
                }
            }
            return Err(Error::Input(problems));
        }
    };

    let script = crate::workflows::checkout_script(repo)?;
    let mut planned = Vec::new();
    for spec in libs {
        let vars = LibPipelineVars {
            lib: spec.name.clone(),
            lib_dir: slash_path(&spec.dir),
            monorepo: opts.monorepo.clone(),
            runs_on: opts.runs_on.clone(),
            checkout: opts.checkout.uses().to_string(),
        };
        let text = render(Path::new(TEMPLATE_PATH), &lib_template.text, &vars)?;
        let text = crate::workflows::finish_checkout(Path::new(TEMPLATE_PATH), text, &opts.checkout, &script)?;
        planned.push((WorkflowKind::Lib, spec.name.clone(), spec.dir.join(OUTPUT_PATH), text));
    }
    for task in tasks {
        let vars = TaskVars::new(task, &opts.monorepo, &opts.runs_on, &opts.checkout);
        let text = render(Path::new(TASK_TEMPLATE_PATH), &task_template.text, &vars)?;
        let text = crate::workflows::finish_checkout(Path::new(TASK_TEMPLATE_PATH), text, &opts.checkout, &script)?;
        planned.push((WorkflowKind::Task, task.name.clone(), task.dir.join(TASK_OUTPUT), text));
    }
    let mut out = Vec::new();
    for (kind, name, rel, text) in planned {
        let abs = repo.join(&rel);
        let changed = std::fs::read_to_string(&abs).map(|old| old != text).unwrap_or(true);
        if changed {
            crate::artifact::write_bytes(&abs, text.as_bytes()).map_err(|e| Error::Failed(e.into()))?;
        }
        out.push(Rendered { kind, name, path: rel, changed });
    }
    Ok(out)
}
