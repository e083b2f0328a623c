//! The argument groups several subcommands share: how to reach and trust the PVE API and how
//! long its tasks may take, the recreate policy, waiting for SSH after a start, the backend, a
//! saved inventory, how many containers at once, and the Gitea target of `rewrite` and `publish`.
//!
//! Each group is a clap `#[derive(Args)]` struct that a subcommand flattens where its options
//! belong, so an option is declared (name, env var, default, help) in exactly one place. A
//! subcommand shows only the PVE options it uses: `plan` the TLS ones ([`PveTlsArgs`]),
//! `snapshot` those and the snapshot task timeout ([`PveSnapshotArgs`]), `destroy` those and the
//! stop/destroy timeouts ([`PveDestroyArgs`]), `provision` and `deploy` all of them
//! ([`PveArgs`]). Each group turns itself into the step's typed options (`connect()`,
//! `policy()`, …): the steps never see clap.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::backend::PveConnect;
use crate::backend::pve::Timeouts;
use crate::error::Location;
use crate::error::{Error, Result};
use crate::model::RecreatePolicy;
use crate::pve::TlsMode;
use crate::settings::{EnvSource, ProcessEnv, Settings};
use crate::steps::rewrite::{RewriteOptions, WorkflowOptions};

/// How to trust the PVE API's certificate: what every subcommand that talks to PVE takes
/// (`plan` only these; `snapshot`, `destroy`, `provision` and `deploy` also task timeouts).
#[derive(Debug, Args, Clone)]
pub struct PveTlsArgs {
    /// Trust the PEM certificate(s) in FILE for the PVE API (the cluster CA
    /// /etc/pve/pve-root-ca.pem, or the node certificate).
    #[arg(long = "pve-ca", env = "PROXMOX_CA", value_name = "FILE")]
    pub pve_ca: Option<PathBuf>,
    /// Accept exactly the PVE certificate with this SHA-256 fingerprint (AA:BB:… as the PVE UI
    /// shows it).
    #[arg(long = "pve-fingerprint", env = "PROXMOX_FINGERPRINT", value_name = "SHA256", conflicts_with = "pve_ca")]
    pub pve_fingerprint: Option<String>,
    /// Do not verify the PVE certificate at all (insecure; prints a warning).
    #[arg(long, conflicts_with_all = ["pve_ca", "pve_fingerprint"])]
    pub insecure: bool,
    /// Seconds a PVE API read (GET, and the login) may take before it is abandoned and sent
    /// again (PVE answers reads in milliseconds; a hung connection is noticed after this).
    #[arg(long, value_name = "SECS", default_value_t = 10, env = "PGO_TIMEOUT_READ",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_read: u64,
    /// Seconds a PVE API write (POST, PUT, DELETE) may take until its answer arrived (PVE holds a
    /// write up to 10 s for a config lock); only writes safe to repeat are sent again.
    #[arg(long, value_name = "SECS", default_value_t = 60, env = "PGO_TIMEOUT_WRITE",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_write: u64,
}

impl PveTlsArgs {
    /// The certificate verification mode.
    ///
    /// # Errors
    /// [`Error::Usage`] for a malformed `--pve-fingerprint`.
    pub fn tls(&self) -> Result<TlsMode> {
        Ok(if self.insecure {
            TlsMode::Insecure
        } else if let Some(fp) = &self.pve_fingerprint {
            TlsMode::Fingerprint(crate::pve::tls::parse_fingerprint(fp).map_err(|e| Error::Usage(e.to_string()))?)
        } else if let Some(ca) = &self.pve_ca {
            TlsMode::CaFile(ca.clone())
        } else {
            TlsMode::System
        })
    }

