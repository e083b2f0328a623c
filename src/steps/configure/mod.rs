//! Step `configure`: bring provisioned containers to their desired state over SSH — the base
//! role first, then the lib's own configuration engine — and record a `configure/<name>.json`
//! artifact per container.
//!
//! Inputs: the inventory (the specs, globals and `base/`), `provision/<name>.json` (the address
//! and port to reach, and whether the container was just created), the container's key pair
//! (`<share>/.keys/<vmid>`, [`crate::ssh::keys`]) and the contract secrets (`LOGIN`, `PASSWORD`,
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
//!
//! # Re-runs that change nothing
//!
//! A successful run leaves a stamp in the container ([`STAMP_PATH`], see `stamp.rs`): the digest
//! of its inputs (base role tree, the lib's directory, the engine, the values handed to the
//! engines, our version) and the digest of the container's state right after it (packages,
//! `/etc`, failed units, running services). The next run compares both in one SSH round trip and,
//! when they are equal, skips the base role and the lib's engine (the artifact says
//! `skipped: "unchanged"`; the lib's outputs are the ones the stamp recorded). The data restore
//! still runs; when it restores, the lib runs. The control plane (`config`) always runs fully, and
//! [`ConfigureOptions::full`] (`--force`, `PROXMOX_GITOPS_CONFIGURE=full`) forces a full run.

mod contract;
mod engines;
mod recap;
mod restore;
mod stamp;

pub use contract::{Contract, missing_requirements, requirements_error};
pub use engines::cinc_missing;
pub use stamp::{STAMP_PATH, STATE_SCRIPT};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::artifact::{self, Artifact, ArtifactDir};
use crate::error::{Error, Location, Result};
use crate::inventory::{ContainerSpec, Engine, Inventory};
use crate::model::{BackendKind, Outcome, Provision};
use crate::snapshot::record::Snapshot;
use crate::ssh::{ConnectOptions, Connection};

use engines::run_engines;

/// Lines of log kept in the artifact when a container fails.
pub const LOG_TAIL_LINES: usize = 40;

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
    /// Where the control plane's programs are on this host, for `config` (see
    /// [`crate::control_plane`]).
    pub control_plane: crate::settings::ControlPlaneSettings,
    /// True when the PVE settings are set: the control plane deploys to Proxmox VE, so `config`'s
    /// own runner takes the pipeline's jobs (label `shell`) instead of idling.
    pub deploys_to_pve: bool,
    /// Run the base role and the lib's engine even when the stamp in the container shows that
    /// nothing changed since the last successful run (`--force`, `PROXMOX_GITOPS_CONFIGURE=full`).
    pub full: bool,
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
            control_plane: Default::default(),
            deploys_to_pve: false,
            full: false,
        }
    }
}

/// Result of one engine run (base role or lib).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineRun {
    /// `ansible`, `shell` or `cinc`.
    pub engine: String,
    /// Tasks that changed something (Ansible's recap `changed`; Cinc's updated resources, from
    /// its `finished, U/T resources updated` line); `None` for engines that do not report it
    /// (shell).
    pub changed: Option<u64>,
    /// Tasks that succeeded, the changed ones included (Ansible's `ok`; Cinc's total resources).
    pub ok: Option<u64>,
    /// Exit code of the engine's process.
    pub exit_code: Option<i32>,
    /// True when the run succeeded.
    pub success: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// True when the engine was not run because nothing changed since the last successful run
    /// (the artifact's `skipped`); `changed`, `ok` and `exit_code` are then `None`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

