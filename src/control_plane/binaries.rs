//! The control plane's programs on the host that configures `config`: given by the settings, or
//! downloaded from Gitea's release site and verified ([`crate::gitea::release`]).

use std::path::{Path, PathBuf};

use crate::error::{Location, Problems};
use crate::gitea::release::{self, Program};
use crate::settings::{ControlPlaneSettings, setting_names};

/// The versions of Gitea and its runner: `GITEA_VERSION` and `GITEA_RUNNER_VERSION` of the
/// monorepo's `versions.env` (the file the real-host tests build from), else the ones this
/// binary was built with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// Gitea's version without a leading `v`, e.g. `1.27.3`.
    pub gitea: String,
    /// The runner's version without a leading `v`, e.g. `1.0.8`.
    pub runner: String,
}

const BUILT_IN: &str = include_str!("../../versions.env");

impl Versions {
    /// Reads `<root>/versions.env` (plain `KEY=value` lines; `#` comments), falling back to the
    /// built-in file for a key it lacks.
    ///
    /// # Errors
    /// An unreadable file, or a version that is not dotted digits, naming the file and key.
    pub fn read(root: &Path) -> Result<Versions, Problems> {
        let file = Path::new("versions.env");
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                let mut p = Problems::new();
                p.add(Location::file(file), format!("cannot read: {e}"));
                return Err(p);
            }
        };
        let get = |text: &str, key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.trim().split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        let mut problems = Problems::new();
        let mut pick = |key: &str| {
            let v = get(&text, key).or_else(|| get(BUILT_IN, key)).unwrap_or_default();
            let v = v.strip_prefix('v').unwrap_or(&v).to_string();
            if v.is_empty() || !v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
                problems.add(Location::file(file).with_key(key), format!("expected a version like 1.2.3, found `{v}`"));
            }
            v
        };
        let v = Versions { gitea: pick("GITEA_VERSION"), runner: pick("GITEA_RUNNER_VERSION") };
        problems.into_result()?;
        Ok(v)
    }
}

/// The programs `config` gets, as paths on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// Gitea.
    pub gitea: PathBuf,
    /// Gitea's `templates/` and `options/` for a binary built without them, else `None`.
    pub gitea_static: Option<PathBuf>,
    /// The runner.
    pub runner: PathBuf,
    /// proxmox-gitops itself (this process's executable).
    pub tool: PathBuf,
}

/// Checks the paths the settings give, without contacting anything: each must be an executable
/// file (the static directory: a directory with `templates/` and `options/`).
///
/// # Errors
/// Every bad path, naming the setting and what was expected.
pub fn check_given(settings: &ControlPlaneSettings) -> Result<(), Problems> {
    use std::os::unix::fs::PermissionsExt;
    let mut problems = Problems::new();
    let mut exe = |path: &Option<PathBuf>, var: &str| {
        if let Some(p) = path {
            match std::fs::metadata(p) {
                Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
                Ok(_) => problems
                    .add(Location::setting(setting_names(var)), format!("`{}` is not an executable file", p.display())),
                Err(e) => problems.add(Location::setting(setting_names(var)), format!("`{}`: {e}", p.display())),
            }
        }
    };
    exe(&settings.gitea_binary, "PGO_GITEA_BINARY");
    exe(&settings.runner_binary, "PGO_RUNNER_BINARY");
    if let Some(p) = &settings.gitea_static
        && !(p.join("templates").is_dir() && p.join("options").is_dir())
    {
        problems.add(
            Location::setting(setting_names("PGO_GITEA_STATIC")),
            format!("`{}` is not a directory with Gitea's templates/ and options/", p.display()),
        );
    }
    problems.into_result()
}

