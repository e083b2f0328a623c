//! Step `configure`: bring provisioned containers to their desired state over SSH — the base
//! role first, then the lib's own configuration engine — and record a `configure/<name>.json`
//! artifact per container.
//!
//! Inputs: the inventory (the specs, globals and `base/`), `provision/<name>.json` (the address
//! and port to reach, and whether the container was just created), the container's key pair
//! (`<share>/.keys/<vmid>`, [`crate::keys`]) and the contract secrets (`LOGIN`, `PASSWORD`,
//! `HOST`).
//!
//! # The contract handed to every engine
//!
//! Lowest precedence first: every global, the lib's container env (`ContainerSpec.env`), then
//! `IP` (the address reached), `ID` (vmid), `HOSTNAME`, `STAGE`, `HOST` (the control plane),
//! `LOGIN`, `PASSWORD` (secret), `PGO_OUTPUT` (a file the lib appends `KEY=value` lines to) and
//! `PGO_CONTAINERS` (JSON list of the inventory's containers: `name`, `hostname`, `vmid`, `ip`,
//! `env`).
//!
//! * shell (`configure.sh`) and Cinc (`recipes/default.rb`): the values are written to an env file
//!   (mode 0600) inside a private temporary directory on the container, uploaded as one tar
//!   stream with the lib, and sourced by a fixed wrapper script; the directory is removed
//!   afterwards, also on failure;
//! * Ansible (`playbook.yml`, and the base role): the values go into an extra-vars JSON file
//!   (mode 0600) in a private temporary directory on the runner (`-e @file`), with the inventory
//!   and `ansible.cfg` next to it; removed afterwards. Ansible reuses our SSH ControlMaster and
//!   our `known_hosts` file (`StrictHostKeyChecking=yes`).
//!
//! Outputs: `KEY=value` lines in `$PGO_OUTPUT` become the artifact's `outputs` (values holding a
//! secret are masked as `***`).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::backend::model::{Outcome, Provision};
use crate::error::{Error, Location, Result};
use crate::exec::{SSH_EXEC_TIMEOUT, SshExec};
use crate::inventory::{ContainerSpec, Engine, Inventory, Mount};
use crate::snapshot::record::{Snapshot, SnapshotOptions};
use crate::ssh::{ConnectOptions, Connection, TarUpload, Target};

/// Lines of log kept in the artifact when a container fails.
pub const LOG_TAIL_LINES: usize = 40;

/// Values of the contract that come from settings, not from the inventory.
#[derive(Debug, Clone, Default)]
pub struct Contract {
    /// The control plane (`HOST`).
    pub host: Option<String>,
    /// `LOGIN`.
    pub login: Option<String>,
    /// `PASSWORD` (secret).
    pub password: Option<SecretString>,
}

impl Contract {
    /// The contract from the Gitea settings (`HOST`, `LOGIN`, `PASSWORD`).
    pub fn from_settings(g: &crate::settings::GiteaSettings) -> Self {
        Self { host: g.host.clone(), login: g.login.clone(), password: g.password.clone() }
    }
}

/// The names of `spec.requires` (`REQUIRES` in the lib's `container.env`) that the configuration
/// contract would hand the lib empty: a name is satisfied by a non-empty global, a non-empty key
/// of the container's env, the settings behind `HOST`, `LOGIN`, `PASSWORD` (see [`Contract`];
/// the inventory's public settings as fallback for `HOST` and `LOGIN`, as in the contract), or
/// one of the values the tool always sets (`IP`, `ID`, `HOSTNAME`, `STAGE`). In the order given.
pub fn missing_requirements(inv: &Inventory, spec: &ContainerSpec, contract: &Contract) -> Vec<String> {
    let set = |v: Option<&str>| v.is_some_and(|v| !v.trim().is_empty());
    spec.requires
        .iter()
        .filter(|name| {
            let ok = match name.as_str() {
                "IP" | "ID" | "HOSTNAME" | "STAGE" => true,
                "HOST" => set(contract.host.as_deref()) || set(inv.settings.gitea_host.as_deref()),
                "LOGIN" => set(contract.login.as_deref()) || set(inv.settings.gitea_login.as_deref()),
                "PASSWORD" => contract.password.as_ref().is_some_and(|p| !p.expose_secret().trim().is_empty()),
                other => {
                    set(spec.env.get(other).map(String::as_str)) || set(inv.globals.get(other).map(String::as_str))
                }
            };
            !ok
        })
        .cloned()
        .collect()
}

