//! Client for the host's LXC tools (`lxc-create`, `lxc-copy`, `lxc-start`, `lxc-info`,
//! `lxc-attach`, `lxc-cgroup`, `lxc-stop`, `lxc-destroy`, `lxc-ls`, `lxc-config`).
//!
//! Why the command-line tools and not liblxc: the only Rust bindings (`lxc-sys`) are unmaintained
//! raw FFI, while the tools are what every LXC user already has and debugs with. Every call runs
//! the tool with `tokio::process`, each argument a separate argv entry (never a shell string),
//! with `-P <lxcpath>` so a configurable LXC path is honoured, bounded by a timeout; a failure
//! carries the command line and the tool's stderr.
//!
//! This module knows LXC, not the pipeline: it never decides whether a container should be
//! recreated (that is [`crate::backend::lxc`]).

pub mod config;

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

pub use config::LxcConfig;

/// Environment variable naming the LXC path (the CLI's `--lxc-path` sets the same).
pub const LXC_PATH_ENV: &str = "PGO_LXC_PATH";

/// Default bound for a quick tool call (`lxc-info`, `lxc-attach` of a short command, …).
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(120);

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

/// The Debian/Ubuntu package that ships `tool`.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "debootstrap" => "debootstrap",
        "ip" => "iproute2",
        _ => "lxc",
    }
}

/// Finds `tool` in `PATH` (and the sbin directories, which a non-login root shell may miss).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Fails unless `tool` is installed, naming the package to install.
///
/// # Errors
/// [`LxcError::ToolMissing`].
pub fn require_tool(tool: &str) -> Result<PathBuf> {
    which(tool).ok_or_else(|| LxcError::ToolMissing { tool: tool.to_string(), package: package_of(tool) })
}

/// The effective uid of this process (owner of `/proc/self`).
pub fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

