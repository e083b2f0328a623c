//! The control plane's own container (`config`, the root `container.env`): what runs in it and
//! what the root's playbook (`playbook.yml`) is handed to install it.
//!
//! `config` runs Gitea and its Actions runner, each a systemd service under its own user:
//!
//! | what | where in the container |
//! |---|---|
//! | Gitea, the runner, proxmox-gitops | `/usr/local/bin/{gitea,gitea-runner,proxmox-gitops}` |
//! | Gitea's `templates/` and `options/` (only for a binary built without them) | [`STATIC_DIR`] |
//! | Gitea's configuration (rendered here, replaced on every configure) | `/etc/gitea/app.ini` |
//! | the runner's configuration (rendered here) | `/etc/gitea-runner/config.yaml` |
//! | **all data**: repositories, SQLite database, Gitea's secrets, the runner's registration | [`DATA_DIR`] |
//!
//! [`DATA_DIR`] is what the root `container.env` declares as `SNAPSHOT`, so a recreate or a move
//! to another host keeps every repository, user, variable and the runner's registration.
//!
//! The programs come from the host that configures `config` ([`binaries`]): the paths the
//! settings give (`PGO_GITEA_BINARY`, `PGO_GITEA_STATIC`, `PGO_RUNNER_BINARY`, or the
//! `control_plane` keys of `local/config*.json`), else Gitea's release site at the versions of the
//! monorepo's `versions.env`, verified against its published SHA-256 ([`crate::gitea::release`]).
//!
//! Gitea's `app.ini` and the runner's `config.yaml` are rendered from the handlebars templates in
//! `src/control_plane/templates/` ([`render`]): SQLite, the install lock, `ROOT_URL` at the
//! container's address, Actions with `DEFAULT_ACTIONS_URL = self` (an action named
//! `actions/checkout` is looked up on this Gitea: nothing needs the internet), no mailer, no update
//! checker. Gitea's own secrets (`SECRET_KEY`, `INTERNAL_TOKEN`, the OAuth2 `JWT_SECRET`) are not in
//! `app.ini` but in files under [`DATA_DIR`] that the playbook makes once (`gitea generate
//! secret`), so a rendered `app.ini` never changes them.
//!
//! The runner is registered once (host mode) and always runs. Its label decides whether it takes
//! the pipeline's jobs: [`RUNNER_LABEL`] (`runs-on: shell`) when the control plane deploys to
//! Proxmox VE (the PVE settings are set), else [`IDLE_LABEL`]: a container cannot create its
//! sibling LXC containers, so without PVE `local/run.sh config` runs a runner on the host for
//! them. The runner declares its labels each time it starts, so a change takes one restart.

mod binaries;

pub use binaries::{Binaries, Versions, binaries, check_given};

use serde::Serialize;

use crate::error::{Location, Problems};

/// Everything the control plane keeps, in the container: Gitea's work directory
/// (`gitea/`: `data/` with the SQLite database, `repositories/`, `secrets/`) and the runner's
/// (`runner/`: `.runner`, the registration; `work/`). The root `container.env`'s `SNAPSHOT`.
pub const DATA_DIR: &str = "/srv/config";

/// Gitea's HTTP port unless the root `container.env` sets `GITEA_PORT` (the original project's
/// control plane answers at `:8080`).
pub const DEFAULT_PORT: u16 = 8080;

/// Where Gitea's `templates/` and `options/` go in the container when the binary needs them.
pub const STATIC_DIR: &str = "/usr/local/share/gitea";

/// The runner label the shipped workflows ask for (`runs-on: shell`), in host mode.
pub const RUNNER_LABEL: &str = "shell:host";

/// The label of `config`'s runner when it does not deploy (no PVE settings): no shipped workflow
/// asks for it, so the runner is ready and takes no job.
pub const IDLE_LABEL: &str = "control-plane:host";

/// Where the runner's jobs get their workspaces: outside [`DATA_DIR`], since they are scratch and
/// a job writing one must not race a data snapshot of the control plane.
pub const RUNNER_WORKDIR: &str = "/var/lib/gitea-runner/work";

/// Gitea's system user.
pub const GITEA_USER: &str = "gitea";
/// The runner's user: `config`, the base role's user, which owns the share (`/share/.keys`, the
/// container key pairs the jobs connect with, mode 0700, and the snapshots) in every container.
/// The runner's jobs need exactly that, so it runs as `config`, not as a user of its own.
pub const RUNNER_USER: &str = "config";

