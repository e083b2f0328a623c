//! The pieces of `local/run.sh` that run without containers: `local/settings.py` (the local
//! settings decided before the build: LOGIN/PASSWORD generated once into
//! `local/config.local.json`, the share) and `local/summary.py` (the end of the run: how to reach
//! each lib and what its configuration reported, from the artifacts), on fixture monorepos.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact;
use proxmox_gitops::inventory::Engine;
use proxmox_gitops::model::{BackendKind, Outcome};
use proxmox_gitops::settings::Settings;
use proxmox_gitops::steps::configure::{Configure, EngineRun};
use secrecy::ExposeSecret;
use support::fixture::Repo;
use support::fs::{source_root, write_files};

/// A git repository with the shipped `local/config.json` template and `.gitignore` (which
/// ignores `*.local.*`) when `ignored`.
fn monorepo(ignored: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repo::init(dir.path());
    repo.write("local/config.json", &std::fs::read_to_string(source_root().join("local/config.json")).unwrap());
    if ignored {
        repo.write(".gitignore", &std::fs::read_to_string(source_root().join(".gitignore")).unwrap());
    }
    dir
}

/// Runs `local/settings.py ROOT` with only `env` (and PATH) in the environment; `legacy` stands
/// for the former default share `/share`, so that the host's own does not matter.
fn settings_py(root: &Path, legacy: &Path, env: &[(&str, &str)]) -> Output {
    let code = "import os, sys; sys.path.insert(0, sys.argv[1]); import settings; \
                settings.LEGACY_SHARE = sys.argv[2]; \
                sys.exit(settings.main(['settings.py', sys.argv[3]], os.environ))";
    let mut cmd = Command::new("python3");
    cmd.args(["-B", "-c", code])
        .arg(source_root().join("local"))
        .arg(legacy)
        .arg(root)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", root);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn local_file(root: &Path) -> PathBuf {
    root.join("local/config.local.json")
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn first_run_generates_login_and_password_once_and_later_runs_reuse_them() {
    let dir = monorepo(true);
    let root = dir.path();
    // The repository belongs to a user; the script runs as root (sudo).
    std::os::unix::fs::chown(root.join("local"), Some(4242), Some(4243)).unwrap();
    let legacy = root.join("no-legacy-share");
    let first = settings_py(root, &legacy, &[]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "/var/lib/proxmox-gitops/share\n");
    assert_eq!(
        text(&first.stderr),
        format!(
            "==> generated LOGIN `admin` and a random PASSWORD for the containers' services, stored in \
             {} (mode 0600, git-ignored) as \"login\"/\"password\"; later runs reuse them (LOGIN/PASSWORD in \
             the environment take precedence)\n\
             ==> share: /var/lib/proxmox-gitops/share (container key pairs in .keys/, data snapshots), from \
             local/config.local.json (proxmox.share), the local runs' default; set PROXMOX_SHARE or \
             proxmox.share to use another\n",
            local_file(root).display()
        )
    );
    assert_eq!(mode(&local_file(root)), 0o600);
    let meta = std::fs::metadata(local_file(root)).unwrap();
    assert_eq!((std::os::unix::fs::MetadataExt::uid(&meta), std::os::unix::fs::MetadataExt::gid(&meta)), (4242, 4243));
    let stored = json(&local_file(root));
    let password = stored["password"].as_str().unwrap().to_string();
    assert_eq!(password.len(), 24);
    assert!(password.chars().all(|c| c.is_ascii_alphanumeric()), "{password}");
    assert_eq!(
        stored,
        serde_json::json!({"login": "admin", "password": password, "proxmox": {"share": "/var/lib/proxmox-gitops/share"}})
    );
    // The binary reads what was written: the file is a valid settings layer.
    let s = Settings::load(root, &BTreeMap::<String, String>::new()).unwrap();
    assert_eq!(s.gitea.login.as_deref(), Some("admin"));
    assert_eq!(s.gitea.password.as_ref().map(|p| p.expose_secret().to_string()), Some(password.clone()));
    assert_eq!(s.share, Path::new("/var/lib/proxmox-gitops/share"));
    // git does not see it.
    assert_eq!(
        support::git::git(root, &["status", "--porcelain", "--untracked-files=all", "--", "local"]),
        "?? local/config.json"
    );

    let before = std::fs::read(local_file(root)).unwrap();
    let second = settings_py(root, &legacy, &[]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "/var/lib/proxmox-gitops/share\n");
    assert_eq!(
        text(&second.stderr),
        "==> share: /var/lib/proxmox-gitops/share (container key pairs in .keys/, data snapshots), from \
         local/config.local.json (proxmox.share)\n"
    );
    assert_eq!(std::fs::read(local_file(root)).unwrap(), before);

    // Another machine (repository) gets another password.
    let other = monorepo(true);
    assert_eq!(settings_py(other.path(), &legacy, &[]).status.code(), Some(0));
    assert_ne!(json(&local_file(other.path()))["password"], stored["password"]);
}

#[test]
fn the_environment_wins_and_only_what_is_missing_is_generated_keeping_other_keys() {
    let dir = monorepo(true);
    let root = dir.path();
    let legacy = root.join("no-legacy-share");
    write_files(root, &[("local/config.local.json", "{\"checkout\": \"tasks/checkout@main\"}\n")]);
    std::fs::set_permissions(local_file(root), std::fs::Permissions::from_mode(0o644)).unwrap();

    // Everything set in the environment: nothing is written.
    let all = [("LOGIN", "alice"), ("PASSWORD", "from-env"), ("PROXMOX_SHARE", "/srv/share")];
    let out = settings_py(root, &legacy, &all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/srv/share\n");
    assert_eq!(
        text(&out.stderr),
        "==> share: /srv/share (container key pairs in .keys/, data snapshots), from the environment (PROXMOX_SHARE)\n"
    );
    assert_eq!(std::fs::read_to_string(local_file(root)).unwrap(), "{\"checkout\": \"tasks/checkout@main\"}\n");
    assert_eq!(mode(&local_file(root)), 0o644);

    // Only the password is missing: it alone is generated; the other key stays.
    let out = settings_py(root, &legacy, &[("LOGIN", "alice"), ("PROXMOX_SHARE", "/srv/share")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("==> generated a random PASSWORD for the containers' services"),
        "{}",
        text(&out.stderr)
    );
    let stored = json(&local_file(root));
    assert_eq!(stored.as_object().unwrap().keys().collect::<Vec<_>>(), vec!["checkout", "password"]);
    assert_eq!(stored["checkout"], "tasks/checkout@main");
    assert_eq!(mode(&local_file(root)), 0o600);
}

#[test]
fn a_share_holding_key_pairs_of_earlier_runs_is_kept() {
    let dir = monorepo(true);
    let root = dir.path();
    let legacy = root.join("legacy-share");
    std::fs::create_dir_all(legacy.join(".keys")).unwrap();
    let out = settings_py(root, &legacy, &[("LOGIN", "a"), ("PASSWORD", "b")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{}\n", legacy.display()));
    assert_eq!(
        text(&out.stderr),
        format!(
            "==> share: {} (container key pairs in .keys/, data snapshots), from local/config.local.json \
             (proxmox.share), kept where earlier runs left key pairs; set PROXMOX_SHARE or proxmox.share to use another\n",
            legacy.display()
        )
    );
    assert_eq!(json(&local_file(root)), serde_json::json!({"proxmox": {"share": legacy.display().to_string()}}));
}

#[test]
fn a_password_is_never_written_to_a_file_git_would_commit() {
    let dir = monorepo(false);
    let root = dir.path();
    let out = settings_py(root, &root.join("none"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: local/config.local.json is not git-ignored, and it would hold a password: add the line \
         `local/config.local.json` (or `*.local.*`) to .gitignore, or set LOGIN, PASSWORD and PROXMOX_SHARE in \
         the environment\n"
    );
    assert!(!local_file(root).exists());
    assert_eq!(std::fs::read_dir(root.join("local")).unwrap().count(), 1, "no temporary file left");
}

#[test]
fn a_readable_file_holding_a_password_is_made_private() {
    let dir = monorepo(true);
    let root = dir.path();
    write_files(
        root,
        &[("local/config.local.json", "{\"login\": \"a\", \"password\": \"b\", \"proxmox\": {\"share\": \"/s\"}}")],
    );
    std::fs::set_permissions(local_file(root), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = settings_py(root, &root.join("none"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with(&format!(
            "==> {} holds a password and was readable by others: its mode is now 0600\n",
            std::path::absolute(local_file(root)).unwrap().display()
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(mode(&local_file(root)), 0o600);
}

#[test]
fn a_config_file_that_is_not_json_is_named_with_its_line() {
    let dir = monorepo(true);
    write_files(dir.path(), &[("local/config.local.json", "{\n  \"login\": \"a\",\n}\n")]);
    let out = settings_py(dir.path(), &dir.path().join("none"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: local/config.local.json:3: not valid JSON (Expecting property name enclosed in double quotes)\n"
    );
}

/// Issue 28: an unknown key is refused by `local/settings.py`, before the build, in the binary's
/// words; every key the binary takes ([`proxmox_gitops::settings::CONFIG_KEYS`]) is accepted.
#[test]
fn unknown_config_keys_are_refused_before_the_build() {
    let dir = monorepo(true);
    write_files(
        dir.path(),
        &[("local/config.local.json", "{\n  \"proxmox\": {\n    \"nod\": \"pve\"\n  },\n  \"logn\": \"a\"\n}\n")],
    );
    let out = settings_py(dir.path(), &dir.path().join("none"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "error: 2 unknown key(s), refused before the build:\n  \
         local/config.local.json:3 (proxmox.nod): unknown key `nod`; the `proxmox` section takes `host`, `port`, \
         `user`, `password`, `token`, `secret`, `node`, `gateway`, `mask`, `interface`, `bridge`, `storage`, \
         `template`, `share`\n  \
         local/config.local.json:5 (logn): unknown key `logn`; a config file takes `proxmox`, `control_plane`, \
         `host`, `login`, `password`, `token`, `checkout`\n"
    );
    // The binary says the same of these keys.
    let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("local/config.local.json:3 (proxmox.nod): unknown key `nod`"), "{e}");
    // Every key the binary takes passes.
    // Every key of CONFIG_KEYS, in its section (`proxmox.host`, `control_plane.gitea_binary`).
    let mut top = serde_json::Map::new();
    for (_, key) in proxmox_gitops::settings::CONFIG_KEYS {
        match key.split_once('.') {
            Some((section, k)) => {
                let s = top.entry(section).or_insert_with(|| serde_json::Value::Object(Default::default()));
                s.as_object_mut().unwrap().insert(k.to_string(), "".into());
            }
            None => {
                top.insert(key.to_string(), "".into());
            }
        }
    }
    let all = serde_json::to_string_pretty(&serde_json::Value::Object(top)).unwrap();
    write_files(dir.path(), &[("local/config.local.json", &all)]);
    assert!(Settings::load(dir.path(), &BTreeMap::new()).is_ok(), "the binary takes every key");
    let out = settings_py(dir.path(), &dir.path().join("none"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

fn engine_run(engine: &str, changed: Option<u64>, ok: Option<u64>, exit_code: i32, ms: u64) -> EngineRun {
    EngineRun {
        engine: engine.into(),
        changed,
        ok,
        exit_code: Some(exit_code),
        success: exit_code == 0,
        duration_ms: ms,
        skipped: false,
    }
}

fn configure(
    name: &str,
    vmid: u32,
    engine: Engine,
    lib: Option<EngineRun>,
    outputs: &[(&str, &str)],
    outcome: Outcome,
) -> Configure {
    Configure {
        name: name.into(),
        hostname: name.into(),
        vmid,
        address: Some(format!("10.0.3.{vmid}")),
        ssh_port: 22,
        user: Some("config".into()),
        host_key_fingerprint: None,
        engine,
        base: Some(engine_run("ansible", Some(0), Some(14), 0, 8200)),
        restore: None,
        lib,
        outputs: outputs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        duration_ms: 12000,
        log_tail: vec![],
        skipped: None,
        full_run: None,
        outcome,
    }
}

#[test]
fn the_summary_shows_each_libs_outputs_login_and_what_its_configuration_reported() {
    let dir = support::deploy::monorepo(&["broker", "web", "old"]);
    let root = dir.path();
    write_files(root, &[("libs/broker/container.env", "ID=101\nIP=127.0.20.2/24\nREQUIRES=LOGIN,PASSWORD\n")]);
    write_files(root, &[("local/config.local.json", "{\"login\": \"admin\", \"password\": \"kept-here\"}\n")]);
    let inv = proxmox_gitops::steps::resolve::resolve(
        &proxmox_gitops::steps::resolve::ResolveOptions { repo: root.to_path_buf(), stage: "main".into() },
        &BTreeMap::from([("LOGIN".to_string(), "admin".to_string())]),
    )
    .unwrap();
    let artifacts = root.join(".proxmox-gitops");
    let dirs = artifact::ArtifactDir::new(&artifacts);
    artifact::write(&artifacts.join("inventory.json"), &inv).unwrap();
    for (name, vmid) in [("broker", 101), ("web", 102), ("old", 103)] {
        let mut p = support::provision::running(BackendKind::Lxc, name, vmid, name);
        p.address = Some(format!("10.0.3.{vmid}"));
        support::provision::write(&artifacts, &p);
    }
    let mut refused = support::provision::running(BackendKind::Lxc, "refused", 104, "refused");
    refused.outcome = Outcome::Failed { error: "container `refused` must be recreated".into() };
    support::provision::write(&artifacts, &refused);
    // A configure artifact of an earlier run, then the mark of this run's start.
    let old = configure("old", 103, Engine::Shell, Some(engine_run("shell", None, None, 0, 100)), &[], Outcome::Ok);
    artifact::write(&dirs.configure("old"), &old).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let since = root.join("since");
    std::fs::write(&since, "").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let broker = configure(
        "broker",
        101,
        Engine::Shell,
        Some(engine_run("shell", None, None, 0, 3400)),
        &[("LIBS_BROKER_ENDPOINT", "mqtt://10.0.3.101:1883")],
        Outcome::Ok,
    );
    let web = configure(
        "web",
        102,
        Engine::Ansible,
        Some(engine_run("ansible", Some(2), Some(5), 2, 6100)),
        &[],
        Outcome::Failed { error: "the lib's ansible configuration failed with exit code 2 (see the log tail)".into() },
    );
    artifact::write(&dirs.configure("broker"), &broker).unwrap();
    artifact::write(&dirs.configure("web"), &web).unwrap();

    let out = Command::new("python3")
        .arg(source_root().join("local/summary.py"))
        .arg(root)
        .arg(&artifacts)
        .arg(&since)
        .args(["broker", "web", "old", "refused", "missing"])
        .env_remove("PASSWORD")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let share = inv.settings.share.display().to_string();
    let local = std::path::absolute(local_file(root)).unwrap();
    assert_eq!(
        text(&out.stdout),
        format!(
            "
  broker: container broker (running) at 10.0.3.101
    LIBS_BROKER_ENDPOINT  mqtt://10.0.3.101:1883
    login                 admin, password: \"password\" in {local}
    configured            base role (ansible): 0 changed, 14 ok, 8.2 s; lib (shell): exit code 0, 3.4 s
    ssh                   ssh -i {share}/.keys/101 config@10.0.3.101
    shell                 lxc-attach -n broker

  web: container web (running) at 10.0.3.102
    configured  base role (ansible): 0 changed, 14 ok, 8.2 s; lib (ansible): FAILED, 2 changed, 5 ok, 6.1 s
    FAILED      the lib's ansible configuration failed with exit code 2 (its last output lines are above)
    ssh         ssh -i {share}/.keys/102 config@10.0.3.102
    shell       lxc-attach -n web

  old: container old (running) at 10.0.3.103
    configured  not in this run (see the errors above)
    ssh         ssh -i {share}/.keys/103 config@10.0.3.103
    shell       lxc-attach -n old

  refused: container refused: provision failed (see the errors above)
    configured  not in this run (see the errors above)
    shell       lxc-attach -n refused

  missing: not provisioned
    configured  not in this run (see the errors above)
",
            local = local.display()
        )
    );
}

/// The code block of README.md that follows the first line containing `after` (its body, without
/// the fence lines).
fn readme_block(readme: &str, after: &str) -> String {
    let start = readme.find(after).unwrap_or_else(|| panic!("README.md has no `{after}`"));
    let rest = &readme[start..];
    let open = rest.find("\n```").unwrap() + 1;
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

#[test]
fn the_readme_walkthrough_lib_resolves_with_either_engine() {
    let readme = std::fs::read_to_string(source_root().join("README.md")).unwrap();
    let env = readme_block(&readme, "`libs/hello/container.env` — the container");
    let script = readme_block(&readme, "`libs/hello/configure.sh` — the shell engine");
    let playbook = readme_block(&readme, "Or the same with Ansible, as `libs/hello/playbook.yml`");
    assert!(script.contains("LIBS_HELLO_URL=http://${IP}/"), "{script}");
    assert!(playbook.contains("LIBS_HELLO_URL=http://{{ IP }}/"), "{playbook}");
    // The user adds it next to the shipped libs: its ID and IP must not be one of theirs.
    for lib in std::fs::read_dir(source_root().join("libs")).unwrap().flatten() {
        let shipped = std::fs::read_to_string(lib.path().join("container.env")).unwrap_or_default();
        for line in env.lines().filter(|l| l.starts_with("ID=") || l.starts_with("IP=")) {
            assert!(!shipped.lines().any(|l| l == line), "README's hello has {line}, as libs/{:?}", lib.file_name());
        }
    }
    let syntax = Command::new("bash").args(["-n", "-c", &script]).output().unwrap();
    assert!(syntax.status.success(), "{}", text(&syntax.stderr));

    for (file, body, engine) in [("configure.sh", &script, Engine::Shell), ("playbook.yml", &playbook, Engine::Ansible)]
    {
        let dir = support::deploy::monorepo(&[]);
        write_files(dir.path(), &[("libs/hello/container.env", &env), (&format!("libs/hello/{file}"), body)]);
        let inv = proxmox_gitops::steps::resolve::resolve(
            &proxmox_gitops::steps::resolve::ResolveOptions { repo: dir.path().to_path_buf(), stage: "main".into() },
            &BTreeMap::<String, String>::new(),
        )
        .unwrap();
        let hello = inv.containers.iter().find(|c| c.name == "hello").unwrap();
        assert_eq!(
            (hello.vmid, hello.memory_mib, hello.engine, &hello.requires, &hello.services),
            (140, 256, engine, &vec!["LOGIN".to_string()], &vec!["nginx.service".to_string()])
        );
    }
}

/// `./local/run.sh config` publishes the monorepo's commits and plans from its working tree: with
/// changes not committed the two would differ, so it refuses before anything is installed, built
/// or created, naming what is not committed.
#[test]
fn config_refuses_a_monorepo_with_changes_not_committed() {
    let dir = monorepo(true);
    support::fs::copy_dir(&source_root().join("local"), &dir.path().join("local"));
    let _ = std::fs::remove_file(dir.path().join("local/config.local.json"));
    write_files(dir.path(), &[("container.env", "ID=9180\nIP=dhcp\n")]);
    let git = |args: &[&str]| support::git::git(dir.path(), args);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "the monorepo"]);
    write_files(dir.path(), &[("container.env", "ID=9181\nIP=10.0.88.10/24\n")]);
    let out = Command::new(dir.path().join("local/run.sh"))
        .arg("config")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("has changes that are not committed (container.env)"), "{err}");
    assert!(!err.contains("==>"), "it did something first: {err}");
    // Committed, the same run goes past that check (here: a lib that does not exist).
    git(&["commit", "-q", "-am", "the address"]);
    let out = Command::new(dir.path().join("local/run.sh"))
        .args(["config", "nolib"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("no lib `nolib`") && !err.contains("not committed"), "{err}");
}
