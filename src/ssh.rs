//! SSH transport to a container: one multiplexed connection per container, safe remote
//! commands, tar uploads, and trust-on-first-use host keys recorded in the artifacts.
//!
//! # Why the `openssh` crate over the system `ssh`
//!
//! `configure` runs `ansible-playbook`, and Ansible speaks to hosts through the system OpenSSH
//! client. Using the same client for our own commands means one implementation of host-key
//! checking, one `known_hosts` file, one set of ciphers and one behaviour for users to debug with
//! `ssh -v`. The `openssh` crate starts a ControlMaster (`ssh -M -f -N`) and runs every command
//! over its socket; we hand that socket to Ansible (`ControlPath`), so base role, lib engine and
//! our helpers share a single authenticated TCP connection. russh would give an in-process
//! client but a second, independent host-key and auth implementation next to Ansible's.
//!
//! # Safety of arguments
//!
//! The remote side always runs the command through the login shell, so every argument is
//! quoted by the crate's [`openssh::OwningCommand::arg`] (POSIX single-quote escaping). No
//! user or secret value is ever put into a command: values travel through stdin or through
//! files uploaded with mode 0600 into a private temporary directory (mode 0700) that is removed
//! afterwards ([`Connection::remove_dir`]).
//!
//! # Host keys
//!
//! Trust on first use: the first connection records the server's key in the target's own
//! known-hosts file (`<artifacts>/known_hosts/<name>`, `StrictHostKeyChecking=accept-new`); a
//! later connection presenting another key fails with [`SshError::HostKeyChanged`]. When
//! `provision` has just (re)created the container, the caller sets
//! [`Target::replace_host_key`], the old record is dropped first and the new key recorded.

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where and how to reach one container.
#[derive(Debug, Clone)]
pub struct Target {
    /// Container (lib) name, used in messages.
    pub name: String,
    /// Address (IPv4/IPv6 literal or host name).
    pub address: String,
    /// SSH port (22).
    pub port: u16,
    /// The private key file (`<share>/.keys/<vmid>`, see [`crate::keys`]).
    pub key: PathBuf,
    /// The known-hosts file for this container (`<artifacts>/known_hosts/<name>`).
    pub known_hosts: PathBuf,
    /// Drop the recorded host key before connecting (the container was (re)created after the
    /// key was recorded: see [`recreated_since_recorded`]).
    pub replace_host_key: bool,
    /// Users to try, in order: `["config", "root"]` — `config` exists once the base role ran.
    pub users: Vec<String>,
}

/// Connection tuning.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Timeout of one TCP connect + handshake (`ConnectTimeout`), e.g. 10 s.
    pub connect_timeout: Duration,
    /// Total time budget for all connect attempts, e.g. 60 s.
    pub total_timeout: Duration,
    /// Maximum connect attempts while the host is unreachable (≥ 1).
    pub attempts: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self { connect_timeout: Duration::from_secs(10), total_timeout: Duration::from_secs(60), attempts: 5 }
    }
}

/// SSH failures, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// No SSH server answered within the budget.
    #[error("{name}: cannot reach SSH at {address}:{port} after {attempts} attempt(s) in {secs:.1}s: {last}")]
    Unreachable {
        /// Container name.
        name: String,
        /// Address.
        address: String,
        /// Port.
        port: u16,
        /// Attempts made.
        attempts: u32,
        /// Seconds spent.
        secs: f64,
        /// The last error from ssh.
        last: String,
    },
    /// The server refused the key for every user tried.
    #[error(
        "{name}: SSH at {address}:{port} refused the key {key} for user(s) {users}: {detail}; \
         is {key}.pub authorized in the container?"
    )]
    AuthRefused {
        /// Container name.
        name: String,
        /// Address.
        address: String,
        /// Port.
        port: u16,
        /// The key file.
        key: String,
        /// Users tried.
        users: String,
        /// ssh's message.
        detail: String,
    },
    /// The server's host key differs from the recorded one.
    #[error(
        "{name}: the SSH host key of {address}:{port} changed since it was recorded in {known_hosts}; \
         this is refused (possible man-in-the-middle). If the container was re-created outside \
         `provision`, delete that file to trust the new key"
    )]
    HostKeyChanged {
        /// Container name.
        name: String,
        /// Address.
        address: String,
        /// Port.
        port: u16,
        /// The known-hosts file.
        known_hosts: String,
    },
    /// A remote command could not be run, or timed out.
    #[error("{name}: {what}: {detail}")]
    Command {
        /// Container name.
        name: String,
        /// What was being done.
        what: String,
        /// Details.
        detail: String,
    },
    /// Local I/O (known-hosts file, control directory).
    #[error("{0}")]
    Io(String),
}

