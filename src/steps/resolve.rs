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
//! A lib without a `container.env` but with an engine file or a `metadata.rb` (the original
//! project's `libs/share`), and the original's root `config/` cookbook, are configuration, not
//! containers ([`ConfigLib`]): listed, provisioned nowhere, and reported as not applied.
//!
//! Every problem of a run is collected and reported together (exit 2); nothing is written then.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Problems, Result};
use crate::inventory::dotenv::{self, Entry};
pub use crate::inventory::globals::{GlobalNameError, global_name, read_globals};
use crate::inventory::spec::{self, SpecInput};
use crate::inventory::{CONTROL_PLANE, ConfigLib, ContainerSpec, Engine, Inventory, Task};
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
/// vmid/IP/hostname, a task without a script (or with several and none named `default.*` or
/// `main.*`), an invalid cron line, a broken `.gitmodules`.
pub fn resolve(opts: &ResolveOptions, env: &dyn EnvSource) -> Result<Inventory> {
    let root = opts
        .repo
        .canonicalize()
        .map_err(|e| Error::input(Location::file(&opts.repo), format!("cannot open the repository directory: {e}")))?;
    let mut problems = Problems::new();
    let stage_ok = spec::is_dns_label(&opts.stage);
    if !stage_ok {
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

    let all_submodules = crate::git::flatten(&tree.submodules);
    // Looked up once per lib and task: a map, not a scan of every submodule each time (which
    // made resolve quadratic in the number of submodules). The first one at a path wins.
    let mut by_path: HashMap<&Path, &crate::inventory::Submodule> = HashMap::with_capacity(all_submodules.len());
    for s in &all_submodules {
        by_path.entry(s.path.as_path()).or_insert(*s);
    }
    let submodule_at = |rel: &Path| by_path.get(rel).copied();

    // Valid containers, control plane first, then libs by name; and the identity (vmid, IP,
    // hostname) of every container whose env files parse, valid or not, for the cross-checks.
    let mut resolved: Vec<ContainerSpec> = Vec::new();
    let mut identities: Vec<spec::Identity> = Vec::new();
    if root.join("container.env").is_file() {
        container(
            &root,
            Path::new("."),
            CONTROL_PLANE,
            &opts.stage,
            None,
            &mut resolved,
            &mut identities,
            &mut problems,
        );
    }
    // Every directory under libs/ is a lib, and so is every submodule registered there (a
    // submodule whose directory is missing is still a lib the user expects to deploy).
    // The original project's control-plane cookbook, when the root has no engine of its own.
    let mut configs: Vec<ConfigLib> = Vec::new();
    if root.join("config/recipes/default.rb").is_file() && Engine::files(&root).is_empty() {
        configs.extend(ConfigLib::detect(
            &root,
            Path::new("config"),
            CONTROL_PLANE,
            submodule_at(Path::new("config")).map(|s| s.path.clone()),
        ));
    }
    let mut lib_names: Vec<String> = match std::fs::read_dir(root.join("libs")) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    for sm in &all_submodules {
        if let Ok(rest) = sm.path.strip_prefix("libs")
            && rest.components().count() == 1
        {
            lib_names.push(rest.to_string_lossy().into_owned());
        }
    }
    lib_names.sort();
    lib_names.dedup();
    for name in lib_names {
        if name.starts_with('.') {
            continue;
        }
        let rel = Path::new("libs").join(&name);
        let sm = submodule_at(&rel);
        if !root.join(&rel).join("container.env").is_file() {
            match sm {
                Some(sm) if !sm.checked_out => problems.add(Location::file(&rel), unchecked_submodule("lib", &name)),
                _ if root.join(&rel).join(ORIGINAL_ENV).is_file() => {
                    problems.add(Location::file(rel.join(ORIGINAL_ENV)), rename_original_env(&name, &rel, sm.is_some()))
                }
                _ => match ConfigLib::detect(&root, &rel, &name, sm.map(|s| s.path.clone())) {
                    Some(c) => configs.push(c),
                    None => problems.add(
                        Location::file(rel.join("container.env")),
                        format!(
                            "lib `{name}` has no container.env and no configuration: every directory under libs/ is \
                             a container (container.env) or configuration (playbook.yml, configure.sh, \
                             recipes/default.rb or a cookbook's metadata.rb)"
                        ),
                    ),
                },
            }
            continue;
        }
        let submodule = sm.map(|s| s.path.clone());
        container(&root, &rel, &name, &opts.stage, submodule, &mut resolved, &mut identities, &mut problems);
    }
    spec::cross_check_identities(&identities, &mut problems);
    let containers: Vec<ContainerSpec> = resolved;
    for c in &containers {
        tracing::debug!(
            "container {} (vmid {}, hostname {}) from {}",
            c.name,
            c.vmid,
            c.hostname,
            c.sources.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" < ")
        );
    }
    let tasks = read_tasks(&root, &by_path, &mut problems);
    tracing::debug!(
        "{} submodule(s) ({} checked out), {} task(s), {} global(s)",
        all_submodules.len(),
        all_submodules.iter().filter(|s| s.checked_out).count(),
        tasks.len(),
        globals.len()
    );
    if !stage_ok {
        // One problem for a bad --stage, not one more per container for the hostnames it makes.
        let prefix = format!("hostname `{}-", opts.stage);
        problems.0.retain(|p| !(p.location.key.as_deref() == Some("hostname") && p.message.starts_with(&prefix)));
    }
    problems.into_result()?;
    for c in &configs {
        crate::actions::warn_problem(&crate::error::Problem::new(Location::file(&c.dir), c.not_applied()), &root);
    }

    let present = |p: &str| root.join(p).is_dir().then(|| PathBuf::from(p));
    Ok(Inventory {
        stage: opts.stage.clone(),
        head: tree.head,
        containers,
        submodules: tree.submodules,
        globals,
        tasks,
        configs,
        base: present("base"),
        libraries: present("config/libraries"),
        settings: settings.public(),
        root,
    })
}

