//! The local LXC backend: real containers on this host, managed with the LXC tools.
//!
//! # How a container is made
//!
//! The container is named after the spec's hostname and lives under the LXC path (see
//! [`crate::lxc`]). The first container bootstraps a cached **base** (`pgo-base-bookworm` by
//! default): `lxc-create -t debian -- -r bookworm --packages=…` (`BASE_PACKAGES` in `base.rs`;
//! debootstrap from Debian's mirror, about a minute), with AppArmor unconfined, `openssh-server` present, its SSH host keys
//! and machine-id removed so every clone generates its own on first boot. The base is kept
//! stopped. Every container is then an `lxc-copy` of the base — an overlay snapshot
//! (`-s -B overlay`, well under a second) where the kernel allows it, else a full copy.
//!
//! # Files
//!
//! Like [`super::pve`]: the desired state as plain data, a pure planner with unit tests
//! (`tests.rs`), a thin executor.
//!
//! * [`host`] — facts about the host the desired state depends on (cgroup layout, bridge subnet,
//!   the kinds of the mounts' host paths), gathered once per plan;
//! * [`desired`](mod@desired) — [`ContainerSpec`] → the managed LXC config keys (pure);
//! * [`planner`] — desired + live → [`ContainerPlan`] (pure);
//! * `executor` — [`LxcBackend::apply`] and [`LxcBackend::destroy`]: run a plan with the LXC
//!   client;
//! * [`guest`] — files written into a new container's rootfs before its first start;
//! * `base` — the cached base container every container is cloned from (bootstrapped with a
//!   cleared environment and the configured Debian mirror, retried once after a download
//!   failure);
//! * [`lock`] — one actor per container: an advisory lock on `<lxcpath>/.<name>.lock` held by
//!   every write sequence of a container ([`LxcBackend::apply`] plans again under it), waited
//!   for at most [`LxcOptions::lock_timeout`].
//!
//! All LXC tools are run through [`LxcClient`] (LXC path, timeouts, cleared environment).
//!
//! # Addresses
//!
//! The network is LXC's bridge (`lxcbr0`, started with `lxc-net` when missing). Containers get
//! static addresses set by LXC before init runs (`lxc.net.0.ipv4.address`/`gateway`), so no boot
//! waits for DHCP: a static `IP` inside the bridge's subnet as it is; otherwise one the backend
//! chooses from the part of the subnet lxc-net's dnsmasq does not lease ([`desired()`]'s address
//! rule; the range is narrowed once in `/etc/default/lxc-net` when it covers the whole subnet,
//! see [`crate::lxc::reserve_static_range`]), under a lock so containers made at once never
//! share one. A new clone's rootfs gets its network files, an SSH host key and root's
//! `authorized_keys` before it starts ([`guest`]). The address is read back with `lxc-info -iH`
//! and recorded in the artifact.

mod base;
pub mod desired;
mod executor;
pub mod guest;
pub mod host;
pub mod interrupted;
pub mod live;
pub mod lock;
pub mod planner;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::inventory::ContainerSpec;
use crate::lxc::LxcClient;
use crate::model::PlanPolicy;
use crate::model::{ActionRecord, ContainerPlan};

pub use base::{BaseStatus, bootstrap_env, transient_download_error};
pub use desired::{Desired, MANAGED_KEYS, desired, hwaddr};
pub use host::{Cgroup, CurrentAddress, DeviceNode, HostFacts, HostPath, host_path_kind};
pub use planner::{LxcObserved, config_changes, plan_container};

use crate::lxc::META_FILE;
/// Marker file in the base's directory, written as the last step of a bootstrap: a base without
/// it is a half-made one and is bootstrapped again.
pub const BASE_READY_FILE: &str = "proxmox-gitops-base.json";

/// The Debian mirror of the base bootstrap unless configured (the debian template's own default).
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// The Debian security mirror of the base bootstrap unless configured (the template's default).
pub const DEFAULT_SECURITY_MIRROR: &str = "http://security.debian.org/debian-security";