const APP_INI: &str = include_str!("templates/app.ini.hbs");
const RUNNER_YAML: &str = include_str!("templates/runner.yaml.hbs");

/// What the control plane's configuration depends on besides the programs.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The container's address (no prefix length): `ROOT_URL`'s host.
    pub address: &'a str,
    /// Gitea's HTTP port.
    pub port: u16,
    /// The container's hostname: Gitea's `APP_NAME` and the runner's name.
    pub hostname: &'a str,
    /// True when the container's runner takes the pipeline's jobs ([`RUNNER_LABEL`]; the control
    /// plane deploys to Proxmox VE), else it has [`IDLE_LABEL`].
    pub runner_enabled: bool,
    /// The programs, as found on the host.
    pub binaries: &'a Binaries,
    /// Gitea's static directory packed by [`pack_static`], when the binary needs it.
    pub static_tar: Option<&'a std::path::Path>,
    /// The key directory of the share this configure runs with (`<share>/.keys`), handed to the
    /// container's own share when its runner deploys (`runner_enabled`): the control plane that
    /// takes over must reach every container the deploying one created. `None`: nothing handed.
    pub share_keys: Option<&'a std::path::Path>,
}

/// The extra variable `pgo_control_plane` of the root playbook: paths on the host to copy from,
/// the rendered files, and the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vars {
    /// Gitea on the host.
    pub gitea_binary: String,
    /// Gitea's static directory on the host packed as a tar ([`pack_static`]), or empty.
    pub gitea_static_tar: String,
    /// The runner on the host.
    pub runner_binary: String,
    /// proxmox-gitops on the host (this very binary), for the runner's jobs.
    pub tool_binary: String,
    /// The rendered `app.ini`.
    pub app_ini: String,
    /// The rendered runner `config.yaml`.
    pub runner_config: String,
    /// [`DATA_DIR`].
    pub data: String,
    /// Gitea's HTTP port.
    pub port: u16,
    /// Gitea's `ROOT_URL`, e.g. `http://10.0.3.17:8080/`.
    pub root_url: String,
    /// Whether the runner takes the pipeline's jobs (its label).
    pub runner_enabled: bool,
    /// The runner's name.
    pub runner_name: String,
    /// [`GITEA_USER`].
    pub gitea_user: String,
    /// [`RUNNER_USER`].
    pub runner_user: String,
    /// [`RUNNER_WORKDIR`].
    pub runner_workdir: String,
    /// The key pairs on the host to copy into the container's share (`<share>/.keys` of the
    /// configuring host, [`Inputs::share_keys`]), or empty for none. Keys the container already
    /// has are never replaced.
    pub share_keys: String,
}

/// `GITEA_PORT` of the control plane's env (default [`DEFAULT_PORT`]).
///
/// # Errors
/// A value that is not a port 1–65535, at `file` (`GITEA_PORT`).
pub fn port(env: &std::collections::BTreeMap<String, String>, file: &std::path::Path) -> Result<u16, Problems> {
    match env.get("GITEA_PORT").map(|v| v.trim()) {
        None | Some("") => Ok(DEFAULT_PORT),
        Some(v) => match v.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => {
                let mut p = Problems::new();
                p.add(
                    Location::file(file).with_key("GITEA_PORT"),
                    format!("expected Gitea's HTTP port 1–65535, found `{v}`"),
                );
                Err(p)
            }
        },
    }
}

