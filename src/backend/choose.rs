//! Choosing and opening a backend: which one a run uses (`--backend`, else `pve` when
//! `PROXMOX_HOST` is set) and how it is built from the settings.
//!
//! This is the only place that turns `PROXMOX_*` settings into a PVE client ([`pve_client`], also
//! used by the `snapshot` step for container snapshots) or a backend ([`open`]); the steps receive
//! the opened [`Backend`] and never read the settings for it themselves.

use std::sync::Arc;
use std::time::Duration;

use super::Backend;
use super::lxc::{LxcBackend, LxcOptions};
use super::pve::{PveBackend, PveBackendOptions, Timeouts, desired::PveDefaults};
use crate::error::{Error, Result};
use crate::model::BackendKind;
use crate::pve::{Auth, ClientOptions, PveClient, TlsMode};
use crate::settings::{Settings, not_set};

/// How to reach PVE besides the settings: TLS and timeouts.
#[derive(Debug, Clone)]
pub struct PveConnect {
    /// Certificate verification.
    pub tls: TlsMode,
    /// Per-operation timeouts.
    pub timeouts: Timeouts,
    /// Timeout of one write request (POST, PUT, DELETE) to the PVE API
    /// ([`crate::pve::ClientOptions::request_timeout`]).
    pub request_timeout: Duration,
    /// Timeout of one read request (GET, and the login), after which it is abandoned and sent
    /// again ([`crate::pve::ClientOptions::read_timeout`]).
    pub read_timeout: Duration,
    /// Whether a plan waits for a container PVE has locked (its running task) before it reads
    /// it ([`crate::backend::pve::PveBackendOptions::wait_for_locks`]); `false` (the `plan`
    /// subcommand without `--wait-for-locks`) reports the container busy.
    pub wait_for_locks: bool,
    /// Where the learned PVE task durations are kept across runs ([`crate::pve::task_wait::TaskTimes`]);
    /// `None`: in memory for this run only. Default:
    /// [`crate::pve::task_wait::default_task_times_file`].
    pub task_times: Option<std::path::PathBuf>,
}

impl Default for PveConnect {
    fn default() -> Self {
        Self {
            tls: TlsMode::System,
            timeouts: Timeouts::default(),
            request_timeout: crate::pve::DEFAULT_WRITE_TIMEOUT,
            read_timeout: crate::pve::DEFAULT_READ_TIMEOUT,
            wait_for_locks: true,
            task_times: crate::pve::task_wait::default_task_times_file(),
        }
    }
}

/// The backend chosen by default: `pve` when `PROXMOX_HOST` is configured, else `lxc`.
pub fn default_backend(settings: &Settings) -> BackendKind {
    if settings.pve.host.is_some() { BackendKind::Pve } else { BackendKind::Lxc }
}

/// Builds the PVE API client from the settings (`PROXMOX_HOST`, `PROXMOX_PORT`, credentials)
/// and the TLS/request options of `connect` (the provision backend and the `snapshot` step's
/// container snapshots share this).
///
/// # Errors
/// [`Error::Input`] naming the missing setting (host, credentials); [`Error::Failed`] for an
/// unusable TLS set-up (unreadable CA file …).
pub fn pve_client(settings: &Settings, connect: &PveConnect) -> Result<PveClient> {
    let s = &settings.pve;
    let host = s.host.clone().ok_or_else(|| not_set("PROXMOX_HOST", "not set: the PVE API host (name or address)"))?;
    let auth = if let Some(pw) = &s.password {
        Auth::Ticket { user: s.user.clone().unwrap_or_else(|| "root@pam".into()), password: pw.clone() }
    } else if let (Some(token), Some(secret)) = (&s.token, &s.secret) {
        let user = s.user.clone().ok_or_else(|| {
            not_set(
                "PROXMOX_USER",
                "not set: an API token needs its user, e.g. root@pam, or the token given as USER@REALM!TOKENID",
            )
        })?;
        Auth::Token { user, token: token.clone(), secret: secret.clone() }
    } else {
        return Err(not_set(
            "PROXMOX_PASSWORD",
            "no PVE credentials: set the password for ticket auth, or an API token: PROXMOX_TOKEN and PROXMOX_SECRET \
             (proxmox.token and proxmox.secret in local/config.json)",
        )
        .into());
    };
    let mut opts = ClientOptions::new(host);
    opts.port = s.port;
    opts.tls = connect.tls.clone();
    opts.request_timeout = connect.request_timeout;
    opts.read_timeout = connect.read_timeout;
    opts.task_times = connect.task_times.clone();
    PveClient::new(opts, auth).map_err(|e| Error::Failed(e.into()))
}

