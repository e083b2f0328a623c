//! Client for the host's LXC tools (`lxc-create`, `lxc-copy`, `lxc-start`, `lxc-info`,
//! `lxc-attach`, `lxc-cgroup`, `lxc-stop`, `lxc-destroy`, `lxc-ls`, `lxc-config`,
//! `lxc-snapshot`, `lxc-freeze`, `lxc-unfreeze`): the only door of the crate to LXC.
//!
//! Why the command-line tools and not liblxc: the only Rust bindings (`lxc-sys`) are unmaintained
//! raw FFI, while the tools are what every LXC user already has and debugs with. Every call runs
//! the tool with `tokio::process`, each argument a separate argv entry (never a shell string),
//! with `-P <lxcpath>` so a configurable LXC path is honoured, bounded by a timeout; a failure
//! carries the command line and the tool's stderr.
//!
//! One place for the three things every caller used to get slightly differently: the LXC path
//! ([`resolve_path`]: `$PGO_LXC_PATH`, else `lxc-config lxc.lxcpath`), the timeouts, and the
//! environment a command inside a container sees (`lxc-attach --clear-env` with only `PATH`
//! set). The backend, the snapshot code ([`crate::snapshot::lxc`]) and the executors of
//! [`crate::exec`] all receive an [`LxcClient`]; nothing outside this module spawns an `lxc-*`
//! process.
//!
//! This module knows LXC, not the pipeline: it never decides whether a container should be
//! recreated (that is [`crate::backend::lxc`]).
//!
//! * [`process`] — spawning a tool (collected or streamed output, timeouts);
//! * [`snapshot`] — `lxc-snapshot` and the `snaps/` directory it keeps;
//! * [`bridge`] — the host bridge (`lxcbr0`) and `lxc-net`;
//! * [`config`] — the container config file.

pub mod bridge;
pub mod config;
pub mod process;
pub mod snapshot;

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

pub use bridge::{
    LXC_NET_RUN_DIR, LXC_NET_SETTINGS, Lease, bridge_ipv4, bridge_ipv4_or_planned, dnsmasq_serves, ensure_bridge,
    leases_file, lxc_net_bridge, lxc_net_dhcp_range, lxc_net_settings, parse_leases, reserve_static_range, static_pool,
};
pub use config::LxcConfig;
pub use process::{Streamed, effective_uid, require_tool, run, run_in, run_streaming, which};
pub use snapshot::LxcSnapshot;

use process::{os, tail};

/// Name of the file in a container's directory (`<lxcpath>/<name>/`) where the lxc backend
/// records that the container is ours and what it was made from; kept through container
/// snapshots and rollbacks.
pub const META_FILE: &str = "proxmox-gitops.json";

/// Environment variable naming the LXC path (the CLI's `--lxc-path` sets the same).
pub const LXC_PATH_ENV: &str = "PGO_LXC_PATH";

/// Default bound for a quick tool call (`lxc-info`, `lxc-attach` of a short command, …).
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(120);

/// The `PATH` a command run with [`LxcClient::attach`] or [`LxcClient::attach_streaming`] sees
/// (its only environment variable: the host's environment is cleared).
pub const ATTACH_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The `PATH` of a template run by [`LxcClient::create`] (the sbin directories included:
/// debootstrap and `chroot` live there).
pub const BOOTSTRAP_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Errors from the LXC tools.
#[derive(Debug, thiserror::Error)]
pub enum LxcError {
    /// The process does not run as root (uid 0); privileged LXC containers need it.
    #[error("the lxc backend needs root (this process runs as uid {uid}): run it as root, e.g. with sudo")]
    NotRoot {
        /// The effective uid.
        uid: u32,
    },
    /// A tool is not installed.
    #[error("`{tool}` is not installed (not found in PATH): install it with `apt-get install {package}`")]
    ToolMissing {
        /// The missing executable.
        tool: String,
        /// The Debian/Ubuntu package that ships it.
        package: &'static str,
    },
    /// A tool could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A tool exited with an error.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// The exit status.
        status: String,
        /// The tool's stderr (last lines), or stdout when stderr was empty.
        stderr: String,
    },
    /// A tool did not finish in time.
    #[error("`{command}` did not finish within {secs:.1}s")]
    Timeout {
        /// The command line.
        command: String,
        /// The bound in seconds.
        secs: f64,
    },
    /// A file of a container could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The container does not exist under the LXC path.
    #[error("container `{name}` does not exist in {path}")]
    NotFound {
        /// Container name.
        name: String,
        /// The LXC path.
        path: PathBuf,
    },
    /// The host bridge is missing and `lxc-net` could not bring it up.
    #[error("bridge `{bridge}` has no IPv4 address: {hint}")]
    Bridge {
        /// The bridge name.
        bridge: String,
        /// What was tried and what to do.
        hint: String,
    },
}