/// The message for [`missing_requirements`]: which names, where they are required, and where
/// each can be set, e.g. "broker needs LOGIN and PASSWORD (REQUIRES in libs/broker/container.env),
/// which are not set: …".
pub fn requirements_error(spec: &ContainerSpec, missing: &[String]) -> String {
    let names = match missing {
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
        [] => String::new(),
    };
    let file = spec.dir.join("container.env");
    let hints: Vec<String> = missing
        .iter()
        .map(|n| match n.as_str() {
            "LOGIN" | "PASSWORD" | "HOST" => format!(
                "{n} in the environment (Gitea Actions: the {n} {}) or \"{}\" in local/config.local.json",
                if n == "PASSWORD" { "secret" } else { "variable" },
                n.to_lowercase()
            ),
            _ => format!("{n} in globals.json (or globals.local.json) or in {}", file.display()),
        })
        .collect();
    format!(
        "{} needs {names} (REQUIRES in {}), which {} not set: set {}",
        spec.name,
        file.display(),
        if missing.len() == 1 { "is" } else { "are" },
        hints.join("; ")
    )
}

/// Options of the configure step.
#[derive(Debug, Clone)]
pub struct ConfigureOptions {
    /// Containers to configure (lib name or hostname); empty means all of the inventory.
    pub containers: Vec<String>,
    /// How many containers are configured at once (≥ 1).
    pub jobs: usize,
    /// The artifacts directory (reads `provision/`, writes `configure/` and `known_hosts/`).
    pub artifacts: ArtifactDir,
    /// Settings-provided contract values.
    pub contract: Contract,
    /// SSH connect tuning.
    pub connect: ConnectOptions,
    /// Upper bound for one engine run (base role, lib), e.g. 30 min.
    pub run_timeout: Duration,
    /// The `ansible-playbook` executable.
    pub ansible_playbook: PathBuf,
}

impl Default for ConfigureOptions {
    fn default() -> Self {
        Self {
            containers: Vec::new(),
            jobs: 4,
            artifacts: ArtifactDir::new(".proxmox-gitops"),
            contract: Contract::default(),
            connect: ConnectOptions::default(),
            run_timeout: Duration::from_secs(1800),
            ansible_playbook: "ansible-playbook".into(),
        }
    }
}

/// Result of one engine run (base role or lib).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineRun {
    /// `ansible`, `shell` or `cinc`.
    pub engine: String,
    /// Tasks that changed something (Ansible's recap `changed`); `None` for engines that do not
    /// report it.
    pub changed: Option<u64>,
    /// Tasks that were already in state (Ansible's `ok`).
    pub ok: Option<u64>,
    /// Exit code of the engine's process.
    pub exit_code: Option<i32>,
    /// True when the run succeeded.
    pub success: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// The `configure/<name>.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configure {
    /// Container (lib) name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// The address connected to.
    pub address: Option<String>,
    /// SSH port.
    pub ssh_port: u16,
    /// The SSH user that was accepted (`config`, or `root` before the base role ran).
    pub user: Option<String>,
    /// SHA-256 fingerprint of the container's SSH host key, as recorded.
    pub host_key_fingerprint: Option<String>,
    /// The lib's engine.
    pub engine: Engine,
    /// The base role's run (`None` when the monorepo has no `base/` or it did not run).
    pub base: Option<EngineRun>,
    /// The automatic data restore before the lib's configuration (the seed's behaviour): the
    /// `snapshot/<name>.json` artifact of the restore, when the lib declares `SNAPSHOT` paths, they
    /// were all missing or empty on the container and a snapshot existed. `None` when nothing was
    /// restored.
    #[serde(default)]
    pub restore: Option<Snapshot>,
    /// The lib's run (`None` for engine `none`, or when an earlier stage failed).
    pub lib: Option<EngineRun>,
    /// `KEY=value` outputs the lib wrote to `$PGO_OUTPUT` (secrets masked).
    pub outputs: BTreeMap<String, String>,
    /// Total wall time in milliseconds.
    pub duration_ms: u64,
    /// The last lines of the log when the container failed (redacted), empty otherwise.
    pub log_tail: Vec<String>,
    /// Result.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Artifact for Configure {
    const KIND: &'static str = "configure";
    // 1.1: `restore`.
    const SCHEMA_VERSION: (u32, u32) = (1, 1);
}

impl Configure {
    /// True when the container was configured.
    pub fn ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok)
    }
}

