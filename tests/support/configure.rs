//! Test support for `configure`: real LXC containers on lxcbr0 with a unique per-run name prefix,
//! destroyed on drop (also when a test fails), and fixture monorepos built from the shipped
//! `base/` and `libs/`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use proxmox_gitops::artifact;
use proxmox_gitops::backend::lxc::{LxcBackend, LxcOptions};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{Action, ApplyOptions, BackendKind, Outcome, Provision, RecreatePolicy};

/// The configure options of the LXC tests: `names` with 2 jobs, the contract's `LOGIN`/`PASSWORD`
/// (and a `HOST` nothing listens on: 127.0.0.1:9), SSH within 60 s, runs within 15 min.
pub fn options(
    artifacts: &Path,
    names: &[&str],
    login: &str,
    password: &str,
) -> proxmox_gitops::steps::configure::ConfigureOptions {
    use proxmox_gitops::steps::configure::{ConfigureOptions, Contract};
    ConfigureOptions {
        containers: names.iter().map(|s| s.to_string()).collect(),
        jobs: 2,
        artifacts: artifact::ArtifactDir::new(artifacts),
        contract: Contract {
            host: Some("http://127.0.0.1:9".into()),
            login: Some(login.into()),
            password: Some(secrecy::SecretString::from(password.to_string())),
        },
        connect: proxmox_gitops::ssh::ConnectOptions {
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(60),
            attempts: 6,
        },
        run_timeout: Duration::from_secs(900),
        ..ConfigureOptions::default()
    }
}

/// Name prefix of everything this test process creates.
pub fn prefix() -> String {
    prefix_for("cfg")
}

/// Name prefix of the containers of a test area of `kind` (`cfg`, `ssh`): `pgotest-<kind>-<pid>-`.
pub fn prefix_for(kind: &str) -> String {
    format!("pgotest-{kind}-{}-", std::process::id())
}

/// The stage of a test area of `kind`: hostnames `<stage>-<lib>` start with [`prefix_for`].
pub fn stage_for(kind: &str) -> String {
    prefix_for(kind).trim_end_matches('-').to_string()
}

/// The stage the fixtures resolve with: hostnames become `<stage>-<lib>`, i.e. they start with
/// [`prefix`], so every container of a run carries the run's prefix.
pub fn stage() -> String {
    prefix().trim_end_matches('-').to_string()
}

/// The LXC backend with this run's own cached base (`<prefix>base`). Every container with the
/// run's prefix (base last) is destroyed when it drops, also when a test fails.
pub struct Lab {
    pub backend: LxcBackend,
    pub share: PathBuf,
    /// The LXC path of its containers.
    pub lxc_path: PathBuf,
    prefix: String,
}

impl Lab {
    /// Opens the backend (a clear failure when LXC cannot run here) and removes leftovers of
    /// earlier runs that were killed (their pid is gone).
    pub async fn new(share: &Path) -> Lab {
        Lab::open(share, "cfg", &format!("{}base", prefix())).await
    }

    /// Like [`Lab::new`] for test area `kind` (containers `pgotest-<kind>-<pid>-…`), cloning
    /// from the base container `base`. A base named without the run's pid (e.g.
    /// `pgotest-ssh-base`) is bootstrapped once and kept for later runs (the backend locks its
    /// bootstrap); only the run's own containers are removed on drop.
    pub async fn open(share: &Path, kind: &str, base: &str) -> Lab {
        let opts = LxcOptions { base: base.to_string(), share: share.to_path_buf(), ..LxcOptions::default() };
        let backend = LxcBackend::new(opts)
            .await
            .unwrap_or_else(|e| panic!("LXC cannot run on this machine, configure cannot be tested: {e:#}"));
        let lxc_path = backend.client().path().to_path_buf();
        let family = format!("pgotest-{kind}-");
        for n in list(&lxc_path) {
            let Some(rest) = n.strip_prefix(&family) else { continue };
            let Some((pid, _)) = rest.split_once('-') else { continue };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                remove_with_prefix(&lxc_path, &format!("{family}{pid}-"));
            }
        }
        Lab { backend, share: share.to_path_buf(), lxc_path, prefix: prefix_for(kind) }
    }

    /// Provisions `spec` with the backend (plan, then apply) and writes its
    /// `provision/<name>.json` into `artifacts`, as the provision step does.
    pub async fn provision(&self, spec: &ContainerSpec, artifacts: &Path) -> Provision {
        let plan = self.backend.plan(spec, RecreatePolicy::Never).await.expect("plan");
        let opts = ApplyOptions { share: self.share.clone(), ..ApplyOptions::default() };
        let p = self.backend.apply(spec, &plan, &opts).await;
        assert_eq!(p.outcome, Outcome::Ok, "{}: provision failed: {p:#?}", spec.name);
        artifact::write(&artifacts.join("provision").join(format!("{}.json", spec.name)), &p).unwrap();
        p
    }

    /// Runs `argv` inside container `name` with lxc-attach; returns the output.
    pub fn attach(&self, name: &str, argv: &[&str]) -> std::process::Output {
        Command::new("lxc-attach").arg("-P").arg(&self.lxc_path).args(["-n", name, "--"]).args(argv).output().unwrap()
    }

    /// The root filesystem of container `name` on the host.
    pub fn rootfs(&self, name: &str) -> PathBuf {
        self.lxc_path.join(name).join("rootfs")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        remove_with_prefix(&self.lxc_path, &self.prefix);
    }
}

fn list(lxc_path: &Path) -> Vec<String> {
    Command::new("lxc-ls")
        .arg("-P")
        .arg(lxc_path)
        .arg("-1")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Stops and destroys every container named `prefix…` with its snapshots (`lxc-destroy -s`:
/// `update` leaves container snapshots), the base last.
fn remove_with_prefix(lxc_path: &Path, prefix: &str) {
    let mut names: Vec<String> = list(lxc_path).into_iter().filter(|n| n.starts_with(prefix)).collect();
    names.sort_by_key(|n| n.ends_with("-base"));
    for n in names {
        let _ = Command::new("lxc-stop").arg("-P").arg(lxc_path).args(["-k", "-n", &n]).output();
        let _ = Command::new("lxc-destroy").arg("-P").arg(lxc_path).args(["-s", "-n", &n]).output();
    }
}

/// Writes `provision/<name>.json` for a lib that shares an already provisioned container (same
/// vmid and key) or names an address that nobody serves.
pub fn write_provision(artifacts: &Path, name: &str, vmid: u32, address: &str, port: u16, created: bool) {
    let mut p = super::provision::running(BackendKind::Lxc, name, vmid, name);
    p.address = Some(address.into());
    p.ssh_port = port;
    p.plan.action = Action::Create;
    p.plan.start = true;
    p.created = created;
    p.created_at = created.then(time::OffsetDateTime::now_utc);
    super::provision::write(artifacts, &p);
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