/// The programs for `config`: the paths the settings give, else downloads of `versions` from the
/// release site into the settings' cache (`<cache>/gitea-<v>/gitea`,
/// `<cache>/gitea-runner-<v>/gitea-runner`), each verified against its published SHA-256 and
/// reused by later runs.
///
/// # Errors
/// A given path that is no executable file ([`check_given`]); a program not given when no cache
/// directory is known; a failed or unverified download, with the setting that avoids it.
pub async fn binaries(settings: &ControlPlaneSettings, versions: &Versions) -> anyhow::Result<Binaries> {
    check_given(settings)?;
    let site = settings.download_site.as_deref().unwrap_or(release::DEFAULT_SITE);
    let fetch = |program: Program, version: &str, var: &str| {
        let var = var.to_string();
        let version = version.to_string();
        let cache = settings.cache.clone();
        async move {
            let cache = cache.ok_or_else(|| {
                anyhow::anyhow!(
                    "{} is not set and there is no cache directory to download {} {version} into (set HOME or \
                     XDG_CACHE_HOME)",
                    setting_names(&var),
                    program.name()
                )
            })?;
            let dest = cache.join(format!("{}-{version}", program.name())).join(program.name());
            if dest.is_file() {
                return Ok(dest);
            }
            let url = release::binary_url(site, program, &version, std::env::consts::ARCH)?;
            tracing::info!("downloading {url} (verified against {url}.sha256)");
            release::download_verified(&url, &dest).await.map_err(|e| {
                anyhow::anyhow!("{e}; without internet access, set {} to the program on this host", setting_names(&var))
            })?;
            Ok::<PathBuf, anyhow::Error>(dest)
        }
    };
    let gitea = match &settings.gitea_binary {
        Some(p) => p.clone(),
        None => fetch(Program::Gitea, &versions.gitea, "PGO_GITEA_BINARY").await?,
    };
    let runner = match &settings.runner_binary {
        Some(p) => p.clone(),
        None => fetch(Program::Runner, &versions.runner, "PGO_RUNNER_BINARY").await?,
    };
    identify(&gitea, "PGO_GITEA_BINARY", &["gitea version "], &versions.gitea).await.and_then(|out| {
        // A Gitea built without the `bindata` tag reads its templates from STATIC_ROOT_PATH.
        if settings.gitea_static.is_none() && !out.contains("bindata") {
            anyhow::bail!(
                "{} ({}) is built without its templates and options (its --version lists no `bindata`): set {} to the \
                 directory with its templates/ and options/",
                setting_names("PGO_GITEA_BINARY"),
                gitea.display(),
                setting_names("PGO_GITEA_STATIC")
            );
        }
        Ok(())
    })?;
    identify(&runner, "PGO_RUNNER_BINARY", &["gitea-runner version ", "act_runner version "], &versions.runner).await?;
    let tool = match &settings.tool_binary {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find this program's own path: {e}"))?,
    };
    if !tool.is_file() {
        anyhow::bail!(
            "proxmox-gitops itself is no longer at {} (replaced while running?): run it again",
            tool.display()
        );
    }
    Ok(Binaries { gitea, gitea_static: settings.gitea_static.clone(), runner, tool })
}

/// Runs `path --version` (at most 10 s) and checks that it is the program `var` names: its first
/// line starts with one of `prefixes` (case-insensitive). A version other than `pinned` is a
/// warning: a deliberate choice is allowed. Returns the output.
///
/// # Errors
/// The program cannot run, runs too long, or says it is something else, naming the setting.
async fn identify(path: &Path, var: &str, prefixes: &[&str], pinned: &str) -> anyhow::Result<String> {
    let what = || format!("{} ({})", setting_names(var), path.display());
    let run = tokio::process::Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(std::time::Duration::from_secs(10), run).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => anyhow::bail!("{} cannot run: {e}", what()),
        Err(_) => anyhow::bail!("{} did not answer --version within 10 s", what()),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = text.lines().next().unwrap_or("").trim().to_ascii_lowercase();
    let Some(rest) = prefixes.iter().find_map(|p| first.strip_prefix(p)) else {
        anyhow::bail!(
            "{} is not the expected program: `--version` printed `{}`, expected a line starting with `{}`",
            what(),
            text.lines().next().unwrap_or("").trim(),
            prefixes[0].trim()
        );
    };
    let version = rest.split_whitespace().next().unwrap_or("").trim_start_matches('v');
    if version != pinned {
        tracing::warn!("{} is version {version}, not {pinned} (versions.env)", what());
    }
    Ok(text)
}
