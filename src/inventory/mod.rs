//! The typed inventory: what `resolve` reads out of a monorepo and every later step consumes.
//!
//! The inventory is plain data (serde) and is written as the `inventory.json` artifact. It holds
//! one [`ContainerSpec`] per container of the stage (the control plane `config` from the root
//! `container.env`, and one per `libs/<name>/`), the submodule tree, the globals, the tasks and
//! the non-secret settings.

pub mod cross_check;
pub mod dotenv;
pub mod globals;
pub mod scheduled;
pub mod selection;
pub mod spec;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::artifact::Artifact;
use crate::remote_url::RemoteUrl;
use crate::settings::PublicSettings;

pub use selection::NotFound;

/// The name of the control-plane container (root `container.env`), as in the seed.
pub const CONTROL_PLANE: &str = "config";

/// The whole inventory of one stage of a monorepo (artifact kind `inventory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Absolute path of the monorepo's working tree when it was resolved.
    pub root: PathBuf,
    /// The stage (`main` unless `--stage` says otherwise).
    pub stage: String,
    /// The monorepo's `HEAD` commit, if it has one.
    pub head: Option<String>,
    /// The containers, control plane first, then libs by name.
    pub containers: Vec<ContainerSpec>,
    /// The monorepo's submodules, recursively.
    pub submodules: Vec<Submodule>,
    /// Globals from `globals.json` overlaid by `globals.local.json` (empty values dropped).
    pub globals: BTreeMap<String, String>,
    /// Tasks (`tasks/<name>/`), by name.
    pub tasks: Vec<Task>,
    /// Configuration without a container: libs without a `container.env` and the original
    /// project's root `config/` cookbook, by directory (schema 1.2; absent when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<ConfigLib>,
    /// The baseline role directory (`base/`), relative to `root`, when present.
    pub base: Option<PathBuf>,
    /// Shared helpers (`config/libraries/`), relative to `root`, when present.
    pub libraries: Option<PathBuf>,
    /// Non-secret settings (PVE, Gitea, share); secrets are only recorded as the auth kind.
    pub settings: PublicSettings,
}

impl Artifact for Inventory {
    const KIND: &'static str = "inventory";
    /// 1.1: a task's `cron` may be `null` (a task without a cron line).
    /// 1.2: `configs`, the configuration that is no container ([`ConfigLib`]).
    const SCHEMA_VERSION: (u32, u32) = (1, 2);
}

impl Inventory {
    /// The container named `name` (lib name, or `config` for the control plane).
    pub fn container(&self, name: &str) -> Option<&ContainerSpec> {
        self.containers.iter().find(|c| c.name == name || c.hostname == name)
    }
}

/// Desired state of one LXC container, validated from its layered env files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// The lib's name (directory name under `libs/`), or `config` for the control plane.
    pub name: String,
    /// The container's hostname: the name for stage `main`, `<stage>-<name>` otherwise; a DNS
    /// label (PVE's `dns-name` format rejects `_`).
    pub hostname: String,
    /// PVE guest id (`ID`), 100–999999999 (PVE `pve-vmid`).
    pub vmid: u32,
    /// The address of `net0` (`IP`).
    pub ip: IpConfig,
    /// CPU cores (`CORES`), ≥ 1.
    pub cores: u32,
    /// Memory in MiB (`MEMORY`), ≥ 16.
    pub memory_mib: u64,
    /// Swap in MiB (`SWAP`).
    pub swap_mib: u64,
    /// The root filesystem (`DISK` = `STORAGE:SIZE`, size in GiB).
    pub rootfs: Disk,
    /// Mounts from `MOUNT`, in order.
    pub mounts: Vec<Mount>,
    /// Start at host boot (`BOOT`), PVE `onboot`.
    pub onboot: bool,
    /// PVE node for this container (`NODE`), overriding the configured/discovered node.
    pub node: Option<String>,
    /// Absolute paths inside the container whose data survives recreation (`SNAPSHOT`,
    /// comma-separated).
    pub snapshot_paths: Vec<String>,
    /// Names the lib's configuration needs non-empty (`REQUIRES`, comma-separated), e.g.
    /// `LOGIN,PASSWORD`: checked against the configuration contract before anything is created
    /// or configured (see `steps::configure::missing_requirements`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// The systemd units the `health` check requires active (`SERVICES`, comma-separated), as
    /// full unit names (`mosquitto` → `mosquitto.service`, see
    /// [`spec::parse_unit`]); empty: health requires that no unit has failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// How the lib configures itself, from the files it has.
    pub engine: Engine,
    /// The lib's directory, relative to the monorepo root (`.` for the control plane).
    pub dir: PathBuf,
    /// The env files that were layered, lowest precedence first, relative to the root.
    pub sources: Vec<PathBuf>,
    /// The submodule path when the lib is a git submodule, `None` for a plain directory.
    pub submodule: Option<PathBuf>,
    /// Every key of the layered env files with its raw value (the lib's own container env,
    /// handed to its configuration engine).
    pub env: BTreeMap<String, String>,
    /// The keys of `env` this tool does not interpret.
    pub extra: BTreeMap<String, String>,
}