    /// The connection options with the default task timeouts ([`Timeouts::default`]), for
    /// subcommands that start no create/start/destroy tasks.
    ///
    /// # Errors
    /// See [`PveTlsArgs::tls`].
    pub fn connect(&self) -> Result<PveConnect> {
        Ok(PveConnect {
            tls: self.tls()?,
            timeouts: Timeouts::default(),
            request_timeout: Duration::from_secs(self.timeout_write),
            read_timeout: Duration::from_secs(self.timeout_read),
            wait_for_locks: true,
            task_times: crate::pve::task_wait::default_task_times_file(),
        })
    }
}

/// The PVE options of `snapshot`: TLS, and how long a container-snapshot task may take.
#[derive(Debug, Args, Clone)]
pub struct PveSnapshotArgs {
    /// PVE API trust (for container snapshots of `pve` containers; used when PROXMOX_HOST is set).
    #[command(flatten)]
    pub tls: PveTlsArgs,
    /// Seconds a PVE container-snapshot task (create, rollback, delete) may take.
    #[arg(long, value_name = "SECS", default_value_t = 600, alias = "timeout-create", env = "PGO_TIMEOUT_SNAPSHOT")]
    pub timeout_snapshot: u64,
}

impl PveSnapshotArgs {
    /// How long one container-snapshot task (create, rollback, delete) may take.
    pub fn task_timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_snapshot)
    }
}

/// How long stopping and destroying a PVE container may take (`destroy`, and as part of
/// [`PveArgs`] for `provision` and `deploy`, which recreate).
#[derive(Debug, Args, Clone)]
pub struct PveStopArgs {
    /// Seconds a clean shutdown may take before the container is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 120, env = "PGO_TIMEOUT_SHUTDOWN")]
    pub timeout_shutdown: u64,
    /// Seconds a stop may take.
    #[arg(long, value_name = "SECS", default_value_t = 60, env = "PGO_TIMEOUT_STOP")]
    pub timeout_stop: u64,
    /// Seconds a destroy may take.
    #[arg(long, value_name = "SECS", default_value_t = 300, env = "PGO_TIMEOUT_DESTROY")]
    pub timeout_destroy: u64,
    /// Seconds to keep retrying while a container is locked (backup, snapshot …).
    #[arg(long, value_name = "SECS", default_value_t = 120, env = "PGO_TIMEOUT_LOCK")]
    pub timeout_lock: u64,
}

impl PveStopArgs {
    /// Sets the stop/destroy/lock timeouts of `timeouts` to these.
    fn apply(&self, timeouts: &mut Timeouts) {
        let s = Duration::from_secs;
        timeouts.shutdown = s(self.timeout_shutdown);
        timeouts.stop = s(self.timeout_stop);
        timeouts.destroy = s(self.timeout_destroy);
        timeouts.lock = s(self.timeout_lock);
    }
}

/// The PVE options of `destroy`: TLS and the stop/destroy timeouts.
#[derive(Debug, Args, Clone)]
pub struct PveDestroyArgs {
    /// PVE API trust.
    #[command(flatten)]
    pub tls: PveTlsArgs,
    /// Stop and destroy task timeouts.
    #[command(flatten)]
    pub stop: PveStopArgs,
}

impl PveDestroyArgs {
    /// The connection options (other task timeouts at their defaults).
    ///
    /// # Errors
    /// See [`PveTlsArgs::tls`].
    pub fn connect(&self) -> Result<PveConnect> {
        let mut c = self.tls.connect()?;
        self.stop.apply(&mut c.timeouts);
        Ok(c)
    }
}

