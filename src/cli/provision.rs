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

/// How to reach and trust the PVE API, and how long its operations may take.
#[derive(Debug, Args, Clone)]
pub struct PveArgs {
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
    /// Seconds a container create may take (slow storage needs minutes).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout_create: u64,
    /// Seconds a start may take.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_start: u64,
    /// Seconds a clean shutdown may take before the container is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_shutdown: u64,
    /// Seconds a stop may take.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout_stop: u64,
    /// Seconds a destroy may take.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout_destroy: u64,
    /// Seconds a template download may take.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub timeout_download: u64,
    /// Seconds to keep retrying while a container is locked (backup, snapshot …).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout_lock: u64,
}

impl PveArgs {
    /// The connection options.
    pub fn connect(&self) -> Result<PveConnect> {
        let tls = if self.insecure {
            TlsMode::Insecure
        } else if let Some(fp) = &self.pve_fingerprint {
            TlsMode::Fingerprint(crate::pve::tls::parse_fingerprint(fp).map_err(|e| Error::Usage(e.to_string()))?)
        } else if let Some(ca) = &self.pve_ca {
            TlsMode::CaFile(ca.clone())
        } else {
            TlsMode::System
        };
        let s = Duration::from_secs;
        Ok(PveConnect {
            tls,
            timeouts: crate::backend::pve::Timeouts {
                create: s(self.timeout_create),
                start: s(self.timeout_start),
                shutdown: s(self.timeout_shutdown),
                stop: s(self.timeout_stop),
                destroy: s(self.timeout_destroy),
                download: s(self.timeout_download),
                resize: s(self.timeout_create.max(300)),
                lock: s(self.timeout_lock),
            },
            request_timeout: s(60),
        })
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
            ("provision_dir", ctx.artifacts.root().join("provision").display().to_string()),
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
