//! The Gitea Actions workflow files proxmox-gitops installs: the monorepo's own `pipeline.yml`,
//! `snapshot.yml` and `drift.yml`, each lib's pipeline and each task's workflow.
//!
//! The monorepo's workflows are static files (`workflows/pipeline.yml`,
//! `workflows/snapshot.yml`, `workflows/drift.yml`); the lib pipeline and the task workflow are rendered with
//! **handlebars** from `workflows/templates/lib_pipeline.yml.hbs` and
//! `workflows/templates/task.yml.hbs`. Each comes from the monorepo when it has the file (a
//! user may edit them), else from the built-in copy compiled into the binary ([`Source`]).
//!
//! Both `steps::render_workflows` (writes them into a checkout) and `steps::rewrite` (commits
//! them into the repositories `publish` pushes) use this module, which is why it sits below the
//! steps.
//!
//! # Escaping
//!
//! Every template value is escaped for a YAML double-quoted scalar ([`yaml_escape`]; the
//! templates put each `{{var}}` in double quotes) and checked to hold no control characters and
//! no `${{` (which Actions would evaluate even inside a quoted string). A task's cron expression
//! is checked as resolve checks it. The rendered text must parse (yaml-rust2) as one mapping with
//! `on` and `jobs` before anything is written.
//!
//! # The checkout step
//!
//! The shipped files check out with `uses: actions/checkout@v4`. The setting
//! `PROXMOX_GITOPS_CHECKOUT` ([`CheckoutAction`]) decides what is installed: by default (`git`)
//! each such step becomes a `run:` step of git commands ([`checkout`], the script
//! `workflows/checkout.sh`), which needs no actions host; any other value is the action the steps
//! use (the templates take it as `checkout`, and in the static files every exact
//! `uses: actions/checkout@v4` is replaced). [`install_static`] and [`finish_checkout`] apply it.

pub mod checkout;

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Location, Problems, Result};
use crate::settings::{ACTIONS_CHECKOUT, CheckoutAction};

/// The lib pipeline's template, relative to the monorepo root.
pub const LIB_TEMPLATE_PATH: &str = "workflows/templates/lib_pipeline.yml.hbs";
/// The built-in lib pipeline template.
pub const LIB_TEMPLATE: &str = include_str!("../../workflows/templates/lib_pipeline.yml.hbs");
/// The task workflow's template, relative to the monorepo root.
pub const TASK_TEMPLATE_PATH: &str = "workflows/templates/task.yml.hbs";
/// The built-in task workflow template.
pub const TASK_TEMPLATE: &str = include_str!("../../workflows/templates/task.yml.hbs");
/// The monorepo's pipeline, relative to the monorepo root.
pub const PIPELINE_PATH: &str = "workflows/pipeline.yml";
/// The built-in monorepo pipeline.
pub const PIPELINE: &str = include_str!("../../workflows/pipeline.yml");
/// The monorepo's snapshot workflow, relative to the monorepo root.
pub const SNAPSHOT_PATH: &str = "workflows/snapshot.yml";
/// The built-in snapshot workflow.
pub const SNAPSHOT: &str = include_str!("../../workflows/snapshot.yml");

/// The monorepo's drift workflow, relative to the monorepo root.
pub const DRIFT_PATH: &str = "workflows/drift.yml";
/// The built-in drift workflow.
pub const DRIFT: &str = include_str!("../../workflows/drift.yml");

/// Where a lib's pipeline goes, relative to the lib's repository.
pub const LIB_OUTPUT: &str = ".gitea/workflows/pipeline.yml";
/// Where a task's workflow goes, relative to the task's repository.
pub const TASK_OUTPUT: &str = ".gitea/workflows/task.yml";
/// The monorepo's installed workflows: (installed path, source path, built-in text).
pub const MONOREPO_FILES: [(&str, &str, &str); 3] = [
    (".gitea/workflows/pipeline.yml", PIPELINE_PATH, PIPELINE),
    (".gitea/workflows/snapshot.yml", SNAPSHOT_PATH, SNAPSHOT),
    (".gitea/workflows/drift.yml", DRIFT_PATH, DRIFT),
];

/// The text of a template or static workflow and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The path named in errors (the monorepo-relative path, also for the built-in copy).
    pub path: &'static str,
    /// The text.
    pub text: String,
    /// True when the monorepo had no such file and the built-in copy is used.
    pub builtin: bool,
}

/// Reads `rel` from the monorepo at `root`, or takes `builtin` when the file does not exist.
///
/// # Errors
/// [`Error::Input`] naming `rel` when the file exists but cannot be read (or is not UTF-8).
pub fn source(root: &Path, rel: &'static str, builtin: &str) -> Result<Source> {
    match std::fs::read_to_string(root.join(rel)) {
        Ok(text) => Ok(Source { path: rel, text, builtin: false }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Source { path: rel, text: builtin.to_string(), builtin: true })
        }
        Err(e) => Err(Error::input(Location::file(rel), format!("cannot read the workflow file: {e}"))),
    }
}