impl ContainerSpec {
    /// A spec for lib `name` (directory `libs/<name>`, hostname `name`, one env file
    /// `libs/<name>/container.env`) with `vmid` and `ip` and every other key at its
    /// `container.env` default (see [`spec`]: 1 core, 512 MiB memory and swap, `local-lvm:8`,
    /// start at boot, no mounts, no snapshot paths, no engine). For code that builds specs
    /// without env files (tests, benchmarks); override fields with struct update syntax.
    pub fn new(name: &str, vmid: u32, ip: IpConfig) -> Self {
        Self {
            name: name.to_string(),
            hostname: name.to_string(),
            vmid,
            ip,
            cores: spec::DEFAULT_CORES,
            memory_mib: spec::DEFAULT_MEMORY_MIB,
            swap_mib: spec::DEFAULT_SWAP_MIB,
            rootfs: Disk { storage: spec::DEFAULT_DISK_STORAGE.into(), size_gib: spec::DEFAULT_DISK_GIB },
            mounts: Vec::new(),
            onboot: true,
            node: None,
            snapshot_paths: Vec::new(),
            requires: Vec::new(),
            services: Vec::new(),
            engine: Engine::None,
            dir: PathBuf::from(format!("libs/{name}")),
            sources: vec![PathBuf::from(format!("libs/{name}/container.env"))],
            submodule: None,
            env: BTreeMap::new(),
            extra: BTreeMap::new(),
        }
    }
}

/// Configuration that is no container: a directory under `libs/` without a `container.env` but
/// with an engine file or a cookbook's `metadata.rb` (the original project's `libs/share`, a
/// cookbook applied to the control plane), or the original project's root `config/` cookbook
/// (`config/recipes/default.rb`, its control plane's configuration).
///
/// It is listed, provisioned nowhere, and its configuration is **not applied**: proxmox-gitops
/// applies a lib's configuration to the lib's own container only, and the control plane's from
/// an engine file at the repository root. `resolve` warns about each so this is never silent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigLib {
    /// The lib's name (directory name), or `config` for the root `config/` cookbook.
    pub name: String,
    /// Its directory, relative to the root (`libs/share`, `config`).
    pub dir: PathBuf,
    /// The engine its files select ([`Engine::detect`]); `none` for a cookbook with only a
    /// `metadata.rb`.
    pub engine: Engine,
    /// The cookbooks its `metadata.rb` names with `depends 'NAME'`: where the original project
    /// applies it (`config`: the control plane).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends: Vec<String>,
    /// The submodule path when it is a git submodule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submodule: Option<PathBuf>,
}

impl ConfigLib {
    /// The configuration at `dir` (relative to `root`), when it is one: an engine file
    /// ([`Engine::FILES`]) or a `metadata.rb`. `depends` is read from `metadata.rb`'s
    /// `depends 'NAME'` lines (single or double quotes; other lines ignored).
    pub fn detect(
        root: &std::path::Path,
        dir: &std::path::Path,
        name: &str,
        submodule: Option<PathBuf>,
    ) -> Option<Self> {
        let abs = root.join(dir);
        let metadata = std::fs::read_to_string(abs.join("metadata.rb")).ok();
        if metadata.is_none() && Engine::files(&abs).is_empty() {
            return None;
        }
        let depends = metadata
            .iter()
            .flat_map(|m| m.lines())
            .filter_map(|l| {
                let rest = l.trim().strip_prefix("depends")?.trim_start();
                let q = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
                let name = rest[1..].split(q).next()?;
                (!name.is_empty()).then(|| name.to_string())
            })
            .collect();
        Some(ConfigLib {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            engine: Engine::detect(&abs),
            depends,
            submodule,
        })
    }

    /// The plain report that this configuration is not applied, for `resolve`'s warning and
    /// table, e.g. "configuration only (no container.env): provisioned nowhere and not applied;
    /// the original project applies it to `config` (metadata.rb: depends 'config'), proxmox-gitops
    /// applies a lib's configuration only to its own container".
    pub fn not_applied(&self) -> String {
        if self.dir == std::path::Path::new("config") {
            return "the original project's control-plane cookbook: not applied; proxmox-gitops configures the \
                    control plane `config` from an engine file at the repository root (playbook.yml, configure.sh \
                    or recipes/default.rb), and reads only config/libraries/ from here"
                .into();
        }
        let original = match self.depends.as_slice() {
            [] => String::new(),
            d => format!(
                "; the original project applies it to {} (metadata.rb: depends {})",
                d.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
                d.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
            ),
        };
        format!(
            "configuration only (no container.env): provisioned nowhere and not applied{original}; proxmox-gitops \
             applies a lib's configuration only to its own container (add a container.env to make it one)"
        )
    }
}

/// The `net0` address of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum IpConfig {
    /// DHCP (`IP=dhcp`).
    Dhcp,
    /// A static IPv4 address; `prefix` is the CIDR length when the value had `/N`, otherwise the
    /// configured `PROXMOX_MASK` applies.
    Static {
        /// The address.
        address: Ipv4Addr,
        /// CIDR prefix length 0–32.
        prefix: Option<u8>,
    },
}