/// The original project's name for a lib's `container.env`.
pub const ORIGINAL_ENV: &str = "config.env";

/// The problem of the lib at `rel` that has the original project's [`ORIGINAL_ENV`] and no
/// `container.env`: how to rename it (inside the submodule when the lib is one).
fn rename_original_env(name: &str, rel: &Path, submodule: bool) -> String {
    let (old, new) = (rel.join(ORIGINAL_ENV), rel.join("container.env"));
    let mv = if submodule {
        format!("git -C {} mv {ORIGINAL_ENV} container.env", rel.display())
    } else {
        format!("git mv {} {}", old.display(), new.display())
    };
    format!(
        "lib `{name}` has no container.env: `{}` is the original project's name for this file: rename it to \
         `container.env` (`{mv}`)",
        old.display()
    )
}

/// The problem of a `what` (`lib`, `task`) directory that is a submodule not checked out.
fn unchecked_submodule(what: &str, name: &str) -> String {
    format!(
        "{what} `{name}` is a submodule that is not checked out; {} first",
        crate::error::Hint::command(["git", "submodule", "update", "--init", "--recursive"])
    )
}

/// Reads and layers one container's env files and validates them: pushes the spec when valid
/// and the identity when the files parse.
#[allow(clippy::too_many_arguments)]
fn container(
    root: &Path,
    rel: &Path,
    name: &str,
    stage: &str,
    submodule: Option<PathBuf>,
    specs: &mut Vec<ContainerSpec>,
    identities: &mut Vec<spec::Identity>,
    problems: &mut Problems,
) {
    let norm = |p: PathBuf| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p);
    let mut files = vec![norm(rel.join("container.env")), norm(rel.join("container.local.env"))];
    if stage != "main" {
        files.push(norm(rel.join(format!("container.{stage}.env"))));
    }
    // The layered env of what parsed, and the keys whose winning line did not: a bad line in
    // one file leaves the other keys of that file in the cross-checks (every problem of a run is
    // reported at once), while its own key is unknown, not taken from a lower layer.
    let mut env: BTreeMap<String, Entry> = BTreeMap::new();
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    let mut sources = Vec::new();
    let mut ok = true;
    let mut readable = true;
    for (i, f) in files.iter().enumerate() {
        let abs = root.join(f);
        if i > 0 && !abs.is_file() {
            continue;
        }
        let read = dotenv::parse_file_lenient(&abs, f);
        // Repeated keys and known keys in the wrong case: warned about, not refused.
        for w in dotenv::lint(&read.entries, spec::KNOWN_KEYS) {
            crate::actions::warn_problem(&w, root);
        }
        ok &= read.problems.is_empty();
        readable &= read.readable;
        problems.extend(read.problems);
        let mut lines: Vec<(usize, Result<Entry, Option<String>>)> =
            read.entries.into_iter().map(|e| (e.line, Ok(e))).collect();
        lines.extend(read.unreadable.into_iter().map(|(line, key)| (line, Err(key))));
        lines.sort_by_key(|(line, _)| *line);
        for (_, line) in lines {
            match line {
                Ok(e) => {
                    unknown.remove(&e.key);
                    env.insert(e.key.clone(), e);
                }
                // A line that assigns no key sets nothing (bash would run it as a command).
                Err(None) => {}
                Err(Some(key)) => {
                    env.remove(&key);
                    unknown.insert(key);
                }
            }
        }
        sources.push(f.clone());
    }
    if !readable {
        // Nothing is known of a file that cannot be read; still report a bad directory name.
        let host = spec::hostname(name, stage);
        if !spec::is_dns_label(&host) {
            problems.add(
                Location::file(rel).with_key("hostname"),
                format!(
                    "hostname `{host}` (from the lib's directory name) is not a valid DNS label: use \
                     letters, digits and `-` (no `_`), at most 63 characters"
                ),
            );
        }
        return;
    }
    identities.push(spec::Identity::from_env(name, stage, rel.to_path_buf(), &env));
    let built = spec::build(SpecInput {
        name,
        stage,
        dir: rel.to_path_buf(),
        abs_dir: root.join(rel),
        env: &env,
        sources,
        main_file: files[0].clone(),
        submodule,
    });
    match built {
        Ok(c) if ok => specs.push(c),
        Ok(_) => {}
        // The problems of the keys that were read; a key whose line was unreadable is reported
        // at that line already (not again as missing).
        Err(p) => {
            problems.0.extend(p.0.into_iter().filter(|p| p.location.key.as_ref().is_none_or(|k| !unknown.contains(k))))
        }
    }
}