/// Options of the LXC backend.
#[derive(Debug, Clone)]
pub struct LxcOptions {
    /// LXC path; `None`: `$PGO_LXC_PATH`, else `lxc-config lxc.lxcpath` (`/var/lib/lxc`).
    pub lxc_path: Option<PathBuf>,
    /// Name of the cached base container, default `pgo-base-bookworm`.
    pub base: String,
    /// Debian release of the base, default `bookworm`.
    pub release: String,
    /// Host bridge, default `lxcbr0`.
    pub bridge: String,
    /// Host directory holding the share: a `MOUNT` entry `NAME` binds `<share>/NAME` at `/NAME`
    /// (default `/share`; never the share root itself, which holds the private keys in `.keys/`).
    pub share: PathBuf,
    /// How containers are cloned from the base.
    pub clone: CloneMode,
    /// Bound for reading the DHCP address back after start, default 60 s.
    pub address_timeout: Duration,
    /// Bound for the base bootstrap (debootstrap), default 20 min.
    pub bootstrap_timeout: Duration,
    /// The Debian mirror the base is bootstrapped from (`MIRROR` of the debian template),
    /// default [`DEFAULT_MIRROR`]; `$PGO_LXC_MIRROR` in the CLI.
    pub mirror: String,
    /// The Debian security mirror (`SECURITY_MIRROR` of the template), default
    /// [`DEFAULT_SECURITY_MIRROR`]; `$PGO_LXC_SECURITY_MIRROR` in the CLI.
    pub security_mirror: String,
    /// The template's download cache (`LXC_CACHE_PATH`); `None`: the template's default
    /// (`/var/cache/lxc/debian`).
    pub cache_path: Option<PathBuf>,
    /// Clean-shutdown time before a stop kills the container, default 30 s.
    pub stop_timeout: Duration,
    /// How long a run waits for a container another run is changing (its [`lock`] file),
    /// default 900 s; `--timeout-lease` in the CLI, like the pve backend's lease.
    pub lock_timeout: Duration,
}

impl Default for LxcOptions {
    fn default() -> Self {
        Self {
            lxc_path: None,
            base: "pgo-base-bookworm".into(),
            release: "bookworm".into(),
            bridge: "lxcbr0".into(),
            share: "/share".into(),
            clone: CloneMode::Auto,
            address_timeout: Duration::from_secs(60),
            bootstrap_timeout: Duration::from_secs(20 * 60),
            mirror: DEFAULT_MIRROR.into(),
            security_mirror: DEFAULT_SECURITY_MIRROR.into(),
            cache_path: None,
            stop_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(900),
        }
    }
}

/// How a container is cloned from the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloneMode {
    /// An overlay snapshot, falling back to a full copy when the snapshot fails.
    #[default]
    Auto,
    /// Only an overlay snapshot (`lxc-copy -s -B overlay`).
    Snapshot,
    /// Only a full copy of the rootfs.
    Copy,
}

/// What the backend records next to a container's config (`proxmox-gitops.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The vmid the container belongs to (the key pair `<share>/.keys/<vmid>`).
    pub vmid: u32,
    /// The lib's name.
    pub name: String,
    /// The base container it was cloned from.
    pub base: String,
    /// The base's Debian release.
    pub release: String,
}

/// Provisions containers on the local host with the LXC tools.
#[derive(Debug, Clone)]
pub struct LxcBackend {
    client: LxcClient,
    opts: LxcOptions,
}

fn record(action: &str, started: Instant, detail: Option<String>) -> ActionRecord {
    ActionRecord {
        action: action.into(),
        upid: None,
        exit_status: Some("OK".into()),
        duration_ms: started.elapsed().as_millis() as u64,
        detail,
    }
}

impl LxcBackend {
    /// Opens the backend: checks root and the LXC tools (errors say what to install) and
    /// resolves the LXC path.
    ///
    /// # Errors
    /// See [`LxcClient::connect`].
    pub async fn new(opts: LxcOptions) -> Result<Self> {
        let client =
            LxcClient::connect(opts.lxc_path.clone()).await.context("the lxc backend cannot run on this host")?;
        Ok(LxcBackend { client, opts })
    }

    /// The blocking form of [`LxcBackend::new`], for callers outside an async context (e.g.
    /// choosing the backend before the runtime starts).
    ///
    /// # Errors
    /// See [`LxcClient::connect`].
    pub fn open(opts: LxcOptions) -> Result<Self> {
        let client = LxcClient::open(opts.lxc_path.clone()).context("the lxc backend cannot run on this host")?;
        Ok(LxcBackend { client, opts })
    }

