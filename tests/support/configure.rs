//! Test support for `configure`: real LXC containers on lxcbr0 with a unique per-run name prefix,
//! destroyed on drop (also when a test fails), and fixture monorepos built from the shipped
//! `base/` and `libs/`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proxmox_gitops::artifact;
use proxmox_gitops::provision::{Action, BackendKind, ContainerPlan, Outcome, Provision};

/// Name prefix of everything this test process creates.
pub fn prefix() -> String {
    format!("pgotest-cfg-{}-", std::process::id())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A running LXC container; stopped and destroyed on drop.
pub struct Ct {
    pub name: String,
    pub ip: String,
}

impl Drop for Ct {
    fn drop(&mut self) {
        let _ = Command::new("lxc-stop").args(["-k", "-n", &self.name]).output();
        let _ = Command::new("lxc-destroy").args(["-f", "-n", &self.name]).output();
    }
}

/// Creates a Debian bookworm container `<prefix><suffix>`, starts it, waits for its DHCP address,
/// authorizes `pubkey` for root (what the lxc backend does at creation) and waits for sshd.
pub fn container(suffix: &str, pubkey: &str) -> Ct {
    let _ = Command::new("/usr/libexec/lxc/lxc-net").arg("start").output();
    let name = format!("{}{suffix}", prefix());
    run(Command::new("lxc-create").args(["-n", &name, "-t", "debian", "--", "-r", "bookworm"]));
    let mut ct = Ct { name: name.clone(), ip: String::new() };
    let cfg = PathBuf::from(format!("/var/lib/lxc/{name}/config"));
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text = text.lines().filter(|l| !l.starts_with("lxc.apparmor.profile")).collect::<Vec<_>>().join("\n");
    text.push_str("\nlxc.apparmor.profile = unconfined\n");
    std::fs::write(&cfg, text).unwrap();
    let rootfs = PathBuf::from(format!("/var/lib/lxc/{name}/rootfs"));
    let ssh = rootfs.join("root/.ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("authorized_keys"), format!("{pubkey}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(ssh.join("authorized_keys"), std::fs::Permissions::from_mode(0o600)).unwrap();
    run(Command::new("lxc-start").args(["-n", &name]));
    let start = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        let out = Command::new("lxc-info").args(["-n", &name, "-iH"]).output().unwrap();
        let ips = String::from_utf8_lossy(&out.stdout);
        if let Some(ip) = ips.lines().map(str::trim).find(|l| l.starts_with("10.0.3.")) {
            ct.ip = ip.to_string();
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{name}: no DHCP address after 90s");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(proxmox_gitops::net::wait_for_ssh(
        format!("{}:22", ct.ip).parse().unwrap(),
        Duration::from_secs(90),
    ))
    .unwrap();
    ct
}

/// Copies `src` to `dst` recursively.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// The crate's own directory (the shipped `base/` and `libs/`).
pub fn source_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `provision/<name>.json` as the provision step would after creating the container.
pub fn write_provision(artifacts: &Path, name: &str, vmid: u32, address: &str, port: u16, created: bool) {
    let p = Provision {
        backend: BackendKind::Lxc,
        name: name.into(),
        node: None,
        vmid,
        hostname: name.into(),
        address: Some(address.into()),
        ssh_port: port,
        plan: ContainerPlan {
            name: name.into(),
            vmid,
            hostname: name.into(),
            action: Action::Create,
            start: true,
        },
        actions: vec![],
        warnings: vec![],
        status: Some("running".into()),
        created,
        protected_by: None,
        inputs_digest: None,
        outcome: Outcome::Ok,
    };
    artifact::write(&artifacts.join("provision").join(format!("{name}.json")), &p).unwrap();
}

/// Samples `ps -eo args` every 50 ms on a thread until stopped; returns every line seen.
pub struct PsSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl PsSampler {
    pub fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(out) = Command::new("ps").args(["-eo", "args"]).output() {
                    for l in String::from_utf8_lossy(&out.stdout).lines() {
                        seen.insert(l.to_string());
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            seen.into_iter().collect()
        });
        PsSampler { stop, handle: Some(handle) }
    }

    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

/// Every file below `dir`, with its contents (lossy UTF-8).
pub fn all_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned()));
            }
        }
    }
    out
}