pub use crate::inventory::scheduled::find_cron;

/// Reads every task directory `tasks/<name>/` (hidden ones skipped), by name: a submodule that is
/// not checked out is named as such; otherwise see [`crate::inventory::scheduled::read_task`].
fn read_tasks(
    root: &Path,
    submodules: &HashMap<&Path, &crate::inventory::Submodule>,
    problems: &mut Problems,
) -> Vec<Task> {
    let mut names: Vec<String> = match std::fs::read_dir(root.join("tasks")) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    let mut tasks = Vec::new();
    for name in names {
        if name.starts_with('.') {
            continue;
        }
        let rel = Path::new("tasks").join(&name);
        match submodules.get(rel.as_path()) {
            Some(sm) if !sm.checked_out => problems.add(Location::file(&rel), unchecked_submodule("task", &name)),
            _ => tasks.extend(crate::inventory::scheduled::read_task(root, &rel, problems)),
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_env_rename_hint() {
        assert_eq!(
            rename_original_env("x", Path::new("libs/x"), false),
            "lib `x` has no container.env: `libs/x/config.env` is the original project's name for this file: rename it to `container.env` \
             (`git mv libs/x/config.env libs/x/container.env`)"
        );
        assert_eq!(
            rename_original_env("x", Path::new("libs/x"), true),
            "lib `x` has no container.env: `libs/x/config.env` is the original project's name for this file: rename it to `container.env` \
             (`git -C libs/x mv config.env container.env`)"
        );
    }
}
