//! Step `resolve`: read a monorepo (and its submodules, recursively) into one [`Inventory`].
//!
//! Layout read (the seed's):
//!
//! ```text
//! container.env  container.local.env  container.<stage>.env   # the control plane, `config`
//! globals.json   globals.local.json                            # flat string maps
//! local/config.json  local/config.local.json                   # settings (see `settings`)
//! base/  config/libraries/  tasks/<name>/  libs/<name>/container.env …
//! ```
//!
//! Every problem of a run is collected and reported together (exit 2); nothing is written then.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Problems, Result};
use crate::inventory::dotenv::{self, Entries};
use crate::inventory::spec::{self, SpecInput};
use crate::inventory::{CONTROL_PLANE, ContainerSpec, Inventory, Task};
use crate::settings::{EnvSource, Settings};

/// Options of the resolve step.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// The monorepo's working tree.
    pub repo: PathBuf,
    /// The stage: `main`, or another name whose `container.<stage>.env` files apply.
    pub stage: String,
}

/// Resolves the monorepo at `opts.repo` with settings from `env` (the process environment in
/// the CLI; a map in tests).
///
/// # Errors
/// [`Error::Input`] with every problem found: malformed env/JSON files, invalid values, duplicate
/// vmid/IP/hostname, task scripts without a cron line, a broken `.gitmodules`.
pub fn resolve(opts: &ResolveOptions, env: &dyn EnvSource) -> Result<Inventory> {
    let root = opts.repo.canonicalize().map_err(|e| {
        Error::input(Location::file(&opts.repo), format!("cannot open the repository directory: {e}"))
    })?;
    let mut problems = Problems::new();
    if !spec::is_dns_label(&opts.stage) {
        problems.add(
            Location::file("--stage"),
            format!("stage `{}` must be a DNS label (letters, digits, `-`)", opts.stage),
        );
    }

    let settings = Settings::load(&root, env).unwrap_or_else(|p| {
        problems.extend(p);
        Settings::default()
    });
    let tree = crate::git::read_tree(&root).unwrap_or_else(|p| {
        problems.extend(p);
        Default::default()
    });
    if !tree.is_repo {
        tracing::warn!("{} is not a git repository: no submodules are read", root.display());
    }
    let globals = read_globals(&root, &mut problems);

    let mut containers = Vec::new();
    if root.join("container.env").is_file() {
        if let Some(c) = container(&root, Path::new("."), CONTROL_PLANE, &opts.stage, None, &mut problems) {
            containers.push(c);
        }
    }
    let submodule_paths: Vec<PathBuf> = tree.submodules.iter().map(|s| s.path.clone()).collect();
    let libs = root.join("libs");
    let mut lib_dirs: Vec<PathBuf> = match std::fs::read_dir(&libs) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(_) => Vec::new(),
    };
    lib_dirs.sort();
    for abs in lib_dirs {
        let name = abs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let rel = Path::new("libs").join(&name);
        let submodule = submodule_paths.iter().find(|p| **p == rel).cloned();
        if !abs.join("container.env").is_file() {
            let sm = tree.submodules.iter().find(|s| s.path == rel);
            match sm {
                Some(sm) if !sm.checked_out => problems.add(
                    Location::file(&rel),
                    format!(
                        "lib `{name}` is a submodule that is not checked out; run \
                         `git submodule update --init --recursive` first"
                    ),
                ),
                _ => problems.add(
                    Location::file(rel.join("container.env")),
                    format!("lib `{name}` has no container.env (every directory under libs/ is a container)"),
                ),
            }
            continue;
        }
        if let Some(c) = container(&root, &rel, &name, &opts.stage, submodule, &mut problems) {
            containers.push(c);
        }
    }
    spec::cross_check(&containers, &mut problems);
    let tasks = read_tasks(&root, &mut problems);
    problems.into_result()?;

    let present = |p: &str| root.join(p).is_dir().then(|| PathBuf::from(p));
    Ok(Inventory {
        stage: opts.stage.clone(),
        head: tree.head,
        containers,
        submodules: tree.submodules,
        globals,
        tasks,
        base: present("base"),
        libraries: present("config/libraries"),
        settings: settings.public(),
        root,
    })
}