/// A set of template variables: each value with its name, for the checks of [`render`].
pub trait TemplateVars: Serialize {
    /// `(name, value)` of every string variable.
    fn values(&self) -> Vec<(&'static str, &str)>;
}

/// The lib pipeline's variables (template `lib_pipeline.yml.hbs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibPipelineVars {
    /// The lib's name (container name).
    pub lib: String,
    /// The lib's directory in the monorepo, `/`-separated (e.g. `libs/broker`).
    pub lib_dir: String,
    /// The monorepo as `owner/repo` on Gitea.
    pub monorepo: String,
    /// The runner label jobs run on (the seed's host-mode label is `shell`).
    pub runs_on: String,
    /// The checkout action (`uses:` of the checkout steps).
    pub checkout: String,
}

impl TemplateVars for LibPipelineVars {
    fn values(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("lib", &self.lib),
            ("lib_dir", &self.lib_dir),
            ("monorepo", &self.monorepo),
            ("runs_on", &self.runs_on),
            ("checkout", &self.checkout),
        ]
    }
}

/// The task workflow's variables (template `task.yml.hbs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskVars {
    /// The task's name (its directory's name).
    pub task: String,
    /// The task's directory in the monorepo, `/`-separated (e.g. `tasks/health`).
    pub task_dir: String,
    /// The task's script, relative to the monorepo root, `/`-separated.
    pub script: String,
    /// The script's cron expression, when it has a cron line (`on.schedule` is rendered only
    /// then).
    pub cron: Option<String>,
    /// The monorepo as `owner/repo` on Gitea.
    pub monorepo: String,
    /// The monorepo branch the task's workflow checks out (`main`, or the task's `# ! ref`).
    pub monorepo_ref: String,
    /// The runner label.
    pub runs_on: String,
    /// The checkout action.
    pub checkout: String,
}

impl TemplateVars for TaskVars {
    fn values(&self) -> Vec<(&'static str, &str)> {
        let mut v = vec![
            ("task", self.task.as_str()),
            ("task_dir", &self.task_dir),
            ("script", &self.script),
            ("monorepo", &self.monorepo),
            ("monorepo_ref", &self.monorepo_ref),
            ("runs_on", &self.runs_on),
            ("checkout", &self.checkout),
        ];
        if let Some(c) = &self.cron {
            v.push(("cron", c));
        }
        v
    }
}

impl TaskVars {
    /// The variables for `task` of the monorepo `monorepo` (`owner/repo`).
    pub fn new(task: &crate::inventory::Task, monorepo: &str, runs_on: &str, checkout: &CheckoutAction) -> TaskVars {
        TaskVars {
            task: task.name.clone(),
            task_dir: slash_path(&task.dir),
            script: slash_path(&task.script),
            cron: task.cron.clone(),
            monorepo: monorepo.to_string(),
            monorepo_ref: task.monorepo_ref.clone().unwrap_or_else(|| "main".into()),
            runs_on: runs_on.to_string(),
            checkout: checkout.uses().to_string(),
        }
    }
}

/// `path` with `/` between its components (the form workflow files and git use).
pub fn slash_path(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Escapes `s` for the inside of a YAML double-quoted scalar (YAML 1.2 §5.7 escapes).
pub fn yaml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c => out.push(c),
        }
    }
    out
}

/// Checks a template value: no control characters, no Actions expression opener.
fn check_value(key: &str, value: &str, loc: &Location, problems: &mut Problems) {
    if value.chars().any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}') {
        problems.add(loc.clone().with_key(key), format!("`{key}` must not contain control characters or line breaks"));
    }
    if value.contains("${{") {
        problems.add(
            loc.clone().with_key(key),
            format!("`{key}` must not contain `${{{{` (Actions would evaluate it as an expression)"),
        );
    }
}

