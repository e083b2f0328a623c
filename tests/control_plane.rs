//! The control plane's own container `config`, for real: the root's `playbook.yml` configures a
//! real LXC container with the real Gitea and runner (the binaries `tests/run.sh` builds, handed
//! over as `PGO_GITEA_BINARY`, `PGO_GITEA_STATIC` and `PGO_RUNNER_BINARY`). Needs root, lxc,
//! ansible and Debian's mirror from inside the container.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proxmox_gitops::artifact::ArtifactDir;
use proxmox_gitops::settings::ControlPlaneSettings;
use proxmox_gitops::ssh::ConnectOptions;
use proxmox_gitops::steps::configure::{ConfigureOptions, Contract, configure};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use secrecy::SecretString;
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
        containers: vec!["config".into()],
        jobs: 1,
        artifacts: ArtifactDir::new(artifacts),
        contract: Contract {
            host: None,
            login: Some(LOGIN.into()),
            password: Some(SecretString::from(password.to_string())),
        },
        connect: ConnectOptions {
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(60),
            attempts: 6,
        },
        run_timeout: Duration::from_secs(900),
        control_plane: programs(),
        deploys_to_pve: false,
        ..ConfigureOptions::default()
    }
}

/// A GET of Gitea's API with basic auth: (status, body).
fn api(url: &str, login: &str, password: &str) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let resp = http.get(url).basic_auth(login, Some(password)).send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.json::<serde_json::Value>().await.unwrap_or(serde_json::Value::Null);
        (status, body)
    })
}

#[test]
fn config_runs_gitea_and_its_runner_and_a_second_configure_changes_nothing() {
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