/// How to reach and trust the PVE API, and how long each of its tasks may take (`provision`,
/// `deploy`).
#[derive(Debug, Args, Clone)]
pub struct PveArgs {
    /// PVE API trust.
    #[command(flatten)]
    pub tls: PveTlsArgs,
    /// Seconds a container create may take (slow storage needs minutes).
    #[arg(long, value_name = "SECS", default_value_t = 600, env = "PGO_TIMEOUT_CREATE")]
    pub timeout_create: u64,
    /// Seconds a start may take.
    #[arg(long, value_name = "SECS", default_value_t = 120, env = "PGO_TIMEOUT_START")]
    pub timeout_start: u64,
    /// Stop and destroy task timeouts (a recreate destroys).
    #[command(flatten)]
    pub stop: PveStopArgs,
    /// Seconds a template download may take.
    #[arg(long, value_name = "SECS", default_value_t = 1800, env = "PGO_TIMEOUT_DOWNLOAD")]
    pub timeout_download: u64,
    /// Seconds moving a container to its NODE may take (PVE copies local volumes).
    #[arg(long, value_name = "SECS", default_value_t = 1800, env = "PGO_TIMEOUT_MIGRATE")]
    pub timeout_migrate: u64,
    /// Seconds to wait while another proxmox-gitops run holds a container's lease (works on it);
    /// with `--backend lxc`, its lock file `<lxcpath>/.<name>.lock`.
    #[arg(long, value_name = "SECS", default_value_t = 900, env = "PGO_TIMEOUT_LEASE")]
    pub timeout_lease: u64,
}

impl PveArgs {
    /// The connection options; the resize timeout follows `--timeout-create` (at least 300 s).
    ///
    /// # Errors
    /// See [`PveTlsArgs::tls`].
    pub fn connect(&self) -> Result<PveConnect> {
        let mut c = self.tls.connect()?;
        let s = Duration::from_secs;
        c.timeouts.create = s(self.timeout_create);
        c.timeouts.start = s(self.timeout_start);
        c.timeouts.download = s(self.timeout_download);
        c.timeouts.migrate = s(self.timeout_migrate);
        c.timeouts.lease = s(self.timeout_lease);
        c.timeouts.resize = s(self.timeout_create.max(300));
        self.stop.apply(&mut c.timeouts);
        Ok(c)
    }
}

/// When existing containers may be destroyed and created again (`plan`, `provision`, `deploy`).
#[derive(Debug, Args, Clone)]
pub struct PolicyArgs {
    /// Allow destroying and recreating a container whose change cannot be applied in place
    /// (same as --recreate when-needed). Its data is lost unless snapshotted.
    #[arg(long)]
    pub allow_recreate: bool,
    /// Recreate policy: never (default), when-needed, always (the seed's behaviour on release).
    #[arg(long, value_enum, conflicts_with = "allow_recreate")]
    pub recreate: Option<RecreatePolicy>,
    /// Take over a container at a lib's vmid that proxmox-gitops did not create (PVE): the plan
    /// shows it as `adopt`, then the `proxmox-gitops` tag and the lib's description are written
    /// in place with the spec's in-place changes. Never destroys it.
    #[arg(long)]
    pub adopt: bool,
}

impl PolicyArgs {
    /// The policy: `--recreate`, else `when-needed` with `--allow-recreate`, else `never`.
    pub fn policy(&self) -> RecreatePolicy {
        match (self.recreate, self.allow_recreate) {
            (Some(p), _) => p,
            (None, true) => RecreatePolicy::WhenNeeded,
            (None, false) => RecreatePolicy::Never,
        }
    }

    /// The recreate policy with `--adopt`: what the planner gets.
    pub fn plan_policy(&self) -> crate::model::PlanPolicy {
        crate::model::PlanPolicy { recreate: self.policy(), adopt: self.adopt }
    }

    /// The policy when `--recreate` or `--allow-recreate` was given; `None` when neither was.
    pub fn given(&self) -> Option<RecreatePolicy> {
        (self.recreate.is_some() || self.allow_recreate).then(|| self.policy())
    }
}

/// Whether and how long to wait for SSH after a container starts (`provision`, `deploy`).
///
/// The help texts are `provision`'s; `deploy` words them for its steps with `mut_arg`.
#[derive(Debug, Args, Clone)]
pub struct SshWaitArgs {
    /// Do not wait for SSH after starting.
    #[arg(long)]
    pub no_wait_ssh: bool,
    /// SSH port to wait for.
    #[arg(long, default_value_t = 22)]
    pub ssh_port: u16,
    /// Seconds to wait for SSH (and a DHCP address) after start.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub ssh_timeout: u64,
}

