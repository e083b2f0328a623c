//! The shipped share server (`libs/share`, Samba) and the PVE-side CIFS client of the share,
//! against real LXC containers on lxcbr0.
//!
//! Two containers, cloned from a ready base (`support::lxc::ready_base`) and removed afterwards,
//! also when the test fails: `share` (the shipped lib, its `container.env` with a test vmid and
//! DHCP) and `client` (`MOUNT=share`, a shell lib that installs `smbclient`). Both are configured
//! by the configure step (base role, then the lib). The client's provision artifact says `pve`,
//! as a container on Proxmox VE would have it, so the base role writes the CIFS client (mount
//! unit, remount timer, credentials) exactly as on PVE; the kernels here have no CIFS, so the
//! mount itself cannot succeed: the units are checked with `systemd-analyze verify` inside the
//! container instead, and the failed mount must not fail the base role.
//!
//! With `smbclient` from the host and from the client container: a file written through one is
//! read through the other, a wrong password is refused with `NT_STATUS_LOGON_FAILURE`, and
//! anonymous access is refused; smbd listens on 445 only on loopback and the container's address.
//! A second configure changes nothing; a data snapshot, the container destroyed and created again,
//! and configure restores the exported directory (`SNAPSHOT`): both files are read back.
//!
//! Needs root, lxc, ansible, `smbclient` on the host (tests/run.sh installs it) and Debian's
//! mirror from inside the containers. Run: `cargo test --test suite share::`.

use crate::support;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use proxmox_gitops::artifact;
use proxmox_gitops::exec::LxcAttach;
use proxmox_gitops::inventory::{Engine, Inventory};
use proxmox_gitops::model::{BackendKind, Outcome, Provision};
use proxmox_gitops::share::{ClientInput, client};
use proxmox_gitops::snapshot::record::SnapshotOptions;
use proxmox_gitops::steps::configure::{Configure, ConfigureOptions, configure};
use proxmox_gitops::steps::resolve::{ResolveOptions, resolve};
use support::configure::{Lab, PsSampler, stage_for};

const KIND: &str = "shr";
const LOGIN: &str = "pgo-admin";
const SHARE_ID: u32 = 9321;
const CLIENT_ID: u32 = 9322;

fn password() -> String {
    // Quotes, `$( )`, `%`, `,` and spaces: nothing may be pasted into a shell string, a unit file
    // or mount options.
    format!("S3cr'et $(id) %i,\"{}\"-x", std::process::id())
}

/// The monorepo: the shipped base/ and libs/share (its container.env with a test vmid and DHCP
/// instead of the example address), and a client lib that mounts the share and has smbclient.
fn monorepo(root: &Path, share_host: &str) {
    let src = support::fs::source_root();
    support::fs::copy_dir(&src.join("base"), &root.join("base"));
    support::fs::copy_dir(&src.join("libs/share"), &root.join("libs/share"));
    let shipped = std::fs::read_to_string(src.join("libs/share/container.env")).unwrap();
    let kept: String =
        shipped.lines().filter(|l| !l.starts_with("ID=") && !l.starts_with("IP=")).map(|l| format!("{l}\n")).collect();
    std::fs::write(root.join("libs/share/container.env"), format!("ID={SHARE_ID}\nIP=dhcp\n{kept}")).unwrap();
    support::fs::write_files(
        root,
        &[
            ("libs/client/container.env", &format!("ID={CLIENT_ID}\nIP=dhcp\nMEMORY=256\nMOUNT=share\n")),
            (
                "libs/client/configure.sh",
                "set -e\ncommand -v smbclient >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends smbclient\n",
            ),
        ],
    );
    let globals = serde_json::json!({"DOMAIN": "lan.test", "SHARE_HOST": share_host});
    std::fs::write(root.join("globals.json"), globals.to_string()).unwrap();
}

fn inventory(root: &Path, share: &Path) -> Inventory {
    let env: BTreeMap<String, String> = [("PROXMOX_SHARE".to_string(), share.display().to_string())].into();
    resolve(&ResolveOptions { repo: root.to_path_buf(), stage: stage_for(KIND) }, &env).unwrap()
}

