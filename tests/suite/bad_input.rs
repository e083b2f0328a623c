//! Issue 12: nothing is written on bad input, for every subcommand.
//!
//! For each subcommand, one or more inputs that must be refused with exit 2 (settings,
//! credentials, selection, arguments, files of the monorepo). After each, the artifacts
//! directory is listed: it must be exactly as before (absent, or holding the artifacts of an
//! earlier good run, byte for byte), and the monorepo's working tree must be unchanged too
//! (`render-workflows` writes there). Hosts are loopback addresses with a closed port: every case
//! must fail before contacting anything.
//!
//! Run: `cargo test --test suite bad_input::` (needs git).

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::fixture::{minimal, write};
use support::git::git;

/// The minimal monorepo as a git repository with one commit.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = minimal();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "monorepo"]);
    (tmp, root)
}

/// Every file below `dir` (relative path → content); empty when `dir` does not exist.
fn listing(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn go(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_path_buf();
            if p.is_dir() && !p.is_symlink() {
                out.insert(rel.join(""), Vec::new());
                go(base, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    go(dir, dir, &mut out);
    out
}

/// Runs the binary in a clean environment (plus `env`) with `--repo root --artifacts art`.
fn run(root: &Path, art: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.arg("--repo").arg(root).arg("--artifacts").arg(art).args(args).env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("HOME", std::env::temp_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// One bad input: a name, a change to the monorepo (a file to overwrite), the arguments and the
/// environment.
struct Case {
    name: &'static str,
    file: Option<(&'static str, &'static str)>,
    args: Vec<&'static str>,
    env: Vec<(&'static str, &'static str)>,
}

fn case(name: &'static str, args: &[&'static str]) -> Case {
    Case { name, file: None, args: args.to_vec(), env: Vec::new() }
}

impl Case {
    fn env(mut self, env: &[(&'static str, &'static str)]) -> Case {
        self.env = env.to_vec();
        self
    }
    fn file(mut self, rel: &'static str, text: &'static str) -> Case {
        self.file = Some((rel, text));
        self
    }
}

/// PVE configured (loopback, the closed discard port 9) but no credentials.
const PVE_NO_CREDENTIALS: &[(&str, &str)] = &[("PROXMOX_HOST", "127.0.0.1"), ("PROXMOX_PORT", "9")];
/// A container.env that does not parse.
const BAD_ENV: (&str, &str) = ("libs/app/container.env", "IP=10.0.3.20/24\nID=not-a-number\n");

fn cases() -> Vec<Case> {
    // Loopback, the discard port: nothing listens there.
    let gitea = "http://127.0.0.1:9";
    vec![
        case("resolve: bad container.env", &["resolve"]).file(BAD_ENV.0, BAD_ENV.1),
        case("resolve: bad --stage", &["resolve", "--stage", "Bad Stage"]),
        case("plan: PVE host without credentials", &["plan", "--ref", "refs/heads/release"]).env(PVE_NO_CREDENTIALS),
        case("plan: unknown container", &["plan", "--ref", "refs/heads/main", "-c", "nosuch"]),
        case("plan: ref that does not deploy", &["plan", "--ref", "refs/heads/feature"]),
        case("plan: bad container.env", &["plan", "--ref", "refs/heads/main"]).file(BAD_ENV.0, BAD_ENV.1),
        case("provision: unknown container", &["provision", "-c", "nosuch"]),
        case("provision: PVE host without credentials", &["provision", "--all"]).env(PVE_NO_CREDENTIALS),
        case("provision: pve backend without a host", &["provision", "--all", "--backend", "pve"]),
        case("configure: unknown container", &["configure", "-c", "nosuch"]),
        case("configure: bad container.env", &["configure", "-c", "app"]).file(BAD_ENV.0, BAD_ENV.1),
        case("snapshot: --all without SNAPSHOT paths", &["snapshot", "--all"]),
        case("snapshot: unknown container", &["snapshot", "-c", "nosuch"]),
        case("destroy: unknown container", &["destroy", "-c", "nosuch"]),
        case("destroy: PVE host without credentials", &["destroy", "-c", "app"]).env(PVE_NO_CREDENTIALS),
        case("deploy: ref that does not deploy", &["deploy", "--ref", "refs/heads/feature", "--all"]),
        case("deploy: PVE host without credentials", &["deploy", "--ref", "refs/heads/release", "--all"])
            .env(PVE_NO_CREDENTIALS),
        case("deploy: unknown container", &["deploy", "--ref", "refs/heads/main", "-c", "nosuch"]),
        case("rewrite: bad --org", &["rewrite", "--gitea", gitea, "--org", "bad org"]),
        case("rewrite: not an http URL", &["rewrite", "--gitea", "ftp://127.0.0.1:9"]),
        case("publish: no credentials", &["publish", "--gitea", gitea]),
        case("publish: bad --org", &["publish", "--gitea", gitea, "--org", "bad org"])
            .env(&[("LOGIN", "admin"), ("PASSWORD", "pw-bad-input")]),
        case("env: bad variable name", &["env", "set", "bad key", "x", "--gitea", gitea]),
        case("env: no credentials", &["env", "set", "SHARE", "/srv", "--gitea", gitea]),
        case("env: not an http URL", &["env", "get", "SHARE", "--remote", "--gitea", "ftp://127.0.0.1:9"]),
        case("render-workflows: unknown lib", &["render-workflows", "--lib", "nosuch"]),
        case("render-workflows: bad container.env", &["render-workflows", "--all"]).file(BAD_ENV.0, BAD_ENV.1),
        case("artifacts: bundle that does not decode", &["artifacts", "unpack", "--bundle", "not-a-bundle"]),
        case("health: unknown container", &["health", "-c", "nosuch"]),
        case("health: PVE host without credentials", &["health"]).env(PVE_NO_CREDENTIALS),
        case("health: bad container.env", &["health"]).file(BAD_ENV.0, BAD_ENV.1),
        case("health: PROXMOX_GITOPS_MONOREPO not OWNER/REPO", &["health", "--backend", "lxc"])
            .env(&[("PROXMOX_GITOPS_MONOREPO", "no-slash")]),
        case("update: no selection", &["update"]),
        case("update: unknown container", &["update", "-c", "nosuch"]),
        case("update: PVE host without credentials", &["update", "--all"]).env(PVE_NO_CREDENTIALS),
    ]
}

/// Every case exits 2 and leaves the artifacts directory (absent, or holding a good run's
/// artifacts) and the working tree as they were.
#[test]
fn every_subcommand_writes_nothing_on_bad_input() {
    let mut failures = Vec::new();
    for prepopulated in [false, true] {
        for c in cases() {
            let (tmp, root) = repo();
            if let Some((rel, text)) = c.file {
                write(&root, rel, text);
            }
            let art = tmp.path().join("artifacts");
            if prepopulated {
                let good = run(&root, &art, &["resolve"], &[]);
                if c.file.is_none() {
                    assert_eq!(good.status.code(), Some(0), "{}", String::from_utf8_lossy(&good.stderr));
                }
                write(&art, "provision/app.json", "{\"kept\": true}\n");
            }
            let before = listing(&art);
            let tree_before = git(&root, &["status", "--porcelain", "--untracked-files=all"]);
            let out = run(&root, &art, &c.args, &c.env);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.code() != Some(2) {
                failures.push(format!("{}: exit {:?}, expected 2\n{stderr}", c.name, out.status.code()));
                continue;
            }
            let after = listing(&art);
            if after != before {
                let changed: Vec<&PathBuf> = after
                    .keys()
                    .chain(before.keys())
                    .filter(|k| after.get(*k) != before.get(*k))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                failures.push(format!("{} (prepopulated: {prepopulated}): artifacts changed: {changed:?}", c.name));
            }
            let tree_after = git(&root, &["status", "--porcelain", "--untracked-files=all"]);
            if tree_after != tree_before {
                failures.push(format!("{}: working tree changed:\n{tree_before}\n→\n{tree_after}", c.name));
            }
            if !stderr.contains("error") {
                failures.push(format!("{}: no error message: {stderr}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The cases cover every subcommand.
#[test]
fn every_subcommand_has_a_case() {
    let covered: std::collections::BTreeSet<&str> = cases().iter().map(|c| c.args[0]).collect();
    let all = [
        "artifacts",
        "configure",
        "deploy",
        "destroy",
        "env",
        "health",
        "plan",
        "provision",
        "publish",
        "render-workflows",
        "resolve",
        "rewrite",
        "snapshot",
        "update",
    ];
    assert_eq!(covered, all.into_iter().collect());
}

/// Issue 28: a one-letter secret is masked as a whole value, not as every such letter of every
/// message, and it is not handed to the runner's `::add-mask::` (which would mask every `e` of
/// the job log).
#[test]
fn a_short_secret_does_not_mangle_messages() {
    let (tmp, root) = repo();
    let art = tmp.path().join("artifacts");
    let env = [("PROXMOX_PASSWORD", "e"), ("GITHUB_ACTIONS", "true")];
    let out = run(&root, &art, &["provision", "--all", "--backend", "pve"], &[PVE_NO_CREDENTIALS, &env].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the container template without arch and extension"), "{stderr}");
    assert!(!stderr.contains("***"), "{stderr}");
    assert!(!stderr.lines().any(|l| l.starts_with("::add-mask::")), "{stderr}");
}

/// Issue 28: a setting that is set nowhere is named by both of its names, the environment
/// variable and the key of `local/config.json`, whichever way the user configures.
#[test]
fn a_missing_setting_names_the_variable_and_the_config_key() {
    let (tmp, root) = repo();
    let art = tmp.path().join("artifacts");
    let problem = |args: &[&str], env: &[(&str, &str)]| {
        let out = run(&root, &art, args, env);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        stderr.lines().skip_while(|l| !l.starts_with("error: ")).nth(1).unwrap_or_default().trim().to_string()
    };
    // Everything in local/config.json but the template.
    write(
        &root,
        "local/config.json",
        "{\"proxmox\": {\"host\": \"127.0.0.1\", \"port\": 9, \"password\": \"pw-bad-input-1\"}}\n",
    );
    assert_eq!(
        problem(&["provision", "--all"], &[]),
        "settings (PROXMOX_TEMPLATE or proxmox.template in local/config.json): not set: the container template \
         without arch and extension, e.g. debian-13-standard_13.1-2"
    );
    write(&root, "local/config.json", "{\"proxmox\": {\"host\": \"127.0.0.1\", \"port\": 9}}\n");
    assert_eq!(
        problem(&["provision", "--all"], &[]),
        "settings (PROXMOX_PASSWORD or proxmox.password in local/config.json): no PVE credentials: set the password \
         for ticket auth, or an API token: PROXMOX_TOKEN and PROXMOX_SECRET (proxmox.token and proxmox.secret in \
         local/config.json)"
    );
    std::fs::remove_file(root.join("local/config.json")).unwrap();
    assert_eq!(
        problem(&["provision", "--all", "--backend", "pve"], &[]),
        "settings (PROXMOX_HOST or proxmox.host in local/config.json): not set: the PVE API host (name or address)"
    );
}

/// Issue 28: `auto-merge --force` names every missing setting in one run (the monorepo, the
/// Gitea address and credentials, the PVE host of the backend), not one per run.
#[test]
fn auto_merge_reports_every_missing_setting_at_once() {
    let (tmp, root) = repo();
    let art = tmp.path().join("artifacts");
    let out = run(&root, &art, &["auto-merge", "--force"], &[("PROXMOX_GITOPS_BACKEND", "pve")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        &stderr[stderr.find("error: ").unwrap()..],
        "error: 4 problems in the input:\n  \
         settings (--monorepo or PROXMOX_GITOPS_MONOREPO): not set: which monorepo? (the task \
         workflow sets PROXMOX_GITOPS_MONOREPO); pass --monorepo OWNER/REPO or set PROXMOX_GITOPS_MONOREPO\n  \
         settings (HOST or host in local/config.json): Gitea configuration: no Gitea address; pass --gitea URL or \
         set HOST\n  \
         settings (GITEA_TOKEN or LOGIN and PASSWORD): no Gitea credentials: set GITEA_TOKEN (or token in \
         local/config.json), or LOGIN and PASSWORD (login and password)\n  \
         settings (PROXMOX_HOST or proxmox.host in local/config.json): not set: the PVE API host (name or address)\n"
    );
    assert!(!art.exists(), "nothing is written on bad input");
}
