//! The real host in the test suite: a throw-away real Gitea ([`RealGitea`]) and its real Actions
//! runner ([`RealRunner`]) on loopback, built at the versions pinned in `versions.env`.
//!
//! The binaries come from `tests/real_host/build.sh` (called by `./tests/run.sh`, which exports
//! `PGO_GITEA_BINARY`, `PGO_GITEA_STATIC` and `PGO_RUNNER_BINARY`); without them the harness
//! panics and says how to get them. Nothing is downloaded here.
//!
//! * **Gitea** gets its own temporary work directory (`app.ini`, SQLite database, repositories,
//!   logs), listens on `127.0.0.1` on a free port, has Actions enabled with
//!   `DEFAULT_ACTIONS_URL=self` (there is no public actions host here) and `OFFLINE_MODE` (no
//!   avatars or update checks from the internet). Gitea refuses to run as root, so as root it runs
//!   as the system user [`GITEA_USER`] (created by `tests/run.sh`) through `setpriv`. The admin
//!   user [`ADMIN`] is created with a random password and an access token (scope `all`) by
//!   `gitea admin user create --random-password --access-token`: both are read from its output,
//!   so no secret is ever a process argument, and neither is printed.
//! * **The runner** ([`RealRunner`]) gets a registration token through the admin API, registers
//!   with the token on its standard input (its interactive mode: `--token` would put it in the
//!   arguments), writes its `config.yaml` (labels, the job environment, a 1 s fetch interval, no
//!   cache server, work directories under its own directory) and runs `daemon` as the current
//!   user (root in the suite: later jobs create LXC containers).
//! * **Start-up is bounded** ([`START_TIMEOUT`]): Gitea until `GET /api/v1/version` answers,
//!   the runner until it logs that it declared itself. On timeout, or when the process exits
//!   early, the panic message holds the tail of its log.
//! * **Nothing is left running**: each process leads its own process group, and `Drop` sends
//!   SIGTERM to the group, waits (bounded) and then sends SIGKILL.
//! * **Workflows**: [`RealGitea::dispatch_workflow`], [`RealGitea::wait_for_runs`] (bounded
//!   polling of the runs and jobs API until the runs completed) and [`RealGitea::job_log`]
//!   return status, conclusion and the job logs, so a test can print them when it fails.
//!
//! Raw HTTP calls that [`proxmox_gitops::gitea::Client`] does not offer (runs, jobs, logs,
//! dispatch, runner registration tokens) live here: they are test instruments, not product.
//! Every request goes to `127.0.0.1` only.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The unprivileged system user Gitea runs as when the tests run as root (`tests/run.sh`
/// creates it).
pub const GITEA_USER: &str = "pgotest-gitea";
/// The login of the admin user of every [`RealGitea`].
pub const ADMIN: &str = "pgo-admin";
/// How long a start-up (Gitea, the runner's registration, its daemon) may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a process gets after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Lines of a log shown in a panic message.
const LOG_TAIL_LINES: usize = 40;

/// The paths of the real programs, from the environment `tests/run.sh` sets.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `PGO_GITEA_BINARY`: the Gitea server.
    pub gitea: PathBuf,
    /// `PGO_GITEA_STATIC`: Gitea's `STATIC_ROOT_PATH` (its `templates/` and `options/`).
    pub gitea_static: PathBuf,
    /// `PGO_RUNNER_BINARY`: Gitea's Actions runner.
    pub runner: PathBuf,
}