fn options(artifacts: &Path, names: &[&str], password: &str) -> ConfigureOptions {
    support::configure::options(artifacts, names, LOGIN, password)
}

/// An smbclient authentication file (mode 0600): `username = …`, `password = …`.
fn auth_file(path: &Path, password: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(path).unwrap();
    std::io::Write::write_all(&mut f, auth_text(password).as_bytes()).unwrap();
}

/// Runs smbclient on the host against `//ip/share` with `auth` and the commands `cmds`, bounded
/// by `timeout 60`; returns (success, stdout + stderr).
fn smb_host(ip: &str, auth: &Path, cmds: &str) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["60", "smbclient", "-t", "20", &format!("//{ip}/share"), "-A"])
        .arg(auth)
        .args(["-c", cmds])
        .output()
        .expect("smbclient on the host (apt-get install smbclient; tests/run.sh installs it)");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Runs smbclient inside container `name` (auth file at `/root/share.auth`).
fn smb_in(lab: &Lab, name: &str, ip: &str, cmds: &str) -> (bool, String) {
    let target = format!("//{ip}/share");
    let out =
        lab.attach(name, &["timeout", "60", "smbclient", "-t", "20", &target, "-A", "/root/share.auth", "-c", cmds]);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Writes `content` to `path` in container `name` (mode 0600, root) through lxc-attach's stdin
/// (a cloned container's rootfs is not a plain directory on the host).
fn put_in(name: &str, path: &str, content: &str) {
    use std::io::Write;
    let mut child = Command::new("lxc-attach")
        .arg("-P")
        .arg(support::lxc::lxc_path())
        .args(["-n", name, "--", "sh", "-c", "umask 077 && mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"", "sh", path])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(content.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "cannot write {path} in {name}");
}

fn auth_text(password: &str) -> String {
    format!("username = {LOGIN}\npassword = {password}\n")
}

fn attach_ok(lab: &Lab, name: &str, argv: &[&str]) -> String {
    let out = lab.attach(name, argv);
    assert!(
        out.status.success(),
        "{argv:?} in {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The IPv4 addresses listening on TCP `port` in container `name` (from /proc/net/tcp).
fn listening_v4(lab: &Lab, name: &str, port: u16) -> Vec<Ipv4Addr> {
    let text = attach_ok(lab, name, &["cat", "/proc/net/tcp"]);
    let mut out: Vec<Ipv4Addr> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (addr, p) = f.get(1)?.split_once(':')?;
            let ip = Ipv4Addr::from(u32::from_str_radix(addr, 16).ok()?.swap_bytes());
            (f.get(3) == Some(&"0A") && u16::from_str_radix(p, 16).ok()? == port).then_some(ip)
        })
        .collect();
    out.sort();
    out
}

/// True when anything in /proc/net/tcp6 listens on `port` on the unspecified address `::`.
fn listening_v6_any(lab: &Lab, name: &str, port: u16) -> bool {
    let text = attach_ok(lab, name, &["cat", "/proc/net/tcp6"]);
    text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1).and_then(|a| a.split_once(':')).is_some_and(|(addr, p)| {
            addr.bytes().all(|b| b == b'0') && u16::from_str_radix(p, 16).ok() == Some(port) && f.get(3) == Some(&"0A")
        })
    })
}

fn assert_ok(c: &Configure) {
    assert!(c.ok(), "{} failed: {:?}\n{}", c.name, c.outcome, c.log_tail.join("\n"));
}

fn no_secret(what: &str, text: &str, password: &str) {
    assert!(!text.contains(password), "{what} contains the password");
    assert!(!text.contains(&format!("\"{}\"-x", std::process::id())), "{what} contains part of the password");
}

