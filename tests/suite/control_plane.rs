//! The control plane's own container `config`, for real: the root's `playbook.yml` configures a
//! real LXC container with the real Gitea and runner (the binaries `tests/run.sh` builds, handed
//! over as `PGO_GITEA_BINARY`, `PGO_GITEA_STATIC` and `PGO_RUNNER_BINARY`). Needs root, lxc,
//! ansible and Debian's mirror from inside the container.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proxmox_gitops::settings::ControlPlaneSettings;
use proxmox_gitops::steps::configure::{ConfigureOptions, Contract, configure};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use support::configure as sup;

const KIND: &str = "cp";
const LOGIN: &str = "pgo-admin";

/// The programs from the environment `tests/run.sh` exports (a clear failure without them).
fn programs() -> ControlPlaneSettings {
    let var = |name: &str| -> PathBuf {
        let v = std::env::var_os(name).unwrap_or_else(|| {
            panic!("{name} is not set: run the tests with ./tests/run.sh, which builds Gitea and its runner")
        });
        PathBuf::from(v)
    };
    ControlPlaneSettings {
        gitea_binary: Some(var("PGO_GITEA_BINARY")),
        gitea_static: Some(var("PGO_GITEA_STATIC")),
        runner_binary: Some(var("PGO_RUNNER_BINARY")),
        tool_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_proxmox-gitops"))),
        ..Default::default()
    }
}

/// A monorepo of the shipped root (`playbook.yml`, `versions.env`, `base/`) with a test
/// `container.env` for `config`.
fn monorepo(root: &Path) {
    let src = support::fs::source_root();
    support::fs::copy_dir(&src.join("base"), &root.join("base"));
    for f in ["playbook.yml", "versions.env"] {
        std::fs::copy(src.join(f), root.join(f)).unwrap();
    }
    std::fs::write(
        root.join("container.env"),
        "ID=9150\nIP=dhcp\nMEMORY=1024\nGITEA_PORT=8080\nSNAPSHOT=/srv/config\nREQUIRES=LOGIN,PASSWORD\n\
         SERVICES=gitea,gitea-runner\n",
    )
    .unwrap();
}

fn options(artifacts: &Path, password: &str) -> ConfigureOptions {
    ConfigureOptions {
        jobs: 1,
        contract: Contract { host: None, ..sup::options(artifacts, &[], LOGIN, password).contract },
        control_plane: programs(),
        deploys_to_pve: false,
        ..sup::options(artifacts, &["config"], LOGIN, password)
    }
}

/// A GET of Gitea's API with basic auth: (status, body).
fn api(url: &str, login: &str, password: &str) -> (u16, serde_json::Value) {
    call(reqwest::Method::GET, url, login, password, None)
}

/// One request to Gitea's API with basic auth and an optional JSON body: (status, body).
fn call(
    method: reqwest::Method,
    url: &str,
    login: &str,
    password: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let mut req = http.request(method, url).basic_auth(login, Some(password));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json::<serde_json::Value>().await.unwrap_or(serde_json::Value::Null);
        (status, body)
    })
}