impl Binaries {
    /// Reads the three variables; panics, naming the build script, when one is unset or does
    /// not point to an existing file or directory.
    pub fn from_env() -> Binaries {
        let var = |name: &str| -> PathBuf {
            let value = std::env::var_os(name).unwrap_or_else(|| {
                panic!(
                    "{name} is not set: the real-host tests need the real Gitea and its runner. Run \
                     `./tests/run.sh` (it builds them once and sets PGO_GITEA_BINARY, PGO_GITEA_STATIC and \
                     PGO_RUNNER_BINARY), or run `tests/real_host/build.sh` and export the lines it prints"
                )
            });
            let path = PathBuf::from(value);
            assert!(
                path.exists(),
                "{name}={} does not exist: run `tests/real_host/build.sh` (or `./tests/run.sh`) again",
                path.display()
            );
            path
        };
        Binaries {
            gitea: var("PGO_GITEA_BINARY"),
            gitea_static: var("PGO_GITEA_STATIC"),
            runner: var("PGO_RUNNER_BINARY"),
        }
    }
}

/// A running process leading its own process group; the group is stopped on drop.
struct Group {
    child: Child,
    log: PathBuf,
    what: &'static str,
}

impl Group {
    /// Spawns `cmd` as the leader of a new process group, stdout and stderr appended to `log`.
    fn spawn(mut cmd: Command, log: &Path, what: &'static str) -> Group {
        use std::os::unix::process::CommandExt;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what} ({:?}): {e}", cmd.get_program()));
        Group { child, log: log.to_path_buf(), what }
    }

    /// Panics with the log's tail when the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited early ({status}); the end of {}:\n{}", self.what, self.log.display(), tail(&self.log));
        }
    }

    /// SIGTERM to the group, a bounded wait, then SIGKILL to the group.
    fn stop(&mut self) {
        let pgid = self.child.id().to_string();
        if self.child.try_wait().ok().flatten().is_none() {
            signal_group("TERM", &pgid);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Children of the leader (a job's shell, a git process) may outlive it: KILL the group
        // whatever the leader did (no such group any more is fine).
        signal_group("KILL", &pgid);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `kill -<sig> -- -<pgid>`: the signal to every process of the group.
fn signal_group(sig: &str, pgid: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last [`LOG_TAIL_LINES`] lines of `log` (or why there are none).
fn tail(log: &Path) -> String {
    match std::fs::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(no log: {e})"),
    }
}

/// Runs `cmd` to its end within `timeout` (stdin from `input`), killing it when it takes longer;
/// returns its stdout. Panics with `what`, the exit status and stderr when it fails. Stdout is
/// never shown: it may hold secrets.
fn run_bounded(cmd: Command, input: Option<&str>, timeout: Duration, what: &str) -> String {
    let (status, out, err) = run_to_end(cmd, input, timeout);
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{what} failed ({s}):\n{err}"),
        None => panic!("{what} did not finish within {timeout:?}; its stderr:\n{err}"),
    }
}

/// Runs `cmd` in a process group of its own to its end within `timeout` (stdin from `input`,
/// else none), killing the group when it takes longer: (its exit status, `None` when killed;
/// stdout; stderr). Both pipes are read on threads, so a full pipe never blocks it.
pub fn run_to_end(
    mut cmd: Command,
    input: Option<&str>,
    timeout: Duration,
) -> (Option<std::process::ExitStatus>, String, String) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    if let Some(text) = input {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            signal_group("KILL", &child.id().to_string());
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

/// A free TCP port on 127.0.0.1 (bound and released: a tiny window in which another process
/// could take it; Gitea then fails to start and says so).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn is_root() -> bool {
    // `id -u` rather than libc, which is no dependency of the crate.
    Command::new("id").arg("-u").output().map(|o| o.stdout.trim_ascii() == b"0").unwrap_or(false)
}

/// The user name of the current process.
fn current_user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A blocking HTTP helper on its own small runtime: the harness is used from plain `#[test]`s.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// One workflow run as the runs API reports it, with its jobs.
#[derive(Debug, Clone)]
pub struct Run {
    /// `id`.
    pub id: i64,
    /// `event`: `push`, `workflow_dispatch`, …
    pub event: String,
    /// `path`: the workflow file with its trigger, e.g. `probe.yml@refs/heads/main`.
    pub path: String,
    /// `head_sha`.
    pub head_sha: String,
    /// `status`: `queued`, `in_progress`, `completed`, …
    pub status: String,
    /// `conclusion`: `success`, `failure`, `cancelled`, … (empty until completed).
    pub conclusion: String,
    /// The run's jobs with their logs (filled by [`RealGitea::wait_for_runs`]).
    pub jobs: Vec<Job>,
}

/// One job of a run.
#[derive(Debug, Clone)]
pub struct Job {
    /// `id`.
    pub id: i64,
    /// `name`.
    pub name: String,
    /// `status`.
    pub status: String,
    /// `conclusion`.
    pub conclusion: String,
    /// `runner_name`: who ran it.
    pub runner_name: String,
    /// `steps`: the job's steps as Gitea recorded them (its own `Set up job` and `Complete job`
    /// around the workflow's).
    pub steps: Vec<JobStep>,
    /// The job's log (`GET …/actions/jobs/{id}/logs`).
    pub log: String,
}

/// One step of a job (`ActionWorkflowStep`).
#[derive(Debug, Clone)]
pub struct JobStep {
    /// `name`: the workflow step's `name:`.
    pub name: String,
    /// `status`: `waiting`, `in_progress`, `completed`, …
    pub status: String,
    /// `conclusion`: `success`, `failure`, `skipped`, … (empty until completed).
    pub conclusion: String,
    /// `started_at`, `completed_at` (RFC 3339; Gitea keeps whole seconds).
    pub started_at: String,
    /// See `started_at`.
    pub completed_at: String,
}

impl Job {
    /// The first step whose name starts with `prefix`.
    pub fn step(&self, prefix: &str) -> Option<&JobStep> {
        self.steps.iter().find(|s| s.name.starts_with(prefix))
    }
}

impl std::fmt::Display for Run {
    /// The run, its jobs and their logs: what a failing test prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "run {} ({}, {}, {}): {} {}",
            self.id, self.event, self.path, self.head_sha, self.status, self.conclusion
        )?;
        for j in &self.jobs {
            writeln!(f, "  job {} {:?} on {:?}: {} {}", j.id, j.name, j.runner_name, j.status, j.conclusion)?;
            for st in &j.steps {
                writeln!(f, "    step {:?}: {} ({} .. {})", st.name, st.conclusion, st.started_at, st.completed_at)?;
            }
            for line in j.log.lines() {
                writeln!(f, "    | {line}")?;
            }
        }
        Ok(())
    }
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A running throw-away Gitea on loopback; stopped (its process group) and removed on drop.
pub struct RealGitea {
    server: Group,
    port: u16,
    password: String,
    token: String,
    bins: Binaries,
    /// Its work directory (config, database, repositories, `gitea.log`): removed on drop.
    pub dir: tempfile::TempDir,
}

impl RealGitea {
    /// Starts a Gitea with an admin user and its token; panics (with the log's tail) when it is
    /// not up within [`START_TIMEOUT`].
    pub fn start() -> RealGitea {
        let bins = Binaries::from_env();
        let dir = tempfile::Builder::new().prefix("pgo-real-gitea-").tempdir().unwrap();
        let port = free_port();
        let run_user = if is_root() { GITEA_USER.to_string() } else { current_user() };
        let config = dir.path().join("app.ini");
        std::fs::write(&config, app_ini(dir.path(), port, &bins.gitea_static, &run_user)).unwrap();
        if is_root() {
            let out = Command::new("chown")
                .arg("-R")
                .arg(format!("{GITEA_USER}:{GITEA_USER}"))
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cannot give {} to the user {GITEA_USER} (Gitea refuses to run as root; ./tests/run.sh creates the \
                 user): {}",
                dir.path().display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let gitea = |args: &[&str]| -> Command {
            let mut cmd = if is_root() {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", GITEA_USER, "--regid", GITEA_USER, "--init-groups", "--"]).arg(&bins.gitea);
                c
            } else {
                Command::new(&bins.gitea)
            };
            cmd.args(args)
                .arg("--config")
                .arg(&config)
                .arg("--work-path")
                .arg(dir.path())
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
                .env("HOME", dir.path())
                .env("USER", &run_user);
            cmd
        };
        run_bounded(gitea(&["migrate"]), None, START_TIMEOUT, "gitea migrate");
        // A throw-away password and token, read from the output (never arguments, never shown).
        let out = run_bounded(
            gitea(&[
                "admin",
                "user",
                "create",
                "--username",
                ADMIN,
                "--email",
                "pgo-admin@example.invalid",
                "--admin",
                "--must-change-password=false",
                "--random-password",
                "--random-password-length",
                "24",
                "--access-token",
                "--access-token-name",
                "harness",
                "--access-token-scopes",
                "all",
            ]),
            None,
            START_TIMEOUT,
            "gitea admin user create",
        );
        let password = out
            .lines()
            .find_map(|l| l.strip_prefix("generated random password is '")?.strip_suffix('\''))
            .expect("gitea admin user create printed no generated password")
            .to_string();
        let token = out
            .lines()
            .find_map(|l| l.strip_prefix("Access token was successfully created... "))
            .expect("gitea admin user create printed no access token")
            .trim()
            .to_string();
        let log = dir.path().join("gitea.log");
        let server = Group::spawn(gitea(&["web"]), &log, "gitea web");
        let mut g = RealGitea { server, port, password, token, bins, dir };
        g.wait_until_up();
        g
    }

    /// Polls `GET /api/v1/version` (bounded by [`START_TIMEOUT`]) until Gitea answers 200.
    fn wait_until_up(&mut self) {
        let rt = runtime();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
        let url = format!("{}/api/v1/version", self.url());
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last;
        loop {
            self.server.assert_running();
            match rt.block_on(async { http.get(&url).send().await }) {
                Ok(r) if r.status().is_success() => return,
                Ok(r) => last = format!("HTTP {}", r.status()),
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                panic!(
                    "Gitea did not answer {url} within {START_TIMEOUT:?} (last: {last}); the end of {}:\n{}",
                    self.server.log.display(),
                    tail(&self.server.log)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The admin's login ([`ADMIN`]).
    pub fn login(&self) -> &str {
        ADMIN
    }

    /// The admin's password (a random throw-away value).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The admin's access token (scope `all`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The binaries in use.
    pub fn binaries(&self) -> &Binaries {
        &self.bins
    }

    /// The end of Gitea's log (its stdout and stderr, and its `log/` files' last lines).
    pub fn log_tail(&self) -> String {
        let mut out = tail(&self.server.log);
        let gitea_log = self.dir.path().join("log/gitea.log");
        if gitea_log.exists() {
            out.push_str("\n--- log/gitea.log ---\n");
            out.push_str(&tail(&gitea_log));
        }
        out
    }

    /// Our client, authenticated with the admin's token, with short retry delays.
    pub fn client(&self) -> proxmox_gitops::gitea::Client {
        self.client_with(proxmox_gitops::gitea::Auth::Token(secrecy::SecretString::from(self.token.clone())))
    }

    /// Our client with `auth`, with short retry delays.
    pub fn client_with(&self, auth: proxmox_gitops::gitea::Auth) -> proxmox_gitops::gitea::Client {
        proxmox_gitops::gitea::Client::new(&self.url(), Some(auth))
            .unwrap()
            .with_backoff(Duration::from_millis(50), Duration::from_millis(200))
    }

    /// `<url>/<owner>/<repo>.git`.
    pub fn clone_url(&self, owner: &str, repo: &str) -> String {
        format!("{}/{owner}/{repo}.git", self.url())
    }

    /// Runs `git args…` in `dir` (the isolated git of [`super::git`]) authenticated as the admin
    /// with its token, sent as an `Authorization` header set through the environment
    /// (`GIT_CONFIG_*`, never the arguments); returns stdout, trimmed. Panics with git's stderr.
    pub fn git_authed(&self, dir: &Path, args: &[&str]) -> String {
        self.git_as(dir, ADMIN, &self.token, args)
    }

    /// As [`RealGitea::git_authed`], authenticated as `login` with `secret` (a password or a
    /// token) in HTTP basic auth.
    pub fn git_as(&self, dir: &Path, login: &str, secret: &str, args: &[&str]) -> String {
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{login}:{secret}"));
        let mut cmd = super::git::command(dir);
        let n: usize = cmd
            .get_envs()
            .find(|(k, _)| *k == "GIT_CONFIG_COUNT")
            .and_then(|(_, v)| v?.to_str()?.parse().ok())
            .unwrap_or(0);
        cmd.env("GIT_CONFIG_COUNT", (n + 1).to_string())
            .env(format!("GIT_CONFIG_KEY_{n}"), "http.extraHeader")
            .env(format!("GIT_CONFIG_VALUE_{n}"), format!("Authorization: Basic {basic}"))
            .env("GIT_TERMINAL_PROMPT", "0");
        cmd.args(args);
        let out = run_bounded(cmd, None, START_TIMEOUT, &format!("git {args:?}"));
        out.trim().to_string()
    }

    /// Waits (bounded, 60 s) until Gitea's branch table shows `branch` of `owner/repo` at `sha`
    /// (`GET /repos/{owner}/{repo}/branches/{branch}`): Gitea records a push in the background,
    /// and until then e.g. creating a pull request from the branch answers 404.
    pub fn wait_branch(&self, owner: &str, repo: &str, branch: &str, sha: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) =
                self.api(reqwest::Method::GET, &format!("/repos/{owner}/{repo}/branches/{branch}"), None);
            let seen = serde_json::from_slice::<Value>(&body).map(|v| s(&v["commit"]["id"])).unwrap_or_default();
            if status == 200 && seen == sha {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{owner}/{repo}: branch {branch} not at {sha} within 60 s (HTTP {status}, at {seen:?}); the end of \
                 Gitea's log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded, 60 s) until Gitea has processed the pushes into `owner/repo`: the
    /// repository no longer counts as empty and `branch` is recorded. Gitea 1.27.3 does both in
    /// the background after a push; a workflow dispatch into a repository it still counts as empty
    /// panics in its handler (HTTP 500, a nil git repository in services/actions/workflow.go).
    pub fn wait_repo_ready(&self, owner: &str, repo: &str, branch: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (repo_status, body) = self.api(reqwest::Method::GET, &format!("/repos/{owner}/{repo}"), None);
            let empty = serde_json::from_slice::<Value>(&body).map(|v| v["empty"].as_bool()).ok().flatten();
            let (branch_status, _) =
                self.api(reqwest::Method::GET, &format!("/repos/{owner}/{repo}/branches/{branch}"), None);
            if repo_status == 200 && empty == Some(false) && branch_status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{owner}/{repo}: not ready within 60 s (repository HTTP {repo_status}, empty {empty:?}; branch                  {branch} HTTP {branch_status}); the end of Gitea's log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One raw API call with the admin's token: `(status, body)`. `path` is below `/api/v1`.
    pub fn api(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
        let rt = runtime();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let mut req = http
            .request(method.clone(), format!("{}/api/v1{path}", self.url()))
            .header("Authorization", format!("token {}", self.token))
            .header("Accept", "application/json");
        if let Some(b) = body {
            req = req.header("Content-Type", "application/json").body(serde_json::to_vec(b).unwrap());
        }
        rt.block_on(async move {
            let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {}", e.without_url()));
            let status = resp.status().as_u16();
            (status, resp.bytes().await.unwrap().to_vec())
        })
    }

    /// A raw API call that must answer `want`; its body as JSON (`Null` when empty).
    pub fn api_json(&self, method: reqwest::Method, path: &str, body: Option<&Value>, want: u16) -> Value {
        let (status, bytes) = self.api(method.clone(), path, body);
        assert_eq!(status, want, "{method} {path}: {}", String::from_utf8_lossy(&bytes));
        if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() }
    }

    /// `POST /admin/actions/runners/registration-token` (`adminCreateRunnerRegistrationToken`):
    /// a token that registers an instance-wide runner.
    pub fn runner_registration_token(&self) -> String {
        let v = self.api_json(reqwest::Method::POST, "/admin/actions/runners/registration-token", None, 200);
        s(&v["token"])
    }

    /// `POST /repos/{owner}/{repo}/actions/workflows/{file}/dispatches` (`ActionsDispatchWorkflow`,
    /// 204) on `git_ref` (a branch) with `inputs`, once the repository is ready for it
    /// ([`RealGitea::wait_repo_ready`]).
    pub fn dispatch_workflow(&self, owner: &str, repo: &str, file: &str, git_ref: &str, inputs: &Value) {
        self.wait_repo_ready(owner, repo, git_ref);
        let body = serde_json::json!({"ref": git_ref, "inputs": inputs});
        self.api_json(
            reqwest::Method::POST,
            &format!("/repos/{owner}/{repo}/actions/workflows/{file}/dispatches"),
            Some(&body),
            204,
        );
    }

    /// `GET /repos/{owner}/{repo}/actions/runs` (`getWorkflowRuns`): the runs, newest first, without
    /// their jobs.
    pub fn runs(&self, owner: &str, repo: &str) -> Vec<Run> {
        let v = self.api_json(reqwest::Method::GET, &format!("/repos/{owner}/{repo}/actions/runs?limit=50"), None, 200);
        v["workflow_runs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| Run {
                        id: r["id"].as_i64().unwrap_or_default(),
                        event: s(&r["event"]),
                        path: s(&r["path"]),
                        head_sha: s(&r["head_sha"]),
                        status: s(&r["status"]),
                        conclusion: s(&r["conclusion"]),
                        jobs: Vec::new(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `GET /repos/{owner}/{repo}/actions/runs/{run}/jobs` (`listWorkflowRunJobs`), without logs.
    pub fn jobs(&self, owner: &str, repo: &str, run: i64) -> Vec<Job> {
        let v =
            self.api_json(reqwest::Method::GET, &format!("/repos/{owner}/{repo}/actions/runs/{run}/jobs"), None, 200);
        v["jobs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|j| Job {
                        id: j["id"].as_i64().unwrap_or_default(),
                        name: s(&j["name"]),
                        status: s(&j["status"]),
                        conclusion: s(&j["conclusion"]),
                        runner_name: s(&j["runner_name"]),
                        steps: j["steps"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|st| JobStep {
                                        name: s(&st["name"]),
                                        status: s(&st["status"]),
                                        conclusion: s(&st["conclusion"]),
                                        started_at: s(&st["started_at"]),
                                        completed_at: s(&st["completed_at"]),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        log: String::new(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs` (`downloadActionsRunJobLogs`): the
    /// job's log, or why there is none.
    pub fn job_log(&self, owner: &str, repo: &str, job_id: i64) -> String {
        let (status, bytes) =
            self.api(reqwest::Method::GET, &format!("/repos/{owner}/{repo}/actions/jobs/{job_id}/logs"), None);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status == 200 { text } else { format!("(no log: HTTP {status}: {text})") }
    }

    /// Waits (polling every 500 ms, at most `timeout`) until `owner/repo` has at least `count`
    /// runs and all of them completed; returns them, newest first, with their jobs and logs.
    /// Panics on timeout with the runs as they were, their jobs, and Gitea's log tail.
    pub fn wait_for_runs(&self, owner: &str, repo: &str, count: usize, timeout: Duration) -> Vec<Run> {
        let deadline = Instant::now() + timeout;
        loop {
            let runs = self.runs(owner, repo);
            let done = runs.len() >= count && runs.iter().all(|r| r.status == "completed");
            if done || Instant::now() > deadline {
                let runs: Vec<Run> = runs
                    .into_iter()
                    .map(|mut r| {
                        r.jobs = self.jobs(owner, repo, r.id);
                        for j in &mut r.jobs {
                            j.log = self.job_log(owner, repo, j.id);
                        }
                        r
                    })
                    .collect();
                if done {
                    return runs;
                }
                let shown: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
                panic!(
                    "{owner}/{repo}: not {count} completed workflow run(s) within {timeout:?}; the runs:\n{}\nthe end of \
                     Gitea's log:\n{}",
                    shown.join(""),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Gitea's configuration for one throw-away instance in `dir` on `127.0.0.1:port`. A task whose
/// runner stopped reporting (killed) is failed after 30 s, checked every 5 s (Gitea's defaults:
/// 10 minutes, every 5 minutes); a live runner reports its task's state every second here.
fn app_ini(dir: &Path, port: u16, static_root: &Path, run_user: &str) -> String {
    let d = dir.display();
    format!(
        "APP_NAME = pgo-test\n\
         RUN_USER = {run_user}\n\
         RUN_MODE = prod\n\
         WORK_PATH = {d}\n\
         \n\
         [server]\n\
         PROTOCOL = http\n\
         HTTP_ADDR = 127.0.0.1\n\
         HTTP_PORT = {port}\n\
         DOMAIN = 127.0.0.1\n\
         ROOT_URL = http://127.0.0.1:{port}/\n\
         STATIC_ROOT_PATH = {static_root}\n\
         APP_DATA_PATH = {d}/data\n\
         DISABLE_SSH = true\n\
         START_SSH_SERVER = false\n\
         LFS_START_SERVER = false\n\
         OFFLINE_MODE = true\n\
         \n\
         [database]\n\
         DB_TYPE = sqlite3\n\
         PATH = {d}/data/gitea.db\n\
         SQLITE_TIMEOUT = 30000\n\
         \n\
         [repository]\n\
         ROOT = {d}/repos\n\
         DEFAULT_BRANCH = main\n\
         ENABLE_PUSH_CREATE_USER = true\n\
         ENABLE_PUSH_CREATE_ORG = true\n\
         \n\
         [security]\n\
         INSTALL_LOCK = true\n\
         \n\
         [service]\n\
         DISABLE_REGISTRATION = true\n\
         REQUIRE_SIGNIN_VIEW = false\n\
         \n\
         [mailer]\n\
         ENABLED = false\n\
         \n\
         [session]\n\
         PROVIDER = memory\n\
         \n\
         [cache]\n\
         ADAPTER = memory\n\
         \n\
         [picture]\n\
         DISABLE_GRAVATAR = true\n\
         \n\
         [cron.update_checker]\n\
         ENABLED = false\n\
         \n\
         [actions]\n\
         ENABLED = true\n\
         DEFAULT_ACTIONS_URL = self\n\
         ZOMBIE_TASK_TIMEOUT = 30s\n\
         \n\
         [cron.stop_zombie_tasks]\n\
         SCHEDULE = @every 5s\n\
         \n\
         [log]\n\
         MODE = file\n\
         LEVEL = info\n\
         ROOT_PATH = {d}/log\n",
        static_root = static_root.display()
    )
}

/// Options of a [`RealRunner`].
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// The runner's name in Gitea.
    pub name: String,
    /// Its labels (`runner.labels`), e.g. `shell:host`.
    pub labels: Vec<String>,
    /// The environment of its jobs (`runner.envs`).
    pub envs: Vec<(String, String)>,
    /// Jobs at once (`runner.capacity`).
    pub capacity: u32,
}

impl Default for RunnerOptions {
    /// One job at a time, label `shell:host`, no extra environment.
    fn default() -> Self {
        RunnerOptions {
            name: "pgo-test-runner".into(),
            labels: vec!["shell:host".into()],
            envs: Vec::new(),
            capacity: 1,
        }
    }
}

/// A registered, running Gitea Actions runner (host mode) for a [`RealGitea`]; its process group
/// is stopped and its directory removed on drop.
pub struct RealRunner {
    daemon: Group,
    /// Its directory (`config.yaml`, `.runner`, `home/`, job work directories, `runner.log`).
    pub dir: tempfile::TempDir,
    /// Its name in Gitea.
    pub name: String,
}

impl RealRunner {
    /// Registers a runner with `opts` on `gitea` and starts its daemon; returns once it declared
    /// itself to Gitea. Panics (with its log's tail) when that takes longer than
    /// [`START_TIMEOUT`].
    pub fn start(gitea: &RealGitea, opts: &RunnerOptions) -> RealRunner {
        let dir = tempfile::Builder::new().prefix("pgo-real-runner-").tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, runner_config(dir.path(), opts)).unwrap();
        let runner = |args: &[&str]| -> Command {
            let mut cmd = Command::new(&gitea.bins.runner);
            cmd.arg("--config")
                .arg(&config)
                .args(args)
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
                .env("HOME", &home);
            cmd
        };
        // Interactive registration with everything but the token given: the token is the one
        // answer read from stdin (as `--token` it would be a process argument).
        let token = gitea.runner_registration_token();
        run_bounded(
            runner(&["register", "--instance", &gitea.url(), "--name", &opts.name]),
            Some(&format!("{token}\n")),
            START_TIMEOUT,
            "gitea-runner register",
        );
        let log = dir.path().join("runner.log");
        let mut daemon = Group::spawn(runner(&["daemon"]), &log, "gitea-runner daemon");
        let deadline = Instant::now() + START_TIMEOUT;
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("declare successfully") {
            daemon.assert_running();
            if Instant::now() > deadline {
                panic!(
                    "the runner did not declare itself within {START_TIMEOUT:?}; the end of {}:\n{}",
                    log.display(),
                    tail(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        RealRunner { daemon, dir, name: opts.name.clone() }
    }

    /// The end of the runner's log.
    pub fn log_tail(&self) -> String {
        tail(&self.daemon.log)
    }

    /// Kills the runner's whole process group at once (SIGKILL: the daemon, the job's shell and
    /// whatever the job runs), as a crash or a power cut would; returns once the daemon is gone.
    pub fn kill(&mut self) {
        signal_group("KILL", &self.daemon.child.id().to_string());
        let _ = self.daemon.child.wait();
    }
}

/// The runner's `config.yaml`: labels and job environment from `opts`, quick polling for tests,
/// no cache server, everything under `dir`.
fn runner_config(dir: &Path, opts: &RunnerOptions) -> String {
    // JSON strings are YAML strings: safe quoting for any value.
    let q = |v: &str| serde_json::to_string(v).unwrap();
    let labels: Vec<String> = opts.labels.iter().map(|l| format!("    - {}\n", q(l))).collect();
    let envs: Vec<String> = opts.envs.iter().map(|(k, v)| format!("    {}: {}\n", q(k), q(v))).collect();
    let envs = if envs.is_empty() { "  envs: {}\n".to_string() } else { format!("  envs:\n{}", envs.concat()) };
    format!(
        "log:\n  level: info\n\
         runner:\n  file: {file}\n  capacity: {capacity}\n{envs}  timeout: 30m\n  shutdown_timeout: 0s\n  \
         fetch_timeout: 5s\n  fetch_interval: 1s\n  fetch_interval_max: 1s\n  log_report_interval: 1s\n  \
         log_report_max_latency: 500ms\n  state_report_interval: 1s\n  labels:\n{labels}\
         cache:\n  enabled: false\n\
         host:\n  workdir_parent: {work}\n",
        file = q(&dir.join(".runner").display().to_string()),
        capacity = opts.capacity,
        labels = labels.concat(),
        work = q(&dir.join("work").display().to_string()),
    )
}
