//! Test support: a fakepve (PyPI `fakepve`) server on loopback, driven from the tests.
//!
//! [`FakePve::start`] runs `python3 tests/support/fakepve_driver.py DIR`, which makes a
//! certificate for 127.0.0.1 with `fakepve.certs.make_cert`, listens on `127.0.0.1:<free port>`
//! with time scale 0 (tasks finish before the answer; [`FakePve::start_scaled`] for another,
//! [`FakePve::start_on`] for the host's `lxcbr0` address) and takes Python snippets on stdin
//! ([`FakePve::exec`]) to set up scenarios: templates, API tokens, locks, task errors, expired
//! tickets, a flaky network. The process is killed when the value is dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use proxmox_gitops::backend::PveConnect;
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::pve::TlsMode;
use proxmox_gitops::settings::{PveSettings, Settings};
use secrecy::SecretString;

/// The password of `root@pam` on every fakepve the tests start (fakepve's own default is
/// `secret`). The integration tests share one process, and every password a test's settings
/// carry is masked in what that process prints ([`proxmox_gitops::actions::redact`]), so a
/// password that is an English word would mask that word in other tests' messages ("the
/// PASSWORD secret" → "the PASSWORD ***"). This value is in no message.
pub const PASSWORD: &str = "pgotest-fakepve-pw";
use serde_json::Value;

/// The template every test uses (`PROXMOX_TEMPLATE`).
pub const TEMPLATE: &str = "debian-13-standard_13.1-2";
/// Its file on storage `local` for amd64 nodes.
pub const TEMPLATE_FILE: &str = "debian-13-standard_13.1-2_amd64.tar.zst";
/// The next release's template file, which tests switch to (a recreate).
pub const NEXT_TEMPLATE_FILE: &str = "debian-13-standard_13.2-1_amd64.tar.zst";