/// Result alias of this module.
pub type Result<T, E = LxcError> = std::result::Result<T, E>;

/// A container's state as `lxc-info -s` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// `STOPPED`.
    Stopped,
    /// `STARTING`.
    Starting,
    /// `RUNNING`.
    Running,
    /// `STOPPING`, `ABORTING`, `FREEZING`, `FROZEN`, `THAWED` — anything else.
    Other,
}

impl State {
    /// The lowercase name recorded in artifacts (`running`, `stopped`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Starting => "starting",
            State::Running => "running",
            State::Other => "other",
        }
    }
}

/// A handle on one LXC path (`/var/lib/lxc` unless configured otherwise).
#[derive(Debug, Clone)]
pub struct LxcClient {
    path: PathBuf,
}

/// The tools every operation of the client may run.
pub const TOOLS: &[&str] = &[
    "lxc-create",
    "lxc-copy",
    "lxc-start",
    "lxc-info",
    "lxc-attach",
    "lxc-cgroup",
    "lxc-stop",
    "lxc-destroy",
    "lxc-ls",
    "lxc-config",
    "lxc-snapshot",
    "lxc-freeze",
    "lxc-unfreeze",
];

/// The LXC path to use: `path` when given, else `$PGO_LXC_PATH` (when set and not empty), else
/// what `lxc-config lxc.lxcpath` prints (normally `/var/lib/lxc`). The one resolution every
/// user of LXC shares (the backend, snapshots, `lxc-attach`), so they all look in one place.
///
/// # Errors
/// [`LxcError::ToolMissing`] or a failing `lxc-config` (only consulted when neither `path` nor
/// the variable is set).
pub fn resolve_path(path: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = path.or_else(|| std::env::var_os(LXC_PATH_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)) {
        return Ok(p);
    }
    let command = "lxc-config lxc.lxcpath".to_string();
    let out = std::process::Command::new(require_tool("lxc-config")?)
        .arg("lxc.lxcpath")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LxcError::Spawn { command: command.clone(), source })?;
    if !out.status.success() {
        return Err(LxcError::Command { command, status: out.status.to_string(), stderr: tail(&out.stderr, 8) });
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

impl LxcClient {
    /// Checks that this process is root and the LXC tools are installed, then opens the LXC
    /// path ([`resolve_path`]: `path` when given, else `$PGO_LXC_PATH`, else `lxc-config
    /// lxc.lxcpath`, normally `/var/lib/lxc`). The directory is created when missing. Same as [`LxcClient::open`], off
    /// the async executor.
    ///
    /// # Errors
    /// [`LxcError::NotRoot`], [`LxcError::ToolMissing`] naming the package, a failing
    /// `lxc-config`, an uncreatable path.
    pub async fn connect(path: Option<PathBuf>) -> Result<Self> {
        match tokio::task::spawn_blocking(move || Self::open(path)).await {
            Ok(r) => r,
            Err(e) => {
                Err(LxcError::Spawn { command: "lxc-config lxc.lxcpath".into(), source: std::io::Error::other(e) })
            }
        }
    }

    /// The blocking form of [`LxcClient::connect`], for callers outside an async context.
    ///
    /// # Errors
    /// See [`LxcClient::connect`].
    pub fn open(path: Option<PathBuf>) -> Result<Self> {
        let uid = effective_uid();
        if uid != 0 {
            return Err(LxcError::NotRoot { uid });
        }
        for t in TOOLS {
            require_tool(t)?;
        }
        let path = resolve_path(path)?;
        std::fs::create_dir_all(&path).map_err(|source| LxcError::Io { path: path.clone(), source })?;
        Ok(LxcClient { path })
    }

    /// The LXC path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<lxcpath>/<name>`.
    pub fn container_dir(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// `<lxcpath>/<name>/config`.
    pub fn config_path(&self, name: &str) -> PathBuf {
        self.container_dir(name).join("config")
    }

    /// True when the container's config file exists.
    pub fn exists(&self, name: &str) -> bool {
        self.config_path(name).is_file()
    }

    pub(crate) fn args(&self, tool_args: &[&str]) -> Vec<OsString> {
        let mut v = vec![OsString::from("-P"), self.path.clone().into_os_string()];
        v.extend(os(tool_args));
        v
    }

    /// Names of all containers under the LXC path (`lxc-ls -1`).
    ///
    /// # Errors
    /// A failing `lxc-ls`.
    pub async fn list(&self) -> Result<Vec<String>> {
        let out = run("lxc-ls", &self.args(&["-1"]), None, QUICK_TIMEOUT).await?;
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect())
    }

    /// The container's state (`lxc-info -sH`).
    ///
    /// # Errors
    /// [`LxcError::NotFound`], a failing `lxc-info`.
    pub async fn state(&self, name: &str) -> Result<State> {
        self.must_exist(name)?;
        let out = run("lxc-info", &self.args(&["-n", name, "-sH"]), None, QUICK_TIMEOUT).await?;
        Ok(match String::from_utf8_lossy(&out.stdout).trim() {
            "STOPPED" => State::Stopped,
            "STARTING" => State::Starting,
            "RUNNING" => State::Running,
            _ => State::Other,
        })
    }

    /// The container's IPv4 addresses (`lxc-info -iH`; IPv6 addresses are skipped). Empty while
    /// it has none (or is stopped).
    ///
    /// # Errors
    /// [`LxcError::NotFound`], a failing `lxc-info`.
    pub async fn ipv4(&self, name: &str) -> Result<Vec<Ipv4Addr>> {
        self.must_exist(name)?;
        let out = run("lxc-info", &self.args(&["-n", name, "-iH"]), None, QUICK_TIMEOUT).await?;
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|s| s.parse().ok()).collect())
    }

    /// Creates `name` from a template (`lxc-create -t TEMPLATE -- ARGS…`), bounded by `timeout`
    /// (a debootstrap takes about a minute), with a cleared environment holding only `env` (the
    /// templates read settings such as `MIRROR` from the environment, so the caller's own
    /// variables must not leak into them; see [`BOOTSTRAP_PATH`] for a `PATH`).
    ///
    /// # Errors
    /// A failing `lxc-create` (its stderr says why: mirror unreachable, debootstrap missing …).
    pub async fn create(
        &self,
        name: &str,
        template: &str,
        template_args: &[&str],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<()> {
        if template == "debian" {
            require_tool("debootstrap")?;
        }
        let mut args = self.args(&["-n", name, "-t", template, "--"]);
        args.extend(os(template_args));
        process::run_in("lxc-create", &args, Some(env), None, timeout).await?;
        Ok(())
    }

    /// Clones the stopped container `source` as `name` (`lxc-copy`): with `snapshot` an overlay
    /// snapshot (`-s -B overlay`: the clone stores only its changes, takes well under a second),
    /// otherwise a full copy of the rootfs.
    ///
    /// # Errors
    /// A failing `lxc-copy`.
    pub async fn copy(&self, source: &str, name: &str, snapshot: bool, timeout: Duration) -> Result<()> {
        self.must_exist(source)?;
        let mut a = vec!["-n", source, "-N", name];
        if snapshot {
            a.extend(["-s", "-B", "overlay"]);
        }
        run("lxc-copy", &self.args(&a), None, timeout).await?;
        Ok(())
    }

    /// Starts the container in the background (`lxc-start -d`); returns once its init runs.
    ///
    /// # Errors
    /// A failing `lxc-start` (the error points to `lxc-start -F -n NAME` for the full log).
    pub async fn start(&self, name: &str) -> Result<()> {
        self.must_exist(name)?;
        run("lxc-start", &self.args(&["-n", name, "-d"]), None, QUICK_TIMEOUT).await.map_err(|e| match e {
            LxcError::Command { command, status, stderr } => LxcError::Command {
                command,
                status,
                stderr: format!(
                    "{stderr}\n(for the full log {})",
                    crate::error::Hint::command(["lxc-start", "-n", name, "-F", "-l", "DEBUG"])
                ),
            },
            e => e,
        })?;
        Ok(())
    }

    /// Stops the container: a clean shutdown, killed after `timeout` (`lxc-stop -t SECS`).
    /// Stopping a stopped container is not an error.
    ///
    /// # Errors
    /// A failing `lxc-stop`.
    pub async fn stop(&self, name: &str, timeout: Duration) -> Result<()> {
        if self.state(name).await? == State::Stopped {
            return Ok(());
        }
        let secs = timeout.as_secs().max(1).to_string();
        run("lxc-stop", &self.args(&["-n", name, "-t", &secs]), None, timeout + QUICK_TIMEOUT).await?;
        Ok(())
    }

    /// Destroys a stopped container and its rootfs (`lxc-destroy`).
    ///
    /// # Errors
    /// A failing `lxc-destroy` (e.g. the container still has snapshot clones).
    pub async fn destroy(&self, name: &str) -> Result<()> {
        self.must_exist(name)?;
        run("lxc-destroy", &self.args(&["-n", name]), None, QUICK_TIMEOUT).await?;
        Ok(())
    }

    /// Destroys a stopped container, its rootfs and its container snapshots (`lxc-destroy -s`),
    /// as Proxmox VE's destroy of a container removes its snapshots: for a container whose data
    /// is protected otherwise (the caller's verified data snapshot). Snapshot *clones* (other
    /// containers made from it) still refuse it.
    ///
    /// # Errors
    /// A failing `lxc-destroy` (e.g. clones of its snapshots remain).
    pub async fn destroy_with_snapshots(&self, name: &str) -> Result<()> {
        self.must_exist(name)?;
        // Several snapshots of a large rootfs are removed one by one: more time than a quick call.
        run("lxc-destroy", &self.args(&["-s", "-n", name]), None, QUICK_TIMEOUT * 4).await?;
        Ok(())
    }

    /// Runs `argv` inside the running container as root (`lxc-attach --clear-env --set-var
    /// PATH=… -- ARGV`, see [`ATTACH_PATH`]), feeding `stdin`, and returns its output.
    ///
    /// # Errors
    /// A failing command (with its stderr), a timeout.
    pub async fn attach(
        &self,
        name: &str,
        argv: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<std::process::Output> {
        self.must_exist(name)?;
        run("lxc-attach", &self.attach_args(name, argv), stdin, timeout).await
    }

    /// Runs `argv` inside the running container as root like [`LxcClient::attach`], with
    /// **streamed** standard input and output (see [`run_streaming`]): for commands whose data
    /// does not fit in memory (a tar of the container's data). The last `keep` bytes of stderr
    /// are kept; a non-zero exit is not an error.
    ///
    /// # Errors
    /// [`LxcError::NotFound`], [`LxcError::Spawn`] (also a failing local reader or writer),
    /// [`LxcError::Timeout`].
    pub async fn attach_streaming(
        &self,
        name: &str,
        argv: &[&str],
        stdin: &mut (dyn AsyncRead + Send + Unpin),
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        keep: usize,
        timeout: Duration,
    ) -> Result<Streamed> {
        self.must_exist(name)?;
        run_streaming("lxc-attach", &self.attach_args(name, argv), stdin, stdout, keep, timeout).await
    }

    /// `-P <lxcpath> -n NAME --clear-env --set-var PATH=… -- ARGV…`.
    fn attach_args(&self, name: &str, argv: &[&str]) -> Vec<OsString> {
        let mut a = vec!["-n", name, "--clear-env", "--set-var", ATTACH_PATH, "--"];
        a.extend(argv);
        self.args(&a)
    }

    /// Sets a cgroup value of the running container (`lxc-cgroup -n NAME KEY VALUE`), e.g.
    /// `memory.limit_in_bytes 536870912`; the key is without the `lxc.cgroup.`/`lxc.cgroup2.`
    /// prefix.
    ///
    /// # Errors
    /// A failing `lxc-cgroup`.
    pub async fn cgroup_set(&self, name: &str, key: &str, value: &str) -> Result<()> {
        run("lxc-cgroup", &self.args(&["-n", name, key, value]), None, QUICK_TIMEOUT).await?;
        Ok(())
    }

    /// The container's config file, `None` when the container does not exist.
    ///
    /// # Errors
    /// An unreadable file.
    pub fn read_config(&self, name: &str) -> Result<Option<LxcConfig>> {
        let path = self.config_path(name);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(Some(LxcConfig::parse(&t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LxcError::Io { path, source }),
        }
    }

    /// Writes the container's config file atomically (temporary file + rename, mode 0640).
    ///
    /// # Errors
    /// I/O failures.
    pub fn write_config(&self, name: &str, config: &LxcConfig) -> Result<()> {
        let path = self.config_path(name);
        write_atomic(&path, config.render().as_bytes(), 0o640)
    }

    /// The static IPv4 address (`lxc.net.0.ipv4.address`, without its prefix length) of every
    /// container under the LXC path that has one, by container name, whoever made it. Unreadable
    /// configs are skipped.
    ///
    /// # Errors
    /// [`LxcError::Io`] when the LXC path cannot be listed.
    pub fn configured_addresses(&self) -> Result<Vec<(String, Ipv4Addr)>> {
        let rd = std::fs::read_dir(&self.path).map_err(|source| LxcError::Io { path: self.path.clone(), source })?;
        let mut out = Vec::new();
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            let Ok(text) = std::fs::read_to_string(e.path().join("config")) else { continue };
            let config = LxcConfig::parse(&text);
            if let Some(a) = config.get("lxc.net.0.ipv4.address").and_then(|v| v.split('/').next()?.trim().parse().ok())
            {
                out.push((name, a));
            }
        }
        out.sort();
        Ok(out)
    }

    pub(crate) fn must_exist(&self, name: &str) -> Result<()> {
        if self.exists(name) {
            Ok(())
        } else {
            Err(LxcError::NotFound { name: name.to_string(), path: self.path.clone() })
        }
    }
}

/// Writes `bytes` to `path` via a temporary file in the same directory and a rename.
///
/// # Errors
/// I/O failures, with the path.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let io = |source| LxcError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir).map_err(io)?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(mode)).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_passes_the_lxc_path_and_clears_the_environment() {
        let client = LxcClient { path: PathBuf::from("/srv/lxc") };
        let args: Vec<String> =
            client.attach_args("app", &["bash", "-c", "x"]).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            ["-P", "/srv/lxc", "-n", "app", "--clear-env", "--set-var", ATTACH_PATH, "--", "bash", "-c", "x"]
        );
    }

    #[test]
    fn an_explicit_path_is_taken_as_it_is() {
        assert_eq!(resolve_path(Some(PathBuf::from("/srv/lxc"))).unwrap(), PathBuf::from("/srv/lxc"));
    }

    #[test]
    fn not_root_says_what_to_do() {
        assert_eq!(
            LxcError::NotRoot { uid: 1000 }.to_string(),
            "the lxc backend needs root (this process runs as uid 1000): run it as root, e.g. with sudo"
        );
    }
}
