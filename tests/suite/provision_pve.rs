//! Integration tests of `provision` against fakepve (PyPI), started on loopback per test with
//! its own certificate. The SSH wait targets a banner-writing listener on 127.0.0.1; container
//! addresses are 127.0.0.1 — nothing else is ever contacted.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proxmox_gitops::artifact::{self, ArtifactDir};
use proxmox_gitops::backend::pve::Timeouts;
use proxmox_gitops::backend::{self, Backend, PveConnect};
use proxmox_gitops::inventory::{ContainerSpec, IpConfig, Mount};
use proxmox_gitops::model::{Action, ApplyOptions, Change, Outcome, Provision, RecreatePolicy, Resize};
use proxmox_gitops::pve::TlsMode;
use proxmox_gitops::settings::Settings;
use proxmox_gitops::steps::provision as step;
use secrecy::SecretString;
use serde_json::{Value, json};
use support::fakepve::{FakePve, TEMPLATE, TEMPLATE_FILE};
use tokio::io::AsyncWriteExt;

/// A TCP listener on 127.0.0.1 that greets like sshd.
async fn ssh_banner() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2 fake\r\n").await;
        }
    });
    port
}

enum Login {
    Root,
    Token,
}

struct Env {
    pve: FakePve,
    ssh_port: u16,
    share: tempfile::TempDir,
    artifacts: tempfile::TempDir,
}

impl Env {
    async fn new() -> Env {
        Env::scaled(0.0).await
    }

    /// [`Env::new`] on a fakepve whose tasks take `time_scale` real seconds per PVE second.
    async fn scaled(time_scale: f64) -> Env {
        Env {
            pve: FakePve::start_scaled(time_scale),
            ssh_port: ssh_banner().await,
            share: tempfile::tempdir().unwrap(),
            artifacts: tempfile::tempdir().unwrap(),
        }
    }

    fn settings(&self, login: Login) -> Settings {
        let mut settings = self.pve.settings(self.share.path());
        settings.pve.gateway = Some("127.0.0.254".into());
        if let Login::Token = login {
            self.pve.exec("pve.apitokens['root@pam!ci'] = '0b8e5a72-5e0c-4d4b-9a3a-2f4f1d8c9e11'");
            settings.pve.password = None;
            settings.pve.token = Some("ci".to_string());
            settings.pve.secret = Some(SecretString::from("0b8e5a72-5e0c-4d4b-9a3a-2f4f1d8c9e11"));
        }
        settings
    }

    fn connect(&self) -> PveConnect {
        self.pve.connect(Timeouts { lock: Duration::from_secs(10), ..Timeouts::default() })
    }

    fn backend(&self, login: Login) -> Backend {
        backend::open(proxmox_gitops::model::BackendKind::Pve, &self.settings(login), &self.connect()).unwrap()
    }

    fn apply_opts(&self) -> ApplyOptions {
        ApplyOptions {
            share: self.share.path().to_path_buf(),
            wait_ssh: true,
            ssh_port: self.ssh_port,
            ssh_timeout: Duration::from_secs(10),
            no_snapshot: false,
        }
    }

    /// [`Env::new`] with the template on storage `local`.
    async fn with_template() -> Env {
        let env = Env::new().await;
        env.pve.add_template();
        env
    }

    /// Provisions `s` alone: recreate policy never, one job.
    async fn provision_one(&self, backend: &Backend, s: ContainerSpec) -> Vec<Provision> {
        self.provision(backend, vec![s], RecreatePolicy::Never, 1).await
    }

    async fn provision(
        &self,
        backend: &Backend,
        specs: Vec<ContainerSpec>,
        policy: RecreatePolicy,
        jobs: usize,
    ) -> Vec<Provision> {
        let planned = backend::plan_all(backend, specs, policy, jobs).await;
        let dir = ArtifactDir::new(self.artifacts.path());
        step::apply_all(backend, planned, &self.apply_opts(), jobs, &dir).await.unwrap()
    }
}

/// fakepve with the template, a backend logged in as root@pam, and `broker` (vmid 101) created
/// and started.
async fn with_broker() -> (Env, Backend) {
    let env = Env::with_template().await;
    let b = env.backend(Login::Root);
    env.provision_one(&b, spec("broker", 101)).await;
    (env, b)
}

fn spec(name: &str, vmid: u32) -> ContainerSpec {
    support::spec::spec(name, vmid).loopback().resources(2, 1024, 256).build()
}

fn client(b: &Backend) -> &Arc<proxmox_gitops::pve::PveClient> {
    match b {
        Backend::Pve(p) => p.client(),
        Backend::Lxc(_) => panic!("these tests use the pve backend"),
    }
}

/// `UPID:pve1:…:vzcreate:101:root@pam:` → `UPID:pve1:vzcreate:101:root@pam`.
fn short_upid(u: &str) -> String {
    let p: Vec<&str> = u.split(':').collect();
    assert!(p.len() >= 9 && p[0] == "UPID", "not a UPID: {u}");
    format!("UPID:{}:{}:{}:{}", p[1], p[5], p[6], p[7])
}