/// Selects the specs to configure; unknown names are input errors.
/// Checks [`missing_requirements`] for the selected containers (`opts.containers`, empty =
/// all) without contacting anything: the preflight of `configure --check`.
///
/// # Errors
/// [`Error::Input`] with one problem per container that lacks something, located at its
/// `container.env` key `REQUIRES`; unknown container names as for [`configure`].
pub fn check_requirements(inv: &Inventory, opts: &ConfigureOptions) -> Result<()> {
    let mut problems = crate::error::Problems::new();
    for spec in select(inv, &opts.containers)? {
        let missing = missing_requirements(inv, spec, &opts.contract);
        if !missing.is_empty() {
            problems.add(
                Location::file(spec.dir.join("container.env")).with_key("REQUIRES"),
                requirements_error(spec, &missing),
            );
        }
    }
    problems.into_result().map_err(Error::Input)
}

fn select<'a>(inv: &'a Inventory, names: &[String]) -> Result<Vec<&'a ContainerSpec>> {
    inv.select(names, true, crate::inventory::NotFound::InInventory)
}

/// Configures the selected containers, at most `opts.jobs` at a time, writing
/// `configure/<name>.json` for each (also for failures). Returns the artifacts in inventory order.
///
/// # Errors
/// [`Error::Input`] for unknown container names; per-container failures are not errors here —
/// they are recorded in each artifact's outcome (the CLI exits 1 if any failed). An artifact that
/// cannot be written is an [`Error::Failed`].
pub async fn configure(inv: &Inventory, opts: &ConfigureOptions) -> Result<Vec<Configure>> {
    let specs = select(inv, &opts.containers)?;
    if let Some(p) = &opts.contract.password {
        crate::ci::mask(p.expose_secret());
    }
    let inv = Arc::new(inv.clone());
    let opts = Arc::new(opts.clone());
    let sem = Arc::new(tokio::sync::Semaphore::new(opts.jobs.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let (inv, opts, sem, spec) = (inv.clone(), opts.clone(), sem.clone(), (*spec).clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let _group = crate::ci::Group::start(&format!("configure {}", spec.name));
            let result = configure_one(&inv, &spec, &opts).await;
            (i, result)
        });
    }
    let mut results: Vec<Option<Configure>> = vec![None; specs.len()];
    while let Some(joined) = set.join_next().await {
        let (i, c) = joined.map_err(|e| Error::Failed(anyhow!("configure task panicked: {e}")))?;
        let path = opts.artifacts.configure(&c.name);
        artifact::write(&path, &c).map_err(|e| Error::Failed(e.into()))?;
        match &c.outcome {
            Outcome::Ok => tracing::info!("{}: configured in {:.1}s", c.name, c.duration_ms as f64 / 1000.0),
            Outcome::Failed { error } => tracing::error!("{}: configure failed: {error}", c.name),
        }
        results[i] = Some(c);
    }
    Ok(results.into_iter().flatten().collect())
}

/// A log collected during one container's run; every line is redacted before it is stored.
#[derive(Default)]
struct Log(Vec<String>);

impl Log {
    fn push(&mut self, name: &str, text: &str) {
        for line in text.lines() {
            let line = crate::ci::redact(line);
            tracing::debug!("{name}: {line}");
            self.0.push(line);
        }
    }
    fn tail(&self) -> Vec<String> {
        let start = self.0.len().saturating_sub(LOG_TAIL_LINES);
        self.0[start..].to_vec()
    }
}

struct Partial {
    user: Option<String>,
    fingerprint: Option<String>,
    address: Option<String>,
    ssh_port: u16,
    base: Option<EngineRun>,
    restore: Option<Snapshot>,
    lib: Option<EngineRun>,
    outputs: BTreeMap<String, String>,
}

async fn configure_one(inv: &Inventory, spec: &ContainerSpec, opts: &ConfigureOptions) -> Configure {
    let start = Instant::now();
    let mut log = Log::default();
    let mut part = Partial {
        user: None,
        fingerprint: None,
        address: None,
        ssh_port: 22,
        base: None,
        restore: None,
        lib: None,
        outputs: BTreeMap::new(),
    };
    let res = run_container(inv, spec, opts, &mut log, &mut part).await;
    let outcome = match res {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            let msg = crate::ci::redact(&format!("{e:#}"));
            log.push(&spec.name, &format!("error: {msg}"));
            Outcome::Failed { error: msg }
        }
    };
    let failed = matches!(outcome, Outcome::Failed { .. });
    Configure {
        name: spec.name.clone(),
        hostname: spec.hostname.clone(),
        vmid: spec.vmid,
        address: part.address,
        ssh_port: part.ssh_port,
        user: part.user,
        host_key_fingerprint: part.fingerprint,
        engine: spec.engine,
        base: part.base,
        restore: part.restore,
        lib: part.lib,
        outputs: part.outputs,
        duration_ms: start.elapsed().as_millis() as u64,
        log_tail: if failed { log.tail() } else { Vec::new() },
        outcome,
    }
}