/// Builds the PVE backend from the settings (`PROXMOX_*`).
///
/// # Errors
/// [`Error::Input`] naming the missing setting (host, credentials, template);
/// [`Error::Failed`] for an unusable TLS set-up (unreadable CA file …).
pub fn pve_backend(settings: &Settings, connect: &PveConnect) -> Result<PveBackend> {
    let s = &settings.pve;
    let client = pve_client(settings, connect)?;
    let template = s.template.clone().ok_or_else(|| {
        not_set(
            "PROXMOX_TEMPLATE",
            "not set: the container template without arch and extension, e.g. debian-13-standard_13.1-2",
        )
    })?;
    Ok(PveBackend::new(
        Arc::new(client),
        PveBackendOptions {
            defaults: PveDefaults {
                storage: s.storage.clone().unwrap_or_else(|| "local".into()),
                template,
                gateway: s.gateway.clone(),
                mask: s.mask,
                interface: s.interface.clone(),
                bridge: s.bridge.clone(),
            },
            node: s.node.clone(),
            timeouts: connect.timeouts.clone(),
            wait_for_locks: connect.wait_for_locks,
        },
    ))
}

/// Builds (opens) the backend of `kind`: the one PVE client and session, or the LXC client,
/// that every container of the run shares. The lxc backend waits for another run's container
/// lock at most `connect.timeouts.lease` (`--timeout-lease`), like the pve backend's lease.
///
/// # Errors
/// See [`pve_backend`] and [`lxc_backend`].
pub fn open(kind: BackendKind, settings: &Settings, connect: &PveConnect) -> Result<Backend> {
    match kind {
        BackendKind::Pve => Ok(Backend::Pve(pve_backend(settings, connect)?)),
        BackendKind::Lxc => {
            // One bound for waiting on another run's container, whichever backend.
            let opts = LxcOptions { lock_timeout: connect.timeouts.lease, ..lxc_options(settings) };
            Ok(Backend::Lxc(LxcBackend::open(opts).map_err(Error::Failed)?))
        }
    }
}

/// Builds the local LXC backend: LXC path from `$PGO_LXC_PATH` (else `lxc-config
/// lxc.lxcpath`), the share directory from the settings (`PROXMOX_SHARE`), bridge `lxcbr0`, the
/// cached base container from `$PGO_LXC_BASE` (default `pgo-base-bookworm`), bootstrapped from
/// the Debian mirror `$PGO_LXC_MIRROR` (default [`crate::backend::lxc::DEFAULT_MIRROR`]) and
/// security mirror `$PGO_LXC_SECURITY_MIRROR`; the caller's own `MIRROR` is never used.
///
/// # Errors
/// [`Error::Failed`] when the host cannot run it (not root, LXC tools missing — the message says
/// what to install).
pub fn lxc_backend(settings: &Settings) -> Result<LxcBackend> {
    LxcBackend::open(lxc_options(settings)).map_err(Error::Failed)
}

/// The options of [`lxc_backend`] (from the settings; other options at their defaults).
fn lxc_options(settings: &Settings) -> LxcOptions {
    let mut opts = LxcOptions { share: settings.share.clone(), ..LxcOptions::default() };
    let lxc = settings.lxc.clone();
    opts.base = lxc.base.unwrap_or(opts.base);
    opts.mirror = lxc.mirror.unwrap_or(opts.mirror);
    opts.security_mirror = lxc.security_mirror.unwrap_or(opts.security_mirror);
    opts
}