impl EngineRun {
    /// The run of `engine` that was skipped: success, nothing counted, no time.
    pub fn skipped(engine: &str) -> Self {
        Self {
            engine: engine.into(),
            changed: None,
            ok: None,
            exit_code: None,
            success: true,
            duration_ms: 0,
            skipped: true,
        }
    }
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
    /// `unchanged` when the base role and the lib's engine were skipped: the inputs and the
    /// container's state equal those of the last successful run (see the module docs). `None`
    /// when they ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why the engines ran instead of being skipped, e.g. `forced`, `no stamp of an earlier
    /// configure in the container`, `the inputs changed (…)`, `the container's state changed (…)`;
    /// `None` when skipped or when the run stopped before it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_run: Option<String>,
    /// Result.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Artifact for Configure {
    const KIND: &'static str = "configure";
    // 1.1: `restore`. 1.2: `skipped` and `full_run`, and `skipped` in the engine runs (all
    // optional: a 1.1 artifact reads as a full run).
    const SCHEMA_VERSION: (u32, u32) = (1, 2);
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
        if is_control_plane(spec) {
            if let Err(p) = crate::control_plane::check_given(&opts.control_plane) {
                problems.extend(p);
            }
            if let Err(p) = crate::control_plane::port(&spec.env, &spec.dir.join("container.env")) {
                problems.extend(p);
            }
        }
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

/// True for the control plane's own container configured by the root's Ansible playbook: it
/// gets `pgo_control_plane` ([`crate::control_plane::Vars`]).
fn is_control_plane(spec: &ContainerSpec) -> bool {
    spec.name == crate::inventory::CONTROL_PLANE && spec.engine == crate::inventory::Engine::Ansible
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
        crate::actions::mask(p.expose_secret());
    }
    let inv = Arc::new(inv.clone());
    let opts = Arc::new(opts.clone());
    let sem = Arc::new(tokio::sync::Semaphore::new(opts.jobs.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let (inv, opts, sem, spec) = (inv.clone(), opts.clone(), sem.clone(), (*spec).clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let _group = crate::actions::Group::start(&format!("configure {}", spec.name));
            let result = configure_one(&inv, &spec, &opts).await;
            (i, result)
        });
    }
    let mut results: Vec<Option<Configure>> = vec![None; specs.len()];
    let overall = crate::progress::Overall::start("configure", specs.len());
    while let Some(joined) = set.join_next().await {
        let (i, c) = joined.map_err(|e| Error::Failed(anyhow!("configure task panicked: {e}")))?;
        overall.done(!matches!(c.outcome, Outcome::Ok));
        let path = opts.artifacts.configure(&c.name);
        artifact::write(&path, &c).map_err(|e| Error::Failed(e.into()))?;
        match &c.outcome {
            Outcome::Ok if c.skipped.is_some() => tracing::info!(
                "{}: unchanged since its last configure (inputs and container state): base role and lib skipped, \
                 checked in {:.1}s",
                c.name,
                c.duration_ms as f64 / 1000.0
            ),
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
            let line = crate::actions::redact(line);
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
    skipped: Option<String>,
    full_run: Option<String>,
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
        skipped: None,
        full_run: None,
    };
    let res = run_container(inv, spec, opts, &mut log, &mut part).await;
    let outcome = match res {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            let msg = crate::actions::redact(&format!("{e:#}"));
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
        skipped: part.skipped,
        full_run: part.full_run,
        outcome,
    }
}

/// How long a configure waits for another run configuring (or, on the lxc backend, provisioning)
/// the same container (the provision lock's default, `--timeout-lease`).
const CONFIGURE_LOCK_TIMEOUT: Duration = Duration::from_secs(900);

/// The lock file inside every container that `configure` holds (`flock`) while it configures
/// the container: on tmpfs, so a reboot clears it. Two runs that configure one container at
/// once — a lib's own pipeline and the monorepo's, which Gitea's per-repository concurrency
/// groups do not serialise, on any backend — would otherwise collide inside it (the second base
/// role meets apt's lock). The lock lives where the collision would happen, so it serialises
/// runners on different hosts too, and it is released when the holding run's SSH connection
/// ends, whatever ended it.
pub const CONFIGURE_LOCK: &str = "/run/proxmox-gitops-configure.lock";

/// The exit code `flock -E` gives when [`CONFIGURE_LOCK`] stayed held for the whole wait
/// (`EX_TEMPFAIL`); any other failure exits otherwise.
const LOCK_CONFLICT_EXIT: i32 = 75;

/// Takes [`CONFIGURE_LOCK`] in the container behind `conn`: `flock -E 75 -w SECS LOCK sh -c 'echo
/// locked && exec cat'` (a constant script: it says it holds the lock, then waits for its input
/// to close). Logs once when another run holds it. Returns the held lock, or `None` when the
/// container has no `flock` (util-linux; logged as a warning: configured without the lock).
///
/// # Errors
/// The lock is still held by another run after [`CONFIGURE_LOCK_TIMEOUT`] (the message says how
/// to see the holder), or the command cannot run.
async fn hold_configure_lock<'c>(
    conn: &'c Connection,
    name: &str,
    log: &mut Log,
) -> anyhow::Result<Option<crate::ssh::command::Held<'c>>> {
    use crate::ssh::command::Hold;
    let secs = CONFIGURE_LOCK_TIMEOUT.as_secs().to_string();
    // `-E`: the timeout has an exit code of its own; 1 is also what `sudo -n` (as `config`) and
    // flock's other failures exit with, which must not read as "another run holds it".
    let conflict = LOCK_CONFLICT_EXIT.to_string();
    let argv = [
        "flock",
        "-E",
        conflict.as_str(),
        "-w",
        secs.as_str(),
        CONFIGURE_LOCK,
        "sh",
        "-c",
        "echo locked && exec cat >/dev/null",
    ];
    let mut waited = false;
    let mut on_wait = || {
        waited = true;
        tracing::info!(
            "{name}: another run is configuring this container; waiting for its lock {CONFIGURE_LOCK} (at most {secs} s)"
        );
    };
    let held = conn
        .hold(
            &argv,
            true,
            "locked",
            Duration::from_secs(2),
            &mut on_wait,
            CONFIGURE_LOCK_TIMEOUT + Duration::from_secs(60),
        )
        .await?;
    if waited {
        log.push(name, &format!("waited for {CONFIGURE_LOCK}: another run was configuring the container"));
    }
    match held {
        Hold::Held(h) => Ok(Some(*h)),
        Hold::Ended(Some(127)) => {
            let msg = format!(
                "{name}: no `flock` in the container (util-linux): configuring without {CONFIGURE_LOCK}, so another run \
                 configuring it at the same time is not kept out"
            );
            tracing::warn!("{msg}");
            log.push(name, &msg);
            Ok(None)
        }
        Hold::Ended(Some(LOCK_CONFLICT_EXIT)) => anyhow::bail!(
            "{name}: another run still holds {CONFIGURE_LOCK} in the container after {secs} s (it is configuring the \
             container, or hangs); see which process holds it with `fuser -v {CONFIGURE_LOCK}` in the container"
        ),
        Hold::Ended(code) => {
            anyhow::bail!(
                "{name}: cannot take {CONFIGURE_LOCK} in the container: `flock` (as {}, through `sudo -n` when not \
                 root) exited with {code:?}",
                conn.user()
            )
        }
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
    let prov: Provision = artifact::read(&prov_path).map_err(|e| {
        crate::error::Hinted::new(
            format!("{}: no provision artifact", spec.name),
            crate::error::Hint::RunStep { step: crate::error::Step::Provision, container: spec.name.clone() },
        )
        .because(e)
    })?;
    if let Outcome::Failed { error } = &prov.outcome {
        anyhow::bail!("{}: provisioning failed ({error}); nothing to configure", prov_path.display());
    }
    // One actor per container also while configuring (docs/lxc.md, "One actor per container"):
    // two runs configuring one LXC container at once collide inside it (apt's dpkg lock), so an
    // LXC container's configure holds the backend's lock of that container on this host.
    let _lock = if prov.backend == BackendKind::Lxc {
        let lxc_path = crate::lxc::resolve_path(None)?;
        let path = crate::backend::lxc::lock::lock_path(&lxc_path, &prov.hostname);
        Some(crate::backend::lxc::lock::acquire(&path, &prov.hostname, CONFIGURE_LOCK_TIMEOUT).await?)
    } else {
        None
    };
    let address = prov
        .address
        .clone()
        .or_else(|| spec.ip.address().map(|a| a.to_string()))
        .ok_or_else(|| anyhow!("{}: no address recorded for the container", prov_path.display()))?;
    part.address = Some(address.clone());
    part.ssh_port = prov.ssh_port;
    // The control plane's programs, found or downloaded before anything is contacted.
    let control_plane = if is_control_plane(spec) {
        let port = crate::control_plane::port(&spec.env, &spec.dir.join("container.env"))?;
        let versions = crate::control_plane::Versions::read(&inv.root)?;
        let binaries = crate::control_plane::binaries(&opts.control_plane, &versions).await?;
        let static_tar = match &binaries.gitea_static {
            Some(dir) => {
                let tar = opts.artifacts.root().join("control-plane").join("gitea-static.tar");
                crate::control_plane::pack_static(dir, &tar)?;
                Some(tar)
            }
            None => None,
        };
        let share_keys = crate::ssh::keys::key_dir(&inv.settings.share);
        Some(crate::control_plane::render(&crate::control_plane::Inputs {
            address: &address,
            port,
            hostname: &spec.hostname,
            runner_enabled: opts.deploys_to_pve,
            binaries: &binaries,
            static_tar: static_tar.as_deref(),
            // Handed over only to a control plane on Proxmox VE: the one that takes over.
            share_keys: (prov.backend == BackendKind::Pve).then_some(share_keys.as_path()),
        })?)
    } else {
        None
    };

    let keys = crate::ssh::keys::ensure(&inv.settings.share, spec.vmid, &spec.hostname)?;
    let control = tempfile::Builder::new()
        .prefix("pgo-ssh-")
        .tempdir_in("/tmp")
        .context("cannot create an SSH control directory")?;
    // The same door as every other way into a container (crate::access): configure keeps the
    // connection itself, for Ansible's ControlPath.
    let known_hosts = opts.artifacts.known_hosts(&spec.name);
    let replace = crate::ssh::recreated_since_recorded(prov.last_creation(&prov_path), &known_hosts);
    let target = crate::access::ssh_target(
        &spec.name,
        spec.vmid,
        &address,
        prov.ssh_port,
        &inv.settings.share,
        known_hosts,
        replace,
    )?;
    let conn = Connection::connect(&target, &opts.connect, control.path()).await?;
    part.user = Some(conn.user().to_string());
    part.fingerprint = conn.fingerprint().map(str::to_string);
    log.push(&spec.name, &format!("connected to {address}:{} as {}", prov.ssh_port, conn.user()));

    let result = match hold_configure_lock(&conn, &spec.name, log).await {
        Ok(lock) => {
            let result = run_engines(
                inv,
                spec,
                opts,
                prov.backend,
                &conn,
                &keys.public_line,
                &address,
                control_plane.as_ref(),
                log,
                part,
            )
            .await;
            drop(lock);
            result
        }
        Err(e) => Err(e),
    };
    conn.close().await;
    result
}