#[test]
fn config_runs_gitea_and_its_runner_and_a_second_configure_changes_nothing() {
    let _heavy = support::heavy::area("control_plane");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (root, share, artifacts) = (tmp.path().join("repo"), tmp.path().join("share"), tmp.path().join("artifacts"));
    monorepo(&root);
    // Quotes, `$( )` and spaces: a password pasted into a shell string would break or leak.
    let password = format!("Cp'pw $(id) \"{}\"", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lxc_path = support::lxc::lxc_path();
    let lab = rt.block_on(sup::Lab::open(&share, KIND, &support::lxc::ready_base(&lxc_path, "pgotest-cp-base")));
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    let inv = resolve(&ResolveOptions { repo: root.clone(), stage: sup::stage_for(KIND) }, &env).unwrap();
    let spec = inv.container("config").unwrap();
    assert_eq!(spec.engine, proxmox_gitops::inventory::Engine::Ansible);
    let prov = rt.block_on(lab.provision(spec, &artifacts));
    let ip = prov.address.clone().unwrap();

    // 1. The first configure installs both services; no process ever has the password in its
    // arguments (Gitea's CLI takes one only that way: the playbook sets it through the API).
    let ps = sup::PsSampler::start();
    let first = rt.block_on(configure(&inv, &options(&artifacts, &password))).unwrap();
    let lines = ps.finish();
    let c = &first[0];
    assert!(c.ok(), "{:?}\n{}", c.outcome, c.log_tail.join("\n"));
    assert!(c.lib.as_ref().unwrap().changed.unwrap() > 0);
    let url = format!("http://{ip}:8080/");
    assert_eq!(c.outputs.get("CONFIG_GITEA_URL"), Some(&url));
    for l in &lines {
        assert!(!l.contains(&password), "a process had the password in its arguments: {l}");
    }
    let active = lab.attach(&prov.hostname, &["systemctl", "is-active", "gitea", "gitea-runner"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout).split_whitespace().collect::<Vec<_>>(), ["active", "active"]);

    // Gitea answers at the container's address; LOGIN signs in with PASSWORD, as an admin.
    let (status, me) = api(&format!("{url}api/v1/user"), LOGIN, &password);
    assert_eq!(status, 200, "{me}");
    assert_eq!((me["login"].as_str(), me["is_admin"].as_bool()), (Some(LOGIN), Some(true)));
    let (status, _) = api(&format!("{url}api/v1/user"), LOGIN, "not the password");
    assert_eq!(status, 401);
    // The runner registered itself and idles under its own label (no PVE settings: a runner on
    // the host deploys local containers).
    let mut runners = serde_json::Value::Null;
    for _ in 0..30 {
        runners = api(&format!("{url}api/v1/admin/actions/runners"), LOGIN, &password).1;
        if runners["runners"][0]["status"] == "online" {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let runner = &runners["runners"][0];
    assert_eq!(runner["status"], "online", "{runners}");
    assert_eq!(runner["name"].as_str(), Some(prov.hostname.as_str()));
    assert_eq!(runner["labels"][0]["name"], "control-plane", "{runners}");
    // Everything it keeps is under SNAPSHOT: the database, repositories, secrets, registration.
    for f in ["gitea/data/gitea.db", "gitea/secrets/INTERNAL_TOKEN", "gitea/repositories", "runner/.runner"] {
        let path = format!("/srv/config/{f}");
        assert!(lab.attach(&prov.hostname, &["test", "-e", &path]).status.success(), "{path} missing");
    }

    // 2. Again: nothing changes, Gitea is not restarted, the runner not registered again.
    let second = rt.block_on(configure(&inv, &options(&artifacts, &password))).unwrap();
    let c = &second[0];
    assert!(c.ok(), "{:?}\n{}", c.outcome, c.log_tail.join("\n"));
    assert_eq!(c.lib.as_ref().unwrap().changed, Some(0), "the second configure changed something");
    assert_eq!(c.base.as_ref().unwrap().changed, Some(0));
    let runners = api(&format!("{url}api/v1/admin/actions/runners"), LOGIN, &password).1;
    assert_eq!(runners["total_count"], 1, "{runners}");

    // 3. A new PASSWORD is taken over by the next configure.
    let new_password = format!("{password}-2");
    let third = rt.block_on(configure(&inv, &options(&artifacts, &new_password))).unwrap();
    assert!(third[0].ok(), "{:?}\n{}", third[0].outcome, third[0].log_tail.join("\n"));
    assert_eq!(api(&format!("{url}api/v1/user"), LOGIN, &new_password).0, 200);
    assert_eq!(api(&format!("{url}api/v1/user"), LOGIN, &password).0, 401);
}

/// One control-plane test at a time: each runs a Gitea, and this one a whole pipeline.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `cmd` to its end within `timeout` (killed after it): (exit code, stdout, stderr).
fn bounded(cmd: std::process::Command, timeout: Duration) -> (Option<i32>, String, String) {
    let (status, out, err) = support::real_gitea::run_to_end(cmd, None, timeout);
    (status.and_then(|s| s.code()), out, err)
}

/// What `local/run.sh config` leaves on the host besides containers (the host's runner, its
/// directory, the runner's artifacts), removed when the test ends, also when it fails.
struct HostRunner(String);

impl Drop for HostRunner {
    fn drop(&mut self) {
        let dir = Path::new("/var/lib/proxmox-gitops/runner").join(&self.0);
        if let Ok(pid) = std::fs::read_to_string(dir.join("runner.pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
            std::thread::sleep(Duration::from_millis(500));
            let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
        }
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(Path::new("/var/lib/proxmox-gitops/artifacts").join(&self.0));
    }
}

/// The control plane's Gitea URL that configure recorded for `config` in the monorepo `root`'s
/// artifacts (`CONFIG_GITEA_URL`).
fn gitea_url(root: &Path) -> String {
    let text = std::fs::read_to_string(root.join(".proxmox-gitops/configure/config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["outputs"]["CONFIG_GITEA_URL"].as_str().unwrap().to_string()
}

/// Merges the release pull request `number` of `main/mono` through Gitea's API (as the printed
/// `curl` does) and waits, at most 15 minutes, until the run on `release` has completed: that run.
fn merge_release(url: &str, number: i64, password: &str) -> serde_json::Value {
    let merge = format!("{url}api/v1/repos/main/mono/pulls/{number}/merge");
    let (status, body) = call(reqwest::Method::POST, &merge, LOGIN, password, Some(serde_json::json!({"Do": "merge"})));
    assert_eq!(status, 200, "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(900);
    loop {
        let (_, runs) = api(&format!("{url}api/v1/repos/main/mono/actions/runs?limit=10"), LOGIN, password);
        let release = runs["workflow_runs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["head_branch"] == "release" && r["status"] == "completed")
            .cloned();
        if let Some(r) = release {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "the release run did not complete within 15 min: {runs}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A git monorepo of the shipped control plane, `local/`, the workflows and the broker lib (test
/// ids), in two commits. `pve`: the addresses `config` and the broker get on Proxmox VE (the root
/// then mounts the share, as the shipped one does); `None`: DHCP.
fn local_monorepo(root: &Path, pve: Option<(&str, &str)>) {
    let src = support::fs::source_root();
    for d in ["base", "workflows", "local"] {
        support::fs::copy_dir(&src.join(d), &root.join(d));
    }
    for f in ["playbook.yml", "versions.env", "action.yml", ".gitignore", "globals.json"] {
        std::fs::copy(src.join(f), root.join(f)).unwrap();
    }
    for f in ["configure.sh", "README.md"] {
        std::fs::create_dir_all(root.join("libs/broker")).unwrap();
        std::fs::copy(src.join("libs/broker").join(f), root.join("libs/broker").join(f)).unwrap();
    }
    let _ = std::fs::remove_file(root.join("local/config.local.json"));
    let (config_ip, broker_ip, mount) = match pve {
        Some((c, b)) => (format!("{c}/24"), format!("{b}/24"), "MOUNT=share\n"),
        None => ("dhcp".to_string(), "dhcp".to_string(), ""),
    };
    std::fs::write(
        root.join("libs/broker/container.env"),
        format!(
            "ID=9171\nIP={broker_ip}\nMEMORY=256\nBROKER_PORT=1883\nSNAPSHOT=/var/lib/mosquitto\n\
             REQUIRES=LOGIN,PASSWORD\nSERVICES=mosquitto\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("container.env"),
        format!(
            "ID=9170\nIP={config_ip}\nMEMORY=1024\n{mount}GITEA_PORT=8080\nSNAPSHOT=/srv/config\n\
             REQUIRES=LOGIN,PASSWORD\nSERVICES=gitea,gitea-runner\n"
        ),
    )
    .unwrap();
    let git = |args: &[&str]| support::git::git(root, args);
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A", "--", ":!libs"]);
    git(&["commit", "-q", "-m", "the control plane"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "the broker"]);
}

/// `./local/run.sh config` as a user runs it: `config` comes up with Gitea, the monorepo is
/// published into it, and the run ends with the release pull request. Merging it through
/// Gitea's API deploys the broker through the runner on this host; the broker then takes an MQTT
/// login. A second run changes nothing and says so.
#[test]
fn local_run_config_bootstraps_and_the_accepted_pull_request_deploys_the_libs() {
    let _heavy = support::heavy::area("control_plane");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _ = programs();
    let tmp = tempfile::tempdir().unwrap();
    let (root, share) = (tmp.path().join("mono"), tmp.path().join("share"));
    std::fs::create_dir_all(&root).unwrap();
    local_monorepo(&root, None);
    let password = format!("Lr'pw $(id) {}", std::process::id());
    let stage = sup::stage_for("cpl");
    let ct = format!("{stage}-config");
    let _runner = HostRunner(ct.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lxc_path = support::lxc::lxc_path();
    let base = support::lxc::ready_base(&lxc_path, "pgotest-cpl-base");
    // Removes this run's containers (`<stage>-config`, `<stage>-broker`) when it drops.
    let _lab = rt.block_on(sup::Lab::open(&share, "cpl", &base));
    let run = || {
        let mut cmd = std::process::Command::new(root.join("local/run.sh"));
        cmd.arg("config")
            .current_dir(&root)
            .env("PGO_BINARY", env!("CARGO_BIN_EXE_proxmox-gitops"))
            .env("PGO_STAGE", &stage)
            .env("PGO_LXC_BASE", &base)
            .env("LOGIN", LOGIN)
            .env("PASSWORD", &password)
            .env("PROXMOX_SHARE", &share)
            .env("XDG_CACHE_HOME", tmp.path().join("cache"))
            .env_remove("GITHUB_ACTIONS")
            .env_remove("GITEA_ACTIONS");
        bounded(cmd, Duration::from_secs(1200))
    };

    // 1. The bootstrap.
    let (code, out, err) = run();
    assert_eq!(code, Some(0), "local/run.sh config failed:\n{out}\n{err}");
    let url = gitea_url(&root);
    assert!(out.contains(&format!("control plane: Gitea at {url} (login {LOGIN}")), "{out}");
    let pull_line = out.lines().find(|l| l.contains("release pull request")).unwrap_or_else(|| panic!("{out}"));
    let pull_url = pull_line.split_whitespace().last().unwrap();
    assert!(pull_url.starts_with(&format!("{url}main/mono/pulls/")), "{pull_line}");
    let number: i64 = pull_url.rsplit('/').next().unwrap().parse().unwrap();
    assert!(out.contains(&format!("{url}api/v1/repos/main/mono/pulls/{number}/merge")), "{out}");
    assert!(err.contains("starting the host's runner"), "{err}");
    // Its description is the release's plan: the broker is to be created.
    let (_, pull) = api(&format!("{url}api/v1/repos/main/mono/pulls/{number}"), LOGIN, &password);
    let body = pull["body"].as_str().unwrap_or_default();
    assert!(body.contains("broker") && body.contains("create"), "the release pull request shows no plan: {body}");

    // 2. The pull request accepted through Gitea's API: the pipeline on release deploys the
    // broker through the host's runner.
    let run_done = merge_release(&url, number, &password);
    let log = std::fs::read_to_string(format!("/var/lib/proxmox-gitops/runner/{ct}/runner.log")).unwrap_or_default();
    assert_eq!(run_done["conclusion"], "success", "{run_done}\nthe host runner's log:\n{log}");
    let broker: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("/var/lib/proxmox-gitops/artifacts/{ct}/provision/broker.json")).unwrap(),
    )
    .unwrap();
    let ip = broker["address"].as_str().unwrap().to_string();
    let publish = |pw: &str| {
        std::process::Command::new("mosquitto_pub")
            .args(["-h", &ip, "-p", "1883", "-u", LOGIN, "-P", pw, "-t", "pgo/test", "-m", "hi"])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(publish(&password), "the broker refused LOGIN/PASSWORD");
    assert!(!publish("not the password"), "the broker took a wrong password");

    // 3. Again: nothing changes, and the run says so.
    let (code, out, err) = run();
    assert_eq!(code, Some(0), "the second run failed:\n{out}\n{err}");
    assert!(out.contains("nothing to accept: release is up to date with main"), "{out}");
    assert!(!err.contains("starting the host's runner"), "{err}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".proxmox-gitops/configure/config.json")).unwrap())
            .unwrap();
    assert_eq!((config["base"]["changed"].as_u64(), config["lib"]["changed"].as_u64()), (Some(0), Some(0)), "{config}");
}

/// The control plane moved onto Proxmox VE keeps its data and points at itself. A local `config`
/// (real LXC, real Gitea) gets a repository and the organizations' `HOST` variable, as publish
/// leaves them, and its data is snapshotted into the share. Then `deploy` on `release` with the
/// PVE settings (fakepve) creates `config` there; a real LXC container of our own stands in for
/// the PVE-side container at the address `container.env` gives it, so that configure, the
/// restore of `/srv/config` and the new Gitea are real. The new Gitea has the repository and the
/// admin, `HOST` names it, and its runner registered itself with it.
#[test]
fn config_moved_to_pve_comes_up_with_its_data_and_points_host_at_itself() {
    let _heavy = support::heavy::area("control_plane");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let programs = programs();
    let tmp = tempfile::tempdir().unwrap();
    let (root, share) = (tmp.path().join("repo"), tmp.path().join("share"));
    let (local_art, scratch_art, pve_art) =
        (tmp.path().join("local-artifacts"), tmp.path().join("scratch"), tmp.path().join("pve-artifacts"));
    monorepo(&root);
    let password = format!("Mv'pw $(id) {}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lxc_path = support::lxc::lxc_path();
    let lab = rt.block_on(sup::Lab::open(&share, KIND, &support::lxc::ready_base(&lxc_path, "pgotest-cp-base")));
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    let stage = sup::stage_for(KIND);
    let inv = resolve(&ResolveOptions { repo: root.clone(), stage: stage.clone() }, &env).unwrap();
    let spec = inv.container("config").unwrap().clone();

    // 1. The local control plane with what publish leaves in it.
    let local = rt.block_on(lab.provision(&spec, &local_art));
    let first = rt.block_on(configure(&inv, &options(&local_art, &password))).unwrap();
    assert!(first[0].ok(), "{:?}\n{}", first[0].outcome, first[0].log_tail.join("\n"));
    let old_url = format!("http://{}:8080/", local.address.clone().unwrap());
    let post = |url: &str, body: serde_json::Value| {
        let (status, answer) = call(reqwest::Method::POST, url, LOGIN, &password, Some(body));
        assert!(status == 201 || status == 204, "POST {url}: {status} {answer}");
    };
    post(&format!("{old_url}api/v1/orgs"), serde_json::json!({"username": "main"}));
    post(&format!("{old_url}api/v1/orgs/main/repos"), serde_json::json!({"name": "mono", "auto_init": true}));
    post(&format!("{old_url}api/v1/orgs/main/actions/variables/HOST"), serde_json::json!({"value": old_url}));

    // 2. Its data snapshot in the share (what a recreate or `local/run.sh --destroy config` takes).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .arg("--repo")
        .arg(&root)
        .arg("--artifacts")
        .arg(&local_art)
        .args(["--stage", &stage, "snapshot", "--container", "config"])
        .env("PROXMOX_SHARE", &share)
        .env("LOGIN", LOGIN)
        .env("PASSWORD", &password)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS")
        .output()
        .unwrap();
    assert!(out.status.success(), "snapshot: {}", String::from_utf8_lossy(&out.stderr));

    // 3. The PVE-side container's stand-in: a fresh container of ours with config's key pair, at
    // the address the root container.env now gives `config`.
    let mut stand_in = spec.clone();
    stand_in.hostname = format!("{}pve-config", sup::prefix_for(KIND));
    let stand_in = rt.block_on(lab.provision(&stand_in, &scratch_art));
    let new_ip = stand_in.address.clone().unwrap();
    let env_file = std::fs::read_to_string(root.join("container.env")).unwrap();
    std::fs::write(root.join("container.env"), env_file.replace("IP=dhcp", &format!("IP={new_ip}/24"))).unwrap();

    // 4. deploy on release with the PVE settings: fakepve creates `config`, configure restores
    // the data into the stand-in and brings Gitea up there.
    let pve = support::fakepve::FakePve::start();
    pve.add_template();
    let mut pve_env = support::fakepve::cli_env(&pve, &share);
    pve_env.extend([
        ("LOGIN".to_string(), LOGIN.to_string()),
        ("PASSWORD".to_string(), password.clone()),
        ("PGO_STAGE".to_string(), stage.clone()),
        ("PROXMOX_GATEWAY".to_string(), "10.0.3.1".to_string()),
        ("PGO_GITEA_BINARY".to_string(), programs.gitea_binary.clone().unwrap().display().to_string()),
        ("PGO_GITEA_STATIC".to_string(), programs.gitea_static.clone().unwrap().display().to_string()),
        ("PGO_RUNNER_BINARY".to_string(), programs.runner_binary.clone().unwrap().display().to_string()),
    ]);
    let pve_art_arg = pve_art.display().to_string();
    let out = support::fakepve::run_cli(
        &root,
        &["--artifacts", &pve_art_arg, "deploy", "--ref", "refs/heads/release", "-c", "config"],
        &pve_env,
    );
    assert!(
        out.status.success(),
        "deploy onto PVE failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pve.ct_config(9150).unwrap()["hostname"], format!("{stage}-config"));

    // The new Gitea: the same admin and repository, HOST naming it, its runner registered with it.
    let new_url = format!("http://{new_ip}:8080/");
    let (status, repo) = api(&format!("{new_url}api/v1/repos/main/mono"), LOGIN, &password);
    assert_eq!(status, 200, "the repository did not move: {repo}");
    let (_, host) = api(&format!("{new_url}api/v1/orgs/main/actions/variables/HOST"), LOGIN, &password);
    assert_eq!(host["data"].as_str(), Some(new_url.as_str()), "{host}");
    let registration = lab.attach(&stand_in.hostname, &["cat", "/srv/config/runner/.runner"]);
    let registration: serde_json::Value = serde_json::from_slice(&registration.stdout).unwrap();
    assert_eq!(registration["address"].as_str(), Some(new_url.as_str()), "{registration}");
    let mut runners = serde_json::Value::Null;
    for _ in 0..30 {
        runners = api(&format!("{new_url}api/v1/admin/actions/runners"), LOGIN, &password).1;
        let online = runners["runners"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["id"] == registration["id"] && r["status"] == "online" && r["labels"][0]["name"] == "shell");
        if online {
            break;
        }
        runners = serde_json::Value::Null;
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(!runners.is_null(), "the moved control plane's runner is not online with the label shell");
}

/// Host routes to addresses of test containers on a subnet of their own, through `lxcbr0`
/// (the "Proxmox VE network" of a test), removed when the test ends.
struct Routes(Vec<String>);

impl Routes {
    /// Gives the container `name` the extra address `ip` (/24) and routes it from this host.
    fn add(&mut self, lab: &sup::Lab, name: &str, ip: &str) {
        let out = lab.attach(name, &["ip", "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        assert!(out.status.success(), "ip addr add in {name}: {}", String::from_utf8_lossy(&out.stderr));
        let st =
            std::process::Command::new("ip").args(["route", "replace", &format!("{ip}/32"), "dev", "lxcbr0"]).status();
        assert!(st.unwrap().success(), "ip route replace {ip}");
        self.0.push(ip.to_string());
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        for ip in &self.0 {
            let _ =
                std::process::Command::new("ip").args(["route", "del", &format!("{ip}/32"), "dev", "lxcbr0"]).status();
        }
    }
}

/// This host's IPv4 address on `lxcbr0`.
fn bridge_address() -> String {
    let out = std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "dev", "lxcbr0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let word = text.split_whitespace().skip_while(|w| *w != "inet").nth(1).unwrap_or_else(|| panic!("lxcbr0: {text}"));
    word.split('/').next().unwrap().to_string()
}

/// The logs of every job of the Actions run `run` of `main/mono`, for a failure message.
fn job_logs(url: &str, run: &serde_json::Value, password: &str) -> String {
    let (_, jobs) = api(&format!("{url}api/v1/repos/main/mono/actions/runs/{}/jobs", run["id"]), LOGIN, password);
    let mut out = String::new();
    for job in jobs["jobs"].as_array().into_iter().flatten() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let log = rt.block_on(async {
            let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
            let req = http.get(format!("{url}api/v1/repos/main/mono/actions/jobs/{}/logs", job["id"]));
            match req.basic_auth(LOGIN, Some(password)).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            }
        });
        out.push_str(&format!("--- job {} ---\n{log}\n", job["name"]));
    }
    out
}

/// `./local/run.sh config` with the Proxmox VE settings (fakepve on this host's `lxcbr0`
/// address, trusted by its fingerprint): the local control plane's own runner takes the release
/// pull request's pipeline and deploys the broker and `config` itself onto PVE. Real LXC
/// containers of ours stand in for the PVE-side containers at the addresses `container.env`
/// gives them (a subnet of their own, routed through `lxcbr0`), so that the runner's SSH, the
/// broker's configuration, the restore of `/srv/config` and the new Gitea are real. Afterwards
/// the broker takes an MQTT login, the new Gitea has the monorepo and `HOST` names it, and the
/// new control plane holds the key pairs of the containers it takes over.
#[test]
fn local_control_plane_with_pve_settings_deploys_the_libs_and_itself_onto_pve() {
    let _heavy = support::heavy::area("control_plane");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _ = programs();
    let tmp = tempfile::tempdir().unwrap();
    let (root, share) = (tmp.path().join("mono"), tmp.path().join("share"));
    std::fs::create_dir_all(&root).unwrap();
    let (config_ip, broker_ip) = ("10.0.77.10", "10.0.77.11");
    local_monorepo(&root, Some((config_ip, broker_ip)));
    let password = format!("Pv'pw $(id) {}", std::process::id());
    let stage = sup::stage_for("cpp");
    let ct = format!("{stage}-config");
    // Removes the artifacts directory of this stage's runner too.
    let _runner = HostRunner(ct.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lxc_path = support::lxc::lxc_path();
    let base = support::lxc::ready_base(&lxc_path, "pgotest-cpl-base");
    let _lab = rt.block_on(sup::Lab::open(&share, "cpp", &base));
    let pve = support::fakepve::FakePve::start_on(&bridge_address(), 0.0);
    pve.add_template();
    let fingerprint = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&pve.ca)
        .output()
        .unwrap();
    let fingerprint = String::from_utf8_lossy(&fingerprint.stdout).trim().rsplit('=').next().unwrap().to_string();
    let mut env = support::fakepve::cli_env(&pve, &share);
    env.retain(|(k, _)| k != "PROXMOX_CA" && k != "PROXMOX_GATEWAY" && k != "XDG_CACHE_HOME");
    env.extend([
        ("PROXMOX_FINGERPRINT".to_string(), fingerprint),
        ("PROXMOX_GATEWAY".to_string(), "10.0.77.1".to_string()),
    ]);

    // 1. The bootstrap, with the PVE settings: no runner on this host, config's data snapshotted
    // into the share its runner deploys with.
    let mut cmd = std::process::Command::new(root.join("local/run.sh"));
    cmd.arg("config")
        .current_dir(&root)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PGO_BINARY", env!("CARGO_BIN_EXE_proxmox-gitops"))
        .env("PGO_STAGE", &stage)
        .env("PGO_LXC_BASE", &base)
        .env("LOGIN", LOGIN)
        .env("PASSWORD", &password)
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .env_remove("PROXMOX_CA")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS");
    let (code, out, err) = bounded(cmd, Duration::from_secs(1200));
    assert_eq!(code, Some(0), "local/run.sh config failed:\n{out}\n{err}");
    assert!(
        out.contains("merging deploys the libs and config itself onto Proxmox VE through config's own runner"),
        "{out}"
    );
    assert!(!err.contains("starting the host's runner"), "{err}");
    let url = gitea_url(&root);
    let pull_line = out.lines().find(|l| l.contains("release pull request")).unwrap_or_else(|| panic!("{out}"));
    let number: i64 = pull_line.rsplit('/').next().unwrap().trim().parse().unwrap();
    let cshare = share.join("share");
    assert!(
        std::fs::read_dir(cshare.join("snapshots/config")).map(|mut d| d.next().is_some()).unwrap_or(false),
        "no snapshot of config in the share its runner deploys with"
    );

    // 2. The PVE-side containers' stand-ins, with the key pairs of config's share (owned, as
    // every file there, by the runner's user), at the addresses container.env gives.
    let stand_ins = rt.block_on(sup::Lab::open(&cshare, "cpq", &base));
    let mut routes = Routes(Vec::new());
    let senv: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), cshare.display().to_string())].into();
    let inv = resolve(&ResolveOptions { repo: root.clone(), stage: stage.clone() }, &senv).unwrap();
    let mut stand_in = |name: &str, ip: &str| {
        let mut spec = inv.container(name).unwrap().clone();
        spec.hostname = format!("{}{name}", sup::prefix_for("cpq"));
        // Without SHARE_HOST, a PVE container's /share is a directory of its own.
        spec.mounts.clear();
        let p = rt.block_on(stand_ins.provision(&spec, &tmp.path().join("scratch")));
        routes.add(&stand_ins, &p.hostname, ip);
        p.hostname
    };
    let (pve_config, _pve_broker) = (stand_in("config", config_ip), stand_in("broker", broker_ip));
    let st = std::process::Command::new("chown")
        .args(["-R", "--reference"])
        .arg(cshare.join(".keys"))
        .arg(cshare.join(".keys"))
        .status()
        .unwrap();
    assert!(st.success());

    // 3. The pull request accepted: config's runner deploys both onto PVE.
    let run_done = merge_release(&url, number, &password);
    assert_eq!(run_done["conclusion"], "success", "{run_done}\n{}", job_logs(&url, &run_done, &password));
    assert_eq!(pve.ct_config(9171).unwrap()["hostname"], format!("{stage}-broker"));
    assert_eq!(pve.ct_config(9170).unwrap()["hostname"], format!("{stage}-config"));

    // The broker answers on PVE.
    let publish = |pw: &str| {
        std::process::Command::new("mosquitto_pub")
            .args(["-h", broker_ip, "-p", "1883", "-u", LOGIN, "-P", pw, "-t", "pgo/test", "-m", "hi"])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(publish(&password), "the broker on PVE refused LOGIN/PASSWORD");
    assert!(!publish("not the password"), "the broker on PVE took a wrong password");

    // The new control plane: the monorepo as published, HOST naming it, and the key pair of the
    // broker it takes over.
    let new_url = format!("http://{config_ip}:8080/");
    let (status, repo) = api(&format!("{new_url}api/v1/repos/main/mono"), LOGIN, &password);
    assert_eq!(status, 200, "the monorepo did not move: {repo}");
    let (_, host) = api(&format!("{new_url}api/v1/orgs/main/actions/variables/HOST"), LOGIN, &password);
    assert_eq!(host["data"].as_str(), Some(new_url.as_str()), "{host}");
    let key = stand_ins.attach(&pve_config, &["cat", "/share/.keys/9171"]);
    assert!(key.status.success(), "the new control plane has no key pair of the broker");
    assert_eq!(key.stdout, std::fs::read(cshare.join(".keys/9171")).unwrap());
    drop(routes);
}
