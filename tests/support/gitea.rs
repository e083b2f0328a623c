//! Test support for the Gitea area: the stateful Gitea double (tests/gitea_double/server.py) on
//! 127.0.0.1 with an ephemeral port, fixture monorepos with nested submodules, and running the
//! binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The Gitea API spec the double and the client are checked against.
/// (A copy of Gitea's official spec, see tests/gitea_double/README.md.)
pub fn spec_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gitea_double/swagger.v1.json")
}

fn double_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gitea_double")
}

/// Credentials the double accepts.
#[derive(Clone, Debug)]
pub struct Creds {
    pub login: String,
    pub password: Option<String>,
    pub token: Option<String>,
}

impl Creds {
    pub fn basic(login: &str, password: &str) -> Creds {
        Creds { login: login.into(), password: Some(password.into()), token: None }
    }
}

/// A running double; killed (by its pid) on drop.
pub struct Double {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub creds: Creds,
}

impl Double {
    /// Starts the double with `creds` and its default background delay (0.3 s: a pushed branch
    /// is known to `createPullRequest`, and a pull request checked, that long after a change, as
    /// in Gitea); its state lives in a temp dir.
    pub fn start(creds: Creds) -> Double {
        Double::start_with_delay(creds, std::time::Duration::from_millis(300))
    }

