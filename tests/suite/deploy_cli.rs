//! The `deploy` and `artifacts` subcommands through the binary: exit codes, messages,
//! $GITHUB_OUTPUT, and the artifact bundle round trip.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use support::deploy::monorepo;

fn pgo(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"));
    cmd.arg("--repo").arg(root).args(args).env("NO_COLOR", "1");
    for v in [
        "GITHUB_ACTIONS",
        "GITEA_ACTIONS",
        "GITHUB_OUTPUT",
        "GITHUB_STEP_SUMMARY",
        "GITHUB_REF",
        "GITHUB_RUN_ID",
        "PGO_BUNDLE",
        "PGO_ARTIFACTS",
        "PGO_ENTRY",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn deploy_reports_each_failed_container_and_writes_outputs() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let out_file = root.join("gh-output");
    let out = pgo(
        root,
        &["deploy", "--ref", "refs/heads/main", "--container", "alpha"],
        &[("GITHUB_OUTPUT", out_file.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error: 1 of 1 container(s) failed: alpha\n  alpha: configure: alpha: no provision artifact; run `proxmox-gitops provision -c alpha` first"),
        "{stderr}"
    );
    let artifact = root.join(".proxmox-gitops/deploy.json");
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        format!(
            "artifact={}\nresult=failed\nsteps=configure\ncontainers=alpha\nsucceeded=\nfailed=alpha\nskipped=\n",
            artifact.display()
        )
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&artifact).unwrap()).unwrap();
    assert_eq!(v["kind"], "deploy");
    assert_eq!(v["containers"][0]["steps"][0]["state"], "failed");
    let human = text(&out.stdout);
    assert!(
        human.starts_with("NAME   VMID  STEPS             TIME  RESULT\nalpha  101   configure FAILED  "),
        "{human}"
    );
}

/// With `$GITHUB_STEP_SUMMARY` set, `deploy` appends a table to the job summary: the failed
/// container first (with its error), then the one that succeeded. The snapshot step needs no
/// container for a lib without SNAPSHOT paths (nothing to snapshot: ok) and fails at once for
/// one with paths that was never provisioned.
#[test]
fn deploy_writes_a_job_summary_with_failures_first() {
    let repo = monorepo(&["alpha", "beta"]);
    let root = repo.path();
    std::fs::write(root.join("libs/beta/container.env"), "ID=102\nIP=127.0.20.3/24\nSNAPSHOT=/data\n").unwrap();
    let summary = root.join("step-summary.md");
    std::fs::write(&summary, "### earlier step\n").unwrap();
    let out = pgo(
        root,
        &["deploy", "--ref", "refs/heads/snapshot", "-c", "alpha,beta"],
        &[("GITHUB_STEP_SUMMARY", summary.to_str().unwrap()), ("GITHUB_ACTIONS", "true")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&summary).unwrap();
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "### earlier step",
            "### deploy refs/heads/snapshot (stage main): 1 of 2 container(s) failed",
            "",
            "| container | vmid | node | action | result | duration | error |",
            "|---|---|---|---|---|---|---|",
        ],
        "{md}"
    );
    assert_eq!(lines.len(), 7, "{md}");
    let beta = lines[5];
    assert!(beta.starts_with("| beta | 102 | - | snapshot failed | **failed** | "), "{md}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/deploy.json")).unwrap()).unwrap();
    let error = v["containers"][1]["error"].as_str().unwrap();
    assert!(!error.is_empty());
    assert!(
        beta.ends_with(&format!(" | {} |", error.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;"))),
        "{md}"
    );
    assert!(lines[6].starts_with("| alpha | 101 | - | snapshot ok | ok | "), "{md}");
    assert!(lines[6].ends_with(" |   |"), "{md}");
    // The human table comes after the log group is closed.
    let stderr = text(&out.stderr);
    assert!(stderr.contains("::group::deploy") && stderr.contains("::endgroup::"), "{stderr}");
    assert!(text(&out.stdout).starts_with("NAME "), "{}", text(&out.stdout));
}

#[test]
fn deploy_refuses_bad_usage_with_exit_code_2() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let out = pgo(root, &["deploy", "--ref", "refs/heads/main"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--container <CONTAINERS>|--all"), "{}", text(&out.stderr));
    let out = pgo(root, &["deploy", "--ref", "refs/heads/feature", "--all"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--ref (refs/heads/feature): ref `refs/heads/feature` does not deploy"),
        "{}",
        text(&out.stderr)
    );
    let out = pgo(root, &["deploy", "--ref", "refs/heads/main", "--all", "--step", "reboot"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!root.join(".proxmox-gitops/deploy.json").exists());
}

#[test]
fn artifacts_travel_in_a_bundle() {
    let a = monorepo(&["alpha"]);
    let out = pgo(a.path(), &["resolve"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = pgo(a.path(), &["artifacts", "pack"], &[]);
    assert!(out.status.success());
    let bundle = text(&out.stdout);
    assert!(bundle.starts_with("pgo1:") && bundle.trim_end().lines().count() == 1, "{bundle}");

    let b = tempfile::tempdir().unwrap();
    let out = pgo(b.path(), &["artifacts", "unpack"], &[("PGO_BUNDLE", bundle.trim())]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(b.path().join(".proxmox-gitops/inventory.json")).unwrap(),
        std::fs::read_to_string(a.path().join(".proxmox-gitops/inventory.json")).unwrap()
    );
    let out = pgo(b.path(), &["artifacts", "unpack"], &[("PGO_BUNDLE", "pgo1:@@@")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("error: cannot unpack the artifact bundle (PGO_BUNDLE): bundle 1: invalid base64"),
        "{}",
        text(&out.stderr)
    );
}

use support::fakepve;

/// `deploy` provisions through the real pve backend (fakepve on loopback) with the recreate
/// policy of its options: a change of template needs a recreate, which is refused by default and
/// done with `--allow-recreate`.
#[test]
fn deploy_provisions_on_pve_with_the_recreate_policy() {
    let pve = fakepve::FakePve::start();
    pve.add_template();
    pve.exec("pve.store_file('local', 'debian-13-standard_13.2-1_amd64.tar.zst', 1024 * 1024, content='vztmpl')");
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let share = tempfile::tempdir().unwrap();
    let port = pve.port.to_string();
    let ca = pve.ca.to_str().unwrap().to_string();
    let share_s = share.path().to_str().unwrap().to_string();
    let env = |template: &'static str| -> Vec<(&'static str, String)> {
        vec![
            ("PROXMOX_HOST", "127.0.0.1".into()),
            ("PROXMOX_PORT", port.clone()),
            ("PROXMOX_USER", "root@pam".into()),
            ("PROXMOX_PASSWORD", support::fakepve::PASSWORD.into()),
            ("PROXMOX_TEMPLATE", template.into()),
            ("PROXMOX_STORAGE", "local".into()),
            ("PROXMOX_GATEWAY", "127.0.20.254".into()),
            ("PROXMOX_SHARE", share_s.clone()),
            ("PROXMOX_CA", ca.clone()),
        ]
    };
    let run = |template: &'static str, extra: &[&str]| {
        let env = env(template);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut args = vec![
            "deploy",
            "--ref",
            "refs/heads/release",
            "--step",
            "provision",
            "--container",
            "alpha",
            "--no-wait-ssh",
        ];
        args.extend_from_slice(extra);
        pgo(root, &args, &env)
    };
    let prov = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/provision/alpha.json")).unwrap())
            .unwrap()
    };
    let actions = |v: &serde_json::Value| -> Vec<String> {
        v["actions"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap().to_string()).collect()
    };

    let out = run(fakepve::TEMPLATE, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let p = prov();
    assert_eq!(
        (p["result"].as_str(), p["backend"].as_str(), p["created"].as_bool()),
        (Some("ok"), Some("pve"), Some(true))
    );
    assert_eq!(actions(&p), vec!["create", "start"]);
    assert_eq!(pve.ct_config(101).unwrap()["hostname"], "alpha");

    // Another template: a recreate is needed; refused by default (the settings are not part of the
    // inputs digest, so --force makes the step run again).
    let out = run("debian-13-standard_13.2-1", &["--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("alpha: provision: "), "{stderr}");
    let p = prov();
    assert_eq!(p["result"], "failed");
    assert_eq!(p["plan"]["action"], "refused", "{p:#}");
    assert!(pve.ct_config(101).unwrap()["description"].as_str().unwrap().contains("13.1-2"), "nothing changed");

    let out = run("debian-13-standard_13.2-1", &["--force", "--allow-recreate"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let p = prov();
    assert_eq!(p["result"], "ok", "{p:#}");
    assert!(actions(&p).contains(&"destroy".to_string()) && actions(&p).contains(&"create".to_string()), "{p:#}");
    assert!(pve.ct_config(101).unwrap()["description"].as_str().unwrap().contains("13.2-1"));
    assert!(
        !text(&out.stderr).contains(support::fakepve::PASSWORD)
            && !text(&out.stdout).contains(support::fakepve::PASSWORD)
    );
}

/// `configure --check` is the preflight of local/run.sh: exit 2 naming the file, the key and
/// where to set what is missing; 0 once it is set. Nothing is contacted.
#[test]
fn configure_check_names_what_requires_lacks() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    std::fs::write(root.join("libs/alpha/container.env"), "ID=101\nIP=127.0.20.2/24\nREQUIRES=LOGIN\n").unwrap();
    let art = root.join(".proxmox-gitops");
    let art = art.to_str().unwrap();
    let out = pgo(root, &["--artifacts", art, "configure", "--check", "--all"], &[("LOGIN", "")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "libs/alpha/container.env (REQUIRES): alpha needs LOGIN (REQUIRES in libs/alpha/container.env), which is \
             not set: set LOGIN in the environment (Gitea Actions: the LOGIN variable) or \"login\" in \
             local/config.local.json"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(!root.join(".proxmox-gitops/configure").exists(), "--check writes no artifact");
    let out = pgo(root, &["--artifacts", art, "configure", "--check", "-c", "alpha"], &[("LOGIN", "admin")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("requirements met (1 container(s) checked)"), "{}", text(&out.stderr));
}

/// `configure` run on its own (not through `deploy`) writes its outputs too: which containers
/// succeeded or failed, and where its artifacts are.
#[test]
fn configure_alone_writes_its_outputs() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let art = root.join(".proxmox-gitops");
    let outputs = root.join("outputs.txt");
    let out = pgo(
        root,
        &["--artifacts", art.to_str().unwrap(), "configure", "-c", "alpha"],
        &[("GITHUB_OUTPUT", outputs.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("run `proxmox-gitops provision -c alpha` first"), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&outputs).unwrap(),
        format!("succeeded=\nfailed=alpha\nconfigure_dir={}\n", art.join("configure").display())
    );
}

/// The hint of a failure is phrased for how the user runs proxmox-gitops
/// (`proxmox-gitops::error::Hint::render`): `./local/run.sh` exports `PGO_ENTRY=local-run` and
/// gets its own command line; under Gitea Actions the hint names the pipeline workflow's input,
/// in the terminal, the annotation and the configure artifact alike.
#[test]
fn a_missing_provision_hint_is_phrased_for_the_entry_point() {
    let repo = monorepo(&["alpha"]);
    let root = repo.path();
    let art = root.join(".proxmox-gitops");
    let configure =
        |env: &[(&str, &str)]| pgo(root, &["--artifacts", art.to_str().unwrap(), "configure", "-c", "alpha"], env);
    let recorded = || -> String {
        let a: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(art.join("configure/alpha.json")).unwrap()).unwrap();
        a["error"].as_str().unwrap_or_default().to_string()
    };

    let out = configure(&[("PGO_ENTRY", "local-run")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let hint = "alpha: no provision artifact; run `sudo ./local/run.sh alpha` first";
    assert!(text(&out.stderr).contains(hint), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("proxmox-gitops provision"), "{}", text(&out.stderr));
    assert!(recorded().contains(hint), "{}", recorded());

    let out = configure(&[("GITEA_ACTIONS", "true"), ("PGO_ENTRY", "local-run")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let hint = "alpha: no provision artifact; run the pipeline workflow with its `step` input `provision` first";
    assert!(text(&out.stderr).contains(hint), "{}", text(&out.stderr));
    // The annotation (`::error::…` on stderr) carries it too.
    let annotation = text(&out.stderr).lines().filter(|l| l.starts_with("::error")).collect::<Vec<_>>().join("\n");
    assert!(annotation.contains(hint), "{}", text(&out.stderr));
    assert!(recorded().contains(hint), "{}", recorded());
}

/// `configure --check -c config` finds the control plane's programs before anything is created:
/// a given path that is no program is an input error naming the setting; without programs and
/// without a reachable release site, the run fails saying which setting avoids the download.
/// Only loopback is contacted (`PGO_GITEA_DOWNLOAD` names a closed port).
#[test]
fn configure_check_of_config_finds_the_control_planes_programs_first() {
    let repo = monorepo(&[]);
    let root = repo.path();
    std::fs::copy(support::fs::source_root().join("playbook.yml"), root.join("playbook.yml")).unwrap();
    std::fs::write(root.join("container.env"), "ID=100\nIP=127.0.20.9/24\nREQUIRES=LOGIN\n").unwrap();
    let art = root.join(".proxmox-gitops");
    let art = art.to_str().unwrap();
    let cache = root.join("cache");
    let env = |extra: &[(&'static str, String)]| {
        let mut v = vec![
            ("LOGIN", "admin".to_string()),
            ("PGO_GITEA_DOWNLOAD", "http://127.0.0.1:9".to_string()),
            ("XDG_CACHE_HOME", cache.display().to_string()),
            ("PGO_GITEA_BINARY", String::new()),
            ("PGO_GITEA_STATIC", String::new()),
            ("PGO_RUNNER_BINARY", String::new()),
        ];
        for (k, val) in extra {
            v.retain(|(n, _)| n != k);
            v.push((k, val.clone()));
        }
        v
    };
    let run = |env: &[(&'static str, String)]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        pgo(root, &["--artifacts", art, "configure", "--check", "-c", "config"], &env)
    };
    let out = run(&env(&[("PGO_GITEA_BINARY", root.join("container.env").display().to_string())]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("settings (PGO_GITEA_BINARY or control_plane.gitea_binary in local/config.json)"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("is not an executable file"), "{}", text(&out.stderr));

    let out = run(&env(&[]));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("cannot download http://127.0.0.1:9/gitea/"), "{err}");
    assert!(
        err.contains(
            "without internet access, set PGO_GITEA_BINARY or control_plane.gitea_binary in local/config.json"
        ),
        "{err}"
    );
    assert!(
        !cache.join("control-plane").exists() || std::fs::read_dir(cache.join("control-plane")).unwrap().count() == 0
    );
}