async fn run_container(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    log: &mut Log,
    part: &mut Partial,
) -> anyhow::Result<()> {
    let missing = missing_requirements(inv, spec, &opts.contract);
    if !missing.is_empty() {
        anyhow::bail!("{}", requirements_error(spec, &missing));
    }
    let prov_path = opts.artifacts.provision(&spec.name);
    let prov: Provision =
        artifact::read(&prov_path).with_context(|| format!("{}: run `provision` first", spec.name))?;
    if let Outcome::Failed { error } = &prov.outcome {
        anyhow::bail!("{}: provisioning failed ({error}); nothing to configure", prov_path.display());
    }
    let address = prov
        .address
        .clone()
        .or_else(|| spec.ip.address().map(|a| a.to_string()))
        .ok_or_else(|| anyhow!("{}: no address recorded for the container", prov_path.display()))?;
    part.address = Some(address.clone());
    part.ssh_port = prov.ssh_port;

    let keys = crate::keys::ensure(&inv.settings.share, spec.vmid, &spec.hostname)?;
    let control = tempfile::Builder::new()
        .prefix("pgo-ssh-")
        .tempdir_in("/tmp")
        .context("cannot create an SSH control directory")?;
    let target = Target {
        name: spec.name.clone(),
        address: address.clone(),
        port: prov.ssh_port,
        key: keys.private.clone(),
        known_hosts: opts.artifacts.root().join("known_hosts").join(&spec.name),
        replace_host_key: crate::ssh::recreated_since_recorded(
            prov.created,
            &prov_path,
            &opts.artifacts.root().join("known_hosts").join(&spec.name),
        ),
        users: vec!["config".into(), "root".into()],
    };
    let conn = Connection::connect(&target, &opts.connect, control.path()).await?;
    part.user = Some(conn.user().to_string());
    part.fingerprint = conn.fingerprint().map(str::to_string);
    log.push(&spec.name, &format!("connected to {address}:{} as {}", prov.ssh_port, conn.user()));

    let result = run_engines(inv, spec, opts, &conn, &keys.public_line, &address, log, part).await;
    conn.close().await;
    result
}

/// The contract as a flat map (see the module docs for the order).
fn contract(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    address: &str,
    output: &str,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (k, v) in &inv.globals {
        m.insert(k.clone(), v.clone());
    }
    for (k, v) in &spec.env {
        m.insert(k.clone(), v.clone());
    }
    m.insert("IP".into(), address.to_string());
    m.insert("ID".into(), spec.vmid.to_string());
    m.insert("HOSTNAME".into(), spec.hostname.clone());
    m.insert("STAGE".into(), inv.stage.clone());
    m.insert("HOST".into(), opts.contract.host.clone().or_else(|| inv.settings.gitea_host.clone()).unwrap_or_default());
    m.insert(
        "LOGIN".into(),
        opts.contract.login.clone().or_else(|| inv.settings.gitea_login.clone()).unwrap_or_default(),
    );
    m.insert(
        "PASSWORD".into(),
        opts.contract.password.as_ref().map(|p| p.expose_secret().to_string()).unwrap_or_default(),
    );
    m.insert("PGO_OUTPUT".into(), output.to_string());
    m.insert("PGO_CONTAINERS".into(), containers_json(inv, opts).to_string());
    m
}

/// The inventory's containers for libs that configure others (e.g. the proxy): the address
/// reached by `provision` when its artifact exists, else the static address.
fn containers_json(inv: &Inventory, opts: &ConfigureOptions) -> serde_json::Value {
    serde_json::Value::Array(
        inv.containers
            .iter()
            .map(|c| {
                let ip = artifact::read::<Provision>(&opts.artifacts.provision(&c.name))
                    .ok()
                    .and_then(|p| p.address)
                    .or_else(|| c.ip.address().map(|a| a.to_string()));
                serde_json::json!({
                    "name": c.name, "hostname": c.hostname, "vmid": c.vmid, "ip": ip, "env": c.env,
                })
            })
            .collect(),
    )
}

/// True for names usable as shell variables.
fn is_var_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renders an env file sourced by bash: `export K='v'` with `'` written as `'\''`. Values never
/// reach a command line; this file is only read by `.` in the fixed wrapper.
fn env_file(vars: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for (k, v) in vars {
        if !is_var_name(k) {
            continue;
        }
        s.push_str(&format!("export {k}='{}'\n", v.replace('\'', "'\\''")));
    }
    s
}