    /// Starts the double with `creds` and Gitea's background work taking `delay`.
    pub fn start_with_delay(creds: Creds, delay: std::time::Duration) -> Double {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg(double_dir().join("server.py"))
            .arg("--root")
            .arg(dir.path().join("repos"))
            .arg("--log")
            .arg(dir.path().join("exchanges.jsonl"))
            .arg("--faults")
            .arg(dir.path().join("faults.json"))
            .arg("--background-delay")
            .arg(delay.as_secs_f64().to_string())
            .env("GITEA_DOUBLE_LOGIN", &creds.login)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(p) = &creds.password {
            cmd.env("GITEA_DOUBLE_PASSWORD", p);
        }
        if let Some(t) = &creds.token {
            cmd.env("GITEA_DOUBLE_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("python3 must be installed");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("PORT ").unwrap_or_else(|| panic!("double said {line:?}")).parse().unwrap();
        Double { child, port, dir, creds }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Injects faults: `[(method, path, status, times)]`, path with `/api/v1`.
    pub fn faults(&self, faults: &[(&str, &str, u16, u32)]) {
        let v: Vec<serde_json::Value> = faults
            .iter()
            .map(|(m, p, s, t)| serde_json::json!({"method": m, "path": p, "status": s, "times": t}))
            .collect();
        let tmp = self.dir.path().join("faults.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&v).unwrap()).unwrap();
        std::fs::rename(tmp, self.dir.path().join("faults.json")).unwrap();
    }

    /// Every logged exchange.
    pub fn exchanges(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("exchanges.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// API exchanges as `METHOD path status`.
    pub fn api_calls(&self) -> Vec<String> {
        self.exchanges()
            .iter()
            .filter(|e| e["kind"] == "api")
            .map(|e| format!("{} {} {}", e["method"].as_str().unwrap(), e["path"].as_str().unwrap(), e["status"]))
            .collect()
    }

    /// Every change of branches the double saw, oldest first: `(repo, via, ref, before, after)`
    /// with `repo` = `owner/name`, `via` = `git` (a push) or `merge` (a merged pull request),
    /// `before`/`after` empty when the branch was created/deleted.
    pub fn pushes(&self) -> Vec<(String, String, String, String, String)> {
        let mut out = Vec::new();
        for e in self.exchanges().iter().filter(|e| e["kind"] == "push") {
            for u in e["updates"].as_array().unwrap() {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
                out.push((s(&e["repo"]), s(&e["via"]), s(&u["ref"]), s(&u["before"]), s(&u["after"])));
            }
        }
        out
    }

    /// A client of the crate for the double, with its credentials (basic auth, or the token) and
    /// short retry delays.
    pub fn client(&self) -> proxmox_gitops::gitea::Client {
        use proxmox_gitops::gitea::{Auth, Client};
        use secrecy::SecretString;
        let auth = match (&self.creds.token, &self.creds.password) {
            (Some(t), _) => Auth::Token(SecretString::from(t.clone())),
            (None, Some(p)) => Auth::Basic { login: self.creds.login.clone(), password: SecretString::from(p.clone()) },
            (None, None) => panic!("the double needs credentials"),
        };
        Client::new(&self.url(), Some(auth))
            .unwrap()
            .with_backoff(std::time::Duration::from_millis(5), std::time::Duration::from_millis(20))
    }

    /// Runs `git args…` in `dir` with the double's credentials in an `Authorization` header
    /// passed through the environment (never the arguments): pushes to `<url>/<owner>/<repo>.git`.
    pub fn git_authed(&self, dir: &Path, args: &[&str]) -> String {
        use base64::Engine;
        let secret = self.creds.password.clone().or_else(|| self.creds.token.clone()).unwrap();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{secret}", self.creds.login));
        let mut cmd = super::git::command(dir);
        // One more entry after the isolated environment's GIT_CONFIG_KEY_n.
        let n: usize = cmd
            .get_envs()
            .find(|(k, _)| *k == "GIT_CONFIG_COUNT")
            .and_then(|(_, v)| v?.to_str()?.parse().ok())
            .unwrap_or(0);
        cmd.env("GIT_CONFIG_COUNT", (n + 1).to_string())
            .env(format!("GIT_CONFIG_KEY_{n}"), "http.extraHeader")
            .env(format!("GIT_CONFIG_VALUE_{n}"), format!("Authorization: Basic {basic}"));
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs check_spec.py over the exchange log; panics with its findings.
    pub fn assert_spec_conformant(&self) {
        let out = Command::new("python3")
            .arg(double_dir().join("check_spec.py"))
            .arg(spec_path())
            .arg("log")
            .arg(self.dir.path().join("exchanges.jsonl"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "exchanges violate the Gitea spec:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The Actions secrets the double holds, values included (its `secrets.json`):
    /// `{"org/main": {"PASSWORD": {"data", "description", "created_at"}}}`; `{}` before the first.
    pub fn secrets(&self) -> serde_json::Value {
        match std::fs::read_to_string(self.dir.path().join("repos/secrets.json")) {
            Ok(t) => serde_json::from_str(&t).unwrap(),
            Err(_) => serde_json::json!({}),
        }
    }

    /// The bare repository of `owner/name` on the double.
    pub fn bare(&self, owner: &str, name: &str) -> PathBuf {
        self.dir.path().join("repos").join(owner.to_lowercase()).join(format!("{}.git", name.to_lowercase()))
    }

    /// `refs/heads/<branch>` of `owner/name` on the double.
    pub fn branch(&self, owner: &str, name: &str, branch: &str) -> Option<String> {
        let out = super::git::git_output(
            &self.bare(owner, name),
            &["rev-parse", "--verify", "-q", &format!("refs/heads/{branch}")],
        );
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use super::git::git;

/// An upstream repository `name` under `root/upstream` with one file.
pub fn upstream(root: &Path, name: &str) -> PathBuf {
    let dir = root.join("upstream").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q"]);
    std::fs::write(dir.join("README"), format!("{name}\n")).unwrap();
    git(&dir, &["add", "README"]);
    git(&dir, &["commit", "-q", "-m", &format!("{name}: first")]);
    dir
}

/// Adds `src` as submodule at `path` of `repo` (cloned from the local path), then sets its URL
/// in `.gitmodules` to `url` — a URL that is never contacted — and commits.
pub fn add_submodule(repo: &Path, src: &Path, path: &str, url: &str) {
    git(repo, &["submodule", "add", "-q", src.to_str().unwrap(), path]);
    git(repo, &["config", "-f", ".gitmodules", &format!("submodule.{path}.url"), url]);
    git(repo, &["add", ".gitmodules"]);
    git(repo, &["commit", "-q", "-m", &format!("add {path}")]);
}

/// The fixture monorepo: every URL form, nested submodules and a plain-directory lib.
///
/// ```text
/// mono/
///   libs/a       http://192.0.2.10/org/a.git
///   libs/b       https://git.example.invalid:8443/org/b/        (no .git, trailing slash)
///   libs/c       ssh://git@git.example.invalid:2222/org/c.git
///   libs/d       git@git.example.invalid:org/d.git               (scp-like)
///   libs/e       ../e.git                                         (relative)
///     vendor/f   ../../f.git//                                    (nested, relative, slashes)
///       deep/g   http://git.example.invalid:3000/x/g              (nested twice)
///   libs/plain/  a plain directory → becomes a submodule
///   base         https://git.example.invalid/org/base.git         (not a lib: no fork)
/// ```
pub struct Fixture {
    pub root: tempfile::TempDir,
    pub mono: PathBuf,
}

pub const FIXTURE_URLS: &[(&str, &str)] = &[
    ("libs/a", "http://192.0.2.10/org/a.git"),
    ("libs/b", "https://git.example.invalid:8443/org/b/"),
    ("libs/c", "ssh://git@git.example.invalid:2222/org/c.git"),
    ("libs/d", "git@git.example.invalid:org/d.git"),
    ("libs/e", "../e.git"),
    ("base", "https://git.example.invalid/org/base.git"),
];

pub fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // Nested chain g ⊂ f ⊂ e, built bottom-up; each checkout comes from a local path.
    let g = upstream(r, "g");
    let f = upstream(r, "f");
    add_submodule(&f, &g, "deep/g", "http://git.example.invalid:3000/x/g");
    let e = upstream(r, "e");
    add_submodule(&e, &f, "vendor/f", "../../f.git//");

    let mono = r.join("mono");
    std::fs::create_dir_all(mono.join("libs/plain")).unwrap();
    git(&mono, &["init", "-q"]);
    std::fs::write(mono.join("libs/plain/container.env"), "ID=150\nIP=dhcp\n").unwrap();
    // The shared helpers and a task as plain directories: repositories of their own too.
    std::fs::create_dir_all(mono.join("config/libraries")).unwrap();
    std::fs::write(mono.join("config/libraries/common.sh"), "log() { echo \"$*\"; }\n").unwrap();
    std::fs::create_dir_all(mono.join("tasks/nightly")).unwrap();
    std::fs::write(mono.join("tasks/nightly/run.sh"), "#!/bin/sh\n# ! cron '0 3 * * *'\necho nightly\n").unwrap();
    std::fs::write(mono.join("README.md"), "monorepo\n").unwrap();
    git(&mono, &["add", "."]);
    git(&mono, &["commit", "-q", "-m", "monorepo"]);
    for (path, url) in FIXTURE_URLS {
        let name = path.rsplit('/').next().unwrap();
        let src = if name == "e" { e.clone() } else { upstream(r, name) };
        add_submodule(&mono, &src, path, url);
    }
    // Check out the nested submodules from the local paths (the .gitmodules URLs are fake).
    git(&mono.join("libs/e"), &["config", "submodule.vendor/f.url", f.to_str().unwrap()]);
    git(&mono.join("libs/e"), &["submodule", "update", "--init", "-q"]);
    git(&mono.join("libs/e/vendor/f"), &["config", "submodule.deep/g.url", g.to_str().unwrap()]);
    git(&mono.join("libs/e/vendor/f"), &["submodule", "update", "--init", "-q"]);
    Fixture { root, mono }
}

impl Fixture {
    /// A new commit in the checked-out submodule `path`, recorded in the monorepo.
    pub fn change_lib(&self, path: &str, content: &str) -> String {
        let sub = self.mono.join(path);
        std::fs::write(sub.join("CHANGE"), content).unwrap();
        git(&sub, &["add", "CHANGE"]);
        git(&sub, &["commit", "-q", "-m", "change"]);
        git(&self.mono, &["add", path]);
        git(&self.mono, &["commit", "-q", "-m", &format!("update {path}")]);
        git(&sub, &["rev-parse", "HEAD"])
    }

    pub fn artifacts(&self) -> PathBuf {
        self.root.path().join("artifacts")
    }
}

/// Runs the binary with `args`, in a clean environment plus `env`.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.args(args);
    for k in [
        "HOST",
        "LOGIN",
        "PASSWORD",
        "GITEA_TOKEN",
        "GITHUB_OUTPUT",
        "GITHUB_STEP_SUMMARY",
        "GITEA_ACTIONS",
        "GITHUB_ACTIONS",
        "RUST_LOG",
        "AUTO_DEPLOY",
        "PROXMOX_GITOPS_MONOREPO",
        "PROXMOX_GITOPS_RECREATE",
        "PROXMOX_GITOPS_BACKEND",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