/// True for `owner/repo` with Gitea's name characters (`[A-Za-z0-9_.-]`).
pub fn is_repo_name(s: &str) -> bool {
    let ok = |p: &str| {
        !p.is_empty() && p != "." && p != ".." && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    matches!(s.split_once('/'), Some((o, r)) if ok(o) && ok(r))
}

/// Renders `template` (handlebars, strict: an unknown variable is an error) with `vars` and checks
/// that the result is one YAML mapping with `on` and `jobs`.
///
/// # Errors
/// [`Error::Input`] naming `template_name` for a template syntax error, an unknown variable, or a
/// result that is not such YAML; and naming the variable for a value that cannot be embedded
/// (control characters, `${{`, a `checkout` that is not a checkout action, an invalid `cron`).
pub fn render<V: TemplateVars>(template_name: &Path, template: &str, vars: &V) -> Result<String> {
    let mut problems = Problems::new();
    let loc = Location::file(template_name);
    for (key, value) in vars.values() {
        check_value(key, value, &loc, &mut problems);
        match key {
            "checkout" if !value.contains("${{") => {
                if let Err(why) = CheckoutAction::parse(value) {
                    problems.add(loc.clone().with_key(key), why);
                }
            }
            "cron" => {
                if let Err(why) = crate::inventory::scheduled::parse_cron(value) {
                    problems.add(loc.clone().with_key(key), why);
                }
            }
            _ => {}
        }
    }
    problems.into_result()?;

    let mut hb = handlebars::Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(yaml_escape);
    let text = hb.render_template(template, vars).map_err(|e| {
        let line = e.line_no.or(match &e.reason() {
            handlebars::RenderErrorReason::TemplateError(t) => t.pos().map(|(l, _)| l),
            _ => None,
        });
        let loc = match line {
            Some(l) => Location::line(template_name, l),
            None => Location::file(template_name),
        };
        Error::input(loc, format!("cannot render the template: {}", e.reason()))
    })?;
    check_yaml(template_name, &text)?;
    Ok(text)
}

/// A static workflow (`workflows/pipeline.yml`, `workflows/snapshot.yml`, `workflows/drift.yml`)
/// as installed with the checkout setting `checkout`: for `git`, every checkout step becomes the
/// git step of `script` ([`checkout::git_steps`]); for an action, every line's exact
/// `uses: actions/checkout@v4` becomes `uses: "<action>"` (unchanged for that action itself). The
/// result must be one YAML mapping with `on` and `jobs`.
///
/// # Errors
/// [`Error::Input`] naming the source file when it is not such YAML, or as
/// [`checkout::git_steps`].
pub fn install_static(source: &Source, checkout: &CheckoutAction, script: &Source) -> Result<String> {
    let text = if checkout.is_git() {
        checkout::git_steps(Path::new(source.path), &source.text, &script.text)?
    } else if checkout.uses() == ACTIONS_CHECKOUT {
        source.text.clone()
    } else {
        let from = format!("uses: {ACTIONS_CHECKOUT}");
        let to = format!("uses: \"{}\"", yaml_escape(checkout.as_str()));
        let mut out = String::with_capacity(source.text.len());
        for line in source.text.split_inclusive('\n') {
            let body = line.trim_end_matches(['\n', '\r']);
            let trimmed = body.trim_start().trim_start_matches("- ");
            if trimmed.trim_end() == from {
                out.push_str(&line.replacen(&from, &to, 1));
            } else {
                out.push_str(line);
            }
        }
        out
    };
    check_yaml(Path::new(source.path), &text)?;
    Ok(text)
}

/// A workflow rendered from a template (with `checkout` = [`CheckoutAction::uses`]) as
/// installed: for `git`, its checkout steps become the git step of `script`
/// ([`checkout::git_steps`]); otherwise `text` as it is.
///
/// # Errors
/// As [`checkout::git_steps`], naming `template_name`; [`Error::Input`] when the result is not
/// one YAML mapping with `on` and `jobs`.
pub fn finish_checkout(
    template_name: &Path,
    text: String,
    checkout: &CheckoutAction,
    script: &Source,
) -> Result<String> {
    if !checkout.is_git() {
        return Ok(text);
    }
    let text = checkout::git_steps(template_name, &text, &script.text)?;
    check_yaml(template_name, &text)?;
    Ok(text)
}

/// The checkout script of the monorepo at `root` (`workflows/checkout.sh`), else the built-in one.
///
/// # Errors
/// As [`source`].
pub fn checkout_script(root: &Path) -> Result<Source> {
    source(root, checkout::SCRIPT_PATH, checkout::SCRIPT)
}

/// Parses `text` as YAML and checks it is one mapping with the keys `on` and `jobs`.
fn check_yaml(template_name: &Path, text: &str) -> Result<()> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| {
        Error::input(
            Location::file(template_name),
            format!("the rendered workflow is not valid YAML (line {} of the output): {e}", e.marker().line()),
        )
    })?;
    let ok = docs.len() == 1
        && docs[0].as_hash().is_some_and(|h| {
            h.contains_key(&yaml_rust2::Yaml::String("on".into()))
                && h.contains_key(&yaml_rust2::Yaml::String("jobs".into()))
        });
    if !ok {
        return Err(Error::input(
            Location::file(template_name),
            "the rendered workflow must be one YAML mapping with the keys `on` and `jobs`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
