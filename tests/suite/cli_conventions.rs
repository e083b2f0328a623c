//! The conventions every subcommand follows: `-c a,b` and repeated `-c` on every container
//! selection, `--json` output that parses as JSON, shell completions and man pages.
//!
//! Offline only: a two-lib monorepo in a temporary directory, no PVE or Gitea settings, the lxc
//! backend where one is needed, and no command that reaches a container (selection errors stop
//! before any effect).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A monorepo with the libs `broker` (vmid 101) and `proxy` (vmid 102).
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, vmid, ip) in [("broker", 101, "10.0.0.5/24"), ("proxy", 102, "10.0.0.6/24")] {
        std::fs::create_dir_all(dir.path().join("libs").join(name)).unwrap();
        std::fs::write(dir.path().join("libs").join(name).join("container.env"), format!("ID={vmid}\nIP={ip}\n"))
            .unwrap();
    }
    let ok = Command::new("git").args(["init", "-q"]).current_dir(dir.path()).status().unwrap();
    assert!(ok.success());
    dir
}

/// Runs the binary in `repo` with a cleared environment (only `PATH`; artifacts in the repo's
/// `.proxmox-gitops`). Returns (exit code, stdout, stderr).
fn run(repo: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    // An LXC path of the test's own (empty), so that `health --backend lxc` never sees
    // containers of the host or of other tests.
    let lxc_path = repo.join(".git").join("test-lxc");
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(args)
        .current_dir(repo)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PGO_LXC_PATH", &lxc_path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every subcommand that selects containers, with the other arguments it requires.
const SELECTING: &[(&str, &[&str])] = &[
    ("plan", &[]),
    ("provision", &[]),
    ("configure", &[]),
    ("snapshot", &[]),
    ("destroy", &[]),
    ("deploy", &["--ref", "refs/heads/main"]),
    ("health", &[]),
    ("update", &[]),
];

#[test]
fn every_selecting_subcommand_splits_comma_separated_and_repeated_containers() {
    let repo = repo();
    for (sub, extra) in SELECTING {
        for selection in [&["-c", "broker,nope"][..], &["-c", "broker", "-c", "nope"], &["--container", "broker,nope"]]
        {
            let mut args = vec![*sub];
            args.extend_from_slice(extra);
            args.extend_from_slice(selection);
            let (code, _, stderr) = run(repo.path(), &args);
            // `broker` was accepted as a name of its own; `nope` is refused alone, before any effect.
            assert_eq!(code, Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains("`nope`") && !stderr.contains("broker,nope"), "{args:?}: {stderr}");
            assert!(!stderr.contains("`broker`"), "{args:?}: {stderr}");
        }
    }
    // The selection really holds both names.
    let names = |args: &[&str]| -> Vec<String> {
        let (code, stdout, stderr) = run(repo.path(), args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        let plan: Value = serde_json::from_str(&stdout).unwrap();
        let mut names: Vec<String> =
            plan["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(names(&["plan", "--json", "-c", "proxy,broker"]), ["broker", "proxy"]);
    assert_eq!(names(&["plan", "--json", "-c", "proxy", "-c", "broker"]), ["broker", "proxy"]);
    assert_eq!(names(&["plan", "--json", "-c", "proxy"]), ["proxy"]);
}

#[test]
fn json_output_parses_for_every_subcommand_run_offline() {
    let repo = repo();
    let man_dir = repo.path().join("man");
    let man_dir = man_dir.to_str().unwrap();
    let runs: &[&[&str]] = &[
        &["resolve"],
        &["plan"],
        &["plan", "-c", "broker,proxy"],
        &["provision", "--dry-run", "--all", "--backend", "lxc"],
        &["render-workflows", "--all", "--monorepo", "srv/config"],
        &["health", "--backend", "lxc"],
        &["artifacts", "pack"],
        &["completions", "bash"],
        &["man"],
        &["man", "--dir", man_dir],
        &["configure", "--check", "--all"],
    ];
    let mut got = std::collections::BTreeMap::new();
    for args in runs {
        let args: Vec<&str> = std::iter::once("--json").chain(args.iter().copied()).collect();
        let (code, stdout, stderr) = run(repo.path(), &args);
        // health fails here (exit 1): nothing is deployed in this test's LXC path, and a
        // container the inventory expects and the backend does not find is a failure. Its
        // report is still JSON.
        let want = if args[1] == "health" { Some(1) } else { Some(0) };
        assert_eq!(code, want, "{args:?}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout:?}"));
        got.insert(args[1..].join(" "), v);
    }
    // The dry run's plan: one object per container, the action as planned, nothing created.
    let dry = &got["provision --dry-run --all --backend lxc"];
    let names: Vec<&str> = dry.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["broker", "proxy"], "{dry}");
    assert!(dry.as_array().unwrap().iter().all(|c| c["action"].is_string() || c["error"].is_string()), "{dry}");
    assert!(
        dry.as_array().unwrap().iter().all(|c| c["kind"] == "container-plan" && c["schema_version"] == "1.0"),
        "{dry}"
    );
    assert!(!repo.path().join(".proxmox-gitops/provision").exists(), "a dry run writes no provision artifact");
    // render-workflows lists what it wrote.
    let rendered = got["render-workflows --all --monorepo srv/config"].as_array().unwrap().clone();
    assert_eq!(rendered.len(), 2);
    assert_eq!(rendered[0]["path"], "libs/broker/.gitea/workflows/pipeline.yml");
    assert!(repo.path().join("libs/broker/.gitea/workflows/pipeline.yml").is_file());
    // The packed bundle unpacks again, listing what it restored.
    let bundle = got["artifacts pack"]["bundle"].as_str().unwrap().to_string();
    let (code, stdout, stderr) = run(repo.path(), &["--json", "artifacts", "unpack", "--bundle", &bundle]);
    assert_eq!(code, Some(0), "{stderr}");
    let restored: Value = serde_json::from_str(&stdout).unwrap();
    assert!(restored["restored"].as_array().unwrap().iter().any(|p| p == "inventory.json"), "{restored}");
    assert_eq!(
        got["configure --check --all"],
        serde_json::json!({
            "kind": "requirements-check", "schema_version": "1.0", "requirements_met": true, "checked": 2
        })
    );
    // `env get` answered from the process environment (the seed's Env.get) needs no Gitea.
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(["--json", "env", "get", "TZ"])
        .current_dir(repo.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TZ", "Europe/Berlin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({ "name": "TZ", "value": "Europe/Berlin", "source": "environment" }));
    // completions and man carry their text.
    assert!(got["completions bash"]["script"].as_str().unwrap().contains("proxmox-gitops"));
    assert!(got["man"]["roff"].as_str().unwrap().contains(".TH proxmox-gitops 1"));
    let written = got[&format!("man --dir {man_dir}")]["written"].as_array().unwrap().clone();
    assert!(written.iter().any(|p| p.as_str().unwrap().ends_with("proxmox-gitops-plan.1")), "{written:?}");
}

#[test]
fn completions_name_every_subcommand_and_man_pages_are_written() {
    let repo = repo();
    let (code, bash, stderr) = run(repo.path(), &["completions", "bash"]);
    assert_eq!(code, Some(0), "{stderr}");
    for sub in [
        "resolve",
        "plan",
        "provision",
        "publish",
        "deploy",
        "render-workflows",
        "snapshot",
        "configure",
        "destroy",
        "auto-merge",
        "release-pr",
        "health",
        "update",
        "completions",
        "man",
    ] {
        assert!(bash.split(|c: char| c.is_whitespace() || c == '"').any(|w| w == sub), "{sub} missing");
    }
    assert!(bash.contains("--container"), "options are completed too");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = run(repo.path(), &["completions", shell]);
        assert_eq!(code, Some(0), "{shell}: {stderr}");
        assert!(script.contains("render-workflows"), "{shell}");
    }
    let (code, _, stderr) = run(repo.path(), &["completions", "tcsh"]);
    assert_eq!(code, Some(2), "an unknown shell is a usage error: {stderr}");

    let (code, page, stderr) = run(repo.path(), &["man"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH proxmox-gitops 1") && page.contains("render\\-workflows"), "{page}");
    let dir = repo.path().join("share/man/man1");
    let (code, stdout, stderr) = run(repo.path(), &["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    for page in ["proxmox-gitops.1", "proxmox-gitops-deploy.1", "proxmox-gitops-env-set.1"] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
        assert!(stdout.contains(page), "{stdout}");
    }
    let deploy = std::fs::read_to_string(dir.join("proxmox-gitops-deploy.1")).unwrap();
    assert!(deploy.contains("container"), "the subcommand's options are on its page");
}

/// Every subcommand with `--backend` reads it from `PGO_BACKEND` too (as the task and pipeline
/// workflows set it), and its help says so; every `-j` takes 1–64 and reads `PGO_JOBS`.
#[test]
fn every_backend_option_reads_pgo_backend() {
    let repo = repo();
    for sub in ["plan", "provision", "deploy", "destroy", "drift", "health", "update", "release-pr", "auto-merge"] {
        let (code, help, stderr) = run(repo.path(), &[sub, "--help"]);
        assert_eq!(code, Some(0), "{sub}: {stderr}");
        // The option's own entry: from `--backend <BACKEND>` to the next option.
        let at = help.find("--backend <BACKEND>").unwrap_or_else(|| panic!("{sub}: {help}"));
        let entry = &help[at..];
        let end = entry[1..].find("\n  -").map_or(entry.len(), |i| i + 1);
        let backend = &entry[..end];
        assert!(backend.contains("[env: PGO_BACKEND="), "{sub} --backend: {backend}");
    }
    for sub in ["plan", "provision", "deploy", "configure", "drift", "health", "update", "release-pr", "auto-merge"] {
        let (_, help, _) = run(repo.path(), &[sub, "--help"]);
        assert!(help.contains("[env: PGO_JOBS="), "{sub}: {help}");
        let (code, _, stderr) = run(repo.path(), &[sub, "-j", "65", "--help"]);
        assert_eq!(code, Some(2), "{sub} -j 65: {stderr}");
    }
}