/// Reads and layers one container's env files and validates them.
fn container(
    root: &Path,
    rel: &Path,
    name: &str,
    stage: &str,
    submodule: Option<PathBuf>,
    problems: &mut Problems,
) -> Option<ContainerSpec> {
    let norm = |p: PathBuf| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p);
    let mut files = vec![norm(rel.join("container.env")), norm(rel.join("container.local.env"))];
    if stage != "main" {
        files.push(norm(rel.join(format!("container.{stage}.env"))));
    }
    let mut layers: Vec<Entries> = Vec::new();
    let mut sources = Vec::new();
    let mut ok = true;
    for (i, f) in files.iter().enumerate() {
        let abs = root.join(f);
        if i > 0 && !abs.is_file() {
            continue;
        }
        match dotenv::parse_file(&abs, f) {
            Ok(e) => {
                layers.push(e);
                sources.push(f.clone());
            }
            Err(p) => {
                problems.extend(p);
                ok = false;
            }
        }
    }
    if !ok {
        // Still report a bad directory name in the same run.
        let host = spec::hostname(name, stage);
        if !spec::is_dns_label(&host) {
            problems.add(
                Location::file(rel),
                format!("hostname `{host}` (from the lib's directory name) is not a valid DNS label: use letters, digits and `-` (no `_`), at most 63 characters"),
            );
        }
        return None;
    }
    let env = dotenv::layer(&layers);
    match spec::build(SpecInput {
        name,
        stage,
        dir: rel.to_path_buf(),
        abs_dir: root.join(rel),
        env: &env,
        sources,
        main_file: files[0].clone(),
        submodule,
    }) {
        Ok(c) => Some(c),
        Err(p) => {
            problems.extend(p);
            None
        }
    }
}

/// `globals.json` < `globals.local.json`: flat maps of strings; empty values dropped. Problems
/// name the file and key.
pub fn read_globals(root: &Path, problems: &mut Problems) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for file in ["globals.json", "globals.local.json"] {
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.add(Location::file(file), format!("cannot read file: {e}"));
                continue;
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.add(Location::line(file, e.line()), format!("invalid JSON: {e}"));
                continue;
            }
        };
        let Some(map) = value.as_object() else {
            problems.add(Location::file(file), "expected a JSON object of string values");
            continue;
        };
        for (k, v) in map {
            match v {
                serde_json::Value::String(s) if s.is_empty() => {
                    out.remove(k);
                }
                serde_json::Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                serde_json::Value::Null => {
                    out.remove(k);
                }
                other => problems.add(
                    Location::file(file).with_key(k),
                    format!("expected a string value, found {other} (globals are flat string maps; quote it)"),
                ),
            }
        }
    }
    out
}

/// Finds the `# ! cron '<expr>'` line in a script's text: `(line, expr)`.
pub fn find_cron(text: &str) -> Option<(usize, String)> {
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('#') else { continue };
        let Some(rest) = rest.trim_start().strip_prefix('!') else { continue };
        let Some(rest) = rest.trim_start().strip_prefix("cron") else { continue };
        let rest = rest.trim();
        let expr = rest
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
            .unwrap_or(rest);
        return Some((i + 1, expr.trim().to_string()));
    }
    None
}

fn read_tasks(root: &Path, problems: &mut Problems) -> Vec<crate::inventory::Task> {
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(root.join("tasks")) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(_) => return Vec::new(),
    };
    dirs.sort();
    let mut tasks = Vec::new();
    for abs in dirs {
        let name = abs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let rel = Path::new("tasks").join(&name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&abs)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        files.sort();
        let mut found = None;
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else { continue };
            if let Some((line, expr)) = find_cron(&text) {
                let script = rel.join(f.file_name().unwrap_or_default());
                found = Some((script, line, expr));
                break;
            }
        }
        match found {
            Some((script, line, expr)) => {
                match croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Disallowed)
                    .build()
                    .parse(&expr)
                {
                    Ok(_) => tasks.push(Task { name, dir: rel, script, cron: expr }),
                    Err(e) => problems.add(
                        Location::line(&script, line),
                        format!("invalid cron expression `{expr}`: {e} (expected five fields, e.g. '0 3 * * *')"),
                    ),
                }
            }
            None => problems.add(
                Location::file(&rel),
                "no script in this task has a `# ! cron '<expr>'` line",
            ),
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_lines() {
        assert_eq!(find_cron("#!/bin/bash\n# ! cron '0 3 * * *'\necho"), Some((2, "0 3 * * *".into())));
        assert_eq!(find_cron("#! cron \"*/5 * * * *\""), Some((1, "*/5 * * * *".into())));
        assert_eq!(find_cron("#!/bin/bash\necho"), None);
    }
}