/// Output of a remote command.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

impl Output {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Bytes of stderr kept by [`Connection::stream`] (the tail), 64 KiB.
pub const STDERR_TAIL: usize = 64 * 1024;

/// How a [`Connection::stream`] command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    /// Exit code; `None` when killed by a signal or ssh itself failed (exit 255).
    pub code: Option<i32>,
    /// The last [`STDERR_TAIL`] bytes of stderr, lossily decoded.
    pub stderr: String,
}

/// An authenticated, multiplexed SSH connection to one container.
pub struct Connection {
    session: Session,
    target: Target,
    user: String,
    fingerprint: Option<String>,
}

enum Attempt {
    Refused(String),
    Fatal(SshError),
    Retry(String),
}

fn classify(target: &Target, err: &openssh::Error) -> Attempt {
    let text = match err {
        openssh::Error::Connect(e) => e.to_string(),
        other => format!("{other}"),
    };
    let lower = text.to_lowercase();
    if lower.contains("remote host identification has changed")
        || lower.contains("host key verification failed")
        || lower.contains("host key for") && lower.contains("has changed")
    {
        return Attempt::Fatal(SshError::HostKeyChanged {
            name: target.name.clone(),
            address: target.address.clone(),
            port: target.port,
            known_hosts: target.known_hosts.display().to_string(),
        });
    }
    if lower.contains("permission denied (") || lower.contains("too many authentication failures") {
        return Attempt::Refused(text.trim().to_string());
    }
    Attempt::Retry(text.trim().to_string())
}

/// Writes an ssh client config that pins what the session may do: key auth only, no agent, no
/// global known-hosts file, no forwarding. Returned as a temp file kept alive with the session.
fn client_config(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("ssh_config");
    std::fs::write(
        &path,
        "Host *\n  PasswordAuthentication no\n  KbdInteractiveAuthentication no\n  \
         PubkeyAuthentication yes\n  GlobalKnownHostsFile /dev/null\n  ForwardAgent no\n  \
         ForwardX11 no\n  LogLevel ERROR\n  HashKnownHosts no\n  ServerAliveCountMax 3\n",
    )?;
    Ok(path)
}

/// The SHA-256 fingerprint (`SHA256:…`) of the first key recorded in `known_hosts`.
pub fn recorded_fingerprint(known_hosts: &Path) -> Option<String> {
    let text = std::fs::read_to_string(known_hosts).ok()?;
    text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).find_map(|l| {
        let mut parts = l.split_whitespace();
        let _hosts = parts.next()?;
        let algo = parts.next()?;
        let data = parts.next()?;
        let key = ssh_key::PublicKey::from_openssh(&format!("{algo} {data}")).ok()?;
        Some(key.fingerprint(ssh_key::HashAlg::Sha256).to_string())
    })
}

/// True when the container's host key must be learned again: the provision artifact at
/// `provision` says this provision run created the container (`created`), and that artifact is
/// newer than the recorded key (or no key is recorded). Once a later connection has recorded the
/// new key, the same `created` artifact no longer replaces it, so a changed key is refused again.
pub fn recreated_since_recorded(created: bool, provision: &Path, known_hosts: &Path) -> bool {
    if !created {
        return false;
    }
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(known_hosts), mtime(provision)) {
        (None, _) => true,
        (Some(recorded), Some(provisioned)) => provisioned > recorded,
        (Some(_), None) => false,
    }
}