impl IpConfig {
    /// The static address, if any.
    pub fn address(&self) -> Option<Ipv4Addr> {
        match self {
            IpConfig::Dhcp => None,
            IpConfig::Static { address, .. } => Some(*address),
        }
    }
}

/// A volume on PVE storage: `STORAGE:SIZE` with the size in GiB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// PVE storage id, e.g. `local-lvm`.
    pub storage: String,
    /// Size in GiB (integer, ≥ 1).
    pub size_gib: u64,
}

/// One entry of `MOUNT` (the seed's comma list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Mount {
    /// A bare name such as `share`: the control plane's shared directory, mounted over CIFS by
    /// the base role (needs the `mount=cifs` feature and a privileged container, as in the seed).
    Share {
        /// The share's name.
        name: String,
    },
    /// `HOST_PATH:CONTAINER_PATH`: a bind mount (PVE `mpN: HOST_PATH,mp=CONTAINER_PATH`; needs
    /// root@pam).
    Bind {
        /// Absolute path on the host.
        host_path: String,
        /// Absolute path in the container.
        container_path: String,
    },
    /// `STORAGE:SIZE:CONTAINER_PATH`: a new volume of SIZE GiB (PVE `mpN: STORAGE:SIZE,mp=…`).
    Volume {
        /// PVE storage id.
        storage: String,
        /// Size in GiB.
        size_gib: u64,
        /// Absolute path in the container.
        container_path: String,
    },
    /// `/dev/…`: device passthrough (PVE `devN: PATH`; needs root@pam).
    Device {
        /// The device node on the host.
        path: String,
    },
}

/// The lib's configuration engine, chosen by the one engine file it has (a lib with two is
/// refused at resolve, see [`Engine::files`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// `playbook.yml`: `ansible-playbook` from the runner.
    Ansible,
    /// `configure.sh`: uploaded and run with bash as root.
    Shell,
    /// `recipes/default.rb`: a Cinc cookbook run with `cinc-client --local-mode`.
    Cinc,
    /// No configuration of its own (only the base role applies).
    None,
}

impl Engine {
    /// The file that selects each engine, relative to the lib directory, in detection order.
    pub const FILES: [(&'static str, Engine); 3] =
        [("playbook.yml", Engine::Ansible), ("configure.sh", Engine::Shell), ("recipes/default.rb", Engine::Cinc)];

    /// The engine files ([`Engine::FILES`]) present in the lib directory `dir`, in detection
    /// order. More than one is an input problem (resolve names them all).
    pub fn files(dir: &std::path::Path) -> Vec<&'static str> {
        Self::FILES.iter().filter(|(f, _)| dir.join(f).is_file()).map(|(f, _)| *f).collect()
    }

    /// Detects the engine of the lib directory `dir`: the engine of its first engine file, or
    /// [`Engine::None`].
    pub fn detect(dir: &std::path::Path) -> Engine {
        Self::FILES.iter().find(|(f, _)| dir.join(f).is_file()).map_or(Engine::None, |(_, e)| *e)
    }
}

/// A git submodule of the monorepo (or of another submodule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submodule {
    /// The submodule's name in `.gitmodules`.
    pub name: String,
    /// Its path relative to the **monorepo root** (not to its parent).
    pub path: PathBuf,
    /// The URL as written in `.gitmodules` (`None` when missing); recorded and shown with its
    /// credentials redacted (see [`RemoteUrl`]).
    pub url: Option<RemoteUrl>,
    /// The commit recorded in the parent's index (the gitlink), hex.
    pub commit: Option<String>,
    /// True when the submodule's repository and working tree are present.
    pub checked_out: bool,
    /// The checked-out `HEAD` commit when it differs from `commit`.
    pub head: Option<String>,
    /// Nested submodules (known only when checked out).
    pub children: Vec<Submodule>,
}

/// A task: `tasks/<name>/` (a plain directory or a submodule) holding one script, which its
/// workflow runs (see [`scheduled`] for how the script is chosen and the cron line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The task's name (directory name).
    pub name: String,
    /// The task's directory, relative to the root.
    pub dir: PathBuf,
    /// The script the task runs (`default.*`, `main.*`, else the only script), relative to the
    /// root.
    pub script: PathBuf,
    /// The script's cron expression (five fields) from its `# ! cron '<expr>'` line: the task is
    /// scheduled. `null` when the script has none: the task runs on workflow dispatch and on a
    /// push to its repository's `main` only.
    pub cron: Option<String>,
    /// The monorepo branch the task acts on, from its `# ! ref <branch>` line (`release` for the
    /// tasks that check or upgrade what is deployed); `null`: `main`. Its workflow checks the
    /// monorepo out at that branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monorepo_ref: Option<String>,
}

impl Task {
    /// True when the task runs on a schedule (its script has a cron line).
    pub fn scheduled(&self) -> bool {
        self.cron.is_some()
    }
}
