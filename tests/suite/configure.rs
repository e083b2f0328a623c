//! End-to-end tests of `configure` against real LXC containers on lxcbr0 (see
//! tests/support/configure.rs). Run with `cargo test --test suite configure::`; needs root, lxc,
//! debootstrap, ansible and mosquitto-clients, and Debian's mirror from inside the containers.

use crate::support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proxmox_gitops::artifact;
use proxmox_gitops::inventory::{Engine, Inventory};
use proxmox_gitops::model::Outcome;
use proxmox_gitops::ssh::ConnectOptions;
use proxmox_gitops::steps::configure::{Configure, ConfigureOptions, EngineRun, configure};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use support::configure as sup;

const LOGIN: &str = "pgo-admin";

fn password() -> String {
    // Quotes, `$( )` and spaces: anything pasted into a shell string would break or leak.
    format!("S3cr'et $(id) \"{}\"-x", std::process::id())
}

/// A fixture monorepo: the shipped base/ plus the given libs (name, container.env, files).
/// (lib name, container.env text, extra files as (name, text)).
type LibFixture<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

fn monorepo(dir: &Path, libs: &[LibFixture], copy_from_source: &[&str]) -> PathBuf {
    let root = dir.to_path_buf();
    support::fs::copy_dir(&support::fs::source_root().join("base"), &root.join("base"));
    std::fs::write(root.join("globals.json"), r#"{"DOMAIN": "lan.test", "SHARE_HOST": ""}"#).unwrap();
    for name in copy_from_source {
        support::fs::copy_dir(&support::fs::source_root().join("libs").join(name), &root.join("libs").join(name));
    }
    for (name, env, files) in libs {
        let d = root.join("libs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("container.env"), env).unwrap();
        for (f, text) in *files {
            std::fs::write(d.join(f), text).unwrap();
        }
    }
    root
}

fn resolve_with_share(root: &Path, share: &Path, stage: &str) -> Inventory {
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    resolve(&ResolveOptions { repo: root.to_path_buf(), stage: stage.into() }, &env).unwrap()
}

/// A provisioned container: its LXC name and address.
struct Ct {
    name: String,
    ip: String,
}

fn options(artifacts: &Path, names: &[&str], password: &str) -> ConfigureOptions {
    sup::options(artifacts, names, LOGIN, password)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

fn mqtt_round_trip(ip: &str, login: &str, password: &str) {
    let topic = format!("pgo/test/{}", std::process::id());
    let mut sub = Command::new("mosquitto_sub")
        .args(["-h", ip, "-p", "1883", "-u", login, "-P", password, "-t", &topic, "-C", "1", "-W", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut delay = Duration::from_millis(100);
    let status = loop {
        let _ = Command::new("mosquitto_pub")
            .args(["-h", ip, "-p", "1883", "-u", login, "-P", password, "-t", &topic, "-m", "hello-from-test"])
            .output()
            .unwrap();
        if let Some(s) = sub.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no message received within 30s");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(1));
    };
    let mut got = String::new();
    sub.stdout.take().unwrap().read_to_string(&mut got).unwrap();
    assert!(status.success(), "mosquitto_sub failed");
    assert_eq!(got.trim(), "hello-from-test");
    // A wrong password is refused.
    let bad = Command::new("mosquitto_pub")
        .args(["-h", ip, "-p", "1883", "-u", login, "-P", "wrong", "-t", &topic, "-m", "x"])
        .output()
        .unwrap();
    assert!(!bad.status.success(), "the broker accepted a wrong password");
}

fn http_get(ip: &str, host: &str) -> String {
    let mut s = std::net::TcpStream::connect((ip, 80)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /index.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn cli(args: &[&str], root: &Path, artifacts: &Path, share: &Path, password: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .arg("--repo")
        .arg(root)
        .arg("--artifacts")
        .arg(artifacts)
        .args(args)
        .env("PROXMOX_SHARE", share)
        .env("LOGIN", LOGIN)
        .env("PASSWORD", password)
        .env("HOST", "http://127.0.0.1:9")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS")
        .output()
        .unwrap()
}

fn assert_no_secret(what: &str, text: &str, password: &str) {
    assert!(!text.contains(password), "{what} contains the password");
    // The distinctive core of the password too (in case of partial quoting).
    let core = format!("\"{}\"-x", std::process::id());
    assert!(!text.contains(&core), "{what} contains part of the password");
}

/// Zeroes the fields that vary run to run (durations, task counts) for whole-artifact asserts.
fn normalized(mut c: Configure) -> Configure {
    c.duration_ms = 0;
    for r in [&mut c.base, &mut c.lib].into_iter().flatten() {
        r.duration_ms = 0;
        r.ok = r.ok.map(|_| 0);
    }
    c
}

#[test]
fn broker_and_proxy_end_to_end() {
    let _heavy = support::heavy::area("configure");
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let password = password();
    let (broker_id, proxy_id) = (9101u32, 9102u32);
    let stage = sup::stage();
    let rt = rt();
    let lab = rt.block_on(sup::Lab::new(&share));
    let root = monorepo(
        &tmp.path().join("repo"),
        &[
            ("broker", &format!("ID={broker_id}\nIP=dhcp\nMEMORY=256\nBROKER_PORT=1883\n"), &[]),
            ("proxy", &format!("ID={proxy_id}\nIP=dhcp\nMEMORY=256\n"), &[]),
            ("web", "ID=9103\nIP=dhcp\nPROXY_PORT=8080\n", &[]),
        ],
        &[],
    );
    // Shipped lib files (container.env replaced above with test values).
    for lib in ["broker", "proxy"] {
        for e in std::fs::read_dir(support::fs::source_root().join("libs").join(lib)).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "container.env" {
                let to = root.join("libs").join(lib).join(e.file_name());
                if e.path().is_dir() {
                    support::fs::copy_dir(&e.path(), &to);
                } else {
                    std::fs::copy(e.path(), &to).unwrap();
                }
            }
        }
    }
    std::fs::write(root.join("libs/proxy/test.local.caddy"), ":8088 {\n\trespond \"include works\"\n}\n").unwrap();
    let inv = resolve_with_share(&root, &share, &stage);
    assert_eq!(inv.container("broker").unwrap().engine, Engine::Shell);
    assert_eq!(inv.container("proxy").unwrap().engine, Engine::Ansible);
    // Real containers from the lxc backend, named `<stage>-broker` / `<stage>-proxy`.
    let pa = rt.block_on(lab.provision(inv.container("broker").unwrap(), &artifacts));
    let pp = rt.block_on(lab.provision(inv.container("proxy").unwrap(), &artifacts));
    assert!(pa.created && pp.created);
    let a = Ct { name: pa.hostname.clone(), ip: pa.address.clone().unwrap() };
    let p = Ct { name: pp.hostname.clone(), ip: pp.address.clone().unwrap() };
    // `web` is served by the broker's container (see below); it is only in the inventory.
    sup::write_provision(&artifacts, "web", 9103, &a.ip, 22, true);

    // 1. First run: base then broker/proxy, as root (config does not exist yet).
    let ps = sup::PsSampler::start();
    let results = rt.block_on(configure(&inv, &options(&artifacts, &["broker", "proxy"], &password))).unwrap();
    let ps_lines = ps.finish();
    for c in &results {
        assert!(c.ok(), "{} failed: {:?}\n{}", c.name, c.outcome, c.log_tail.join("\n"));
        assert_eq!(c.user.as_deref(), Some("root"));
        assert!(c.base.as_ref().unwrap().changed.unwrap() > 0);
    }
    assert!(ps_lines.iter().any(|l| l.contains("ansible-playbook")), "the sampler saw no ansible run");
    for l in &ps_lines {
        assert_no_secret(&format!("process argument list `{l}`"), l, &password);
    }
    let broker = results.iter().find(|c| c.name == "broker").unwrap();
    assert_eq!(broker.outputs, BTreeMap::from([("LIBS_BROKER_ENDPOINT".to_string(), format!("mqtt://{}:1883", a.ip))]));
    let fingerprint = broker.host_key_fingerprint.clone().unwrap();
    assert!(fingerprint.starts_with("SHA256:"));

    // mosquitto is active and a publish/subscribe round trip with the credentials works.
    let active = lab.attach(&a.name, &["systemctl", "is-active", "mosquitto"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout).trim(), "active");
    mqtt_round_trip(&a.ip, LOGIN, &password);

    // The proxy reaches a backend: a web server on the broker's container, listed as `web`
    // (PROXY_PORT=8080) in the inventory.
    let made =
        lab.attach(&a.name, &["sh", "-c", "mkdir -p /srv/web && echo 'hello through caddy' > /srv/web/index.html"]);
    assert!(made.status.success());
    let started = lab.attach(
        &a.name,
        &["systemd-run", "--unit", "pgo-test-web", "python3", "-m", "http.server", "8080", "--directory", "/srv/web"],
    );
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let start = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let resp = http_get(&p.ip, &format!("{stage}-web.lan.test"));
        if resp.starts_with("HTTP/1.1 200") && resp.contains("hello through caddy") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no response through caddy: {resp}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(1));
    }
    let direct_name = http_get(&p.ip, &format!("{stage}-web"));
    assert!(direct_name.contains("hello through caddy"), "{direct_name}");
    let unknown = http_get(&p.ip, "nobody.lan.test");
    assert!(!unknown.contains("hello through caddy"));
    // The lib's `*.local.caddy` include is imported.
    let mut s = std::net::TcpStream::connect((p.ip.as_str(), 8088)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut include = String::new();
    let _ = s.read_to_string(&mut include);
    assert!(include.ends_with("include works"), "{include}");

    // 2. Second run, through the CLI with `--force` (nothing changed, so without it the engines
    // would be skipped: see 2b): user config, zero changes everywhere Ansible counts.
    // A second provision finds both containers in state: nothing created.
    let pa2 = rt.block_on(lab.provision(inv.container("broker").unwrap(), &artifacts));
    let pp2 = rt.block_on(lab.provision(inv.container("proxy").unwrap(), &artifacts));
    assert!(!pa2.created && !pp2.created);
    // Another run is configuring the proxy (it holds the configure lock inside the container for
    // a few seconds): this run waits for it, says so, then configures.
    let mut other = Command::new("lxc-attach")
        .arg("-P")
        .arg(&lab.lxc_path)
        .args(["-n", &p.name, "--", "flock", proxmox_gitops::steps::configure::CONFIGURE_LOCK, "sleep", "4"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lab
        .attach(&p.name, &["flock", "-n", proxmox_gitops::steps::configure::CONFIGURE_LOCK, "true"])
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "the other run never took the lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = cli(
        &["--stage", &stage, "-v", "configure", "--force", "-c", "broker", "-c", "proxy"],
        &root,
        &artifacts,
        &share,
        &password,
    );
    assert!(other.wait().unwrap().success());
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "second configure failed:\n{text}");
    assert!(
        text.contains(
            "proxy: another run is configuring this container; waiting for its lock /run/proxmox-gitops-configure.lock"
        ),
        "{text}"
    );
    assert!(!text.contains("broker: another run is configuring"), "{text}");
    assert_no_secret("the CLI's output", &text, &password);
    let b2: Configure = artifact::read(&artifacts.join("configure/broker.json")).unwrap();
    let p2: Configure = artifact::read(&artifacts.join("configure/proxy.json")).unwrap();
    assert_eq!(p2.lib.as_ref().unwrap().changed, Some(0), "proxy lib changed something on the second run");
    assert_eq!(p2.base.as_ref().unwrap().changed, Some(0));
    assert_eq!(
        normalized(b2),
        Configure {
            name: "broker".into(),
            hostname: format!("{stage}-broker"),
            vmid: broker_id,
            address: Some(a.ip.clone()),
            ssh_port: 22,
            user: Some("config".into()),
            host_key_fingerprint: Some(fingerprint.clone()),
            engine: Engine::Shell,
            base: Some(EngineRun {
                engine: "ansible".into(),
                changed: Some(0),
                ok: Some(0),
                exit_code: Some(0),
                success: true,
                duration_ms: 0,
                skipped: false,
            }),
            restore: None,
            lib: Some(EngineRun {
                engine: "shell".into(),
                changed: None,
                ok: None,
                exit_code: Some(0),
                success: true,
                duration_ms: 0,
                skipped: false,
            }),
            outputs: BTreeMap::from([("LIBS_BROKER_ENDPOINT".to_string(), format!("mqtt://{}:1883", a.ip))]),
            duration_ms: 0,
            log_tail: vec![],
            skipped: None,
            full_run: Some("forced".into()),
            outcome: Outcome::Ok,
        }
    );
    assert_eq!(p2.full_run.as_deref(), Some("forced"));
    // The stamp is root's alone inside the container.
    let stamp = lab.attach(&a.name, &["stat", "-c", "%a %U", proxmox_gitops::steps::configure::STAMP_PATH]);
    assert_eq!(String::from_utf8_lossy(&stamp.stdout).trim(), "600 root");

    // 2b. Nothing changed since: both engines are skipped on both containers, said in the
    // artifact and the log line, and the broker's outputs are the recorded ones.
    let out =
        cli(&["--stage", &stage, "configure", "-c", "broker", "-c", "proxy"], &root, &artifacts, &share, &password);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "third configure failed:\n{text}");
    assert!(text.contains("broker: unchanged since its last configure"), "{text}");
    assert_no_secret("the CLI's output", &text, &password);
    for name in ["broker", "proxy"] {
        let c: Configure = artifact::read(&artifacts.join(format!("configure/{name}.json"))).unwrap();
        assert_eq!(c.skipped.as_deref(), Some("unchanged"), "{name}: {c:?}");
        assert_eq!(c.full_run, None);
        assert!(c.base.as_ref().unwrap().skipped && c.lib.as_ref().unwrap().skipped, "{name}: {c:?}");
        assert_eq!(c.base.as_ref().unwrap().changed, None);
        if name == "broker" {
            assert_eq!(
                c.outputs,
                BTreeMap::from([("LIBS_BROKER_ENDPOINT".to_string(), format!("mqtt://{}:1883", a.ip))])
            );
        }
    }
    let raw = std::fs::read_to_string(artifacts.join("configure/broker.json")).unwrap();
    assert!(raw.contains("\"schema_version\": \"1.2\"") && raw.contains("\"skipped\": \"unchanged\""), "{raw}");

    // 2c. Drift inside the container: the broker's configuration edited in /etc. The next run
    // sees the state changed, runs fully and puts the file right.
    let conf = "/etc/mosquitto/conf.d/proxmox-gitops.conf";
    let want_conf = lab.attach(&a.name, &["cat", conf]).stdout;
    let edited = lab.attach(&a.name, &["sh", "-c", "echo 'listener 1884' >> \"$1\"", "sh", conf]);
    assert!(edited.status.success());
    let broker_only = |opts: ConfigureOptions| {
        let r = rt.block_on(configure(&inv, &opts)).unwrap();
        assert!(r[0].ok(), "{:?}\n{}", r[0].outcome, r[0].log_tail.join("\n"));
        r.into_iter().next().unwrap()
    };
    let c = broker_only(options(&artifacts, &["broker"], &password));
    assert_eq!(c.skipped, None);
    assert_eq!(c.full_run.as_deref(), Some("the container's state changed (packages, /etc or systemd units)"));
    assert_eq!(c.base.as_ref().unwrap().changed, Some(0));
    assert!(!c.lib.as_ref().unwrap().skipped);
    assert_eq!(lab.attach(&a.name, &["cat", conf]).stdout, want_conf, "the drifted file was not put right");
    mqtt_round_trip(&a.ip, LOGIN, &password);
    // A package the base role installs, removed: put back by the next run.
    let removed = lab.attach(&a.name, &["dpkg", "--remove", "less"]);
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    let c = broker_only(options(&artifacts, &["broker"], &password));
    assert!(c.full_run.as_deref().is_some_and(|w| w.starts_with("the container's state changed")), "{c:?}");
    assert!(c.base.as_ref().unwrap().changed.unwrap() > 0);
    let less = lab.attach(&a.name, &["dpkg-query", "-W", "-f", "${Status}", "less"]);
    assert_eq!(String::from_utf8_lossy(&less.stdout), "install ok installed");
    assert_eq!(broker_only(options(&artifacts, &["broker"], &password)).skipped.as_deref(), Some("unchanged"));
    // A changed input of the lib (a new file in its directory): a full run.
    std::fs::write(root.join("libs/broker/NOTES.txt"), "changed input\n").unwrap();
    let c = broker_only(options(&artifacts, &["broker"], &password));
    assert_eq!(c.full_run.as_deref(), Some("the inputs changed (base role, lib files, engine or contract values)"));
    assert_eq!(broker_only(options(&artifacts, &["broker"], &password)).skipped.as_deref(), Some("unchanged"));
    // Forced through the environment, as ./local/run.sh --full and the workflows do.
    let out = Command::new(env!("CARGO_BIN_EXE_proxmox-gitops"))
        .arg("--repo")
        .arg(&root)
        .arg("--artifacts")
        .arg(&artifacts)
        .args(["--stage", &stage, "configure", "-c", "broker"])
        .env("PROXMOX_SHARE", &share)
        .env("LOGIN", LOGIN)
        .env("PASSWORD", &password)
        .env("HOST", "http://127.0.0.1:9")
        .env("PROXMOX_GITOPS_CONFIGURE", "full")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITEA_ACTIONS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Configure = artifact::read(&artifacts.join("configure/broker.json")).unwrap();
    assert_eq!((c.skipped, c.full_run.as_deref()), (None, Some("forced")));
    // Root may no longer log in; config may, with passwordless sudo.
    let root_login = Command::new("ssh")
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-i"])
        .arg(share.join(".keys").join(broker_id.to_string()))
        .arg(format!("root@{}", a.ip))
        .arg("true")
        .output()
        .unwrap();
    assert!(!root_login.status.success(), "root can still log in after the base role");

    // 3. A lib whose script exits 1: the step fails (exit 1) with the log tail, recorded in the
    // artifact, and the secret it printed is redacted.
    let root2 = monorepo(
        &tmp.path().join("repo2"),
        &[(
            "failing",
            &format!("ID={broker_id}\nIP=dhcp\n"),
            &[(
                "configure.sh",
                "echo preparing\necho \"about to fail: $PASSWORD\"\necho 'broken on purpose' >&2\nexit 1\n",
            )],
        )],
        &[],
    );
    sup::write_provision(&artifacts, "failing", broker_id, &a.ip, 22, false);
    let ps = sup::PsSampler::start();
    let out = cli(&["--stage", &stage, "configure", "-c", "failing"], &root2, &artifacts, &share, &password);
    let ps_lines = ps.finish();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("failing failed; last log lines:"), "{text}");
    assert!(text.contains("broken on purpose"), "{text}");
    assert_no_secret("the CLI's output", &text, &password);
    for l in &ps_lines {
        assert_no_secret(&format!("process argument list `{l}`"), l, &password);
    }
    let f: Configure = artifact::read(&artifacts.join("configure/failing.json")).unwrap();
    assert_eq!(
        f.outcome,
        Outcome::Failed { error: "the lib's shell configuration failed with exit code 1 (see the log tail)".into() }
    );
    assert_eq!(f.lib.as_ref().unwrap().exit_code, Some(1));
    assert_eq!(f.base.as_ref().unwrap().changed, Some(0));
    let tail = f.log_tail.join("\n");
    assert!(tail.contains("preparing\nabout to fail: ***\nbroken on purpose\nerror: the lib's shell"), "{tail}");

    // 3b. The contract reaches a shell lib intact (values with quotes and `$( )` included), the
    // password is masked in outputs, and the lib runs as root.
    let contract_sh = r#"{
  echo "C_IP=$IP"; echo "C_ID=$ID"; echo "C_HOSTNAME=$HOSTNAME"; echo "C_STAGE=$STAGE"
  echo "C_HOST=$HOST"; echo "C_LOGIN=$LOGIN"; echo "C_PASSWORD=$PASSWORD"; echo "C_DOMAIN=$DOMAIN"
  echo "C_GREETING=$GREETING"; echo "C_GREETING2=$GREETING2"; echo "C_WHOAMI=$(id -un)"
  echo "C_CONTAINERS=$(printf '%s' "$PGO_CONTAINERS" | jq -c '[.[].name]')"
} >> "$PGO_OUTPUT"
"#;
    let root3 = monorepo(
        &tmp.path().join("repo3"),
        &[
            (
                "contract",
                &format!("ID={broker_id}\nIP=dhcp\nGREETING='it is $(id) `x` \"q\"'\nGREETING2=\"it's \\$HOME\"\n"),
                &[("configure.sh", contract_sh)],
            ),
            ("stranger", "ID=9105\nIP=dhcp\n", &[]),
        ],
        &[],
    );
    let inv3 = resolve_with_share(&root3, &share, &stage);
    sup::write_provision(&artifacts, "contract", broker_id, &a.ip, 22, false);
    sup::write_provision(&artifacts, "stranger", 9105, &a.ip, 22, false);
    let r = rt.block_on(configure(&inv3, &options(&artifacts, &["contract", "stranger"], &password))).unwrap();
    assert!(r[0].ok(), "{:?}\n{}", r[0].outcome, r[0].log_tail.join("\n"));
    let want: BTreeMap<String, String> = [
        ("C_IP", a.ip.as_str()),
        ("C_ID", "9101"),
        ("C_HOSTNAME", format!("{stage}-contract").as_str()),
        ("C_STAGE", stage.as_str()),
        ("C_HOST", "http://127.0.0.1:9"),
        ("C_LOGIN", LOGIN),
        ("C_PASSWORD", "***"),
        ("C_DOMAIN", "lan.test"),
        ("C_GREETING", "it is $(id) `x` \"q\""),
        ("C_GREETING2", "it's $HOME"),
        ("C_WHOAMI", "root"),
        ("C_CONTAINERS", r#"["contract","stranger"]"#),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(r[0].outputs, want);
    // A key the container does not authorize: refused for config and root, said clearly.
    let Outcome::Failed { error } = &r[1].outcome else { panic!("stranger should fail") };
    assert!(
        error.starts_with(&format!("stranger: SSH at {}:22 refused the key ", a.ip))
            && error.contains("for user(s) config, root"),
        "{error}"
    );

    // 3c. A Cinc lib on a container without cinc-client: a clear error.
    let root4 = monorepo(&tmp.path().join("repo4"), &[("chef", &format!("ID={broker_id}\nIP=dhcp\n"), &[])], &[]);
    std::fs::create_dir_all(root4.join("libs/chef/recipes")).unwrap();
    std::fs::write(root4.join("libs/chef/recipes/default.rb"), "file '/tmp/x' do\n  content 'x'\nend\n").unwrap();
    let inv4 = resolve_with_share(&root4, &share, &stage);
    assert_eq!(inv4.container("chef").unwrap().engine, Engine::Cinc);
    sup::write_provision(&artifacts, "chef", broker_id, &a.ip, 22, false);
    let r = rt.block_on(configure(&inv4, &options(&artifacts, &["chef"], &password))).unwrap();
    let Outcome::Failed { error } = &r[0].outcome else { panic!("chef should fail") };
    assert!(
        error.contains(
            "libs/chef has recipes/default.rb but cinc-client is not installed in the container: nothing here \
             installs Cinc (the base role does not)"
        ),
        "{error}"
    );
    assert_eq!(r[0].lib.as_ref().unwrap().exit_code, Some(127));

    // 4. A changed host key is refused …
    let kh = artifacts.join("known_hosts/broker");
    let fake = ssh_key::PrivateKey::random(&mut ssh_key::rand_core::OsRng, ssh_key::Algorithm::Ed25519).unwrap();
    std::fs::write(&kh, format!("{} {}\n", a.ip, fake.public_key().to_openssh().unwrap())).unwrap();
    let r = rt.block_on(configure(&inv, &options(&artifacts, &["broker"], &password))).unwrap();
    match &r[0].outcome {
        Outcome::Failed { error } => {
            assert!(error.contains("SSH host key") && error.contains("changed"), "{error}");
            assert!(error.contains(&kh.display().to_string()), "{error}");
        }
        o => panic!("expected a host key failure, got {o:?}"),
    }
    assert!(r[0].base.is_none());
    // … except when provision (re)created the container after the key was recorded: the record
    // is replaced.
    let mut recreated: proxmox_gitops::model::Provision =
        artifact::read(&artifacts.join("provision/broker.json")).unwrap();
    recreated.created = true;
    recreated.created_at = Some(time::OffsetDateTime::now_utc());
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
    std::fs::File::options().write(true).open(&kh).unwrap().set_modified(before).unwrap();
    artifact::write(&artifacts.join("provision/broker.json"), &recreated).unwrap();
    let r = rt.block_on(configure(&inv, &options(&artifacts, &["broker"], &password))).unwrap();
    assert!(r[0].ok(), "{:?}\n{}", r[0].outcome, r[0].log_tail.join("\n"));
    assert_eq!(r[0].host_key_fingerprint.as_deref(), Some(fingerprint.as_str()));
    // The key learned after that creation is kept: the same `created_at` does not make a later
    // change acceptable.
    let learned = std::fs::read_to_string(&kh).unwrap();
    std::fs::write(&kh, format!("{} {}\n", a.ip, fake.public_key().to_openssh().unwrap())).unwrap();
    let r = rt.block_on(configure(&inv, &options(&artifacts, &["broker"], &password))).unwrap();
    assert!(matches!(&r[0].outcome, Outcome::Failed { error } if error.contains("changed")), "{:?}", r[0].outcome);
    std::fs::write(&kh, learned).unwrap();

    // The contract's temporary directories are gone from the container.
    let left = lab.attach(&a.name, &["find", "/tmp", "-maxdepth", "1", "-name", "pgo.*"]);
    assert_eq!(String::from_utf8_lossy(&left.stdout), "", "temporary directories left on the container");

    // The secret is in no artifact.
    for (path, text) in sup::all_files(&artifacts) {
        assert_no_secret(&path.display().to_string(), &text, &password);
    }
    drop(lab);
}

#[test]
fn unreachable_host_fails_clearly_within_the_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let root = monorepo(&tmp.path().join("repo"), &[("ghost", "ID=9200\nIP=dhcp\n", &[])], &[]);
    let inv = resolve_with_share(&root, &share, "main");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    sup::write_provision(&artifacts, "ghost", 9200, "127.0.0.1", port, true);
    let mut opts = options(&artifacts, &["ghost"], "pw");
    opts.connect =
        ConnectOptions { connect_timeout: Duration::from_secs(2), total_timeout: Duration::from_secs(6), attempts: 3 };
    let start = Instant::now();
    let r = rt().block_on(configure(&inv, &opts)).unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let c: Configure = artifact::read(&artifacts.join("configure/ghost.json")).unwrap();
    assert_eq!(c, r[0]);
    let Outcome::Failed { error } = &c.outcome else { panic!("expected a failure") };
    assert!(error.starts_with(&format!("ghost: cannot reach SSH at 127.0.0.1:{port} after 3 attempt(s)")), "{error}");
    assert!(error.contains("Connection refused"), "{error}");
    assert_eq!(c.user, None);
    assert_eq!(c.base, None);
    assert_eq!(c.log_tail.last().unwrap(), &format!("error: {error}"));
}

#[test]
fn unknown_container_is_an_input_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = monorepo(&tmp.path().join("repo"), &[("ghost", "ID=9200\nIP=dhcp\n", &[])], &[]);
    let inv = resolve_with_share(&root, &tmp.path().join("share"), "main");
    let e = rt().block_on(configure(&inv, &options(&tmp.path().join("a"), &["nope"], "pw"))).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        e.to_string(),
        "1 problem in the input:\n  --container (nope): no container named `nope` in the inventory (known: ghost)\n"
    );
}