/// The artifact as JSON with UPIDs shortened, durations zeroed and a `created_at` (checked to be
/// RFC 3339 within the last hour) replaced by `"<time>"`, for whole-artifact asserts.
fn normalised(p: &Provision) -> Value {
    let mut v = artifact::to_value(p);
    if let Some(at) = v.get_mut("created_at") {
        let t =
            time::OffsetDateTime::parse(at.as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
        let age = time::OffsetDateTime::now_utc() - t;
        assert!(age >= time::Duration::ZERO && age < time::Duration::hours(1), "created_at {t}");
        *at = json!("<time>");
    }
    for a in v["actions"].as_array_mut().unwrap() {
        a["duration_ms"] = json!(0);
        if let Some(u) = a["upid"].as_str() {
            a["upid"] = json!(short_upid(u));
        }
    }
    v
}

/// Request paths with UPIDs shortened.
fn paths(reqs: &[(String, String, String)]) -> Vec<String> {
    reqs.iter()
        .map(|(m, p, _)| {
            let p = match p.find("UPID:") {
                Some(i) => {
                    let end = p[i..].find('/').map(|e| i + e).unwrap_or(p.len());
                    format!("{}{}{}", &p[..i], short_upid(&p[i..end]), &p[end..])
                }
                None => p.clone(),
            };
            format!("{m} {p}")
        })
        .collect()
}

fn expected_created(name: &str, vmid: u32, ssh_port: u16, actions: Value) -> Value {
    json!({
        "kind": "provision",
        "schema_version": "1.1",
        "backend": "pve",
        "name": name,
        "node": "pve1",
        "vmid": vmid,
        "hostname": name,
        "address": "127.0.0.1",
        "ssh_port": ssh_port,
        "plan": {"name": name, "vmid": vmid, "hostname": name, "action": "create", "start": true, "node": "pve1",
                 "policy": "never"},
        "actions": actions,
        "warnings": [],
        "status": "running",
        "created": true,
        "created_at": "<time>",
        "protected_by": null,
        "inputs_digest": null,
        "result": "ok"
    })
}

fn create_actions(vmid: u32, ssh_port: u16, user: &str) -> Value {
    json!([
        {"action": "create", "upid": format!("UPID:pve1:vzcreate:{vmid}:{user}"), "exit_status": "OK", "duration_ms": 0,
         "detail": format!("local:vztmpl/{TEMPLATE_FILE}")},
        {"action": "start", "upid": null, "exit_status": null, "duration_ms": 0, "detail": "with the create (start=1)"},
        {"action": "wait-ssh", "upid": null, "exit_status": null, "duration_ms": 0, "detail": format!("127.0.0.1:{ssh_port}")}
    ])
}

/// fakepve with the template, recording requests from the start; `broker` (vmid 101) created
/// from nothing with `login`, and its artifact checked whole (its tasks owned by `user`).
async fn created_broker(login: Login, user: &str) -> (Env, Backend, Vec<Provision>) {
    let env = Env::with_template().await;
    env.pve.requests(true);
    let b = env.backend(login);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    assert_eq!(
        normalised(&out[0]),
        expected_created("broker", 101, env.ssh_port, create_actions(101, env.ssh_port, user))
    );
    (env, b, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn create_from_nothing_with_ticket_auth() {
    let (env, _b, out) = created_broker(Login::Root, "root@pam").await;
    // The artifact on disk is the same document.
    let on_disk: Provision = artifact::read(&env.artifacts.path().join("provision/broker.json")).unwrap();
    assert_eq!(on_disk, out[0]);
    // Exactly these requests: one login, the cluster's view (where the container is; the only
    // online node; root@pam sees every guest there, so a vmid it does not list has no config to
    // read), arch, template check, create (with our lease in its description, and `start=1`), the node's earlier creates (nothing learned yet: a first
    // guess of the task's duration), the task's status (time scale 0: done at the first poll),
    // the status saying it runs, and the lease's release (read, write with the digest).
    assert_eq!(
        paths(&env.pve.requests(false)),
        vec![
            "POST /access/ticket",
            "GET /cluster/resources",
            "GET /nodes/pve1/status",
            "GET /nodes/pve1/storage/local/content",
            "POST /nodes/pve1/lxc",
            "GET /nodes/pve1/tasks",
            "GET /nodes/pve1/tasks/UPID:pve1:vzcreate:101:root@pam/status",
            "GET /nodes/pve1/lxc/101/status/current",
            "GET /nodes/pve1/lxc/101/config",
            "PUT /nodes/pve1/lxc/101/config",
        ]
    );
    let create = env.pve.writes(false).into_iter().find(|(m, p, _)| m == "POST" && p == "/nodes/pve1/lxc").unwrap();
    assert!(
        create.2.contains("start=1") || create.2.contains("\"start\": 1") || create.2.contains("\"start\":1"),
        "{create:?}"
    );
    // The password went in the login body only (fakepve records it redacted), never a URL.
    let reqs = env.pve.requests(false);
    assert!(
        reqs.iter().all(|(_, p, b)| !p.contains(support::fakepve::PASSWORD) && !b.contains(support::fakepve::PASSWORD)),
        "{reqs:?}"
    );
    // What PVE holds now.
    let key = std::fs::read_to_string(env.share.path().join(".keys/101.pub")).unwrap();
    let cfg = env.pve.ct_config(101).unwrap();
    let net0 = cfg["net0"].as_str().unwrap().to_string();
    assert!(net0.starts_with("name=eth0,bridge=vmbr0,gw=127.0.0.254,hwaddr="), "{net0}");
    assert!(net0.ends_with(",ip=127.0.0.1/8,type=veth"), "{net0}");
    assert_eq!(
        cfg,
        json!({
            "hostname": "broker", "cores": 2, "memory": 1024, "swap": 256, "net0": net0, "unprivileged": 1, "onboot": 1,
            "description": format!("managed by proxmox-gitops: lib `broker`\nostemplate: local:vztmpl/{TEMPLATE_FILE}\n"),
            "rootfs": "local-lvm:vm-101-disk-0,size=8G", "ostype": "debian", "arch": "amd64", "status": "running",
            "tags": "proxmox-gitops"
        })
    );
    // The create request carried the container's public key.
    let create_body = &reqs.iter().find(|(m, p, _)| m == "POST" && p == "/nodes/pve1/lxc").unwrap().2;
    let sent: BTreeMap<String, String> = url::form_urlencoded::parse(create_body.as_bytes()).into_owned().collect();
    assert_eq!(sent["ssh-public-keys"], key.trim());
    assert_eq!(sent["rootfs"], "local-lvm:8");
    assert_eq!(sent["tags"], "proxmox-gitops", "the ownership tag");
    // The create decides who works on the vmid: it carries this run's lease, released at the end.
    let lease = sent["description"].lines().nth(2).unwrap_or_default().to_string();
    assert!(lease.starts_with("proxmox-gitops lease: ") && lease.contains(" until "), "{sent:?}");
    let release = reqs.iter().rfind(|(m, _, _)| m == "PUT").unwrap();
    let released: BTreeMap<String, String> = url::form_urlencoded::parse(release.2.as_bytes()).into_owned().collect();
    assert_eq!(released.keys().collect::<Vec<_>>(), vec!["description", "digest"]);
    assert!(!released["description"].contains("lease"), "{released:?}");
    assert!(!sent.contains_key("features"), "features only when set: {sent:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_template_is_downloaded_once_for_concurrent_creates() {
    let env = Env::new().await;
    let b = env.backend(Login::Root);
    let specs = vec![spec("a", 201), spec("b", 202), spec("c", 203)];
    let out = env.provision(&b, specs, RecreatePolicy::Never, 3).await;
    assert!(out.iter().all(|p| p.outcome == Outcome::Ok), "{out:#?}");
    let downloads: Vec<&Provision> = out.iter().filter(|p| p.actions.iter().any(|a| a.action == "download")).collect();
    assert_eq!(downloads.len(), 1, "one container downloads, the others wait for it");
    let d = downloads[0].actions.iter().find(|a| a.action == "download").unwrap();
    assert_eq!(d.detail.as_deref(), Some(format!("local:vztmpl/{TEMPLATE_FILE}").as_str()));
    assert_eq!(d.exit_status.as_deref(), Some("OK"));
    let reqs = env.pve.requests(false);
    let dl: Vec<&(String, String, String)> = reqs.iter().filter(|(_, p, _)| p.ends_with("/download-url")).collect();
    assert_eq!(dl.len(), 1);
    let body: BTreeMap<String, String> = url::form_urlencoded::parse(dl[0].2.as_bytes()).into_owned().collect();
    assert_eq!(body["url"], format!("https://download.proxmox.com/images/system/{TEMPLATE_FILE}"));
    assert_eq!(body["checksum"], support::fakepve::template_sha512(TEMPLATE_FILE));
    assert_eq!(body["checksum-algorithm"], "sha512");
    assert_eq!(body["content"], "vztmpl");
    assert_eq!(body["filename"], TEMPLATE_FILE);
    for vmid in [201, 202, 203] {
        assert_eq!(env.pve.ct_config(vmid).unwrap()["status"], "running");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rerun_changes_nothing_and_writes_nothing() {
    let (env, b) = with_broker().await;
    env.pve.requests(true);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    assert_eq!(p.plan.action, Action::Nothing);
    assert!(!p.plan.start);
    assert!(!p.created);
    assert_eq!(p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(), vec!["wait-ssh"]);
    assert_eq!(env.pve.writes(false), vec![], "a converged container sees no write");
    // Reads only (pending and status are fetched concurrently, so compare sorted).
    let mut got = paths(&env.pve.requests(false));
    got.sort();
    assert_eq!(
        got,
        vec![
            "GET /cluster/resources",
            "GET /nodes/pve1/lxc/101/config",
            "GET /nodes/pve1/lxc/101/pending",
            "GET /nodes/pve1/lxc/101/status/current"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_change_is_applied_in_place_with_the_digest() {
    let (env, b) = with_broker().await;
    env.pve.requests(true);
    let mut s = spec("broker", 101);
    s.memory_mib = 2048;
    let out = env.provision_one(&b, s).await;
    let p = &out[0];
    assert_eq!(
        p.plan.action,
        Action::Update {
            changes: vec![Change { key: "memory".into(), from: Some("1024".into()), to: Some("2048".into()) }],
            resizes: vec![],
            reboot_needed: false,
        }
    );
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(), vec!["config", "wait-ssh"]);
    assert_eq!(p.actions[0].detail.as_deref(), Some("memory: 1024 → 2048"));
    // Lease, change (with the digest read after the lease), release.
    let writes = env.pve.writes(false);
    assert_eq!(paths(&writes), vec!["PUT /nodes/pve1/lxc/101/config"; 3], "{writes:?}");
    assert!(writes[0].2.contains("proxmox-gitops+lease%3A"), "{writes:?}");
    let (m, path, body) = &writes[1];
    assert_eq!((m.as_str(), path.as_str()), ("PUT", "/nodes/pve1/lxc/101/config"));
    let sent: BTreeMap<String, String> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    assert_eq!(sent.keys().cloned().collect::<Vec<_>>(), vec!["digest".to_string(), "memory".to_string()]);
    assert_eq!(sent["memory"], "2048");
    assert_eq!(env.pve.ct_config(101).unwrap()["memory"], 2048);
    assert!(!p.created);
}

#[tokio::test(flavor = "multi_thread")]
async fn disk_grow_is_a_resize_not_a_rootfs_put() {
    let (env, b) = with_broker().await;
    env.pve.requests(true);
    let mut s = spec("broker", 101);
    s.rootfs.size_gib = 12;
    let out = env.provision_one(&b, s).await;
    let p = &out[0];
    assert_eq!(
        p.plan.action,
        Action::Update {
            changes: vec![],
            resizes: vec![Resize { disk: "rootfs".into(), from_gib: 8, to_gib: 12 }],
            reboot_needed: false
        }
    );
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    let writes = env.pve.writes(false);
    assert_eq!(
        paths(&writes),
        vec!["PUT /nodes/pve1/lxc/101/config", "PUT /nodes/pve1/lxc/101/resize", "PUT /nodes/pve1/lxc/101/config"],
        "the resize, under our lease"
    );
    assert_eq!(writes[1].2, "disk=rootfs&size=12G");
    assert_eq!(env.pve.ct_config(101).unwrap()["rootfs"], "local-lvm:vm-101-disk-0,size=12G");
    assert_eq!(
        normalised(p)["actions"][0],
        json!({"action": "resize", "upid": "UPID:pve1:resize:101:root@pam", "exit_status": "OK", "duration_ms": 0, "detail": "rootfs → 12G"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn template_change_is_refused_without_allow_recreate_and_recreated_with_it() {
    let (env, _b) = with_broker().await;
    // A note someone typed into the container's description in PVE's UI.
    env.pve.exec("pve.ct(101).config['description'] += 'Backups: ask Bob\\n'");
    // The next release uses another template.
    let mut settings = env.settings(Login::Root);
    settings.pve.template = Some("debian-13-standard_13.2-1".into());
    let b2 = backend::open(proxmox_gitops::model::BackendKind::Pve, &settings, &env.connect()).unwrap();
    env.pve.requests(true);
    let out = env.provision_one(&b2, spec("broker", 101)).await;
    let p = &out[0];
    let reason = format!(
        "ostemplate changes from local:vztmpl/{TEMPLATE_FILE} to local:vztmpl/debian-13-standard_13.2-1_amd64.tar.zst"
    );
    assert_eq!(p.plan.action, Action::refused_recreate(vec![reason.clone()]));
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert!(error.contains("--allow-recreate") && error.contains(&reason), "{error}");
    assert_eq!(p.actions, vec![]);
    assert_eq!(paths(&env.pve.writes(false)), vec!["POST /access/ticket"], "nothing but the new session's login");
    let before = env.pve.ct_config(101).unwrap();
    assert_eq!(before["status"], "running");

    // With --allow-recreate: shutdown, destroy (purge), download, create, start.
    env.pve.requests(true);
    let out = env.provision(&b2, vec![spec("broker", 101)], RecreatePolicy::WhenNeeded, 1).await;
    let p = &out[0];
    assert_eq!(p.plan.action, Action::Recreate { reasons: vec![reason] });
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(
        p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        vec!["download", "shutdown", "destroy", "create", "start", "wait-ssh"]
    );
    assert!(p.created);
    // The lib declares no data: nothing to snapshot, and the artifact says so.
    assert_eq!(p.protected_by.as_deref(), Some("none (no SNAPSHOT paths)"));
    let destroy = env.pve.writes(false).into_iter().find(|(m, _, _)| m == "DELETE").unwrap();
    assert_eq!(destroy.1, "/nodes/pve1/lxc/101");
    let cfg = env.pve.ct_config(101).unwrap();
    assert!(cfg["description"].as_str().unwrap().contains("debian-13-standard_13.2-1_amd64.tar.zst"), "{cfg}");
    assert!(cfg["description"].as_str().unwrap().ends_with("\nBackups: ask Bob\n"), "the note goes along: {cfg}");
    assert_eq!(cfg["status"], "running");
}

/// A container recreated by one run and left alone by the next (configure did not run in
/// between) still has its new host key accepted: `created` says what each run did, and the time
/// of the recreation (`created_at`) is carried over, so a key recorded before it is replaced and
/// one recorded after it is not.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_changes_nothing_keeps_the_time_of_the_recreation_for_the_host_key() {
    use proxmox_gitops::ssh::recreated_since_recorded;
    let (env, _b) = with_broker().await;
    let dir = ArtifactDir::new(env.artifacts.path());
    let first: Provision = artifact::read(&dir.provision("broker")).unwrap();
    let first_at = first.created_at.expect("the create is timed");
    // `configure` recorded the first container's key.
    let kh = dir.known_hosts("broker");
    std::fs::create_dir_all(kh.parent().unwrap()).unwrap();
    std::fs::write(&kh, "127.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
        .unwrap();
    let recorded = std::time::SystemTime::now() - Duration::from_secs(5);
    std::fs::File::options().write(true).open(&kh).unwrap().set_modified(recorded).unwrap();
    // A new template: recreated with --allow-recreate.
    let mut settings = env.settings(Login::Root);
    settings.pve.template = Some("debian-13-standard_13.2-1".into());
    let b2 = backend::open(proxmox_gitops::model::BackendKind::Pve, &settings, &env.connect()).unwrap();
    let recreated = env.provision(&b2, vec![spec("broker", 101)], RecreatePolicy::WhenNeeded, 1).await;
    assert!(matches!(recreated[0].plan.action, Action::Recreate { .. }), "{:#?}", recreated[0]);
    assert!(recreated[0].created);
    let recreated_at = recreated[0].created_at.expect("the recreate is timed");
    assert!(recreated_at > first_at);
    // configure does not run; the next two provision runs find nothing to do.
    for _ in 0..2 {
        let again = env.provision_one(&b2, spec("broker", 101)).await;
        assert_eq!(again[0].plan.action, Action::Nothing, "{:#?}", again[0]);
        assert!(!again[0].created, "`created` still says what this run did");
        assert_eq!(again[0].created_at, Some(recreated_at));
    }
    let prov: Provision = artifact::read(&dir.provision("broker")).unwrap();
    assert_eq!(prov.created_at, Some(recreated_at), "written as such");
    assert!(recreated_since_recorded(prov.created_at, &kh), "the key recorded before the recreation is replaced");
    // Once configure recorded the new key, a later change is refused again.
    std::fs::File::options().write(true).open(&kh).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
    assert!(!recreated_since_recorded(prov.created_at, &kh), "the key recorded after it is kept");
    // Destroyed: no creation is known any more, and none is carried into a later artifact.
    let destroyed = proxmox_gitops::steps::destroy::destroy_all(
        &b2,
        &[spec("broker", 101)],
        &proxmox_gitops::steps::destroy::DestroyOptions { share: env.share.path().to_path_buf(), no_snapshot: false },
        &dir,
    )
    .await
    .unwrap();
    assert!(destroyed[0].destroyed, "{:#?}", destroyed[0]);
    let prov: Provision = artifact::read(&dir.provision("broker")).unwrap();
    assert_eq!((prov.status.as_deref(), prov.created_at), (Some("destroyed"), None));
}

#[tokio::test(flavor = "multi_thread")]
async fn api_token_auth_creates_without_ticket_or_csrf() {
    let (env, b, _out) = created_broker(Login::Token, "root@pam!ci").await;
    assert!(env.pve.requests(false).iter().all(|(_, p, _)| p != "/access/ticket"));
    assert_eq!(client(&b).login_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_csrf_token_logs_in_again_once() {
    let env = Env::with_template().await;
    let b = env.backend(Login::Root);
    // Log in (a read), then make PVE refuse the session's CSRF token on writes.
    let plan = b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap();
    env.pve.exec("for t in pve.tickets.values():\n    t['csrf'] = 'refused'");
    env.pve.requests(true);
    let dir = ArtifactDir::new(env.artifacts.path());
    let p = b.apply(&spec("broker", 101), &plan, &env.apply_opts(), &ArtifactDir::new(env.artifacts.path())).await;
    let _ = dir;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(client(&b).login_count(), 2);
    let got = paths(&env.pve.requests(false));
    assert_eq!(
        &got[..4],
        &[
            "GET /nodes/pve1/storage/local/content",
            "POST /nodes/pve1/lxc",
            "POST /access/ticket",
            "POST /nodes/pve1/lxc"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_is_verified_without_the_ca_it_fails_and_pinning_works() {
    let env = Env::with_template().await;
    let mut connect = env.connect();
    connect.tls = TlsMode::System;
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    let e = b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("POST /access/ticket") && msg.to_lowercase().contains("certificate"), "{msg}");
    assert!(env.pve.requests(false).is_empty(), "no request got through");
    // The refusal names the certificate fakepve really presents, as openssl computes it, and the
    // exact setting that trusts it.
    let presented = openssl_fingerprint(&env.pve.ca);
    assert!(msg.lines().next().unwrap().ends_with(&format!("PROXMOX_FINGERPRINT={presented}")), "{msg}");
    assert!(msg.contains("PROXMOX_CA="), "{msg}");

    // Pinning the certificate's SHA-256 works; another fingerprint fails.
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    use sha2::Digest;
    let der = CertificateDer::from_pem_file(&env.pve.ca).unwrap();
    let fp: [u8; 32] = sha2::Sha256::digest(der.as_ref()).into();
    connect.tls = TlsMode::Fingerprint(fp);
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    assert_eq!(b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap().action, Action::Create);
    connect.tls = TlsMode::Fingerprint([7; 32]);
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    let msg = format!("{:#}", b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap_err());
    assert!(msg.contains("does not match the pinned --pve-fingerprint"), "{msg}");
    // A renewed certificate: the message says which fingerprint to pin now.
    assert!(msg.contains(&format!("PROXMOX_FINGERPRINT={presented}")), "{msg}");
}

/// `openssl x509 -fingerprint -sha256` of the PEM certificate at `pem`: `AA:BB:…`.
fn openssl_fingerprint(pem: &std::path::Path) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // `sha256 Fingerprint=AA:BB:…` (the label's case varies between OpenSSL versions).
    let text = String::from_utf8(out.stdout).unwrap();
    let fp = text.trim().rsplit_once('=').expect("Fingerprint=").1.to_string();
    assert_eq!(fp.len(), 32 * 3 - 1, "{text}");
    fp
}

#[tokio::test(flavor = "multi_thread")]
async fn root_only_option_under_a_token_fails_before_any_api_call() {
    let env = Env::new().await;
    let b = env.backend(Login::Token);
    env.pve.requests(true);
    let mut s = spec("nas", 120);
    s.mounts = vec![Mount::Bind { host_path: "/srv/media".into(), container_path: "/media".into() }];
    let out = env.provision_one(&b, s.clone()).await;
    // apply() refuses too, before any request, even when handed a plan.
    let plan = proxmox_gitops::model::ContainerPlan::new("nas", 120, "nas", Action::Create, true);
    let direct = b.apply(&s, &plan, &env.apply_opts(), &ArtifactDir::new(env.artifacts.path())).await;
    assert_eq!(direct.outcome, out[0].outcome);
    assert_eq!(direct.node, None);
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert_eq!(
        error,
        "nas (vmid 120): mp0 (bind mount /srv/media → /media) — PVE allows this option only to root@pam logged in with a password, \
         and the API identity is `root@pam!ci`. Fix: set PROXMOX_USER=root@pam with PROXMOX_PASSWORD (ticket auth), or remove it \
         from MOUNT/FEATURES in libs/nas/container.env"
    );
    assert_eq!(env.pve.requests(false), vec![], "not a single API call");
    assert!(env.artifacts.path().join("provision/nas.json").is_file());
}

#[tokio::test(flavor = "multi_thread")]
async fn pve_validation_errors_are_surfaced_with_fields() {
    let env = Env::with_template().await;
    let mut settings = env.settings(Login::Root);
    settings.pve.gateway = Some("not-an-ip".into());
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &settings, &env.connect()).unwrap();
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(
        error.starts_with(
            "cannot create CT 101 on node pve1: POST /nodes/pve1/lxc: HTTP 400: Parameter verification failed. (net0: "
        ),
        "{error}"
    );
    assert!(error.contains("gw"), "{error}");
    assert_eq!(out[0].actions, vec![]);
    assert!(env.pve.ct_config(101).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn locked_container_is_retried_until_the_lock_clears() {
    let (env, b) = with_broker().await;
    // A backup lock (no task) that clears after a moment: planned once it has cleared.
    env.pve.exec(
        "pve.snapshot_lock(101, 'backup')\nasync def later():\n    await asyncio.sleep(0.8)\n    pve.unlock(101)\nasyncio.ensure_future(later())",
    );
    let mut s = spec("broker", 101);
    s.cores = 4;
    env.pve.requests(true);
    let out = env.provision_one(&b, s.clone()).await;
    assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
    assert!(out[0].warnings.iter().any(|w| w.contains("locked (backup)")), "{:?}", out[0].warnings);
    let puts = env.pve.writes(false).into_iter().filter(|(m, _, _)| m == "PUT").count();
    assert_eq!(puts, 3, "planned after the lock cleared: the lease, the change, the release");
    assert_eq!(env.pve.ct_config(101).unwrap()["cores"], 4);

    // A lock that never clears fails after the bounded wait, naming the lock.
    env.pve.exec("pve.snapshot_lock(101, 'snapshot')");
    let mut connect = env.connect();
    connect.timeouts.lock = Duration::from_secs(1);
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    s.cores = 3;
    let out = env.provision_one(&b, s).await;
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(error.contains("CT is locked (snapshot)"), "{error}");
}

/// PVE's other lock wording, `can't lock file '…/pve-config-101.lock' - got timeout` (another
/// writer holds the config lock), is waited out like `CT is locked`.
#[tokio::test(flavor = "multi_thread")]
async fn config_lock_timeout_is_retried() {
    let (env, b) = with_broker().await;
    env.pve.exec("pve.fail('PUT', '/nodes/pve1/lxc/101/config', error='config_lock_timeout', times=2)");
    let mut s = spec("broker", 101);
    s.cores = 4;
    env.pve.requests(true);
    let out = env.provision_one(&b, s).await;
    assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
    let puts = env.pve.writes(false).into_iter().filter(|(m, _, _)| m == "PUT").count();
    assert_eq!(puts, 5, "two PUTs (of the lease) met the config lock, then the lease, the change and the release");
    assert_eq!(env.pve.ct_config(101).unwrap()["cores"], 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn task_error_fails_with_the_log_tail() {
    let (env, b) = with_broker().await;
    env.pve.exec("ct = pve.ct(101)\nct.status = 'stopped'\nct.pid = None\nct.start_error = \"startup for container '101' failed\"");
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    assert_eq!(p.plan.action, Action::Nothing);
    assert!(p.plan.start);
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    // The remedy names the command that shows LXC's own log of the start.
    assert!(
        error
            .starts_with("cannot start CT 101 on node pve1; run `pct start 101 --debug` on node pve1: task UPID:pve1:"),
        "{error}"
    );
    assert!(error.contains(":vzstart:101:root@pam: failed: startup for container '101' failed"), "{error}");
    assert!(error.contains("task log (last 2 lines):\n    startup for container '101' failed\n    TASK ERROR: startup for container '101' failed"), "{error}");
    assert_eq!(p.status, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_ticket_mid_run_is_renewed_once() {
    let env = Env::with_template().await;
    let b = env.backend(Login::Root);
    let specs = vec![spec("a", 301), spec("b", 302)];
    let planned = backend::plan_all(&b, specs, RecreatePolicy::Never, 2).await;
    env.pve.exec("pve.revoke_tickets()");
    let out =
        step::apply_all(&b, planned, &env.apply_opts(), 2, &ArtifactDir::new(env.artifacts.path())).await.unwrap();
    assert!(out.iter().all(|p| p.outcome == Outcome::Ok), "{out:#?}");
    assert_eq!(client(&b).login_count(), 2, "both containers share one renewed session");
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_percent_dropped_connections_still_converge() {
    let env = Env::with_template().await;
    env.pve.exec("pve.flaky_network(drop_rate=0.2, seed=7)");
    let b = env.backend(Login::Root);
    let specs: Vec<ContainerSpec> = (0..6).map(|i| spec(&format!("ct{i}"), 400 + i)).collect();
    let out = env.provision(&b, specs.clone(), RecreatePolicy::Never, 3).await;
    assert!(out.iter().all(|p| p.outcome == Outcome::Ok), "{out:#?}");
    // fakepve records only the requests it answered: the client sent more (the dropped ones,
    // repeated).
    let answered = env.pve.exec("result = len(pve.requests)").as_u64().unwrap();
    assert!(client(&b).request_count() > answered, "sent {} answered {answered}", client(&b).request_count());
    for i in 0..6 {
        assert_eq!(env.pve.ct_config(400 + i).unwrap()["status"], "running");
    }
    // And a second run over the flaky network is a no-op.
    let out = env.provision(&b, specs, RecreatePolicy::Never, 3).await;
    assert!(out.iter().all(|p| p.outcome == Outcome::Ok && p.plan.action == Action::Nothing), "{out:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_containers_in_parallel_share_one_session() {
    let env = Env::with_template().await;
    let b = env.backend(Login::Root);
    let specs: Vec<ContainerSpec> = (0..10).map(|i| spec(&format!("app{i}"), 500 + i)).collect();
    let out = env.provision(&b, specs, RecreatePolicy::Never, 10).await;
    assert_eq!(out.len(), 10);
    for (i, p) in out.iter().enumerate() {
        let name = format!("app{i}");
        assert_eq!(
            normalised(p),
            expected_created(
                &name,
                500 + i as u32,
                env.ssh_port,
                create_actions(500 + i as u32, env.ssh_port, "root@pam")
            )
        );
        let on_disk: Provision = artifact::read(&env.artifacts.path().join(format!("provision/{name}.json"))).unwrap();
        assert_eq!(&on_disk, p);
    }
    assert_eq!(client(&b).login_count(), 1);
    let reqs = env.pve.requests(false);
    let count = |path: &str| reqs.iter().filter(|(_, p, _)| p == path).count();
    assert_eq!(count("/nodes/pve1/status"), 1, "the arch is read once for all containers");
    // Where each container is: one read of the cluster for the run's plans (a planning round;
    // they were all made before the first write anyway), not one per container.
    assert_eq!((count("/cluster/resources"), count("/nodes")), (1, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_shows_the_live_action_without_changing_anything() {
    let (env, b) = with_broker().await;
    let mut big = spec("broker", 101);
    big.memory_mib = 4096;
    let inv = proxmox_gitops::inventory::Inventory {
        root: env.artifacts.path().to_path_buf(),
        stage: "main".into(),
        head: None,
        containers: vec![big, spec("new", 102)],
        submodules: vec![],
        globals: BTreeMap::new(),
        tasks: vec![],
        configs: vec![],
        base: None,
        libraries: None,
        settings: env.settings(Login::Root).public(),
    };
    env.pve.requests(true);
    let mut plan = proxmox_gitops::steps::plan::plan(&inv, "refs/heads/release", &[]).unwrap();
    proxmox_gitops::steps::plan::with_live_state(&mut plan, &inv, &b, RecreatePolicy::Never, 2).await;
    let mut v = artifact::to_value(&plan);
    // The existing CT's config digest is recorded (for `deploy --plan`); the new one has none.
    let digest = v["containers"][0].as_object_mut().unwrap().remove("config_digest");
    assert!(digest.as_ref().and_then(|d| d.as_str()).is_some_and(|d| d.len() == 40), "{digest:?}");
    assert_eq!(
        v["containers"],
        json!([
            {"name": "broker", "hostname": "broker", "vmid": 101, "steps": ["provision", "configure"],
             "provision": {"name": "broker", "vmid": 101, "hostname": "broker", "action": "update",
                           "changes": [{"key": "memory", "from": "1024", "to": "4096"}], "resizes": [], "reboot_needed": false, "start": false,
                           "node": "pve1", "policy": "never"},
             "settings": [{"setting": "MEMORY", "from": "1024", "to": "4096"}]},
            {"name": "new", "hostname": "new", "vmid": 102, "steps": ["provision", "configure"],
             "provision": {"name": "new", "vmid": 102, "hostname": "new", "action": "create", "start": true, "node": "pve1",
                           "policy": "never"}}
        ])
    );
    assert_eq!(env.pve.writes(false), vec![]);
}

/// A std-thread SSH banner listener for tests that run the binary.
fn ssh_banner_thread() -> u16 {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2 fake\r\n");
        }
    });
    port
}

/// A monorepo holding one lib, `broker`, whose `container.env` is `container_env`, and a share,
/// for the tests that run the binary: (repo, share).
fn broker_repo(container_env: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = tempfile::tempdir().unwrap();
    let share = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("libs/broker")).unwrap();
    std::fs::write(repo.path().join("libs/broker/container.env"), container_env).unwrap();
    (repo, share)
}

/// Runs the binary with `args` and `--repo <repo>` against `pve`: the environment cleared but
/// for `PATH`, root@pam / secret, `template` on storage `local`, `share`, and `env` on top.
/// Returns (exit code, stdout, stderr).
fn run_cli(
    pve: &FakePve,
    repo: &std::path::Path,
    share: &std::path::Path,
    template: &str,
    env: &[(&str, &std::ffi::OsStr)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(args)
        .arg("--repo")
        .arg(repo)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PROXMOX_HOST", "127.0.0.1")
        .env("PROXMOX_PORT", pve.port.to_string())
        .env("PROXMOX_USER", "root@pam")
        .env("PROXMOX_PASSWORD", support::fakepve::PASSWORD)
        .env("PROXMOX_TEMPLATE", template)
        .env("PROXMOX_STORAGE", "local")
        .env("PROXMOX_SHARE", share)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_plan_then_provision_then_converged() {
    let pve = FakePve::start();
    pve.add_template();
    let ssh = ssh_banner_thread();
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\n");
    let outputs = repo.path().join("github_output");
    let env = [("PROXMOX_GATEWAY", "127.0.0.254".as_ref()), ("GITHUB_OUTPUT", outputs.as_os_str())];
    let run = |args: &[&str]| run_cli(&pve, repo.path(), share.path(), TEMPLATE, &env, args);
    let ca = pve.ca.to_str().unwrap().to_string();
    let ssh_port = ssh.to_string();

    let (code, stdout, stderr) = run(&["plan", "--ref", "refs/heads/release", "--pve-ca", &ca]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("broker") && l.contains("provision + configure") && l.ends_with("create")),
        "{stdout}"
    );
    assert_eq!(pve.writes(false).iter().filter(|(_, p, _)| p != "/access/ticket").count(), 0);

    let (code, _, stderr) = run(&["provision", "--pve-ca", &ca]);
    assert_eq!(code, Some(2), "neither --container nor --all: {stderr}");
    assert!(stderr.contains("--container NAME (repeatable) or --all"), "{stderr}");

    let (code, _, stderr) = run(&["provision", "--all"]);
    assert_eq!(code, Some(1), "system roots do not trust fakepve's certificate: {stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    let presented = openssl_fingerprint(&pve.ca);
    assert!(stderr.contains(&format!("PROXMOX_FINGERPRINT={presented}")), "{stderr}");
    // … and that setting, copied as printed, is what makes the next run work.
    let (code, stdout, stderr) =
        run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[("PROXMOX_FINGERPRINT", presented.as_ref())], &["plan"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(!stderr.contains(support::fakepve::PASSWORD), "{stderr}");

    let (code, stdout, stderr) = run(&["provision", "--all", "--pve-ca", &ca, "--ssh-port", &ssh_port]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let plan_line = stdout.lines().find(|l| l.starts_with("broker")).unwrap();
    assert!(plan_line.contains("create"), "the plan is printed first: {stdout}");
    let art: Provision = artifact::read(&repo.path().join(".proxmox-gitops/provision/broker.json")).unwrap();
    assert_eq!(art.outcome, Outcome::Ok);
    assert!(art.created);
    let outs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outs.contains("provisioned=broker\nfailed=\ncreated=broker\n"), "{outs}");

    let (code, stdout, stderr) = run(&["provision", "--container", "broker", "--pve-ca", &ca, "--ssh-port", &ssh_port]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("broker") && l.contains("nothing")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn already_running_is_success_and_destroy_is_idempotent() {
    let (env, b) = with_broker().await;
    // Stopped when planned and when the lease is taken; started by someone else just before
    // our start arrives: PVE says "already running".
    env.pve.exec("ct = pve.ct(101)\nct.status = 'stopped'\nct.pid = None");
    let plan = b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap();
    assert!(plan.start);
    env.pve.exec("pve.fail('POST', '/nodes/pve1/lxc/101/status/start', error='already_running', times=1)");
    let p = b.apply(&spec("broker", 101), &plan, &env.apply_opts(), &ArtifactDir::new(env.artifacts.path())).await;
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(
        normalised(&p)["actions"][0],
        json!({"action": "start", "upid": null, "exit_status": null, "duration_ms": 0, "detail": "already running"})
    );
    // Destroy (of the running container): shutdown, destroy with purge; then absent, and a
    // second destroy does nothing.
    env.pve.exec("ct = pve.ct(101)\nct.status = 'running'\nct.pid = 4242");
    env.pve.requests(true);
    let actions = b.destroy(&spec("broker", 101)).await.unwrap();
    assert_eq!(actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(), vec!["shutdown", "destroy"]);
    let del = env.pve.writes(false).into_iter().find(|(m, _, _)| m == "DELETE").unwrap();
    assert_eq!(del.1, "/nodes/pve1/lxc/101");
    assert!(env.pve.ct_config(101).is_none());
    assert_eq!(b.destroy(&spec("broker", 101)).await.unwrap(), vec![]);
    let plan = b.plan(&spec("broker", 101), RecreatePolicy::Never).await.unwrap();
    assert_eq!(plan.action, Action::Create, "absent again");
}

#[tokio::test(flavor = "multi_thread")]
async fn dhcp_address_wait_is_bounded() {
    let env = Env::with_template().await;
    let b = env.backend(Login::Root);
    let mut s = spec("dyn", 130);
    s.ip = IpConfig::Dhcp;
    let planned = backend::plan_all(&b, vec![s], RecreatePolicy::Never, 1).await;
    let mut opts = env.apply_opts();
    opts.ssh_timeout = Duration::from_millis(600);
    let out = step::apply_all(&b, planned, &opts, 1, &ArtifactDir::new(env.artifacts.path())).await.unwrap();
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert_eq!(error, "CT 130 got no DHCP address on eth0 within 0.6 s");
    assert_eq!(out[0].actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(), vec!["create", "start"]);
    let cfg = env.pve.ct_config(130).unwrap();
    assert!(cfg["net0"].as_str().unwrap().contains("ip=dhcp"), "{cfg}");
    assert!(!cfg["net0"].as_str().unwrap().contains("gw="), "{cfg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_create_answer_then_already_exists_means_created() {
    let env = Env::with_template().await;
    // PVE creates the container, but its answer comes only after the client gave up on it.
    env.pve.exec(
        "orig = pve.task\nstate = {'n': 0}\n\
         async def slow(node, ttype, tid, user, body, **kw):\n    upid = await orig(node, ttype, tid, user, body, **kw)\n    \
         if ttype == 'vzcreate' and state['n'] == 0:\n        state['n'] += 1\n        await asyncio.sleep(2.5)\n    return upid\n\
         pve.task = slow",
    );
    let mut connect = env.connect();
    connect.request_timeout = Duration::from_secs(1);
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    let out = env.provision_one(&b, spec("broker", 101)).await;
    assert_eq!(
        normalised(&out[0]),
        expected_created("broker", 101, env.ssh_port, create_actions(101, env.ssh_port, "root@pam"))
    );
    let got = paths(&env.pve.requests(false));
    let creates = got.iter().filter(|p| *p == "POST /nodes/pve1/lxc").count();
    assert_eq!(creates, 2, "{got:#?}");
    assert!(got.iter().any(|p| p.starts_with("GET /nodes/pve1/tasks?") || p == "GET /nodes/pve1/tasks"), "{got:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn task_warnings_are_success_and_surfaced() {
    let env = Env::with_template().await;
    env.pve.exec(
        "orig = pve.task\n\
         async def warn(node, ttype, tid, user, body, **kw):\n    upid = await orig(node, ttype, tid, user, body, **kw)\n    \
         if ttype == 'vzcreate':\n        rec = pve.tasks[upid]\n        rec['exitstatus'] = 'WARNINGS: 1'\n        \
         rec['log'].insert(-1, 'WARN: systemd 219 in the container is too old')\n    return upid\n\
         pve.task = warn",
    );
    let b = env.backend(Login::Root);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(p.actions[0].action, "create");
    assert_eq!(p.actions[0].exit_status.as_deref(), Some("WARNINGS: 1"));
    assert_eq!(p.warnings, vec!["WARN: systemd 219 in the container is too old"]);
}

/// PVE's own create with `start=1` (`PVE/API2/LXC.pm`): the `vzcreate` worker forks a `vzstart`
/// task of its own, which waits for the config lock the create holds, and ends. fakepve runs the
/// start inside the create task; this makes it PVE's way (its start taking `start_secs`, failing
/// with `start_error` when set).
const PVE_FORKS_THE_START: &str = "orig_steps = pve._start_steps\n\
    async def steps(ct, user, skiplock=None):\n    \
    if skiplock is not None:\n        return await orig_steps(ct, user, skiplock)\n    \
    async def body():\n        await orig_steps(ct, user, False)\n    \
    await pve.task(ct.node, 'vzstart', ct.vmid, user, body, vm=ct)\n\
    pve._start_steps = steps";

#[tokio::test(flavor = "multi_thread")]
async fn a_create_with_start_waits_for_the_vzstart_task_pve_forks_and_reports_its_failure() {
    // Tasks take a hundredth of their PVE seconds: the create 0.1 s, the start 0.3 s.
    let env = Env::scaled(0.01).await;
    env.pve.add_template();
    env.pve.exec(PVE_FORKS_THE_START);
    env.pve.exec(
        "import fakepve.lxc\ninit = fakepve.lxc.FakeCt.__init__\n\
         def patched(self, *a, **k):\n    init(self, *a, **k)\n    self.start_secs = 30\n\
         fakepve.lxc.FakeCt.__init__ = patched",
    );
    let b = env.backend(Login::Root);
    env.pve.requests(true);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    let start = &p.actions[1];
    assert_eq!(start.action, "start");
    assert!(start.upid.as_deref().is_some_and(|u| u.contains(":vzstart:101:")), "{start:?}");
    assert_eq!(start.detail.as_deref(), Some("started by the create (start=1)"));
    assert_eq!(env.pve.ct_config(101).unwrap()["status"], "running");
    let got = paths(&env.pve.requests(false));
    assert!(!got.iter().any(|r| r.ends_with("/status/start")), "no start of our own: {got:#?}");
    assert_eq!(got.iter().filter(|r| *r == "POST /nodes/pve1/lxc").count(), 1, "{got:#?}");

    // The start PVE forks fails: reported as a failed start, with its log.
    env.pve.exec(
        "import fakepve.lxc\ninit2 = fakepve.lxc.FakeCt.__init__\n\
         def failing(self, *a, **k):\n    init2(self, *a, **k)\n    self.start_error = \"startup for container '102' failed\"\n\
         fakepve.lxc.FakeCt.__init__ = failing",
    );
    let out = env.provision_one(&b, spec("web", 102)).await;
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(
        error.contains("cannot start CT 102 on node pve1; run `pct start 102 --debug` on node pve1: task UPID:pve1:"),
        "{error}"
    );
    assert!(error.contains(":vzstart:102:root@pam: failed: startup for container '102' failed"), "{error}");
    assert!(error.contains("TASK ERROR: startup for container '102' failed"), "{error}");
    // It was created all the same: the artifact says so, and our lease line is gone.
    assert!(out[0].created, "{:#?}", out[0]);
    let cfg = env.pve.ct_config(102).unwrap();
    assert!(!cfg["description"].as_str().unwrap_or_default().contains("lease"), "{cfg}");
}

/// fakepve runs a `start=1` start inside the create task, so a failing start fails that task:
/// the container stands, and is recorded as created, its lease removed, the start blamed.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_failing_inside_the_create_task_still_records_the_container_as_created() {
    let env = Env::with_template().await;
    env.pve.exec(
        "import fakepve.lxc\ninit = fakepve.lxc.FakeCt.__init__\n\
         def failing(self, *a, **k):\n    init(self, *a, **k)\n    self.start_error = \"startup for container '101' failed\"\n\
         fakepve.lxc.FakeCt.__init__ = failing",
    );
    let b = env.backend(Login::Root);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert!(
        error.contains("cannot start CT 101 on node pve1; run `pct start 101 --debug` on node pve1: task UPID:pve1:"),
        "{error}"
    );
    assert!(error.contains("TASK ERROR: startup for container '101' failed"), "{error}");
    assert!(p.created, "{p:#?}");
    // The create's record keeps its task: the UPID and the exit status it ended with.
    let create = p.actions.first().unwrap();
    assert_eq!(create.action, "create", "{p:#?}");
    assert!(create.upid.as_deref().is_some_and(|u| u.contains(":vzcreate:101:")), "{p:#?}");
    assert_eq!(create.exit_status.as_deref(), Some("startup for container '101' failed"), "{p:#?}");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["status"], "stopped");
    assert!(!cfg["description"].as_str().unwrap_or_default().contains("lease"), "{cfg}");

    // Run again: nothing to change, a start of its own, which fails too. Its record keeps the
    // `vzstart` task like the create's did.
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let p = &out[0];
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert!(error.contains("run `pct start 101 --debug` on node pve1: task UPID:pve1:"), "{error}");
    let start = p.actions.iter().find(|a| a.action == "start").unwrap_or_else(|| panic!("{p:#?}"));
    assert!(start.upid.as_deref().is_some_and(|u| u.contains(":vzstart:101:") && error.contains(u)), "{p:#?}");
    assert_eq!(start.exit_status.as_deref(), Some("startup for container '101' failed"), "{p:#?}");
}

// ---------------------------------------------------------------- no destroy without a snapshot

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A container declaring data at /srv/data, created without waiting for SSH, whose recorded
/// SSH port (`provision/broker.json`) is closed: it cannot be reached to snapshot it. Returns
/// the backend for the next template (a recreate) and the apply options.
async fn unreachable_with_data(env: &Env) -> (ContainerSpec, Backend, ApplyOptions) {
    env.pve.add_template();
    let b = env.backend(Login::Root);
    let mut s = spec("broker", 101);
    s.snapshot_paths = vec!["/srv/data".into()];
    let mut opts = env.apply_opts();
    opts.wait_ssh = false;
    opts.ssh_port = closed_port();
    let dir = ArtifactDir::new(env.artifacts.path());
    let planned = backend::plan_all(&b, vec![s.clone()], RecreatePolicy::Never, 1).await;
    let out = step::apply_all(&b, planned, &opts, 1, &dir).await.unwrap();
    assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
    let mut settings = env.settings(Login::Root);
    settings.pve.template = Some("debian-13-standard_13.2-1".into());
    let b2 = backend::open(proxmox_gitops::model::BackendKind::Pve, &settings, &env.connect()).unwrap();
    env.pve.exec("pve.store_file('local', 'debian-13-standard_13.2-1_amd64.tar.zst', 1024 * 1024, content='vztmpl')");
    (s, b2, opts)
}

/// `error` is the refusal of a destroy that is part of `then` (`recreate` or `destroy`): its hint
/// names that.
fn assert_refusal(error: &str, then: &str) {
    let head =
        "refusing to destroy broker (vmid 101): it declares data (/srv/data) but cannot be reached to snapshot it: ";
    let tail = format!(
        "start it (`pct start 101` on its node, or the PVE API) and make SSH work, or re-run with --no-snapshot \
         to {then} without a snapshot"
    );
    assert!(error.starts_with(head) && error.ends_with(&tail), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn recreate_is_refused_when_the_data_snapshot_cannot_be_taken() {
    let env = Env::new().await;
    let (s, b2, opts) = unreachable_with_data(&env).await;
    env.pve.requests(true);
    let dir = ArtifactDir::new(env.artifacts.path());
    let planned = backend::plan_all(&b2, vec![s], RecreatePolicy::WhenNeeded, 1).await;
    let out = step::apply_all(&b2, planned, &opts, 1, &dir).await.unwrap();
    let p = &out[0];
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert_refusal(error, "recreate");
    let reason = format!(
        "ostemplate changes from local:vztmpl/{TEMPLATE_FILE} to local:vztmpl/debian-13-standard_13.2-1_amd64.tar.zst"
    );
    assert_eq!(
        normalised(p),
        json!({
            "kind": "provision", "schema_version": "1.1", "backend": "pve", "name": "broker", "node": null,
            "vmid": 101, "hostname": "broker", "address": "127.0.0.1", "ssh_port": opts.ssh_port,
            "plan": {"name": "broker", "vmid": 101, "hostname": "broker", "action": "recreate", "reasons": [reason], "start": true,
                     "node": "pve1", "policy": "when-needed"},
            "actions": [], "warnings": [], "status": null, "created": false,
            // The container is still the one created above: when is carried over.
            "created_at": "<time>",
            "protected_by": null, "inputs_digest": null, "result": "failed", "error": error
        })
    );
    // Written as such, and nothing was changed on PVE: no shutdown, destroy or create.
    assert_eq!(artifact::read::<Provision>(&dir.provision("broker")).unwrap(), *p);
    assert_eq!(paths(&env.pve.writes(false)), vec!["POST /access/ticket"], "nothing but the new session's login");
    let cfg = env.pve.ct_config(101).unwrap();
    assert_eq!(cfg["status"], "running");
    assert!(cfg["description"].as_str().unwrap().contains(TEMPLATE_FILE), "{cfg}");
    // No archive that could look like a snapshot.
    let store = env.share.path().join("snapshots").join("broker");
    assert!(!store.exists() || std::fs::read_dir(&store).unwrap().next().is_none(), "{}", store.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn recreate_with_no_snapshot_goes_ahead_and_the_artifact_says_so() {
    let env = Env::new().await;
    let (s, b2, mut opts) = unreachable_with_data(&env).await;
    opts.no_snapshot = true;
    let dir = ArtifactDir::new(env.artifacts.path());
    let planned = backend::plan_all(&b2, vec![s], RecreatePolicy::WhenNeeded, 1).await;
    let out = step::apply_all(&b2, planned, &opts, 1, &dir).await.unwrap();
    let p = &out[0];
    assert_eq!(p.outcome, Outcome::Ok, "{p:#?}");
    assert_eq!(p.protected_by.as_deref(), Some("none (--no-snapshot)"));
    assert_eq!(
        p.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        vec!["shutdown", "destroy", "create", "start"]
    );
    assert_eq!(artifact::read::<Provision>(&dir.provision("broker")).unwrap(), *p);
    let cfg = env.pve.ct_config(101).unwrap();
    assert!(cfg["description"].as_str().unwrap().contains("debian-13-standard_13.2-1_amd64.tar.zst"), "{cfg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_step_refuses_without_snapshot_and_destroys_with_no_snapshot() {
    use proxmox_gitops::steps::destroy::{self, Destroy, DestroyOptions};
    let env = Env::new().await;
    let (s, _b2, _) = unreachable_with_data(&env).await;
    let b = env.backend(Login::Root);
    let dir = ArtifactDir::new(env.artifacts.path());
    let opts = DestroyOptions { share: env.share.path().to_path_buf(), no_snapshot: false };

    // Refused: it declares data and cannot be reached.
    env.pve.requests(true);
    let out = destroy::destroy_all(&b, std::slice::from_ref(&s), &opts, &dir).await.unwrap();
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert_refusal(error, "destroy");
    assert_eq!(
        artifact::to_value(&out[0]),
        json!({
            "kind": "destroy", "schema_version": "1.0", "backend": "pve", "name": "broker", "vmid": 101,
            "hostname": "broker", "existed": true, "destroyed": false, "protected_by": null, "actions": [],
            "result": "failed", "error": error
        })
    );
    assert_eq!(artifact::read::<Destroy>(&destroy::artifact_path(&dir, "broker")).unwrap(), out[0]);
    assert_eq!(paths(&env.pve.writes(false)), vec!["POST /access/ticket"]);
    assert_eq!(env.pve.ct_config(101).unwrap()["status"], "running");

    // Another lib's spec for the same vmid: not its container, refused before anything else.
    let mut other = spec("web", 101);
    other.snapshot_paths = vec![];
    let out = destroy::destroy_all(&b, &[other], &opts, &dir).await.unwrap();
    assert_eq!(
        out[0].outcome,
        Outcome::Failed {
            error: "CT 101 holds hostname `broker`, not `web`: it is not web's container; not destroying it".into()
        }
    );
    assert!(env.pve.ct_config(101).is_some());

    // --no-snapshot: destroyed, and both artifacts say so.
    let opts = DestroyOptions { no_snapshot: true, ..opts };
    let out = destroy::destroy_all(&b, std::slice::from_ref(&s), &opts, &dir).await.unwrap();
    let mut v = artifact::to_value(&out[0]);
    for a in v["actions"].as_array_mut().unwrap() {
        a["duration_ms"] = json!(0);
        a["upid"] = json!(short_upid(a["upid"].as_str().unwrap()));
    }
    assert_eq!(
        v,
        json!({
            "kind": "destroy", "schema_version": "1.0", "backend": "pve", "name": "broker", "vmid": 101,
            "hostname": "broker", "existed": true, "destroyed": true, "protected_by": "none (--no-snapshot)",
            "actions": [
                {"action": "shutdown", "upid": "UPID:pve1:vzshutdown:101:root@pam", "exit_status": "OK", "duration_ms": 0, "detail": null},
                {"action": "destroy", "upid": "UPID:pve1:vzdestroy:101:root@pam", "exit_status": "OK", "duration_ms": 0,
                 "detail": "purge=1,destroy-unreferenced-disks=1"}
            ],
            "result": "ok"
        })
    );
    assert!(env.pve.ct_config(101).is_none());
    let prov = artifact::read::<Provision>(&dir.provision("broker")).unwrap();
    assert_eq!((prov.status.as_deref(), prov.address.as_deref()), (Some("destroyed"), None));

    // Absent now: nothing to do.
    let out = destroy::destroy_all(&b, std::slice::from_ref(&s), &opts, &dir).await.unwrap();
    assert_eq!((out[0].existed, out[0].destroyed, &out[0].outcome), (false, false, &Outcome::Ok));

    // A lib without data is destroyed without a snapshot, and the artifact says why.
    env.provision_one(&b, spec("plain", 102)).await;
    let opts = DestroyOptions { no_snapshot: false, ..opts };
    let out = destroy::destroy_all(&b, &[spec("plain", 102)], &opts, &dir).await.unwrap();
    assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
    assert_eq!(out[0].protected_by.as_deref(), Some("none (no SNAPSHOT paths)"));
    assert!(env.pve.ct_config(102).is_none());
}

/// A refused recreate's hint is phrased for how the user runs proxmox-gitops
/// (crate::error::Hint::render): the binary's option, the command line of `./local/run.sh`
/// (which exports PGO_ENTRY=local-run), or the repository variable under Actions.
#[test]
fn cli_recreate_hint_is_phrased_for_the_entry_point() {
    let pve = FakePve::start();
    pve.add_template();
    pve.exec("pve.store_file('local', 'debian-13-standard_13.2-1_amd64.tar.zst', 1024 * 1024, content='vztmpl')");
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\n");
    let ca = pve.ca.to_str().unwrap().to_string();
    let closed = closed_port().to_string();
    let run = |template: &str, env: &[(&str, &std::ffi::OsStr)]| {
        let args = ["provision", "-c", "broker", "--no-wait-ssh", "--ssh-port", &closed, "--pve-ca", &ca];
        run_cli(&pve, repo.path(), share.path(), template, env, &args)
    };
    let (code, _, stderr) = run(TEMPLATE, &[]);
    assert_eq!(code, Some(0), "{stderr}");

    let next = "debian-13-standard_13.2-1";
    let refusal = format!(
        "broker: broker (vmid 101) needs to be recreated (ostemplate changes from local:vztmpl/{TEMPLATE_FILE} to \
         local:vztmpl/debian-13-standard_13.2-1_amd64.tar.zst), which the recreate policy `never` forbids; nothing \
         was changed (a recreate destroys it: its data is lost unless snapshotted); "
    );
    let (code, _, binary) = run(next, &[]);
    assert_eq!(code, Some(1), "{binary}");
    assert!(binary.contains(&format!("{refusal}re-run with --allow-recreate\n")), "{binary}");
    assert!(!binary.contains("local/run.sh"), "{binary}");

    let (code, _, local) = run(next, &[("PGO_ENTRY", "local-run".as_ref())]);
    assert_eq!(code, Some(1), "{local}");
    let hint = "re-run with --allow-recreate: `sudo ./local/run.sh --allow-recreate broker`";
    assert!(local.contains(&format!("{refusal}{hint}\n")), "{local}");
    // The artifact holds the same text, and still the container's address: nothing changed, and
    // the guard and `destroy` reach the container through it.
    let p: Provision = artifact::read(&repo.path().join(".proxmox-gitops/provision/broker.json")).unwrap();
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert!(error.ends_with(hint), "{error}");
    assert_eq!(p.address.as_deref(), Some("127.0.0.1"), "{p:#?}");

    let (code, _, actions) = run(next, &[("GITEA_ACTIONS", "true".as_ref())]);
    assert_eq!(code, Some(1), "{actions}");
    let hint = "set the repository variable PROXMOX_GITOPS_RECREATE to `when-needed` and re-run the workflow";
    assert!(actions.contains(&format!("{refusal}{hint}\n")), "{actions}");
    // The Actions annotation (`::error::…` on stderr) carries the same hint.
    let annotation = actions.lines().filter(|l| l.starts_with("::error")).collect::<Vec<_>>().join("\n");
    assert!(annotation.contains(hint), "{actions}");
    let p: Provision = artifact::read(&repo.path().join(".proxmox-gitops/provision/broker.json")).unwrap();
    let Outcome::Failed { error } = &p.outcome else { panic!("{p:#?}") };
    assert!(error.ends_with(hint), "{error}");
    assert!(pve.ct_config(101).unwrap()["description"].as_str().unwrap().contains(TEMPLATE_FILE), "nothing changed");
}

#[test]
fn cli_recreate_and_destroy_follow_the_snapshot_rule() {
    let pve = FakePve::start();
    pve.add_template();
    pve.exec("pve.store_file('local', 'debian-13-standard_13.2-1_amd64.tar.zst', 1024 * 1024, content='vztmpl')");
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\nSNAPSHOT=/srv/data\n");
    let ca = pve.ca.to_str().unwrap().to_string();
    let closed = closed_port().to_string();
    let run = |template: &str, args: &[&str]| {
        run_cli(&pve, repo.path(), share.path(), template, &[], &[args, &["--pve-ca", &ca]].concat())
    };
    let art = |kind: &str| repo.path().join(".proxmox-gitops").join(kind).join("broker.json");
    // Created; its recorded SSH port is closed, so it cannot be reached for a snapshot.
    let (code, _, stderr) = run(TEMPLATE, &["provision", "--all", "--no-wait-ssh", "--ssh-port", &closed]);
    assert_eq!(code, Some(0), "{stderr}");

    // A template change needs a recreate: refused, nothing changed.
    let next = "debian-13-standard_13.2-1";
    let (code, _, stderr) =
        run(next, &["provision", "-c", "broker", "--allow-recreate", "--no-wait-ssh", "--ssh-port", &closed]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("refusing to destroy broker (vmid 101): it declares data (/srv/data)"), "{stderr}");
    assert!(stderr.contains("or re-run with --no-snapshot to recreate without a snapshot\n"), "{stderr}");
    let p: Provision = artifact::read(&art("provision")).unwrap();
    assert!(matches!(p.outcome, Outcome::Failed { .. }) && p.protected_by.is_none(), "{p:#?}");
    assert!(pve.ct_config(101).unwrap()["description"].as_str().unwrap().contains(TEMPLATE_FILE));

    // --no-snapshot: recreated, loudly, and the artifact says so.
    let (code, _, stderr) = run(
        next,
        &["provision", "-c", "broker", "--allow-recreate", "--no-snapshot", "--no-wait-ssh", "--ssh-port", &closed],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "--no-snapshot: destroying broker (vmid 101) WITHOUT a data snapshot; the data in /srv/data will be lost"
        ),
        "{stderr}"
    );
    let p: Provision = artifact::read(&art("provision")).unwrap();
    assert_eq!((p.outcome, p.protected_by.as_deref()), (Outcome::Ok, Some("none (--no-snapshot)")));

    // The destroy subcommand: refused, then done with --no-snapshot.
    let (code, stdout, stderr) = run(next, &["destroy", "-c", "broker"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("refusing to destroy broker (vmid 101)"), "{stderr}");
    assert!(pve.ct_config(101).is_some());
    let (code, stdout, stderr) = run(next, &["destroy", "-c", "broker", "--no-snapshot"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("broker") && l.contains("destroyed") && l.contains("none (--no-snapshot)")),
        "{stdout}"
    );
    assert!(pve.ct_config(101).is_none());
    let d: proxmox_gitops::steps::destroy::Destroy = artifact::read(&art("destroy")).unwrap();
    assert!(d.destroyed && d.outcome == Outcome::Ok, "{d:#?}");
}

// ------------------------------------------------------------------------------------------------
// Gateway errors (502/503/504): reads are repeated, writes are not
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_503_on_the_node_status_read_is_retried_and_the_container_is_created() {
    let env = Env::with_template().await;
    // pveproxy answers the node status read twice with 503 (a daemon restarting), then normally.
    env.pve.exec("pve.fail('GET', '/nodes/pve1/status', 503, 'Service Unavailable', times=2)");
    let b = env.backend(Login::Root);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    assert_eq!(
        normalised(&out[0]),
        expected_created("broker", 101, env.ssh_port, create_actions(101, env.ssh_port, "root@pam"))
    );
    let got = paths(&env.pve.requests(false));
    assert_eq!(got.iter().filter(|p| *p == "GET /nodes/pve1/status").count(), 3, "{got:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_502_on_the_create_is_not_repeated() {
    let env = Env::with_template().await;
    // A proxy's page instead of PVE's answer: the create may or may not have happened behind it.
    env.pve.exec("pve.fail('POST', '/nodes/pve1/lxc', 502, '<html>502 Bad Gateway</html>', html=True, times=1)");
    let b = env.backend(Login::Root);
    let out = env.provision_one(&b, spec("broker", 101)).await;
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(error.contains("POST /nodes/pve1/lxc: HTTP 502: <html>502 Bad Gateway</html>"), "{error}");
    let got = paths(&env.pve.writes(false));
    assert_eq!(got.iter().filter(|p| *p == "POST /nodes/pve1/lxc").count(), 1, "{got:#?}");
}

/// A client of this fakepve with `retries` repetitions 1 ms apart (ticket login as root@pam).
fn fast_retrying_client(pve: &FakePve, retries: usize) -> proxmox_gitops::pve::PveClient {
    use proxmox_gitops::pve::{Auth, ClientOptions, PveClient};
    let mut opts = ClientOptions::new("127.0.0.1");
    opts.port = pve.port;
    opts.tls = TlsMode::CaFile(pve.ca.clone());
    opts.request_timeout = Duration::from_secs(10);
    opts.transport_retries = retries;
    opts.retry_delay = Duration::from_millis(1);
    PveClient::new(
        opts,
        Auth::Ticket { user: "root@pam".into(), password: SecretString::from(support::fakepve::PASSWORD) },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_errors_on_a_read_are_retried_a_bounded_number_of_times() {
    let pve = FakePve::start();
    let client = fast_retrying_client(&pve, 3);
    client.nodes().await.unwrap();
    for status in [502, 503, 504] {
        // Always failing: 1 attempt + 3 repetitions, then the error.
        pve.exec(&format!("pve.fail('GET', '/nodes/pve1/status', {status}, 'down')"));
        pve.requests(true);
        let err = client.node("pve1").machine().await.unwrap_err();
        assert_eq!(err.status(), Some(status), "{err}");
        let got = paths(&pve.requests(false));
        assert_eq!(got, vec!["GET /nodes/pve1/status"; 4], "{status}");
    }
    // A 500 is PVE's own answer: reported at once.
    pve.exec("pve.fail('GET', '/nodes/pve1/status', 500, 'boom')");
    pve.requests(true);
    let err = client.node("pve1").machine().await.unwrap_err();
    assert_eq!(err.status(), Some(500), "{err}");
    assert_eq!(paths(&pve.requests(false)), vec!["GET /nodes/pve1/status"]);
    // Once the gateway recovers within the bound, the read succeeds.
    pve.exec("pve.failures.clear()\npve.fail('GET', '/nodes/pve1/status', 503, 'down', times=3)");
    pve.requests(true);
    let machine = client.node("pve1").machine().await.unwrap();
    assert!(!machine.is_empty(), "the node names its machine");
    assert_eq!(paths(&pve.requests(false)).len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_errors_on_writes_are_never_retried() {
    let pve = FakePve::start();
    let client = fast_retrying_client(&pve, 3);
    client.nodes().await.unwrap();
    let ct = client.ct("pve1", 999);
    // Start, resize and destroy are writes PVE may get twice after a lost answer (`Replay::Safe`);
    // a gateway error is an answer, so none of them is sent again.
    for (method, path) in [
        ("POST", "/nodes/pve1/lxc/999/status/start"),
        ("PUT", "/nodes/pve1/lxc/999/resize"),
        ("DELETE", "/nodes/pve1/lxc/999"),
    ] {
        pve.exec(&format!("pve.fail('{method}', '{path}', 503, 'down')"));
        pve.requests(true);
        let err = match method {
            "POST" => ct.start().await.map(drop),
            "PUT" => ct.resize("rootfs", 8).await.map(drop),
            _ => ct.destroy().await.map(drop),
        }
        .unwrap_err();
        assert_eq!(err.status(), Some(503), "{err}");
        assert_eq!(paths(&pve.requests(false)), vec![format!("{method} {path}")]);
    }
}

// ------------------------------------------------------------------------------------------------
// Output streams under Actions
// ------------------------------------------------------------------------------------------------

#[test]
fn under_actions_the_no_snapshot_warning_goes_to_stderr_and_stdout_stays_json() {
    let pve = FakePve::start();
    pve.add_template();
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\nCORES=1\nMEMORY=512\nSNAPSHOT=/srv/data\n");
    let ca = pve.ca.to_str().unwrap().to_string();
    let closed = closed_port().to_string();
    let run = |args: &[&str]| {
        run_cli(
            &pve,
            repo.path(),
            share.path(),
            TEMPLATE,
            &[("GITHUB_ACTIONS", "true".as_ref())],
            &[args, &["--pve-ca", &ca]].concat(),
        )
    };
    let (code, _, stderr) = run(&["provision", "--all", "--no-wait-ssh", "--ssh-port", &closed]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = run(&["--json", "destroy", "-c", "broker", "--no-snapshot"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // stdout is the JSON and nothing else; every workflow command is on stderr.
    let all: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: stdout is not JSON:\n{stdout}"));
    assert_eq!(all[0]["name"], "broker", "{all:#}");
    assert!(stderr.lines().any(|l| l
        == "::warning::--no-snapshot: destroying broker (vmid 101) WITHOUT a data snapshot; the data in /srv/data will be lost"),
        "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("::add-mask::")), "{stderr}");
    assert!(pve.ct_config(101).is_none());
}

/// Runs `plan` on a one-lib repo against `pve` (trusting its certificate) with only `PATH`, the
/// PVE host and template settings and `creds` in the environment. Returns (exit code, stderr).
fn plan_with_credentials(pve: &FakePve, creds: &[(&str, &str)]) -> (Option<i32>, String) {
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .args(["plan", "--repo"])
        .arg(repo.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PROXMOX_HOST", "127.0.0.1")
        .env("PROXMOX_PORT", pve.port.to_string())
        .env("PROXMOX_CA", &pve.ca)
        .env("PROXMOX_TEMPLATE", TEMPLATE)
        .env("PROXMOX_SHARE", share.path())
        .envs(creds.iter().copied())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_whole_api_token_in_one_variable_authenticates() {
    let pve = FakePve::start();
    pve.add_template();
    let secret = "0b8e5a72-5e0c-4d4b-9a3a-2f4f1d8c9e11";
    pve.exec(&format!("pve.apitokens['root@pam!ci'] = '{secret}'"));
    let whole = format!("root@pam!ci={secret}");
    for creds in [
        vec![("PROXMOX_TOKEN", whole.as_str())],
        vec![("PROXMOX_TOKEN_SECRET", whole.as_str())],
        vec![("PROXMOX_TOKEN_ID", "root@pam!ci"), ("PROXMOX_TOKEN_SECRET", secret)],
        vec![("PROXMOX_USER", "root@pam"), ("PROXMOX_TOKEN", "ci"), ("PROXMOX_SECRET", secret)],
    ] {
        let (code, out) = plan_with_credentials(&pve, &creds);
        assert_eq!(code, Some(0), "{creds:?}: {out}");
        assert!(out.lines().any(|l| l.starts_with("broker") && l.ends_with("create")), "{creds:?}: {out}");
        assert!(!out.contains(secret), "{out}");
        let reqs = pve.requests(true);
        assert!(reqs.iter().any(|(m, p, _)| m == "GET" && p.starts_with("/nodes")), "{creds:?}: {reqs:?}");
        assert!(reqs.iter().all(|(_, p, _)| p != "/access/ticket"), "token auth, no ticket: {reqs:?}");
    }
    // A wrong secret in the whole form is PVE's 401, not a success.
    let (code, out) = plan_with_credentials(&pve, &[("PROXMOX_TOKEN", "root@pam!ci=wrong-secret-00")]);
    assert!(out.contains("401") && !out.contains("wrong-secret-00"), "{code:?}: {out}");
}

#[test]
fn a_user_given_twice_is_refused_before_any_request() {
    let pve = FakePve::start();
    let (code, out) = plan_with_credentials(
        &pve,
        &[("PROXMOX_USER", "ci@pve"), ("PROXMOX_TOKEN", "root@pam!ci"), ("PROXMOX_SECRET", "s-0b8e5a72")],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("PROXMOX_USER") && out.contains("PROXMOX_TOKEN") && out.contains("given twice"), "{out}");
    assert!(!out.contains("s-0b8e5a72"), "{out}");
    assert!(pve.requests(false).is_empty(), "nothing was sent to PVE");
}

/// Status polls of the `vzcreate` tasks in `requests`, per task, in order.
fn create_polls(requests: &[(String, String, String)]) -> Vec<usize> {
    let mut per: Vec<(String, usize)> = Vec::new();
    for (m, p, _) in requests {
        if m == "GET" && p.contains(":vzcreate:") && p.ends_with("/status") {
            match per.iter_mut().find(|(u, _)| p.contains(u.as_str())) {
                Some((_, n)) => *n += 1,
                None => per.push((p.split('/').nth(4).unwrap_or_default().to_string(), 1)),
            }
        }
    }
    per.into_iter().map(|(_, n)| n).collect()
}

/// Waiting really loops here (tasks take time): each create is polled within two polls per
/// task-second plus four, the client learns the create's duration from its waits, and a create
/// slower than `--timeout-create` fails after that timeout, naming the task, without waiting for
/// it and without destroying anything.
#[tokio::test(flavor = "multi_thread")]
async fn task_waits_loop_learn_the_duration_and_time_out() {
    let env = Env::scaled(0.05).await;
    env.pve.add_template();
    env.pve.exec("pve.ct_secs['create'] = 10"); // 0.5 s
    let b = env.backend(Login::Root);
    env.pve.requests(true);
    for (i, vmid) in (401..=404).enumerate() {
        let started = std::time::Instant::now();
        let out = env.provision_one(&b, spec(&format!("ct{i}"), vmid)).await;
        assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
        let polls = create_polls(&env.pve.requests(true));
        assert_eq!(polls.len(), 1, "{polls:?}");
        assert!(polls[0] as f64 <= 4.0 + 2.0 * started.elapsed().as_secs_f64(), "create {i}: {polls:?}");
        if i == 0 {
            assert!(polls[0] >= 3, "nothing known: polled with backoff ({polls:?})");
        }
    }
    let learned = client(&b).task_times().learned("pve1/vzcreate").expect("the create's duration is learned");
    assert!(learned.lo < learned.secs && (0.4..5.0).contains(&learned.secs), "{learned:?}");

    // A create slower than the timeout.
    env.pve.exec("pve.ct_secs['create'] = 200"); // 10 s
    let mut connect = env.connect();
    connect.timeouts.create = Duration::from_secs(1);
    let slow = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    let started = std::time::Instant::now();
    let out = env.provision_one(&slow, spec("slow", 405)).await;
    let waited = started.elapsed();
    let Outcome::Failed { error } = &out[0].outcome else { panic!("{:#?}", out[0]) };
    assert!(error.contains(":vzcreate:405:") && error.contains("no result after 1 s (timeout)"), "{error}");
    assert!(waited < Duration::from_secs(8), "did not wait for the task: {waited:?}");
    let requests = env.pve.requests(true);
    let polls = create_polls(&requests);
    assert!(polls.len() == 1 && polls[0] as f64 <= 4.0 + 2.0 * waited.as_secs_f64(), "{polls:?}");
    assert!(!requests.iter().any(|(m, _, _)| m == "DELETE"), "nothing destroyed: {requests:?}");
}

/// Makes fakepve leave every `nth` GET unanswered for `secs` real seconds (as a half-open
/// connection or a proxy that stalls does); `pve.stalled` counts the reads left hanging. Loopback only, bounded by `secs` and by the
/// server's life.
fn stall_every_nth_read(pve: &FakePve, nth: u32, secs: u32) {
    pve.exec(&format!(
        "orig = pve._read_body\nstate = {{'gets': 0}}\npve.stalled = 0\n\
         async def stall(request):\n    \
             if request.method == 'GET':\n        \
                 state['gets'] += 1\n        \
                 if state['gets'] % {nth} == 0:\n            \
                     pve.stalled += 1\n            \
                     await asyncio.sleep({secs})\n    \
             return await orig(request)\n\
         pve._read_body = stall"
    ));
}

/// A hung read costs the read timeout, not a minute: with every third GET never answered,
/// a create converges, each hung read abandoned after `read_timeout` (1 s here) and sent again
/// on another connection. Writes keep their own, longer timeout. The run's bound (60 s) is
/// what the old single 20 s timeout per request blew with the reads hung here.
#[tokio::test(flavor = "multi_thread")]
async fn hung_reads_are_abandoned_after_the_read_timeout_and_repeated() {
    let env = Env::with_template().await;
    stall_every_nth_read(&env.pve, 3, 600);
    let mut connect = env.connect();
    connect.read_timeout = Duration::from_secs(1);
    let b = backend::open(proxmox_gitops::model::BackendKind::Pve, &env.settings(Login::Root), &connect).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), env.provision_one(&b, spec("broker", 101)))
        .await
        .expect("hung reads are given up on after the read timeout");
    assert_eq!(out[0].outcome, Outcome::Ok, "{:#?}", out[0]);
    assert!(out[0].created);
    let stalled = env.pve.exec("result = pve.stalled").as_u64().unwrap();
    assert!(stalled >= 3, "reads left hanging: {stalled}");
    // fakepve records the requests it answered, not the hung ones: each hung read was sent
    // again.
    let answered = env.pve.requests(false).len() as u64;
    assert!(
        client(&b).request_count() >= answered + stalled,
        "sent {}, {answered} answered",
        client(&b).request_count()
    );
    assert_eq!(env.pve.ct_config(101).unwrap()["status"], "running");
}

/// `--timeout-read` / `PGO_TIMEOUT_READ` and `--timeout-write` / `PGO_TIMEOUT_WRITE` are read
/// (a value out of range is refused naming the option) and shown in the help.
#[test]
fn request_timeouts_are_settable_by_flag_and_environment() {
    let pve = FakePve::start();
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\n");
    for (var, flag) in [("PGO_TIMEOUT_READ", "--timeout-read"), ("PGO_TIMEOUT_WRITE", "--timeout-write")] {
        let (code, _, err) =
            run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[(var, "0".as_ref())], &["plan", "--pve-ca", "x"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(flag) && err.contains("0"), "{err}");
        let (code, out, err) = run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[], &["provision", "--help"]);
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains(flag) && out.contains(&format!("[env: {var}=")), "{out}");
    }
}

/// Every PVE task timeout is settable as `PGO_TIMEOUT_NAME` too (a value that is no number is
/// refused naming the option), and the help shows the variable.
#[test]
fn task_timeouts_are_settable_by_environment() {
    let pve = FakePve::start();
    let (repo, share) = broker_repo("ID=101\nIP=127.0.0.1/8\n");
    let (_, help, _) = run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[], &["provision", "--help"]);
    let (_, snapshot_help, _) = run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[], &["snapshot", "--help"]);
    let (_, update_help, _) = run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[], &["update", "--help"]);
    for (name, command, help) in [
        ("create", "provision", &help),
        ("start", "provision", &help),
        ("shutdown", "provision", &help),
        ("stop", "provision", &help),
        ("destroy", "provision", &help),
        ("lock", "provision", &help),
        ("download", "provision", &help),
        ("migrate", "provision", &help),
        ("lease", "provision", &help),
        ("snapshot", "snapshot", &snapshot_help),
        ("shutdown", "update", &update_help),
    ] {
        let (var, flag) = (format!("PGO_TIMEOUT_{}", name.to_uppercase()), format!("--timeout-{name}"));
        assert!(help.contains(&flag) && help.contains(&format!("[env: {var}=")), "{var}: {help}");
        let (code, _, err) =
            run_cli(&pve, repo.path(), share.path(), TEMPLATE, &[(var.as_str(), "soon".as_ref())], &[command, "--all"]);
        assert_eq!(code, Some(2), "{var}: {err}");
        assert!(err.contains(&flag) && err.contains("soon"), "{var}: {err}");
    }
}
