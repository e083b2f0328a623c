//! Step `render-workflows`: the per-lib pipeline every published lib repository gets.
//!
//! As in the seed (which renders `repo_pipeline.yml` into every lib), a push to a lib's own
//! repository deploys that lib. The workflow is rendered with **handlebars** from
//! `workflows/templates/lib_pipeline.yml.hbs` in the monorepo (a built-in copy is used when the
//! monorepo has none) into `<lib>/.gitea/workflows/pipeline.yml`.
//!
//! Variables: `lib` (the lib's name), `lib_dir` (its directory in the monorepo, `/`-separated),
//! `monorepo` (`owner/repo` of the monorepo on Gitea), `runs_on` (the runner label). Every value is
//! escaped for a YAML double-quoted scalar (the template puts each `{{var}}` in double quotes) and
//! checked to hold no control characters and no `${{` (which Actions would evaluate even inside a
//! quoted string). The rendered text is parsed as YAML (yaml-rust2) before anything is written;
//! files are written atomically, only when their content changes.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Location, Problems, Result};
use crate::inventory::{CONTROL_PLANE, Inventory};

/// The template's path in the monorepo.
pub const TEMPLATE_PATH: &str = "workflows/templates/lib_pipeline.yml.hbs";
/// The built-in template (this repository's copy).
pub const BUILTIN_TEMPLATE: &str = include_str!("../../workflows/templates/lib_pipeline.yml.hbs");
/// Where the workflow goes inside a lib.
pub const OUTPUT_PATH: &str = ".gitea/workflows/pipeline.yml";

/// The template's variables for one lib.
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
}

/// Options of [`render_workflows`].
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Libs to render (names); empty = every lib (all containers but the control plane).
    pub libs: Vec<String>,
    /// `owner/repo` of the monorepo.
    pub monorepo: String,
    /// Runner label.
    pub runs_on: String,
}

/// One rendered file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rendered {
    /// The lib.
    pub lib: String,
    /// The file, relative to the monorepo root.
    pub path: PathBuf,
    /// False when the file already had this content.
    pub changed: bool,
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
fn is_repo_name(s: &str) -> bool {
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
/// result that is not such YAML; and naming the variable for a value that cannot be embedded.
pub fn render(template_name: &Path, template: &str, vars: &LibPipelineVars) -> Result<String> {
    let mut problems = Problems::new();
    let loc = Location::file(template_name);
    check_value("lib", &vars.lib, &loc, &mut problems);
    check_value("lib_dir", &vars.lib_dir, &loc, &mut problems);
    check_value("monorepo", &vars.monorepo, &loc, &mut problems);
    check_value("runs_on", &vars.runs_on, &loc, &mut problems);
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

/// Renders the per-lib pipeline into each selected lib of `inv` (rooted at `repo`) and returns
/// what was written. Every lib is rendered and checked before any file is written.
///
/// # Errors
/// [`Error::Input`]: an unknown lib, the control plane named as a lib, a `monorepo` that is not
/// `owner/repo`, an unreadable or broken template; [`Error::Failed`] when a file cannot be written.
pub fn render_workflows(repo: &Path, inv: &Inventory, opts: &RenderOptions) -> Result<Vec<Rendered>> {
    let mut problems = Problems::new();
    if !is_repo_name(&opts.monorepo) {
        problems.add(
            Location::file("--monorepo"),
            format!("expected the monorepo as owner/repo (letters, digits, `-_.`), found `{}`", opts.monorepo),
        );
    }
    let template_file = repo.join(TEMPLATE_PATH);
    let template = match std::fs::read_to_string(&template_file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BUILTIN_TEMPLATE.to_string(),
        Err(e) => {
            problems.add(Location::file(TEMPLATE_PATH), format!("cannot read the template: {e}"));
            String::new()
        }
    };
    let libs: Vec<&crate::inventory::ContainerSpec> = if opts.libs.is_empty() {
        inv.containers.iter().filter(|c| c.name != CONTROL_PLANE).collect()
    } else {
        let mut out = Vec::new();
        for n in &opts.libs {
            match inv.container(n) {
                Some(c) if c.name == CONTROL_PLANE => problems.add(
                    Location::file("--lib").with_key(n),
                    "the control plane is the monorepo itself; it runs workflows/pipeline.yml, not a lib pipeline",
                ),
                Some(c) => out.push(c),
                None => problems.add(
                    Location::file("--lib").with_key(n),
                    format!(
                        "no lib `{n}`; known: {}",
                        inv.containers
                            .iter()
                            .filter(|c| c.name != CONTROL_PLANE)
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
        }
        out
    };
    problems.into_result()?;

    let mut planned = Vec::new();
    for spec in libs {
        let vars = LibPipelineVars {
            lib: spec.name.clone(),
            lib_dir: spec.dir.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"),
            monorepo: opts.monorepo.clone(),
            runs_on: opts.runs_on.clone(),
        };
        let text = render(Path::new(TEMPLATE_PATH), &template, &vars)?;
        let rel = spec.dir.join(OUTPUT_PATH);
        planned.push((spec.name.clone(), rel, text));
    }
    let mut out = Vec::new();
    for (lib, rel, text) in planned {
        let abs = repo.join(&rel);
        let changed = std::fs::read_to_string(&abs).map(|old| old != text).unwrap_or(true);
        if changed {
            crate::artifact::write_bytes(&abs, text.as_bytes()).map_err(|e| Error::Failed(e.into()))?;
        }
        out.push(Rendered { lib, path: rel, changed });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_for_double_quoted_yaml() {
        assert_eq!(yaml_escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(yaml_escape("x\ny\u{1}"), "x\\ny\\x01");
        assert_eq!(yaml_escape("plain-lib"), "plain-lib");
    }

    #[test]
    fn repo_names() {
        assert!(is_repo_name("srv/config"));
        assert!(is_repo_name("my.org/mono_repo-1"));
        assert!(!is_repo_name("srv"));
        assert!(!is_repo_name("srv/con fig"));
        assert!(!is_repo_name("../x"));
        assert!(!is_repo_name("a/b/c"));
    }
}