fn command_line(tool: &str, args: &[OsString]) -> String {
    let mut s = tool.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn tail(text: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `tool args…` (separate argv entries), feeding `stdin` when given, bounded by `timeout`.
/// Returns the output on exit status 0.
///
/// # Errors
/// [`LxcError::ToolMissing`], [`LxcError::Spawn`], [`LxcError::Timeout`] (the child is killed),
/// [`LxcError::Command`] with the last lines of stderr.
pub async fn run(
    tool: &str,
    args: &[OsString],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<std::process::Output> {
    let exe = require_tool(tool)?;
    let command = command_line(tool, args);
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tracing::debug!("run: {command}");
    let mut child = cmd.spawn().map_err(|source| LxcError::Spawn { command: command.clone(), source })?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        let input = input.to_vec();
        tokio::spawn(async move {
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        });
    }
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(r) => r.map_err(|source| LxcError::Spawn { command: command.clone(), source })?,
        Err(_) => return Err(LxcError::Timeout { command, secs: timeout.as_secs_f64() }),
    };
    if !out.status.success() {
        let mut stderr = tail(&out.stderr, 8);
        if stderr.is_empty() {
            stderr = tail(&out.stdout, 8);
        }
        if stderr.is_empty() {
            stderr = "no output".into();
        }
        return Err(LxcError::Command { command, status: out.status.to_string(), stderr });
    }
    Ok(out)
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
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
];

impl LxcClient {
    /// Checks that this process is root and the LXC tools are installed, then opens the LXC
    /// path: `path` when given, else `$PGO_LXC_PATH`, else `lxc-config lxc.lxcpath` (normally
    /// `/var/lib/lxc`). The directory is created when missing. Same as [`LxcClient::open`], off
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
        let path = match path.or_else(|| std::env::var_os(LXC_PATH_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)) {
            Some(p) => p,
            None => {
                let command = "lxc-config lxc.lxcpath".to_string();
                let out = std::process::Command::new(require_tool("lxc-config")?)
                    .arg("lxc.lxcpath")
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|source| LxcError::Spawn { command: command.clone(), source })?;
                if !out.status.success() {
                    return Err(LxcError::Command {
                        command,
                        status: out.status.to_string(),
                        stderr: tail(&out.stderr, 8),
                    });
                }
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
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

    fn args(&self, tool_args: &[&str]) -> Vec<OsString> {
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
    /// (a debootstrap takes about a minute).
    ///
    /// # Errors
    /// A failing `lxc-create` (its stderr says why: mirror unreachable, debootstrap missing …).
    pub async fn create(&self, name: &str, template: &str, template_args: &[&str], timeout: Duration) -> Result<()> {
        if template == "debian" {
            require_tool("debootstrap")?;
        }
        let mut args = self.args(&["-n", name, "-t", template, "--"]);
        args.extend(os(template_args));
        run("lxc-create", &args, None, timeout).await?;
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
                stderr: format!("{stderr}\n(for the full log run `lxc-start -n {name} -F -l DEBUG`)"),
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

    /// Runs `argv` inside the running container as root (`lxc-attach --clear-env -- ARGV`),
    /// feeding `stdin`, and returns its output.
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
        let mut a = vec![
            "-n",
            name,
            "--clear-env",
            "--set-var",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--",
        ];
        a.extend(argv);
        run("lxc-attach", &self.args(&a), stdin, timeout).await
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

    fn must_exist(&self, name: &str) -> Result<()> {
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

/// The IPv4 address and prefix length of `bridge` (`ip -j -4 addr show dev BRIDGE`), `None`
/// when the bridge does not exist or has no IPv4 address.
///
/// # Errors
/// `ip` missing or printing unexpected output.
pub async fn bridge_ipv4(bridge: &str) -> Result<Option<(Ipv4Addr, u8)>> {
    let args = os(&["-j", "-4", "addr", "show", "dev", bridge]);
    let out = match run("ip", &args, None, QUICK_TIMEOUT).await {
        Ok(o) => o,
        // `ip` fails with "Device … does not exist".
        Err(LxcError::Command { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let found = v
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .find_map(|a| {
            let ip: Ipv4Addr = a["local"].as_str()?.parse().ok()?;
            let prefix = u8::try_from(a["prefixlen"].as_u64()?).ok()?;
            Some((ip, prefix))
        });
    Ok(found)
}

/// The address `lxc-net` gives its bridge, from its settings file (`/etc/default/lxc-net`:
/// `LXC_ADDR`, `LXC_NETMASK`), with lxc-net's own defaults 10.0.3.1/24. Used to plan without
/// bringing the bridge up.
pub fn lxc_net_settings(text: Option<&str>) -> (Ipv4Addr, u8) {
    let mut addr = Ipv4Addr::new(10, 0, 3, 1);
    let mut prefix = 24u8;
    for line in text.unwrap_or("").lines() {
        let Some((k, v)) = line.trim().split_once('=') else { continue };
        let v = v.trim().trim_matches('"').trim_matches('\'');
        match k.trim() {
            "LXC_ADDR" => addr = v.parse().unwrap_or(addr),
            "LXC_NETMASK" => {
                if let Ok(m) = v.parse::<Ipv4Addr>() {
                    prefix = u32::from(m).count_ones() as u8;
                }
            }
            _ => {}
        }
    }
    (addr, prefix)
}

/// The bridge's address if it is up, else the one `lxc-net` will give it (see
/// [`lxc_net_settings`]). Changes nothing on the host.
///
/// # Errors
/// `ip` missing.
pub async fn bridge_ipv4_or_planned(bridge: &str) -> Result<(Ipv4Addr, u8)> {
    if let Some(found) = bridge_ipv4(bridge).await? {
        return Ok(found);
    }
    Ok(lxc_net_settings(std::fs::read_to_string("/etc/default/lxc-net").ok().as_deref()))
}

/// Where `lxc-net` keeps its run state (`varrun` in `/usr/libexec/lxc/lxc-net`): the marker
/// `network_up` and dnsmasq's `dnsmasq.pid`.
pub const LXC_NET_RUN_DIR: &str = "/run/lxc";

/// The bridge `lxc-net` manages, from its settings file (`/etc/default/lxc-net`: `LXC_BRIDGE`),
/// with lxc-net's default `lxcbr0`.
pub fn lxc_net_bridge(text: Option<&str>) -> String {
    text.unwrap_or("")
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .filter(|(k, _)| k.trim() == "LXC_BRIDGE")
        .map(|(_, v)| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|v| !v.is_empty())
        .last()
        .unwrap_or_else(|| "lxcbr0".to_string())
}

/// Whether a dnsmasq serving `bridge` runs: a process whose `comm` is `dnsmasq` and whose
/// command line has `--interface=<bridge>` (how `lxc-net` starts it). Reads only `proc_root`
/// (`/proc` on a host; a directory of the same shape in tests).
pub fn dnsmasq_serves(proc_root: &Path, bridge: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(proc_root) else { return false };
    let wanted = format!("--interface={bridge}");
    entries.flatten().any(|e| {
        let is_pid = e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == "dnsmasq")
            && std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == wanted.as_bytes()))
    })
}

/// Forgets `lxc-net`'s run state in `run_dir` when its dnsmasq is gone (the bridge and its address
/// outlive the process, e.g. when the session that started it was killed): without this,
/// `lxc-net start` answers "already running" and the stale `dnsmasq.pid` would make its `stop`
/// `kill -9` whatever process now has that pid.
fn forget_stale_lxc_net_state(run_dir: &Path) {
    for f in ["network_up", "dnsmasq.pid"] {
        let p = run_dir.join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => tracing::debug!("removed stale {}", p.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("could not remove stale {}: {e}", p.display()),
        }
    }
}

/// Makes sure LXC's bridge is up with DHCP and returns its address. When `bridge` has no IPv4
/// address — or it is lxc-net's bridge (see [`lxc_net_bridge`]) and no dnsmasq serves it (see
/// [`dnsmasq_serves`]), so containers would never get an address — starts `lxc-net`
/// (`systemctl restart lxc-net` on a systemd host, else `/usr/libexec/lxc/lxc-net start`, which
/// creates `lxcbr0` with dnsmasq for DHCP) and looks again. A bridge that lxc-net does not
/// manage is taken as it is.
///
/// # Errors
/// [`LxcError::Bridge`] when the bridge is still missing or still has no DHCP server, saying
/// what to configure.
pub async fn ensure_bridge(bridge: &str) -> Result<(Ipv4Addr, u8)> {
    let managed = lxc_net_bridge(std::fs::read_to_string("/etc/default/lxc-net").ok().as_deref()) == bridge;
    let proc_root = Path::new("/proc");
    if let Some(found) = bridge_ipv4(bridge).await? {
        if !managed || dnsmasq_serves(proc_root, bridge) {
            return Ok(found);
        }
        tracing::warn!(
            "{bridge} is up but lxc-net's dnsmasq does not run (no DHCP for containers): restarting lxc-net"
        );
        forget_stale_lxc_net_state(Path::new(LXC_NET_RUN_DIR));
    }
    let mut tried = Vec::new();
    if Path::new("/run/systemd/system").is_dir() && which("systemctl").is_some() {
        let r = run("systemctl", &os(&["restart", "lxc-net"]), None, QUICK_TIMEOUT).await;
        tried.push(format!("systemctl restart lxc-net: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
    } else {
        for script in ["/usr/libexec/lxc/lxc-net", "/usr/lib/x86_64-linux-gnu/lxc/lxc-net", "/usr/lib/lxc/lxc-net"] {
            if Path::new(script).is_file() {
                let r = run(script, &os(&["start"]), None, QUICK_TIMEOUT).await;
                tried.push(format!("{script} start: {}", r.err().map_or("ok".to_string(), |e| e.to_string())));
                break;
            }
        }
    }
    if let Some(found) = bridge_ipv4(bridge).await? {
        if !managed || dnsmasq_serves(proc_root, bridge) {
            return Ok(found);
        }
        tried.push("dnsmasq still does not serve it".to_string());
    }
    let hint = if tried.is_empty() {
        "lxc-net was not found; install `lxc` and set USE_LXC_BRIDGE=\"true\" in /etc/default/lxc-net".to_string()
    } else {
        format!(
            "tried {}; check USE_LXC_BRIDGE=\"true\" in /etc/default/lxc-net and that dnsmasq-base is installed",
            tried.join("; ")
        )
    };
    Err(LxcError::Bridge { bridge: bridge.to_string(), hint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_names_the_package() {
        let e = require_tool("lxc-definitely-not-installed").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`lxc-definitely-not-installed` is not installed (not found in PATH): install it with `apt-get install lxc`"
        );
        let e = require_tool("debootstrap-not-here").unwrap_err();
        assert!(e.to_string().ends_with("`apt-get install lxc`"), "{e}");
        assert_eq!(package_of("debootstrap"), "debootstrap");
        assert_eq!(package_of("ip"), "iproute2");
    }

    #[test]
    fn lxc_net_bridge_and_default() {
        assert_eq!(lxc_net_bridge(None), "lxcbr0");
        assert_eq!(lxc_net_bridge(Some("USE_LXC_BRIDGE=\"true\"\nLXC_BRIDGE=\"br-lab\"\n")), "br-lab");
        assert_eq!(lxc_net_bridge(Some("LXC_BRIDGE=\n")), "lxcbr0");
    }

    /// A fake /proc: pid directories with `comm` and a NUL-separated `cmdline`.
    fn fake_proc(procs: &[(&str, &str, &[&str])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("self")).unwrap();
        for (pid, comm, args) in procs {
            let p = dir.path().join(pid);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(p.join("cmdline"), args.join("\0") + "\0").unwrap();
        }
        dir
    }

    #[test]
    fn dnsmasq_serving_the_bridge_is_found_by_its_interface_argument() {
        let lxc_dnsmasq: &[&str] =
            &["dnsmasq", "--conf-file=/dev/null", "--interface=lxcbr0", "--listen-address", "10.0.3.1"];
        let running = fake_proc(&[("1", "systemd", &["/sbin/init"]), ("18671", "dnsmasq", lxc_dnsmasq)]);
        assert!(dnsmasq_serves(running.path(), "lxcbr0"));
        assert!(!dnsmasq_serves(running.path(), "lxcbr1"), "another bridge's dnsmasq does not count");
        // The pid file's process is gone and its pid reused by something else.
        let dead = fake_proc(&[
            ("18671", "bash", &["bash", "--interface=lxcbr0"]),
            ("20", "dnsmasq", &["dnsmasq", "--interface=virbr0"]),
        ]);
        assert!(!dnsmasq_serves(dead.path(), "lxcbr0"));
        assert!(!dnsmasq_serves(Path::new("/nonexistent-proc"), "lxcbr0"));
    }

    #[test]
    fn stale_lxc_net_state_is_forgotten() {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join("network_up"), "").unwrap();
        std::fs::write(run.path().join("dnsmasq.pid"), "18671\n").unwrap();
        std::fs::write(run.path().join("lock"), "").unwrap();
        forget_stale_lxc_net_state(run.path());
        assert!(!run.path().join("network_up").exists());
        assert!(!run.path().join("dnsmasq.pid").exists());
        assert!(run.path().join("lock").exists(), "only lxc-net's state files go");
        forget_stale_lxc_net_state(run.path()); // nothing left: no error
    }

    #[test]
    fn lxc_net_settings_and_defaults() {
        assert_eq!(lxc_net_settings(None), (Ipv4Addr::new(10, 0, 3, 1), 24));
        let text = "USE_LXC_BRIDGE=\"true\"\nLXC_ADDR=\"10.1.0.1\"\nLXC_NETMASK='255.255.0.0'\n# LXC_ADDR=1.2.3.4\n";
        assert_eq!(lxc_net_settings(Some(text)), (Ipv4Addr::new(10, 1, 0, 1), 16));
    }

    #[test]
    fn not_root_says_what_to_do() {
        assert_eq!(
            LxcError::NotRoot { uid: 1000 }.to_string(),
            "the lxc backend needs root (this process runs as uid 1000): run it as root, e.g. with sudo"
        );
    }

    #[tokio::test]
    async fn run_reports_status_stderr_and_timeouts() {
        let out = run("sh", &os(&["-c", "cat; echo done"]), Some(b"in "), QUICK_TIMEOUT).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "in done\n");
        let e = run("sh", &os(&["-c", "echo first >&2; echo 'it broke' >&2; exit 3"]), None, QUICK_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`sh -c echo first >&2; echo 'it broke' >&2; exit 3` failed (exit status: 3): first\nit broke"
        );
        let e = run("sleep", &os(&["5"]), None, Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(e.to_string(), "`sleep 5` did not finish within 0.1s");
    }
}
