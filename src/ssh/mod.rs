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
//! `provision` (re)created the container after the key was recorded
//! ([`recreated_since_recorded`]), the caller sets [`Target::replace_host_key`], the old record is
//! dropped first and the new key recorded.
//!
//! # Files
//!
//! * this file — [`Target`], [`ConnectOptions`], [`SshError`], connecting ([`Connection::connect`]);
//! * [`command`] — running commands (collected or streamed);
//! * [`known_hosts`] — recorded host keys and when to replace them;
//! * [`upload`] — tar uploads ([`TarUpload`]), temporary directories, reading files.

pub mod command;
pub mod keys;
pub mod known_hosts;
pub mod upload;
pub mod wait;

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder};

pub use command::{Output, STDERR_TAIL, StreamStatus};
pub use known_hosts::{recorded_fingerprint, recreated_since_recorded};
pub use upload::TarUpload;
pub use wait::wait_for_ssh;

/// Where and how to reach one container.
#[derive(Debug, Clone)]
pub struct Target {
    /// Container (lib) name, used in messages.
    pub name: String,
    /// Address (IPv4/IPv6 literal or host name).
    pub address: String,
    /// SSH port (22).
    pub port: u16,
    /// The private key file (`<share>/.keys/<vmid>`, see [`crate::ssh::keys`]).
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
         this is refused (possible man-in-the-middle). If the container was re-created and you trust \
         its new key, delete that file: rm {known_hosts}"
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
/// global known-hosts file, no forwarding, and no rewriting of the known-hosts file once a key is
/// recorded (`UpdateHostKeys no`: its modification time is when the key was recorded,
/// [`recreated_since_recorded`]). Returned as a temp file kept alive with the session.
fn client_config(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("ssh_config");
    std::fs::write(
        &path,
        "Host *\n  PasswordAuthentication no\n  KbdInteractiveAuthentication no\n  \
         PubkeyAuthentication yes\n  GlobalKnownHostsFile /dev/null\n  ForwardAgent no\n  \
         ForwardX11 no\n  LogLevel ERROR\n  HashKnownHosts no\n  UpdateHostKeys no\n  ServerAliveCountMax 3\n",
    )?;
    Ok(path)
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

    /// Closes the master connection.
    pub async fn close(self) {
        let _ = self.session.close().await;
    }
}
