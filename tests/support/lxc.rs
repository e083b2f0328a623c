//! Test support for real LXC containers.
//!
//! Every run names its containers `pgotest-<pid>-…` (its own cached base included), so runs and
//! other users of the host never collide. Containers are removed when their [`Guard`] drops
//! (also when the test fails), and [`Fixture::teardown`] removes whatever is left with the run's
//! prefix, base last. Leftovers of runs that were killed (their pid is gone) are removed at the
//! start of the next run.
//!
//! If LXC cannot run on the machine (not root, tools missing, no bridge), [`Fixture::new`]
//! returns an error saying so and every test fails with it: these tests never pass or skip
//! without real containers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use proxmox_gitops::backend::lxc::{LxcBackend, LxcOptions};
use proxmox_gitops::inventory::ContainerSpec;
use proxmox_gitops::model::{ApplyOptions, Provision, RecreatePolicy};

/// Prefix of every container this test process creates.
pub fn run_prefix() -> String {
    format!("pgotest-{}-", std::process::id())
}

/// Shared state of one test process.
pub struct Fixture {
    /// The backend, with the run's own base.
    pub backend: LxcBackend,
    /// The LXC path.
    pub lxc_path: PathBuf,
    /// The share directory (keys) of this run.
    pub share: tempfile::TempDir,
    /// The run's name prefix.
    pub prefix: String,
}

fn lxc_cmd(tool: &str, lxc_path: &Path, args: &[&str]) -> Option<std::process::Output> {
    Command::new(tool).arg("-P").arg(lxc_path).args(args).output().ok()
}