impl SshWaitArgs {
    /// Whether to wait for SSH after a start (not `--no-wait-ssh`).
    pub fn wait(&self) -> bool {
        !self.no_wait_ssh
    }

    /// How long to wait for SSH (and a DHCP address) after a start.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.ssh_timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    #[test]
    fn timeouts_reach_the_connection() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            pve: super::PveArgs,
        }
        #[derive(Parser)]
        struct D {
            #[command(flatten)]
            pve: super::PveDestroyArgs,
        }
        let s = Duration::from_secs;
        let defaults = crate::backend::pve::Timeouts::default();
        // resize follows --timeout-create (at least 300 s), as before the split.
        let t = T::try_parse_from(["t"]).unwrap().pve.connect().unwrap().timeouts;
        assert_eq!(t, crate::backend::pve::Timeouts { resize: s(600), ..defaults.clone() });
        assert_eq!(D::try_parse_from(["d"]).unwrap().pve.connect().unwrap().timeouts, defaults.clone());
        let d = D::try_parse_from(["d", "--timeout-stop", "7"]).unwrap().pve.connect().unwrap().timeouts;
        assert_eq!(d, crate::backend::pve::Timeouts { stop: s(7), ..defaults });
        let args = [
            "t",
            "--timeout-create",
            "11",
            "--timeout-start",
            "12",
            "--timeout-shutdown",
            "13",
            "--timeout-stop",
            "14",
            "--timeout-destroy",
            "15",
            "--timeout-lock",
            "16",
            "--timeout-download",
            "17",
            "--timeout-migrate",
            "18",
        ];
        let t = T::try_parse_from(args).unwrap().pve.connect().unwrap().timeouts;
        assert_eq!(
            (t.create, t.start, t.shutdown, t.stop, t.destroy, t.lock, t.download, t.resize, t.migrate),
            (s(11), s(12), s(13), s(14), s(15), s(16), s(17), s(300), s(18))
        );
    }
}

/// `--backend`: which provisioning backend a run works with, read from `PGO_BACKEND` too (what
/// the shipped action sets from its `backend` input).
#[derive(Debug, Args, Clone, Copy)]
pub struct BackendArg {
    /// Backend of the containers [default: pve when PROXMOX_HOST is configured, else lxc].
    #[arg(long = "backend", value_name = "BACKEND", value_enum, env = "PGO_BACKEND")]
    pub kind: Option<crate::model::BackendKind>,
}

impl BackendArg {
    /// The backend given, else the default of `settings` ([`crate::backend::default_backend`]).
    pub fn or_default(self, settings: &crate::settings::Settings) -> crate::model::BackendKind {
        self.kind.unwrap_or_else(|| crate::backend::default_backend(settings))
    }
}

/// `--inventory`: a saved inventory instead of resolving the monorepo again.
#[derive(Debug, Args, Clone)]
pub struct InventoryArg {
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long = "inventory", value_name = "INVENTORY")]
    pub path: Option<PathBuf>,
}

impl InventoryArg {
    /// The path given, if any.
    pub fn as_deref(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }
}

/// `-j`/`--jobs`: at most this many containers at once (1–64, default 4), read from `PGO_JOBS`
/// too (what the shipped action sets from its `jobs` input).
#[derive(Debug, Args, Clone, Copy)]
pub struct JobsArg {
    /// At most this many containers at once.
    #[arg(long = "jobs", short = 'j', default_value_t = 4, env = "PGO_JOBS",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub jobs: u16,
}

impl JobsArg {
    /// The count as a `usize`.
    pub fn get(self) -> usize {
        usize::from(self.jobs)
    }
}

