//! `proxmox-gitops provision`: create, update and start the containers (PVE API or local LXC).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{Ctx, table};
use crate::error::{Error, Result};
use crate::provision::{ApplyOptions, BackendKind, Outcome, RecreatePolicy};
use crate::pve::TlsMode;
use crate::settings::{ProcessEnv, Settings};
use crate::steps::provision::{self as step, PveConnect};

/// How to trust the PVE API's certificate: what every subcommand that talks to PVE takes
/// (`plan` and `snapshot` only these; `provision`, `deploy` and `destroy` also task timeouts).
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

    /// The connection options with the default task timeouts
    /// ([`crate::backend::pve::Timeouts::default`]), for subcommands that start no
    /// create/start/destroy tasks.
    ///
    /// # Errors
    /// See [`PveTlsArgs::tls`].
    pub fn connect(&self) -> Result<PveConnect> {
        Ok(PveConnect {
            tls: self.tls()?,
            timeouts: crate::backend::pve::Timeouts::default(),
            request_timeout: Duration::from_secs(60),
        })
    }
}

/// How long stopping and destroying a PVE container may take (`destroy`, and as part of
/// [`PveArgs`] for `provision` and `deploy`, which recreate).
#[derive(Debug, Args, Clone)]
pub struct PveStopArgs {
    /// Seconds a clean shutdown may take before the container is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_shutdown: u64,
    /// Seconds a stop may take.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout_stop: u64,
    /// Seconds a destroy may take.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout_destroy: u64,
    /// Seconds to keep retrying while a container is locked (backup, snapshot …).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_lock: u64,
}