/// Names of containers under `lxc_path` (lxc-ls -1).
pub fn list(lxc_path: &Path) -> Vec<String> {
    lxc_cmd("lxc-ls", lxc_path, &["-1"])
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Stops (kill) and destroys a container with its snapshots; best effort, for cleanup.
pub fn force_remove(lxc_path: &Path, name: &str) {
    let _ = lxc_cmd("lxc-stop", lxc_path, &["-n", name, "-k"]);
    let _ = lxc_cmd("lxc-destroy", lxc_path, &["-s", "-n", name]);
}

/// Removes every container with `prefix`, clones first, the base (`…base`) last.
pub fn remove_all_with_prefix(lxc_path: &Path, prefix: &str) {
    let mut names: Vec<String> = list(lxc_path).into_iter().filter(|n| n.starts_with(prefix)).collect();
    names.sort_by_key(|n| n.ends_with("-base"));
    for n in names {
        force_remove(lxc_path, &n);
    }
    // The base's bootstrap lock (LxcBackend::base_lock_path) and the containers' locks
    // (LxcBackend::container_lock_path): `.<prefix>….lock`.
    let locks = std::fs::read_dir(lxc_path).into_iter().flatten().flatten();
    for e in locks {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!(".{prefix}")) && n.ends_with(".lock") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl Fixture {
    /// Opens the backend (failing with a clear message when LXC cannot run here) and removes
    /// leftovers of dead earlier runs.
    pub async fn new() -> Result<Fixture, String> {
        let prefix = run_prefix();
        let share = tempfile::tempdir().map_err(|e| e.to_string())?;
        let opts =
            LxcOptions { base: format!("{prefix}base"), share: share.path().join("share"), ..LxcOptions::default() };
        let backend = LxcBackend::new(opts)
            .await
            .map_err(|e| format!("LXC cannot run on this machine, so the lxc backend cannot be tested: {e:#}"))?;
        proxmox_gitops::lxc::ensure_bridge("lxcbr0")
            .await
            .map_err(|e| format!("LXC networking cannot start on this machine: {e}"))?;
        let lxc_path = backend.client().path().to_path_buf();
        // Leftovers of killed runs.
        for n in list(&lxc_path) {
            let Some(rest) = n.strip_prefix("pgotest-") else { continue };
            let Some((pid, _)) = rest.split_once('-') else { continue };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                remove_all_with_prefix(&lxc_path, &format!("pgotest-{pid}-"));
            }
        }
        Ok(Fixture { backend, lxc_path, share, prefix })
    }

    /// Apply options of this run (keys in the run's share, SSH wait 120 s).
    pub fn apply_options(&self) -> ApplyOptions {
        ApplyOptions { share: self.share.path().to_path_buf(), ..ApplyOptions::default() }
    }

    /// A spec for a container called `<prefix><short>` with vmid `vmid` (DHCP, 1 core, 256 MiB).
    pub fn spec(&self, short: &str, vmid: u32) -> ContainerSpec {
        let name = format!("{}{short}", self.prefix);
        super::spec::spec(&name, vmid).small_lxc().lib(short).build()
    }

    /// A guard that removes the container of `spec` when dropped.
    pub fn guard(&self, spec: &ContainerSpec) -> Guard {
        Guard { lxc_path: self.lxc_path.clone(), name: spec.hostname.clone() }
    }

    /// Plans and applies `spec`; panics with the artifact when the outcome is not ok.
    pub async fn provision(&self, spec: &ContainerSpec, policy: RecreatePolicy) -> Provision {
        let plan = self.backend.plan(spec, policy).await.expect("plan");
        self.backend.apply(spec, &plan, &self.apply_options()).await
    }

    /// Removes everything of this run, base last.
    pub fn teardown(&self) {
        remove_all_with_prefix(&self.lxc_path, &self.prefix);
    }

    /// Runs `argv` in the container over the system `ssh` client with the generated key of
    /// `vmid` (host key checking off: test containers are new each run). Returns stdout.
    pub fn ssh(&self, address: &str, vmid: u32, argv: &[&str]) -> Result<String, String> {
        let key = self.share.path().join(".keys").join(vmid.to_string());
        let out = Command::new("ssh")
            .args(["-i"])
            .arg(&key)
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "ConnectTimeout=10",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg(format!("root@{address}"))
            .arg("--")
            .args(argv)
            .output()
            .map_err(|e| format!("cannot run ssh: {e}"))?;
        if !out.status.success() {
            return Err(format!("ssh failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `argv` inside the container with lxc-attach; returns stdout.
    pub fn attach(&self, name: &str, argv: &[&str]) -> String {
        let out = Command::new("lxc-attach")
            .arg("-P")
            .arg(&self.lxc_path)
            .args(["-n", name, "--"])
            .args(argv)
            .output()
            .expect("lxc-attach");
        assert!(out.status.success(), "lxc-attach {argv:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Removes one container when dropped (also while a failing test unwinds).
pub struct Guard {
    lxc_path: PathBuf,
    name: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        force_remove(&self.lxc_path, &self.name);
    }
}

/// A base of the lxc backend that is ready to clone (its `proxmox-gitops-base.json` written):
/// `$PGO_TEST_LXC_BASE`, else the backend's default `pgo-base-bookworm` when ready (what
/// `local/run.sh` caches), else any ready base under `lxc_path`, else `fallback` (which the
/// backend then bootstraps, from Debian's mirror).
pub fn ready_base(lxc_path: &Path, fallback: &str) -> String {
    if let Ok(b) = std::env::var("PGO_TEST_LXC_BASE") {
        return b;
    }
    let mut ready: Vec<String> = std::fs::read_dir(lxc_path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.path().join(proxmox_gitops::backend::lxc::BASE_READY_FILE).is_file() && e.path().join("config").is_file()
        })
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    let default = LxcOptions::default().base;
    ready.sort_by_key(|n| (*n != default, n.clone()));
    ready.into_iter().next().unwrap_or_else(|| fallback.to_string())
}

/// The LXC path (`lxc-config lxc.lxcpath`, normally `/var/lib/lxc`).
pub fn lxc_path() -> PathBuf {
    let out = Command::new("lxc-config").arg("lxc.lxcpath").output().expect("lxc-config (is lxc installed?)");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Bound for tests waiting on something they caused.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(300);