#[tokio::test(flavor = "multi_thread")]
async fn share_server_clients_and_the_cifs_units() {
    let _heavy = support::heavy::area("share");
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    let artifacts = tmp.path().join("artifacts");
    let root = tmp.path().join("repo");
    let password = password();
    let lxc_path = support::lxc::lxc_path();
    let lab = Lab::open(&share, KIND, &support::lxc::ready_base(&lxc_path, "pgotest-shr-base")).await;

    // 1. Provision both. The client is created without its MOUNT: on the lxc backend `share` would
    // be a bind mount of the host's share at /share, and this container plays one on PVE.
    monorepo(&root, "");
    let inv = inventory(&root, &share);
    let share_spec = inv.container("share").unwrap().clone();
    assert_eq!(share_spec.engine, Engine::Ansible);
    assert_eq!(share_spec.snapshot_paths, vec!["/srv/share".to_string()]);
    assert_eq!(share_spec.services, vec!["smbd.service".to_string()]);
    let mut client_spec = inv.container("client").unwrap().clone();
    client_spec.mounts.clear();
    let (ps, pc) = tokio::join!(lab.provision(&share_spec, &artifacts), lab.provision(&client_spec, &artifacts));
    let (share_name, client_name) = (ps.hostname.clone(), pc.hostname.clone());
    let share_ip = ps.address.clone().unwrap();
    // The client as a PVE container would be recorded.
    let mut on_pve: Provision = artifact::read(&artifacts.join("provision/client.json")).unwrap();
    on_pve.backend = BackendKind::Pve;
    artifact::write(&artifacts.join("provision/client.json"), &on_pve).unwrap();

    // 2. SHARE_HOST names the share server; configure both.
    monorepo(&root, &share_ip);
    let inv = inventory(&root, &share);
    let sampler = PsSampler::start();
    let results = configure(&inv, &options(&artifacts, &["share", "client"], &password)).await.unwrap();
    let argv_seen = sampler.finish();
    for c in &results {
        assert_ok(c);
    }
    for l in &argv_seen {
        no_secret(&format!("process argument list `{l}`"), l, &password);
    }
    let sc = results.iter().find(|c| c.name == "share").unwrap();
    assert_eq!(sc.outputs, BTreeMap::from([("LIBS_SHARE_ENDPOINT".to_string(), format!("//{share_ip}/share"))]));
    assert!(sc.lib.as_ref().unwrap().changed.unwrap() > 0);

    // 3. The server: smbd active, nmbd off, listening on 445 only on loopback and its address.
    assert_eq!(attach_ok(&lab, &share_name, &["systemctl", "is-active", "smbd"]).trim(), "active");
    let nmbd = lab.attach(&share_name, &["systemctl", "is-active", "nmbd"]);
    assert_eq!(String::from_utf8_lossy(&nmbd.stdout).trim(), "inactive");
    let share_addr: Ipv4Addr = share_ip.parse().unwrap();
    let mut want = vec![Ipv4Addr::LOCALHOST, share_addr];
    want.sort();
    assert_eq!(listening_v4(&lab, &share_name, 445), want);
    assert!(!listening_v6_any(&lab, &share_name, 445), "smbd listens on every IPv6 address");
    assert_eq!(listening_v4(&lab, &share_name, 139), Vec::<Ipv4Addr>::new(), "NetBIOS (139) should be off");

    // 4. A file written from the host is read in the client container, and the other way round.
    let auth = tmp.path().join("share.auth");
    auth_file(&auth, &password);
    let local = tmp.path().join("files");
    std::fs::create_dir_all(&local).unwrap();
    let from_host = format!("written on the host by {}\n", std::process::id());
    std::fs::write(local.join("from-host.txt"), &from_host).unwrap();
    let put = format!("lcd {}; put from-host.txt", local.display());
    let start = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        let (ok, text) = smb_host(&share_ip, &auth, &put);
        if ok {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the host cannot write to the share: {text}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    put_in(&client_name, "/root/share.auth", &auth_text(&password));
    let (ok, text) = smb_in(&lab, &client_name, &share_ip, "get from-host.txt /tmp/from-host.txt");
    assert!(ok, "the client cannot read the share: {text}");
    assert_eq!(attach_ok(&lab, &client_name, &["cat", "/tmp/from-host.txt"]), from_host);
    let from_client = format!("written in {client_name}\n");
    put_in(&client_name, "/tmp/from-client.txt", &from_client);
    let (ok, text) = smb_in(&lab, &client_name, &share_ip, "put /tmp/from-client.txt from-client.txt");
    assert!(ok, "the client cannot write to the share: {text}");
    let (ok, text) = smb_host(&share_ip, &auth, &format!("lcd {}; get from-client.txt", local.display()));
    assert!(ok, "{text}");
    assert_eq!(std::fs::read_to_string(local.join("from-client.txt")).unwrap(), from_client);
    // On the server, files belong to config:config with the share's modes.
    let owners = attach_ok(
        &lab,
        &share_name,
        &["stat", "-c", "%n %U:%G %a", "/srv/share/from-host.txt", "/srv/share/from-client.txt"],
    );
    assert_eq!(owners, "/srv/share/from-host.txt config:config 660\n/srv/share/from-client.txt config:config 660\n");

    // 5. A wrong password is refused, from both sides, and so is a guest.
    let wrong = tmp.path().join("wrong.auth");
    auth_file(&wrong, "not-the-password");
    let (ok, text) = smb_host(&share_ip, &wrong, "ls");
    assert!(!ok && text.contains("NT_STATUS_LOGON_FAILURE"), "a wrong password was not refused clearly: {text}");
    put_in(&client_name, "/root/share.auth", &auth_text("not-the-password"));
    let (ok, text) = smb_in(&lab, &client_name, &share_ip, "ls");
    assert!(!ok && text.contains("NT_STATUS_LOGON_FAILURE"), "a wrong password was not refused clearly: {text}");
    let guest = Command::new("timeout")
        .args(["60", "smbclient", "-t", "20", "-N", &format!("//{share_ip}/share"), "-c", "ls"])
        .output()
        .unwrap();
    let guest_text = format!("{}{}", String::from_utf8_lossy(&guest.stdout), String::from_utf8_lossy(&guest.stderr));
    assert!(!guest.status.success() && guest_text.contains("NT_STATUS_"), "a guest got in: {guest_text}");

    // 6. The client's CIFS units as the base role wrote them: the rendered files, the credentials
    // root-only, accepted by systemd-analyze verify; the timer runs; the mount is enabled (the
    // kernel has no CIFS, so it cannot be active here).
    let env_file = root.join("libs/client/container.env");
    let want = client(&ClientInput {
        shares: &["share".to_string()],
        host: &share_ip,
        login: LOGIN,
        password: &password,
        env_file: &env_file,
    })
    .unwrap();
    for f in &want.files {
        assert_eq!(attach_ok(&lab, &client_name, &["cat", &f.path]), f.content, "{}", f.path);
    }
    assert_eq!(
        attach_ok(&lab, &client_name, &["stat", "-c", "%U:%G %a", "/etc/proxmox-gitops-share.credentials"]),
        "root:root 600\n"
    );
    let units: Vec<String> = want.files[1..].iter().map(|f| f.path.clone()).collect();
    let mut verify = vec!["systemd-analyze", "verify"];
    verify.extend(units.iter().map(String::as_str));
    let out = lab.attach(&client_name, &verify);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "systemd-analyze verify refused the units: {text}");
    assert!(!text.contains("share") && !text.contains("proxmox-gitops"), "systemd-analyze verify: {text}");
    assert_eq!(
        attach_ok(
            &lab,
            &client_name,
            &["systemctl", "is-enabled", "share.mount", "proxmox-gitops-remount-share.timer"]
        ),
        "enabled\nenabled\n"
    );
    assert_eq!(
        attach_ok(&lab, &client_name, &["systemctl", "is-active", "proxmox-gitops-remount-share.timer"]).trim(),
        "active"
    );
    assert!(attach_ok(&lab, &client_name, &["test", "-x", "/usr/sbin/mount.cifs"]).is_empty());
    // The mount was attempted and cannot be active: no CIFS in this kernel.
    let state = lab.attach(&client_name, &["systemctl", "is-active", "share.mount"]);
    assert_ne!(String::from_utf8_lossy(&state.stdout).trim(), "active");
    // A share whose name needs escaping: systemd agrees with our unit name and accepts the units.
    let escaped = attach_ok(&lab, &client_name, &["systemd-escape", "--path", "--suffix=mount", "/media-lib"]);
    let other = client(&ClientInput {
        shares: &["media-lib".to_string()],
        host: &share_ip,
        login: LOGIN,
        password: &password,
        env_file: &env_file,
    })
    .unwrap();
    assert_eq!(other.mounts, vec![escaped.trim().to_string()]);
    let mut verify: Vec<String> = vec!["systemd-analyze".into(), "verify".into()];
    for f in &other.files[1..] {
        let path = format!("/root/units/{}", Path::new(&f.path).file_name().unwrap().to_string_lossy());
        put_in(&client_name, &path, &f.content);
        verify.push(path);
    }
    let argv: Vec<&str> = verify.iter().map(String::as_str).collect();
    let out = lab.attach(&client_name, &argv);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("media"), "systemd-analyze verify: {text}");

    // 7. A second configure, forced (with nothing changed it would skip both engines), changes
    // nothing: the share lib, and the base role on both (the client's failed mount is retried,
    // which is no change).
    let forced = ConfigureOptions { full: true, ..options(&artifacts, &["share", "client"], &password) };
    let again = configure(&inv, &forced).await.unwrap();
    for c in &again {
        assert_ok(c);
        assert_eq!(c.base.as_ref().unwrap().changed, Some(0), "{}: the base role changed something", c.name);
    }
    let share_again = again.iter().find(|c| c.name == "share").unwrap();
    assert_eq!(share_again.lib.as_ref().unwrap().changed, Some(0), "the share lib changed something on a second run");

    // 8. Destroy and redeploy keeps the data: a verified snapshot of SNAPSHOT=/srv/share, the
    // container gone, created again, and configure restores the directory before Samba runs.
    let exec = LxcAttach::new(lab.backend.client().clone(), &share_name);
    let sopts = SnapshotOptions { share: share.clone(), keep: None, now: time::OffsetDateTime::now_utc() };
    let snap = proxmox_gitops::steps::snapshot::snapshot(&share_spec, &exec, None, &sopts).await;
    assert_eq!(snap.outcome, Outcome::Ok, "{snap:#?}");
    support::lxc::force_remove(&lxc_path, &share_name);
    assert!(!support::lxc::list(&lxc_path).contains(&share_name));
    let ps2 = lab.provision(&share_spec, &artifacts).await;
    assert!(ps2.created);
    let share_ip2 = ps2.address.clone().unwrap();
    if share_ip2 != share_ip {
        monorepo(&root, &share_ip2);
    }
    let inv = inventory(&root, &share);
    let r = configure(&inv, &options(&artifacts, &["share"], &password)).await.unwrap();
    assert_ok(&r[0]);
    let restored = r[0].restore.as_ref().expect("configure restored nothing into the new container");
    assert_eq!(restored.paths, vec!["/srv/share".to_string()]);
    auth_file(&auth, &password);
    let back = tmp.path().join("back");
    std::fs::create_dir_all(&back).unwrap();
    let (ok, text) =
        smb_host(&share_ip2, &auth, &format!("lcd {}; get from-host.txt; get from-client.txt", back.display()));
    assert!(ok, "after redeploy: {text}");
    assert_eq!(std::fs::read_to_string(back.join("from-host.txt")).unwrap(), from_host);
    assert_eq!(std::fs::read_to_string(back.join("from-client.txt")).unwrap(), from_client);

    // The password is in no artifact.
    for (path, text) in support::configure::all_files(&artifacts) {
        no_secret(&path.display().to_string(), &text, &password);
    }
    drop(lab);
}