/// Parses `KEY=value` lines; blank lines and `#` comments are skipped, later keys win. Values
/// holding a secret are masked.
fn parse_outputs(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if is_var_name(k.trim()) => {
                out.insert(k.trim().to_string(), crate::ci::redact(v));
            }
            _ => {
                bad.push(format!("$PGO_OUTPUT line {}: expected KEY=value, found `{}`", i + 1, crate::ci::redact(line)))
            }
        }
    }
    (out, bad)
}

#[allow(clippy::too_many_arguments)]
async fn run_engines(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    conn: &Connection,
    pubkey: &str,
    address: &str,
    log: &mut Log,
    part: &mut Partial,
) -> anyhow::Result<()> {
    let tmp = conn.make_temp_dir(true).await?;
    let result = async {
        let output = format!("{tmp}/output");
        let vars = contract(inv, spec, opts, address, &output);
        let mut bundle = TarUpload::new();
        bundle.file("env", env_file(&vars).as_bytes(), 0o600)?;
        bundle.file("output", b"", 0o600)?;
        let lib_dir = inv.root.join(&spec.dir);
        let lib_name = spec.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(spec.name.clone());
        match spec.engine {
            Engine::Shell => bundle.dir("lib", &lib_dir)?,
            Engine::Cinc => bundle.dir(&format!("cookbooks/{lib_name}"), &lib_dir)?,
            _ => {}
        }
        conn.upload_tar(&tmp, &bundle.finish()?, true, Duration::from_secs(300)).await?;

        let mut extra = serde_json::Map::new();
        for (k, v) in &vars {
            extra.insert(k.clone(), v.clone().into());
        }
        extra.insert("pgo_containers".into(), containers_json(inv, opts));
        extra.insert("pgo_config_pubkey".into(), pubkey.into());
        extra.insert("pgo_share".into(), "/share".into());
        extra.insert("pgo_share_mount".into(), spec.mounts.iter().any(|m| matches!(m, Mount::Share { .. })).into());
        extra.insert(
            "pgo_share_host".into(),
            inv.globals.get("SHARE_HOST").cloned().unwrap_or_default().into(),
        );
        let extra = serde_json::Value::Object(extra);

        if let Some(base) = &inv.base {
            let playbook = inv.root.join(base).join("playbook.yml");
            log.push(&spec.name, &format!("base role: {}", playbook.display()));
            let run = ansible(opts, conn, spec, &playbook, &extra, log).await?;
            let ok = run.success;
            part.base = Some(run);
            if !ok {
                anyhow::bail!("the base role failed (see the log tail)");
            }
        } else {
            tracing::warn!("{}: the monorepo has no base/ directory; skipping the base role", spec.name);
        }

        restore_data(inv, spec, opts, conn, log, part).await?;

        let lib_start = Instant::now();
        let lib = match spec.engine {
            Engine::None => None,
            Engine::Ansible => Some(ansible(opts, conn, spec, &lib_dir.join("playbook.yml"), &extra, log).await?),
            Engine::Shell => {
                let script = "exec 2>&1\nd=\"$1\"\n\
                    if set -a && . \"$d/env\" && set +a && cd \"$d/lib\"; then bash ./configure.sh; rc=$?; else rc=1; fi\n\
                    printf '\\n%s%s\\n' __pgo_exit_code= \"$rc\"\n";
                let (code, text) = run_wrapped(conn, script, &[&tmp], opts.run_timeout).await?;
                log.push(&spec.name, &text);
                Some(EngineRun {
                    engine: "shell".into(),
                    changed: None,
                    ok: None,
                    exit_code: code,
                    success: code == Some(0),
                    duration_ms: lib_start.elapsed().as_millis() as u64,
                })
            }
            Engine::Cinc => {
                let script = "exec 2>&1\nd=\"$1\"\nlib=\"$2\"\n\
                    if ! command -v cinc-client >/dev/null 2>&1; then\n  echo 'cinc-client: command not found'\n  rc=127\n\
                    elif set -a && . \"$d/env\" && set +a && cd \"$d\"; then\n\
                      cinc-client --local-mode --chef-license accept-silent --config-option \"cookbook_path=$d/cookbooks\" -o \"recipe[$lib]\"\n  rc=$?\n\
                    else\n  rc=1\nfi\n\
                    printf '\\n%s%s\\n' __pgo_exit_code= \"$rc\"\n";
                let (code, text) = run_wrapped(conn, script, &[&tmp, &lib_name], opts.run_timeout).await?;
                log.push(&spec.name, &text);
                let run = EngineRun {
                    engine: "cinc".into(),
                    changed: None,
                    ok: None,
                    exit_code: code,
                    success: code == Some(0),
                    duration_ms: lib_start.elapsed().as_millis() as u64,
                };
                if code == Some(127) && text.lines().any(|l| l == "cinc-client: command not found") {
                    part.lib = Some(run);
                    anyhow::bail!(
                        "{} has recipes/default.rb but cinc-client is not installed on the container; \
                         install Cinc Client (https://cinc.sh) there first, e.g. from the base role",
                        spec.dir.display()
                    );
                }
                Some(run)
            }
        };
        let lib_ok = lib.as_ref().map(|r| r.success).unwrap_or(true);
        let lib_desc = lib.as_ref().map(|r| (r.engine.clone(), r.exit_code));
        part.lib = lib;
        if !lib_ok {
            let (engine, code) = lib_desc.unwrap_or_default();
            anyhow::bail!(
                "the lib's {engine} configuration failed{} (see the log tail)",
                code.map(|c| format!(" with exit code {c}")).unwrap_or_default()
            );
        }
        let text = conn.read_file(&output, true).await?;
        let (outputs, bad) = parse_outputs(&String::from_utf8_lossy(&text));
        for b in &bad {
            log.push(&spec.name, b);
            tracing::warn!("{}: {b}", spec.name);
        }
        part.outputs = outputs;
        Ok(())
    }
    .await;
    let cleanup = conn.remove_dir(&tmp, true).await;
    match (result, cleanup) {
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(anyhow!(e).context("cannot remove the temporary directory with the contract")),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// The seed's behaviour, after the base role and before the lib's configuration: when the lib
/// declares `SNAPSHOT` paths, all of them are missing or empty on the container, and a snapshot
/// exists in `<share>/snapshots/<lib>/`, the newest (by time) is verified and restored as root
/// over this connection ([`crate::snapshot::record::restore_if_empty`]). The restore's
/// `snapshot/<name>.json` artifact is written and embedded in the configure artifact. A failed
/// restore fails the container: its lib is not configured on top of empty data.
async fn restore_data(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    conn: &Connection,
    log: &mut Log,
    part: &mut Partial,
) -> anyhow::Result<()> {
    if spec.snapshot_paths.is_empty() {
        return Ok(());
    }
    let exec = SshExec::new(conn, opts.run_timeout.max(SSH_EXEC_TIMEOUT));
    let sopts = SnapshotOptions { share: inv.settings.share.clone(), keep: None, now: time::OffsetDateTime::now_utc() };
    let Some(r) = crate::snapshot::record::restore_if_empty(spec, &exec, &sopts).await else {
        log.push(&spec.name, "data: paths not empty or no snapshot; nothing restored");
        return Ok(());
    };
    let path = opts.artifacts.snapshot(&spec.name);
    artifact::write(&path, &r).with_context(|| format!("cannot write {}", path.display()))?;
    let failure = match &r.outcome {
        Outcome::Ok => {
            let msg = format!(
                "data: {} were empty; restored snapshot {} ({} entries, verified) from {}",
                r.paths.join(", "),
                r.snapshot_id.as_deref().unwrap_or("?"),
                r.entry_count,
                r.archive.as_ref().map(|a| a.display().to_string()).unwrap_or_default()
            );
            tracing::info!("{}: {msg}", spec.name);
            log.push(&spec.name, &msg);
            for w in &r.warnings {
                tracing::warn!("{}: {w}", spec.name);
                log.push(&spec.name, &format!("data: warning: {w}"));
            }
            None
        }
        Outcome::Failed { error } => Some(error.clone()),
    };
    part.restore = Some(r);
    if let Some(error) = failure {
        anyhow::bail!(
            "the data paths are empty and a snapshot exists, but restoring it failed: {error}; \
             the lib's configuration was not run (see {})",
            path.display()
        );
    }
    Ok(())
}

/// Marker line the engine wrappers print last: the engine's exit code. SSH itself maps remote
/// exit codes 127 and 255 to its own errors, so the code travels in the output instead.
const EXIT_MARKER: &str = "__pgo_exit_code=";

/// Runs a fixed wrapper `script` with bash as root (`bash -c SCRIPT pgo-configure ARGS…`) and
/// returns the engine's exit code (from [`EXIT_MARKER`]) and its output without the marker.
async fn run_wrapped(
    conn: &Connection,
    script: &str,
    args: &[&str],
    timeout: Duration,
) -> anyhow::Result<(Option<i32>, String)> {
    let mut argv = vec!["bash", "-c", script, "pgo-configure"];
    argv.extend_from_slice(args);
    let out = conn.run(&argv, None, true, timeout).await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(split_exit_marker(&text, out.code))
}

/// Splits the wrapper's output into (exit code, output without the marker line). Without a
/// marker (the wrapper was killed) the SSH exit code stands.
fn split_exit_marker(text: &str, fallback: Option<i32>) -> (Option<i32>, String) {
    match text.rfind(EXIT_MARKER) {
        Some(pos) if text[..pos].ends_with('\n') || pos == 0 => {
            let code = text[pos + EXIT_MARKER.len()..].trim().parse::<i32>().ok().or(fallback);
            // The wrapper prints a newline before the marker, in case the output lacked one.
            let body = text[..pos].strip_suffix('\n').unwrap_or(&text[..pos]);
            (code, body.to_string())
        }
        _ => (fallback, text.to_string()),
    }
}

/// Runs `ansible-playbook` with `playbook` against the container over `conn`'s ControlMaster.
async fn ansible(
    opts: &ConfigureOptions,
    conn: &Connection,
    spec: &ContainerSpec,
    playbook: &Path,
    extra: &serde_json::Value,
    log: &mut Log,
) -> anyhow::Result<EngineRun> {
    let start = Instant::now();
    let dir =
        tempfile::Builder::new().prefix("pgo-ansible-").tempdir().context("cannot create a temporary directory")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    let t = conn.target();
    let host = &spec.name;
    let inventory = serde_json::json!({
        "all": { "hosts": { host: {
            "ansible_host": t.address,
            "ansible_port": t.port,
            "ansible_user": conn.user(),
            "ansible_ssh_private_key_file": t.key,
            "ansible_python_interpreter": "/usr/bin/python3",
        }}}
    });
    let inv_path = dir.path().join("inventory.json");
    std::fs::write(&inv_path, serde_json::to_vec_pretty(&inventory)?)?;
    let vars_path = dir.path().join("vars.json");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&vars_path)?;
        f.write_all(&serde_json::to_vec(extra)?)?;
    }
    let ssh_args = format!(
        "-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={} -o UserKnownHostsFile={} \
         -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes \
         -o PasswordAuthentication=no -o BatchMode=yes",
        conn.control_socket().display(),
        t.known_hosts.display()
    );
    let cfg = format!(
        "[defaults]\nhost_key_checking = True\nstdout_callback = json\nretry_files_enabled = False\n\
         interpreter_python = /usr/bin/python3\nlocal_tmp = {}/local\nnocows = True\n\
         [ssh_connection]\nssh_args = {ssh_args}\npipelining = True\n",
        dir.path().display()
    );
    let cfg_path = dir.path().join("ansible.cfg");
    std::fs::write(&cfg_path, cfg)?;
    let mut cmd = tokio::process::Command::new(&opts.ansible_playbook);
    cmd.arg("-i")
        .arg(&inv_path)
        .arg("-e")
        .arg(format!("@{}", vars_path.display()))
        .arg(playbook)
        .env("ANSIBLE_CONFIG", &cfg_path)
        .env("ANSIBLE_HOST_KEY_CHECKING", "True")
        .env("ANSIBLE_STDOUT_CALLBACK", "json")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .env("ANSIBLE_NOCOLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}; is Ansible installed?", opts.ansible_playbook.display()))?;
    let out = tokio::time::timeout(opts.run_timeout, child.wait_with_output()).await.map_err(|_| {
        anyhow!(
            "{}: ansible-playbook {} timed out after {}s",
            spec.name,
            playbook.display(),
            opts.run_timeout.as_secs()
        )
    })??;
    // The secrets file goes first, whatever happened.
    let _ = std::fs::remove_file(&vars_path);
    drop(dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (lines, stats) = summarize(&stdout, host);
    for l in &lines {
        log.push(&spec.name, l);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.trim().is_empty() {
        log.push(&spec.name, stderr.trim());
    }
    if stats.is_none() && !out.status.success() && lines.is_empty() {
        log.push(&spec.name, stdout.trim());
    }
    let (changed, ok, failed) = stats.unwrap_or((None, None, true));
    Ok(EngineRun {
        engine: "ansible".into(),
        changed,
        ok,
        exit_code: out.status.code(),
        success: out.status.success() && !failed,
        duration_ms: start.elapsed().as_millis() as u64,
    })
}

/// A host's recap: `(changed, ok, failed-or-unreachable)`.
type Recap = (Option<u64>, Option<u64>, bool);

/// Turns the JSON callback's output into one log line per task (plus the failure details) and
/// the host's recap: `(changed, ok, failed-or-unreachable)`.
fn summarize(stdout: &str, host: &str) -> (Vec<String>, Option<Recap>) {
    let json_start = stdout.find('{').unwrap_or(0);
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&stdout[json_start..]) else {
        return (Vec::new(), None);
    };
    let mut lines = Vec::new();
    for play in v["plays"].as_array().into_iter().flatten() {
        lines.push(format!("PLAY [{}]", play["play"]["name"].as_str().unwrap_or("")));
        for task in play["tasks"].as_array().into_iter().flatten() {
            let name = task["task"]["name"].as_str().unwrap_or("");
            let r = &task["hosts"][host];
            if r.is_null() {
                continue;
            }
            let status = if r["unreachable"].as_bool() == Some(true) {
                "unreachable"
            } else if r["failed"].as_bool() == Some(true) {
                "failed"
            } else if r["skipped"].as_bool() == Some(true) {
                "skipped"
            } else if r["changed"].as_bool() == Some(true) {
                "changed"
            } else {
                "ok"
            };
            lines.push(format!("TASK [{name}] {status}"));
            if status == "failed" || status == "unreachable" {
                for key in ["msg", "stderr", "stdout", "module_stderr", "module_stdout"] {
                    if let Some(s) = r[key].as_str().filter(|s| !s.trim().is_empty()) {
                        for l in s.lines() {
                            lines.push(format!("  {key}: {l}"));
                        }
                    }
                }
                for res in r["results"].as_array().into_iter().flatten() {
                    if let (Some(true), Some(m)) = (res["failed"].as_bool(), res["msg"].as_str()) {
                        lines.push(format!("  item: {m}"));
                    }
                }
            }
        }
    }
    let s = &v["stats"][host];
    if s.is_null() {
        return (lines, None);
    }
    let changed = s["changed"].as_u64();
    let ok = s["ok"].as_u64();
    let bad = s["failures"].as_u64().unwrap_or(0) > 0 || s["unreachable"].as_u64().unwrap_or(0) > 0;
    lines.push(format!(
        "RECAP {host}: ok={} changed={} failed={} unreachable={}",
        ok.unwrap_or(0),
        changed.unwrap_or(0),
        s["failures"].as_u64().unwrap_or(0),
        s["unreachable"].as_u64().unwrap_or(0)
    ));
    (lines, Some((changed, ok, bad)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_quotes_everything() {
        let mut m = BTreeMap::new();
        m.insert("A".to_string(), "it's $(rm -rf /) `x`".to_string());
        m.insert("bad-name".to_string(), "skipped".to_string());
        m.insert("_B2".to_string(), "".to_string());
        assert_eq!(env_file(&m), "export A='it'\\''s $(rm -rf /) `x`'\nexport _B2=''\n");
    }

    #[test]
    fn outputs_are_parsed_and_masked() {
        crate::ci::mask("s3cr3t-output");
        let (m, bad) = parse_outputs("# c\nA=1\nB=x=y\n\nnot a line\nC=pre-s3cr3t-output\nA=2\n");
        let want: BTreeMap<String, String> =
            [("A", "2"), ("B", "x=y"), ("C", "pre-***")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(m, want);
        assert_eq!(bad, vec!["$PGO_OUTPUT line 5: expected KEY=value, found `not a line`".to_string()]);
    }

    #[test]
    fn exit_marker() {
        assert_eq!(split_exit_marker("a\nb\n\n__pgo_exit_code=127\n", Some(0)), (Some(127), "a\nb\n".into()));
        assert_eq!(split_exit_marker("\n__pgo_exit_code=0\n", Some(0)), (Some(0), "".into()));
        assert_eq!(split_exit_marker("killed\n", Some(255)), (Some(255), "killed\n".into()));
    }

    #[test]
    fn recap_from_json_callback() {
        let json = r#"{"plays":[{"play":{"name":"base"},"tasks":[
            {"task":{"name":"a"},"hosts":{"h":{"changed":true}}},
            {"task":{"name":"b"},"hosts":{"h":{"failed":true,"msg":"boom"}}}]}],
            "stats":{"h":{"changed":1,"failures":1,"ok":1,"unreachable":0,"skipped":0}}}"#;
        let (lines, stats) = summarize(json, "h");
        assert_eq!(
            lines,
            vec![
                "PLAY [base]",
                "TASK [a] changed",
                "TASK [b] failed",
                "  msg: boom",
                "RECAP h: ok=1 changed=1 failed=1 unreachable=0"
            ]
        );
        assert_eq!(stats, Some((Some(1), Some(1), true)));
        assert_eq!(summarize("not json", "h"), (Vec::new(), None));
    }
}