impl PveStopArgs {
    /// `timeouts` with these stop/destroy/lock timeouts.
    fn apply(&self, timeouts: &mut crate::backend::pve::Timeouts) {
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
    #[command(flatten)]
    pub tls: PveTlsArgs,
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
    #[command(flatten)]
    pub tls: PveTlsArgs,
    /// Seconds a container create may take (slow storage needs minutes).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout_create: u64,
    /// Seconds a start may take.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_start: u64,
    #[command(flatten)]
    pub stop: PveStopArgs,
    /// Seconds a template download may take.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub timeout_download: u64,
}

impl PveArgs {
    /// The connection options.
    ///
    /// # Errors
    /// See [`PveTlsArgs::tls`].
    pub fn connect(&self) -> Result<PveConnect> {
        let mut c = self.tls.connect()?;
        let s = Duration::from_secs;
        c.timeouts.create = s(self.timeout_create);
        c.timeouts.start = s(self.timeout_start);
        c.timeouts.download = s(self.timeout_download);
        c.timeouts.resize = s(self.timeout_create.max(300));
        self.stop.apply(&mut c.timeouts);
        Ok(c)
    }
}

/// When existing containers may be destroyed and created again.
#[derive(Debug, Args, Clone)]
pub struct PolicyArgs {
    /// Allow destroying and recreating a container whose change cannot be applied in place
    /// (same as --recreate when-needed). Its data is lost unless snapshotted.
    #[arg(long)]
    pub allow_recreate: bool,
    /// Recreate policy: never (default), when-needed, always (the seed's behaviour on release).
    #[arg(long, value_enum, conflicts_with = "allow_recreate")]
    pub recreate: Option<RecreatePolicy>,
}

impl PolicyArgs {
    /// The policy.
    pub fn policy(&self) -> RecreatePolicy {
        match (self.recreate, self.allow_recreate) {
            (Some(p), _) => p,
            (None, true) => RecreatePolicy::WhenNeeded,
            (None, false) => RecreatePolicy::Never,
        }
    }
}

/// Arguments of `provision`.
#[derive(Debug, Args)]
pub struct ProvisionArgs {
    /// Container to provision (lib name or hostname); repeatable.
    #[arg(long = "container", short = 'c', value_name = "NAME")]
    containers: Vec<String>,
    /// Provision every container of the stage.
    #[arg(long, conflicts_with = "containers")]
    all: bool,
    /// How many containers are provisioned at the same time (one shared API session).
    #[arg(long, short = 'j', default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: u16,
    /// Backend [default: pve when PROXMOX_HOST is configured, else lxc].
    #[arg(long, value_enum)]
    backend: Option<BackendKind>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Use this inventory artifact instead of resolving the repo again.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// Only show the plan; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not wait for SSH after starting.
    #[arg(long)]
    no_wait_ssh: bool,
    /// SSH port to wait for.
    #[arg(long, default_value_t = 22)]
    ssh_port: u16,
    /// Seconds to wait for SSH (and a DHCP address) after start.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    ssh_timeout: u64,
    /// Destroy/recreate containers that declare SNAPSHOT paths WITHOUT taking a verified data
    /// snapshot first (their data is lost; logged as a warning).
    #[arg(long)]
    no_snapshot: bool,
    #[command(flatten)]
    pve: PveArgs,
}

/// Rows of the plan table.
pub(crate) fn plan_rows(planned: &[step::Planned]) -> Vec<Vec<String>> {
    planned
        .iter()
        .map(|p| {
            let (what, start) = match &p.plan {
                Ok(cp) => (step::describe(cp), if cp.start { "yes" } else { "no" }.to_string()),
                Err(e) => (format!("cannot plan: {}", crate::ci::redact(&format!("{e:#}"))), "-".into()),
            };
            vec![p.spec.name.clone(), p.spec.hostname.clone(), p.spec.vmid.to_string(), what, start]
        })
        .collect()
}

pub fn run(ctx: &Ctx, args: ProvisionArgs) -> Result<()> {
    let inv = ctx.inventory(args.inventory.as_deref())?;
    let specs = step::select(&inv, &args.containers, args.all)?;
    let settings = Settings::load(&ctx.repo, &ProcessEnv)?;
    let kind = args.backend.unwrap_or_else(|| step::default_backend(&settings));
    let backend = step::backend(kind, &settings, &args.pve.connect()?)?;
    let jobs = usize::from(args.jobs);
    let policy = args.policy.policy();
    let opts = ApplyOptions {
        share: settings.share.clone(),
        wait_ssh: !args.no_wait_ssh,
        ssh_port: args.ssh_port,
        ssh_timeout: Duration::from_secs(args.ssh_timeout),
        recreate: policy,
        no_snapshot: args.no_snapshot,
    };
    let rt = tokio::runtime::Runtime::new().map_err(|e| Error::Failed(e.into()))?;
    rt.block_on(async {
        let planned = step::plan_all(&backend, specs, policy, jobs).await;
        if !ctx.json {
            let mut s = table(&["NAME", "HOSTNAME", "VMID", "PLAN", "START"], &plan_rows(&planned));
            s.push_str(&format!("\nplan for {} container(s) on {kind} (recreate policy {policy:?})\n", planned.len()));
            print!("{s}");
        }
        if args.dry_run {
            return Ok(());
        }
        let results = step::apply_all(&backend, planned, &opts, jobs, &ctx.artifacts).await?;
        let failed: Vec<&str> =
            results.iter().filter(|p| matches!(p.outcome, Outcome::Failed { .. })).map(|p| p.name.as_str()).collect();
        let names = |f: &dyn Fn(&crate::provision::Provision) -> bool| {
            results.iter().filter(|p| f(p)).map(|p| p.name.as_str()).collect::<Vec<_>>().join(",")
        };
        crate::ci::set_outputs(&[
            ("provisioned", names(&|p| matches!(p.outcome, Outcome::Ok))),
            ("failed", failed.join(",")),
            ("created", names(&|p| p.created)),
            ("provision_dir", ctx.artifacts.provision_dir().display().to_string()),
        ])
        .map_err(|e| Error::Failed(anyhow::anyhow!("cannot write $GITHUB_OUTPUT: {e}")))?;
        if ctx.json {
            let all: Vec<serde_json::Value> = results.iter().map(crate::artifact::to_value).collect();
            println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        } else {
            let rows: Vec<Vec<String>> = results
                .iter()
                .map(|p| {
                    vec![
                        p.name.clone(),
                        p.vmid.to_string(),
                        p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>().join(","),
                        p.address.clone().unwrap_or_default(),
                        match &p.outcome {
                            Outcome::Ok => "ok".into(),
                            Outcome::Failed { error } => format!("FAILED: {}", error.lines().next().unwrap_or("")),
                        },
                    ]
                })
                .collect();
            print!("\n{}", table(&["NAME", "VMID", "ACTIONS", "ADDRESS", "RESULT"], &rows));
            for p in &results {
                for w in &p.warnings {
                    eprintln!("warning: {}: {w}", p.name);
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            let details: Vec<String> = results
                .iter()
                .filter_map(|p| match &p.outcome {
                    Outcome::Failed { error } => Some(format!("{}: {error}", p.name)),
                    Outcome::Ok => None,
                })
                .collect();
            Err(Error::Failed(anyhow::anyhow!(
                "{} of {} container(s) failed:\n{}",
                failed.len(),
                results.len(),
                details.join("\n")
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The `--timeout-*` options each subcommand shows in its help.
    fn timeouts(sub: &str) -> Vec<String> {
        let cmd = super::super::Cli::command();
        let sub = cmd.find_subcommand(sub).unwrap_or_else(|| panic!("{sub}"));
        sub.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| l.starts_with("timeout-") || l.starts_with("pve-") || *l == "insecure")
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn each_subcommand_shows_only_the_pve_options_it_uses() {
        let tls = ["pve-ca", "pve-fingerprint", "insecure"];
        let all = [
            "timeout-create",
            "timeout-start",
            "timeout-shutdown",
            "timeout-stop",
            "timeout-destroy",
            "timeout-lock",
            "timeout-download",
        ];
        let with = |extra: &[&str]| tls.iter().chain(extra).map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(timeouts("plan"), with(&[]));
        assert_eq!(timeouts("snapshot"), with(&["timeout-snapshot"]));
        assert_eq!(timeouts("destroy"), with(&["timeout-shutdown", "timeout-stop", "timeout-destroy", "timeout-lock"]));
        assert_eq!(timeouts("provision"), with(&all));
        assert_eq!(timeouts("deploy"), with(&all));
    }

    #[test]
    fn timeouts_reach_the_connection() {
        use clap::Parser;
        use std::time::Duration;
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
        ];
        let t = T::try_parse_from(args).unwrap().pve.connect().unwrap().timeouts;
        assert_eq!(
            (t.create, t.start, t.shutdown, t.stop, t.destroy, t.lock, t.download, t.resize),
            (s(11), s(12), s(13), s(14), s(15), s(16), s(17), s(300))
        );
    }
}