impl Connection {
    /// Connects to `target`, trying each of `target.users` in turn.
    ///
    /// Unreachable hosts (refused, timed out, no route, no banner) are retried with capped
    /// exponential backoff (0.5 s doubling up to 5 s) for at most `opts.attempts` attempts and
    /// `opts.total_timeout`. An authentication refusal moves to the next user without retrying.
    ///
    /// # Errors
    /// [`SshError::Unreachable`], [`SshError::AuthRefused`] (every user refused),
    /// [`SshError::HostKeyChanged`], [`SshError::Io`] for the local files.
    pub async fn connect(target: &Target, opts: &ConnectOptions, control_dir: &Path) -> Result<Self, SshError> {
        let io = |e: std::io::Error| SshError::Io(format!("{}: {e}", target.name));
        if let Some(dir) = target.known_hosts.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        if target.replace_host_key && target.known_hosts.exists() {
            tracing::info!("{}: container was (re)created, replacing its recorded host key", target.name);
            std::fs::remove_file(&target.known_hosts).map_err(io)?;
        }
        std::fs::create_dir_all(control_dir).map_err(io)?;
        let config = client_config(control_dir).map_err(io)?;
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut delay = Duration::from_millis(500);
        let mut refused: Vec<(String, String)> = Vec::new();
        let mut last = String::from("no attempt");
        'users: for user in &target.users {
            loop {
                attempts += 1;
                let remaining = opts.total_timeout.saturating_sub(start.elapsed());
                let mut b = SessionBuilder::default();
                b.user(user.clone())
                    .port(target.port)
                    .keyfile(&target.key)
                    .known_hosts_check(KnownHosts::Add)
                    .user_known_hosts_file(&target.known_hosts)
                    .config_file(&config)
                    .control_directory(control_dir)
                    .server_alive_interval(Duration::from_secs(15))
                    // A master left behind by a crashed run exits on its own after 10 idle minutes.
                    .control_persist(ControlPersist::IdleFor(std::num::NonZeroUsize::new(600).expect("non-zero")))
                    .connect_timeout(opts.connect_timeout.min(remaining.max(Duration::from_secs(1))));
                tracing::debug!("{}: ssh {user}@{}:{} (attempt {attempts})", target.name, target.address, target.port);
                let res =
                    tokio::time::timeout(opts.connect_timeout + Duration::from_secs(5), b.connect(&target.address))
                        .await;
                let err = match res {
                    Ok(Ok(session)) => {
                        let fingerprint = recorded_fingerprint(&target.known_hosts);
                        return Ok(Connection { session, target: target.clone(), user: user.clone(), fingerprint });
                    }
                    Ok(Err(e)) => classify(target, &e),
                    Err(_) => Attempt::Retry("connect attempt timed out".into()),
                };
                match err {
                    Attempt::Fatal(e) => return Err(e),
                    Attempt::Refused(detail) => {
                        tracing::debug!("{}: user {user} refused: {detail}", target.name);
                        refused.push((user.clone(), detail));
                        continue 'users;
                    }
                    Attempt::Retry(msg) => {
                        last = msg;
                        if attempts >= opts.attempts || start.elapsed() + delay >= opts.total_timeout {
                            return Err(SshError::Unreachable {
                                name: target.name.clone(),
                                address: target.address.clone(),
                                port: target.port,
                                attempts,
                                secs: start.elapsed().as_secs_f64(),
                                last,
                            });
                        }
                        tracing::info!("{}: SSH not reachable yet ({last}), retrying in {:?}", target.name, delay);
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
        }
        Err(SshError::AuthRefused {
            name: target.name.clone(),
            address: target.address.clone(),
            port: target.port,
            key: target.key.display().to_string(),
            users: refused.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>().join(", "),
            detail: refused.last().map(|(_, d)| d.clone()).unwrap_or(last),
        })
    }

    /// The user the connection is authenticated as (`config` or `root`).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// SHA-256 fingerprint of the server's host key as recorded (`SHA256:…`).
    pub fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    /// The ControlMaster socket, for other OpenSSH clients (Ansible) to multiplex over.
    pub fn control_socket(&self) -> &Path {
        self.session.control_socket()
    }

    /// Runs `argv` on the container (each element quoted, never interpreted by a shell), with
    /// `stdin` fed from `input`, for at most `timeout`. With `as_root`, the command is run through
    /// `sudo -n --` when the session's user is not root.
    ///
    /// # Errors
    /// [`SshError::Command`] when the command cannot be started, the connection breaks, or the
    /// timeout passes (the remote process is then left to be killed by the closing session).
    pub async fn run(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        as_root: bool,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let fail = |detail: String| SshError::Command {
            name: self.target.name.clone(),
            what: format!("running {}", argv.first().copied().unwrap_or("")),
            detail,
        };
        let (program, rest): (&str, Vec<&str>) = if as_root && self.user != "root" {
            ("sudo", [&["-n", "--"], argv].concat())
        } else {
            (argv[0], argv[1..].to_vec())
        };
        let mut cmd = self.session.command(program);
        for a in &rest {
            cmd.arg(*a);
        }
        cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let work = async {
            let mut child = cmd.spawn().await.map_err(|e| fail(e.to_string()))?;
            if let (Some(data), Some(mut w)) = (input, child.stdin().take()) {
                w.write_all(data).await.map_err(|e| fail(format!("writing stdin: {e}")))?;
                w.shutdown().await.map_err(|e| fail(format!("closing stdin: {e}")))?;
            }
            let mut out = child.stdout().take();
            let mut err = child.stderr().take();
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let ro = async {
                if let Some(s) = out.as_mut() {
                    let _ = s.read_to_end(&mut o).await;
                }
            };
            let re = async {
                if let Some(s) = err.as_mut() {
                    let _ = s.read_to_end(&mut e).await;
                }
            };
            tokio::join!(ro, re);
            let status = child.wait().await.map_err(|e| fail(e.to_string()))?;
            Ok(Output { code: status.code(), stdout: o, stderr: e })
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(fail(format!("timed out after {}s", timeout.as_secs()))),
        }
    }

    /// Runs `argv` on the container with **streamed** standard input and output, for commands
    /// whose data does not fit in memory (data snapshots: a tar stream of any size).
    ///
    /// Every argv word is quoted by the `openssh` crate for the remote login shell (POSIX single
    /// quotes), so constants with spaces, quotes and newlines (the fixed snapshot scripts) arrive
    /// as one word each. With `as_root` the command runs through `sudo -n --` when the session's
    /// user is not root (the `config` user has passwordless sudo after the base role).
    ///
    /// `stdin` is copied to the command until EOF, then the remote stdin is closed; `stdout` is
    /// filled concurrently; stderr is collected, keeping its last [`STDERR_TAIL`] bytes. A command
    /// that stops reading its input early (it failed) is not a transport error: its exit status
    /// says what happened. The whole run is bounded by `timeout`; when it passes, the local
    /// `ssh` channel is killed (the remote process gets EOF/SIGPIPE on its streams).
    ///
    /// Exit codes: OpenSSH uses 255 for its own failures, so a remote 255 is reported as
    /// `code: None` with a note in `stderr` (connection lost, or the command exited 255).
    ///
    /// # Errors
    /// [`SshError::Command`] when the command cannot be started, the local stdout writer fails,
    /// or the timeout passes.
    pub async fn stream(
        &self,
        argv: &[&str],
        stdin: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
        stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        as_root: bool,
        timeout: Duration,
    ) -> Result<StreamStatus, SshError> {
        let what = format!("running {}", argv.first().copied().unwrap_or(""));
        let fail = |detail: String| SshError::Command { name: self.target.name.clone(), what: what.clone(), detail };
        if argv.is_empty() {
            return Err(fail("empty command".into()));
        }
        let (program, rest): (&str, Vec<&str>) = if as_root && self.user != "root" {
            ("sudo", [&["-n", "--"], argv].concat())
        } else {
            (argv[0], argv[1..].to_vec())
        };
        let mut cmd = self.session.command(program);
        for a in &rest {
            cmd.arg(*a);
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let work = async {
            let mut child = cmd.spawn().await.map_err(|e| fail(e.to_string()))?;
            let child_in = child.stdin().take().ok_or_else(|| fail("no stdin pipe".into()))?;
            let child_out = child.stdout().take().ok_or_else(|| fail("no stdout pipe".into()))?;
            let child_err = child.stderr().take().ok_or_else(|| fail("no stderr pipe".into()))?;
            let crate::net::Pumped { fed, drained, mut stderr } =
                crate::net::pump(stdin, child_in, child_out, stdout, child_err, STDERR_TAIL).await;
            if let Err(e) = drained {
                let _ = child.disconnect().await;
                return Err(fail(format!("writing the command's output: {e}")));
            }
            let code = match child.wait().await {
                Ok(status) => status.code(),
                Err(openssh::Error::RemoteProcessTerminated) => {
                    stderr.push_str("\nssh: exit status 255 (the connection was lost, or the command exited 255)");
                    None
                }
                // openssh reports a remote 127 this way; keep the code.
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
                Err(e) => return Err(fail(e.to_string())),
            };
            if let Err(e) = fed {
                // The input could not be read (a local failure), though the command finished.
                if code == Some(0) {
                    return Err(fail(format!("feeding the command's input: {e}")));
                }
                stderr.push_str(&format!("\nfeeding the command's input failed: {e}"));
            }
            Ok(StreamStatus { code, stderr })
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(fail(format!("timed out after {}s", timeout.as_secs()))),
        }
    }

    /// Like [`Connection::run`], but a non-zero exit is an error carrying the command's stderr.
    pub async fn check(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        as_root: bool,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let out = self.run(argv, input, as_root, timeout).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(SshError::Command {
                name: self.target.name.clone(),
                what: format!("`{}` failed with exit code {:?}", argv.join(" "), out.code),
                detail: crate::ci::redact(String::from_utf8_lossy(&out.stderr).trim()),
            })
        }
    }

    /// Creates a private temporary directory (mode 0700, owned by root when `as_root`) and
    /// returns its path.
    pub async fn make_temp_dir(&self, as_root: bool) -> Result<String, SshError> {
        let out = self.check(&["mktemp", "-d", "/tmp/pgo.XXXXXXXX"], None, as_root, Duration::from_secs(30)).await?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !path.starts_with("/tmp/pgo.") {
            return Err(SshError::Command {
                name: self.target.name.clone(),
                what: "mktemp".into(),
                detail: format!("unexpected output `{path}`"),
            });
        }
        Ok(path)
    }

    /// Removes a directory made by [`Connection::make_temp_dir`] (best effort is not enough for
    /// secrets: an error is returned when removal fails).
    pub async fn remove_dir(&self, path: &str, as_root: bool) -> Result<(), SshError> {
        self.check(&["rm", "-rf", "--", path], None, as_root, Duration::from_secs(30)).await.map(|_| ())
    }

    /// Uploads a tar archive (built with [`tar::Builder`]) by streaming it to `tar -x` on the
    /// container, extracting below `dest` (which must exist). Modes in the archive are kept, so a
    /// file added with mode 0600 arrives with 0600.
    pub async fn upload_tar(
        &self,
        dest: &str,
        archive: &[u8],
        as_root: bool,
        timeout: Duration,
    ) -> Result<(), SshError> {
        self.check(&["tar", "-x", "--no-same-owner", "-p", "-C", dest, "-f", "-"], Some(archive), as_root, timeout)
            .await
            .map(|_| ())
    }

    /// Reads a file from the container (as root when `as_root`).
    pub async fn read_file(&self, path: &str, as_root: bool) -> Result<Vec<u8>, SshError> {
        Ok(self.check(&["cat", "--", path], None, as_root, Duration::from_secs(30)).await?.stdout)
    }

    /// Closes the master connection.
    pub async fn close(self) {
        let _ = self.session.close().await;
    }
}

/// Builds an in-memory tar archive.
pub struct Bundle {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for Bundle {
    fn default() -> Self {
        Self::new()
    }
}

impl Bundle {
    /// An empty archive.
    pub fn new() -> Self {
        let mut builder = tar::Builder::new(Vec::new());
        builder.mode(tar::HeaderMode::Deterministic);
        builder.follow_symlinks(false);
        Self { builder }
    }

    /// Adds a file with `data` and `mode` (e.g. 0o600) at `path` inside the archive.
    pub fn file(&mut self, path: &str, data: &[u8], mode: u32) -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        self.builder.append_data(&mut h, path, data)
    }

    /// Adds the directory tree `src` under `prefix`, skipping `.git`. Files keep their
    /// executable bit; everything else becomes 0644/0755.
    pub fn dir(&mut self, prefix: &str, src: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mut stack = vec![src.to_path_buf()];
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        self.builder.append_data(&mut h, prefix, std::io::empty())?;
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)?.filter_map(|e| e.ok()).collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                if e.file_name() == ".git" {
                    continue;
                }
                let path = e.path();
                let rel = path.strip_prefix(src).unwrap_or(&path);
                let name = format!("{prefix}/{}", rel.display());
                let ft = e.file_type()?;
                if ft.is_dir() {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(0o755);
                    h.set_size(0);
                    h.set_mtime(0);
                    self.builder.append_data(&mut h, &name, std::io::empty())?;
                    stack.push(path);
                } else if ft.is_file() {
                    let data = std::fs::read(&path)?;
                    let exec = e.metadata()?.permissions().mode() & 0o111 != 0;
                    self.file(&name, &data, if exec { 0o755 } else { 0o644 })?;
                }
            }
        }
        Ok(())
    }

    /// Finishes the archive and returns its bytes.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        self.builder.into_inner()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn host_key_is_replaced_only_for_a_newer_creation() {
        let dir = tempfile::tempdir().unwrap();
        let prov = dir.path().join("provision.json");
        let kh = dir.path().join("known_hosts");
        std::fs::write(&prov, "{}").unwrap();
        assert!(recreated_since_recorded(true, &prov, &kh), "no record yet");
        assert!(!recreated_since_recorded(false, &prov, &kh));
        std::fs::write(&kh, "x").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&prov).unwrap().set_modified(old).unwrap();
        assert!(!recreated_since_recorded(true, &prov, &kh), "key learned after the creation");
        std::fs::File::options()
            .write(true)
            .open(&kh)
            .unwrap()
            .set_modified(old - std::time::Duration::from_secs(60))
            .unwrap();
        assert!(recreated_since_recorded(true, &prov, &kh), "creation after the record");
    }

    use super::*;

    #[test]
    fn bundle_keeps_modes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        let mut b = Bundle::new();
        b.dir("lib", dir.path()).unwrap();
        b.file("env", b"X=1\n", 0o600).unwrap();
        let bytes = b.finish().unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let got: Vec<(String, u32)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("lib".to_string(), 0o755),
                ("lib/sub".to_string(), 0o755),
                ("lib/sub/a.txt".to_string(), 0o644),
                ("env".to_string(), 0o600)
            ]
        );
    }

    #[test]
    fn fingerprint_of_recorded_key() {
        let dir = tempfile::tempdir().unwrap();
        let kh = dir.path().join("kh");
        std::fs::write(
            &kh,
            "10.0.3.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
        )
        .unwrap();
        let fp = recorded_fingerprint(&kh).unwrap();
        assert!(fp.starts_with("SHA256:"), "{fp}");
        assert_eq!(recorded_fingerprint(&dir.path().join("missing")), None);
    }
}