/// Arguments shared by `rewrite` and `publish`.
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// Gitea base URL, e.g. `http://10.0.3.2:8080` [default: HOST from the settings].
    #[arg(long, value_name = "URL")]
    pub gitea: Option<String>,
    /// Organization of the repositories.
    #[arg(long, default_value = "main")]
    pub org: String,
    /// Where the working copy is built [default: <artifacts>/worktree]. Replaced on every run.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Repository name of the monorepo [default: the checkout's directory name].
    #[arg(long)]
    pub name: Option<String>,
    /// The runner label the installed workflows' jobs run on.
    #[arg(long, default_value = "shell")]
    pub runs_on: String,
    /// Do not install the workflows (the monorepo's pipeline.yml and snapshot.yml, each lib's
    /// pipeline, each task's task.yml under .gitea/workflows/).
    #[arg(long)]
    pub no_workflows: bool,
}

impl TargetArgs {
    /// The rewrite step's options for the checkout `repo`: the Gitea address (`--gitea`, else
    /// `HOST` of `settings`), the working copy (`--workdir`, else `default_workdir`), and the
    /// workflows to install with the checkout action of the settings (none with
    /// `--no-workflows`).
    ///
    /// # Errors
    /// [`Error::Usage`] when no Gitea address is given or set; [`Error::Input`] for a bad
    /// checkout action (`PROXMOX_GITOPS_CHECKOUT` or `checkout` in `local/config*.json`).
    pub fn rewrite_options(
        &self,
        repo: &Path,
        default_workdir: PathBuf,
        settings: &Settings,
    ) -> Result<RewriteOptions> {
        let gitea = self.gitea.clone().or_else(|| settings.gitea.host.clone()).ok_or_else(|| {
            Error::Usage(format!(
                "no Gitea address; {}",
                crate::error::Hint::PassOption { option: "--gitea URL".into(), variable: Some("HOST".into()) }
            ))
        })?;
        let workflows = if self.no_workflows {
            None
        } else {
            // The checkout action (PROXMOX_GITOPS_CHECKOUT) the installed workflows use.
            let root = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
            let checkout = crate::settings::load_checkout(&root, &ProcessEnv)?;
            Some(WorkflowOptions { runs_on: self.runs_on.clone(), checkout })
        };
        Ok(RewriteOptions {
            repo: repo.to_path_buf(),
            workdir: self.workdir.clone().unwrap_or(default_workdir),
            gitea,
            org: self.org.clone(),
            name: self.name.clone(),
            workflows,
        })
    }
}

/// How containers of the `pve` backend are reached over SSH (`health`, `update`).
#[derive(Debug, Args, Clone)]
pub struct ReachArgs {
    /// SSH port of `pve` containers.
    #[arg(long, default_value_t = 22)]
    pub ssh_port: u16,
    /// Seconds for one SSH connect attempt.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub connect_timeout: u64,
    /// Seconds all SSH connect attempts to one container may take together.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub connect_budget: u64,
}

impl ReachArgs {
    /// The SSH connect options.
    pub fn ssh(&self) -> crate::ssh::ConnectOptions {
        crate::ssh::ConnectOptions {
            connect_timeout: Duration::from_secs(self.connect_timeout.max(1)),
            total_timeout: Duration::from_secs(self.connect_budget.max(1)),
            attempts: 6,
        }
    }
}

/// The value of the environment variable `var` as a `T` (a clap value enum); unset or empty is
/// `None`. For the variables a workflow passes as empty when unset, where clap's `env` would
/// take the empty value.
///
/// # Errors
/// [`Error::Input`] naming the variable and the accepted values.
pub fn from_env<T: clap::ValueEnum>(var: &str) -> Result<Option<T>> {
    let Some(v) = ProcessEnv.get(var).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
    T::from_str(v.trim(), true).map(Some).map_err(|_| {
        let accepted: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|x| x.to_possible_value())
            .map(|p| p.get_name().to_string())
            .collect();
        Error::input(Location::environment(var), format!("expected one of {}, found `{v}`", accepted.join(", ")))
    })
}