    /// The LXC client (its path, for callers that print where containers live).
    pub fn client(&self) -> &LxcClient {
        &self.client
    }

    /// The options.
    pub fn options(&self) -> &LxcOptions {
        &self.opts
    }

    /// The lock file of container `name`: `<lxcpath>/.<name>.lock` (see [`lock`]).
    pub fn container_lock_path(&self, name: &str) -> PathBuf {
        lock::lock_path(self.client.path(), name)
    }

    /// Takes the lock of container `name` (see [`lock`]), waiting at most
    /// [`LxcOptions::lock_timeout`] while another run holds it. Hold it across every write of
    /// the container; it is released when dropped.
    ///
    /// # Errors
    /// See [`lock::acquire`]: the lock file cannot be opened, or the wait timed out (the message
    /// names the file and how to see its holder).
    pub async fn lock_container(&self, name: &str) -> Result<lock::ContainerLock> {
        lock::acquire(&self.container_lock_path(name), name, self.opts.lock_timeout).await
    }

    fn read_meta(&self, name: &str) -> Result<Option<Meta>> {
        let path = self.client.container_dir(name).join(META_FILE);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(
                serde_json::from_slice(&b).with_context(|| format!("{}: not a valid {META_FILE}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow!(e).context(format!("cannot read {}", path.display()))),
        }
    }

    async fn live(&self, name: &str) -> Result<Option<LxcObserved>> {
        let Some(config) = self.client.read_config(name)? else { return Ok(None) };
        let meta = self.read_meta(name)?;
        let state = self.client.state(name).await?;
        let interrupted = match meta {
            None => interrupted::marked_vmid(&self.create_marker_path(name)),
            Some(_) => None,
        };
        Ok(Some(LxcObserved { config, meta, state, interrupted }))
    }

    /// The marker of an unfinished create of container `name` (see [`interrupted`]).
    pub fn create_marker_path(&self, name: &str) -> PathBuf {
        interrupted::marker_path(self.client.path(), name)
    }

    async fn desired(&self, spec: &ContainerSpec, start_bridge: bool) -> Result<Desired> {
        let host = HostFacts::gather(spec, &self.opts, &self.client, start_bridge).await?;
        desired(spec, &host, &self.opts)
    }

    /// Compares `spec` with the live container named after its hostname and plans. Changes
    /// nothing on the host.
    ///
    /// # Errors
    /// A mount the host cannot provide, unreadable config or
    /// metadata, a failing `lxc-info`.
    pub async fn plan(&self, spec: &ContainerSpec, policy: impl Into<PlanPolicy>) -> Result<ContainerPlan> {
        // The lxc backend adopts nothing: a container it did not make is refused whatever
        // `--adopt` says.
        let policy = policy.into().recreate;
        let desired = self.desired(spec, false).await?;
        let live = self.live(&spec.hostname).await?;
        Ok(plan_container(spec, &desired, live.as_ref(), policy))
    }

    /// Whether the container of `spec` exists (`false` when absent) and is ours to destroy.
    ///
    /// # Errors
    /// It exists but was not made by proxmox-gitops, or belongs to another vmid; unreadable
    /// metadata.
    pub fn owned(&self, spec: &ContainerSpec) -> Result<bool> {
        if !self.client.exists(&spec.hostname) {
            return Ok(false);
        }
        match self.not_ours(spec)? {
            Some(why) => bail!("{why}: not destroying it"),
            None => Ok(true),
        }
    }

    /// Why the existing container named after `spec`'s hostname is not the one `spec`
    /// describes — made by something else (no `proxmox-gitops.json`) or for another vmid —
    /// or `None` when it is ours. Call it for a container that exists.
    ///
    /// # Errors
    /// Unreadable metadata.
    pub fn not_ours(&self, spec: &ContainerSpec) -> Result<Option<String>> {
        let name = spec.hostname.as_str();
        Ok(match self.read_meta(name)? {
            None => Some(format!(
                "container `{name}` in {} was not made by proxmox-gitops (no {META_FILE})",
                self.client.path().display()
            )),
            Some(m) if m.vmid != spec.vmid => {
                Some(format!("container `{name}` belongs to vmid {}, not {}", m.vmid, spec.vmid))
            }
            Some(_) => None,
        })
    }
}

#[cfg(test)]
mod tests;