/// The `sha512sum` [`FakePve::set_template_index`] lists for `file`: 128 hex digits made from
/// the name (not a digest of anything; fakepve does not check it).
pub fn template_sha512(file: &str) -> String {
    let mut out = String::new();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    while out.len() < 128 {
        for b in file.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

struct Io {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// A running fakepve.
pub struct FakePve {
    child: Child,
    io: Mutex<Io>,
    /// The address it listens on: 127.0.0.1, or the one [`FakePve::start_on`] was given.
    pub host: String,
    /// The port it listens on.
    pub port: u16,
    /// Its certificate (PEM), to verify TLS with.
    pub ca: PathBuf,
    dir: tempfile::TempDir,
}

impl FakePve {
    /// Starts a fakepve (root@pam / secret, node pve1, storages local and local-lvm).
    pub fn start() -> FakePve {
        FakePve::start_scaled(0.0)
    }

    /// [`FakePve::start`] with fakepve's `time_scale`: real seconds per PVE second of a task
    /// (0: tasks finish before the answer; > 0: tasks run, and waiting on them really polls).
    pub fn start_scaled(time_scale: f64) -> FakePve {
        FakePve::start_on("127.0.0.1", time_scale)
    }

    /// [`FakePve::start_scaled`] listening on `host`: loopback, or the host's own `lxcbr0`
    /// address so that containers reach it (never any other address). Its certificate names
    /// `host`.
    pub fn start_on(host: &str, time_scale: f64) -> FakePve {
        let dir = tempfile::tempdir().expect("tempdir");
        let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/fakepve_driver.py");
        let mut child = Command::new("python3")
            .arg(&driver)
            .arg(dir.path())
            .arg(time_scale.to_string())
            .arg(host)
            .env("FAKEPVE_PASSWORD", PASSWORD)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (fakepve[crypto] installed?)");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("fakepve announces its port");
        let hello: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("fakepve did not start: {e}: {line:?}"));
        let port = hello["port"].as_u64().expect("port") as u16;
        let ca = PathBuf::from(hello["ca"].as_str().expect("ca"));
        let pve = FakePve { child, io: Mutex::new(Io { stdin, stdout }), host: host.to_string(), port, ca, dir };
        // Every node knows the test templates, as `pveam update` makes a real node know Proxmox's.
        pve.set_template_index(None, &[TEMPLATE_FILE, NEXT_TEMPLATE_FILE]);
        pve
    }

    /// Answers `method` on the schema path `template` (e.g. `/nodes/{node}/status`) with
    /// `value` on `node` (`None`: every node), for paths fakepve answers from the schema's shapes.
    pub fn answer(&self, method: &str, template: &str, node: Option<&str>, value: &Value) {
        // A JSON string literal is a Python string literal too.
        let literal = |v: String| serde_json::to_string(&v).unwrap();
        let key = literal(serde_json::to_string(&(method, template, node)).unwrap());
        let value = literal(serde_json::to_string(value).unwrap());
        self.exec(&format!("import json\npve.test_answers[tuple(json.loads({key}))] = json.loads({value})"));
    }

    /// Makes `GET /nodes/{node}/aplinfo` on `node` (`None`: every node) list `files` as Proxmox's
    /// index lists them: `template`, `http://download.proxmox.com/images/system/FILE` as
    /// `location`, the architecture from the name, and [`template_sha512`] as `sha512sum`.
    pub fn set_template_index(&self, node: Option<&str>, files: &[&str]) {
        let entries: Vec<Value> = files
            .iter()
            .map(|f| {
                let arch = f.rsplit('_').next().and_then(|a| a.split('.').next()).unwrap_or("amd64");
                serde_json::json!({
                    "template": f, "type": "lxc", "section": "system", "architecture": arch,
                    "os": "debian-13", "package": f.split('_').next().unwrap_or(f), "infopage": "https://www.debian.org",
                    "location": format!("http://download.proxmox.com/images/system/{f}"),
                    "sha512sum": template_sha512(f),
                })
            })
            .collect();
        self.answer("GET", "/nodes/{node}/aplinfo", node, &Value::Array(entries));
    }

    /// Makes `GET /nodes/{node}/status` report `machine` as `current-kernel.machine` on `node`
    /// (`aarch64` for an arm64 node).
    pub fn set_machine(&self, node: &str, machine: &str) {
        let status = serde_json::json!({
            "current-kernel": {"machine": machine, "release": "6.14.8-2-pve", "sysname": "Linux", "version": "#1 SMP"},
            "uptime": 3600, "cpu": 0.01, "memory": {"total": 8589934592u64, "used": 1073741824u64, "free": 7516192768u64}
        });
        self.answer("GET", "/nodes/{node}/status", Some(node), &status);
    }

    /// Settings for this server: root@pam / [`PASSWORD`] (ticket login), node discovered, no gateway,
    /// mask 8 on `eth0` at `vmbr0`, the [`TEMPLATE`] on `local:vztmpl`, and `share`.
    pub fn settings(&self, share: &Path) -> Settings {
        Settings {
            pve: PveSettings {
                host: Some(self.host.clone()),
                port: self.port,
                user: Some("root@pam".into()),
                password: Some(SecretString::from(PASSWORD)),
                token: None,
                secret: None,
                node: None,
                gateway: None,
                mask: Some(8),
                interface: "eth0".into(),
                bridge: "vmbr0".into(),
                storage: Some("local:vztmpl".into()),
                template: Some(TEMPLATE.into()),
            },
            gitea: Default::default(),
            share: share.to_path_buf(),
            variables: Default::default(),
            control_plane: Default::default(),
            lxc: Default::default(),
        }
    }

    /// Connection options that trust this server's certificate, with `timeouts` for its tasks,
    /// 20 s per request (read or write), and the learned task durations kept in this server's directory (not in
    /// the user's cache, shared by every test).
    pub fn connect(&self, timeouts: Timeouts) -> PveConnect {
        PveConnect {
            tls: TlsMode::CaFile(self.ca.clone()),
            timeouts,
            request_timeout: Duration::from_secs(20),
            read_timeout: Duration::from_secs(20),
            wait_for_locks: true,
            task_times: Some(self.dir.path().join("pve-task-times.json")),
        }
    }

    /// Runs Python `code` inside the server (as an async function body with `pve` in scope;
    /// set `result` to return a JSON value). Panics when the code raises.
    pub fn exec(&self, code: &str) -> Value {
        let mut io = self.io.lock().unwrap();
        let mut msg = serde_json::to_string(&serde_json::json!({ "code": code })).unwrap();
        msg.push('\n');
        io.stdin.write_all(msg.as_bytes()).unwrap();
        io.stdin.flush().unwrap();
        let mut line = String::new();
        io.stdout.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad answer {line:?}: {e}"));
        if v["ok"] != Value::Bool(true) {
            panic!("fakepve command failed: {}\n{code}", v["error"].as_str().unwrap_or(""));
        }
        v["result"].clone()
    }

    /// Puts the test template on storage `local`.
    pub fn add_template(&self) {
        self.exec(&format!("pve.store_file('local', '{TEMPLATE_FILE}', 1024 * 1024, content='vztmpl')"));
    }

    /// Every request seen as `(METHOD, PATH without /api2/json, body)`, oldest first; forgets
    /// them when `clear`.
    pub fn requests(&self, clear: bool) -> Vec<(String, String, String)> {
        let v = self.exec(&format!(
            "result = [(m, p, b.decode('utf-8', 'replace')) for (m, p, b) in pve.requests]\n{}",
            if clear { "pve.requests.clear()" } else { "" }
        ));
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r[0].as_str().unwrap().to_string(),
                    r[1].as_str().unwrap().trim_start_matches("/api2/json").to_string(),
                    r[2].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The write requests (POST/PUT/DELETE) among [`FakePve::requests`].
    pub fn writes(&self, clear: bool) -> Vec<(String, String, String)> {
        self.requests(clear).into_iter().filter(|(m, _, _)| m != "GET").collect()
    }

    /// The container's config as fakepve holds it (`None` when absent).
    pub fn ct_config(&self, vmid: u32) -> Option<Value> {
        let v = self.exec(&format!("ct = pve.ct({vmid})\nresult = dict(ct.config, status=ct.status) if ct else None"));
        (!v.is_null()).then_some(v)
    }
}

impl Drop for FakePve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The settings that point the binary at `pve` (root@pam ticket, its CA, the test template and
/// storage, gateway 127.0.20.254) with `share` as the share directory, as `(name, value)` pairs
/// for [`run_cli`].
pub fn cli_env(pve: &FakePve, share: &Path) -> Vec<(String, String)> {
    [
        ("PROXMOX_HOST", pve.host.clone()),
        ("PROXMOX_PORT", pve.port.to_string()),
        ("PROXMOX_USER", "root@pam".into()),
        ("PROXMOX_PASSWORD", PASSWORD.into()),
        ("PROXMOX_TEMPLATE", TEMPLATE.into()),
        ("PROXMOX_STORAGE", "local".into()),
        ("PROXMOX_GATEWAY", "127.0.20.254".into()),
        ("PROXMOX_SHARE", share.display().to_string()),
        ("PROXMOX_CA", pve.ca.display().to_string()),
        // The learned task durations (and any other cache) beside this server, not in the
        // user's cache.
        ("XDG_CACHE_HOME", pve.dir.path().join("cache").display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Runs the binary on the monorepo `root` with `args` and `env` added to this process's
/// environment, minus the Actions variables a CI runner may set (so a test sees no job summary,
/// outputs file, ref, run id, artifacts directory or backend it did not ask for).
pub fn run_cli(root: &Path, args: &[&str], env: &[(String, String)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.arg("--repo").arg(root).args(args).env("NO_COLOR", "1");
    for v in [
        "GITHUB_ACTIONS",
        "GITEA_ACTIONS",
        "GITHUB_OUTPUT",
        "GITHUB_STEP_SUMMARY",
        "GITHUB_REF",
        "GITHUB_RUN_ID",
        "PGO_ARTIFACTS",
        "PGO_BACKEND",
        "PGO_ENTRY",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.output().unwrap()
}