/// Renders the control plane's files for `inputs`.
///
/// # Errors
/// A path of [`Binaries`] or the address that cannot be written into `app.ini` (a line break, a
/// `;` or `#`, or not valid UTF-8), naming the setting.
pub fn render(inputs: &Inputs<'_>) -> Result<Vars, Problems> {
    let mut problems = Problems::new();
    let text = |path: &std::path::Path, setting: &str, problems: &mut Problems| -> String {
        match path.to_str() {
            Some(s) if !s.contains(['\n', '\r', ';', '#']) => s.to_string(),
            _ => {
                problems.add(
                    Location::setting(crate::settings::setting_names(setting)),
                    format!("`{}`: a path without line breaks, `;` or `#` is needed here", path.display()),
                );
                String::new()
            }
        }
    };
    let b = inputs.binaries;
    let gitea_binary = text(&b.gitea, "PGO_GITEA_BINARY", &mut problems);
    let gitea_static = b.gitea_static.as_deref().map(|p| text(p, "PGO_GITEA_STATIC", &mut problems));
    let runner_binary = text(&b.runner, "PGO_RUNNER_BINARY", &mut problems);
    let tool_binary = b.tool.to_string_lossy().into_owned();
    if inputs.address.parse::<std::net::IpAddr>().is_err() && crate::share::check_host(inputs.address).is_err() {
        problems.add(
            Location::setting("the address of `config`"),
            format!("`{}` is not an IP address or host name", inputs.address),
        );
    }
    problems.into_result()?;

    let host = match inputs.address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(a)) => format!("[{a}]"),
        _ => inputs.address.to_string(),
    };
    let root_url = format!("http://{host}:{}/", inputs.port);
    let mut envs = serde_json::Map::new();
    envs.insert("PGO_GITEA_BINARY".into(), "/usr/local/bin/gitea".into());
    envs.insert("PGO_RUNNER_BINARY".into(), "/usr/local/bin/gitea-runner".into());
    if gitea_static.is_some() {
        envs.insert("PGO_GITEA_STATIC".into(), STATIC_DIR.into());
    }
    let values = serde_json::json!({
        "app_name": inputs.hostname,
        "gitea_user": GITEA_USER,
        "runner_user": RUNNER_USER,
        "data": DATA_DIR,
        "port": inputs.port,
        "address": inputs.address,
        "root_url": root_url,
        "static_root": gitea_static.as_ref().map(|_| STATIC_DIR),
        "runner_file": format!("{DATA_DIR}/runner/.runner"),
        "workdir": RUNNER_WORKDIR,
        "label": if inputs.runner_enabled { RUNNER_LABEL } else { IDLE_LABEL },
        "envs": envs,
    });
    Ok(Vars {
        gitea_binary,
        gitea_static_tar: inputs.static_tar.map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
        runner_binary,
        tool_binary,
        app_ini: render_template(APP_INI, &values),
        runner_config: render_template(RUNNER_YAML, &values),
        data: DATA_DIR.into(),
        port: inputs.port,
        root_url,
        runner_enabled: inputs.runner_enabled,
        runner_name: inputs.hostname.into(),
        gitea_user: GITEA_USER.into(),
        runner_user: RUNNER_USER.into(),
        runner_workdir: RUNNER_WORKDIR.into(),
        share_keys: inputs
            .share_keys
            .filter(|_| inputs.runner_enabled)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

/// Packs Gitea's `templates/` and `options/` under `dir` into the tar `dest`, the same bytes for
/// the same files (sorted, owner root, mtime 0), so that copying it again changes nothing.
///
/// # Errors
/// An unreadable file under `dir`, or `dest` not writable.
pub fn pack_static(dir: &std::path::Path, dest: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let tmp = tempfile::NamedTempFile::new_in(dest.parent().unwrap_or(std::path::Path::new(".")))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(tmp.reopen()?));
    let mut files = Vec::new();
    for top in ["templates", "options"] {
        for entry in ignore::WalkBuilder::new(dir.join(top)).standard_filters(false).build() {
            let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
            if entry.file_type().is_some_and(|t| t.is_file()) {
                files.push(entry.into_path());
            }
        }
    }
    files.sort();
    for path in files {
        let rel = path.strip_prefix(dir).unwrap_or(&path);
        let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, rel, data.as_slice())
            .with_context(|| format!("cannot pack {}", path.display()))?;
    }
    tar.into_inner()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    tmp.persist(dest).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(())
}

/// Renders one built-in template (strict: a missing value is a bug); `json` quotes a value as a
/// JSON string, which YAML reads as the same string.
fn render_template(template: &str, values: &serde_json::Value) -> String {
    let mut hb = handlebars::Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.register_helper(
        "json",
        Box::new(
            |h: &handlebars::Helper<'_>,
             _: &handlebars::Handlebars<'_>,
             _: &handlebars::Context,
             _: &mut handlebars::RenderContext<'_, '_>,
             out: &mut dyn handlebars::Output|
             -> handlebars::HelperResult {
                let v = h.param(0).map(|p| p.value().clone()).unwrap_or(serde_json::Value::Null);
                let s = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                out.write(&serde_json::to_string(&s).unwrap_or_default())?;
                Ok(())
            },
        ),
    );
    hb.render_template(template, values).expect("the built-in control-plane templates render with checked values")
}

#[cfg(test)]
mod tests;
