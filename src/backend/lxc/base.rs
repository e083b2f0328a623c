//! The cached base container: bootstrapped once per host (`lxc-create -t debian`, prepared for
//! cloning: SSH host keys and machine-id removed, AppArmor unconfined, [`super::BASE_READY_FILE`]
//! written last), then cloned for every container (`lxc-copy`, an overlay snapshot where the kernel
//! allows it). A lock file serialises concurrent bootstraps. The bootstrap runs with a cleared
//! environment plus the mirror settings ([`bootstrap_env`]) and is tried once more after a
//! download failure ([`transient_download_error`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::{BASE_READY_FILE, CloneMode, LxcBackend};
use crate::lxc;

/// The packages the base is bootstrapped with (`lxc-create -t debian -- --packages=…`): Python
/// for Ansible, and what the shipped base role (`base/playbook.yml`, task `packages`) installs
/// into every container. Installing them once into the base, instead of into every clone, takes
/// about 16 s off each new container's first configure on these machines (measured: `apt-get
/// install` of the six of them a bare Debian lacks, in a fresh clone); the base role then finds
/// them present. A monorepo whose base role installs others still gets them, per container.
pub const BASE_PACKAGES: &[&str] =
    &["python3", "sudo", "locales", "curl", "jq", "unzip", "ca-certificates", "gnupg", "tar", "less", "procps"];

/// The whole environment of the base bootstrap (`lxc-create -t debian`): the template reads
/// `MIRROR`, `SECURITY_MIRROR` and `LXC_CACHE_PATH` from its environment, so the caller's
/// environment is not passed on (a `MIRROR` set for something else used to break the bootstrap
/// with "Invalid release bookworm (not found in mirror)"). It holds `PATH`
/// ([`lxc::BOOTSTRAP_PATH`]), `MIRROR` and `SECURITY_MIRROR` from the options,
/// `LXC_CACHE_PATH` when the options set one, and from `caller` (the process's variables) only
/// the proxy settings `http_proxy`, `https_proxy`, `no_proxy` (either case), which debootstrap's
/// downloads need behind a proxy.
pub fn bootstrap_env(
    opts: &super::LxcOptions,
    caller: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_string(), lxc::BOOTSTRAP_PATH.to_string()),
        ("MIRROR".to_string(), opts.mirror.clone()),
        ("SECURITY_MIRROR".to_string(), opts.security_mirror.clone()),
    ];
    if let Some(c) = &opts.cache_path {
        env.push(("LXC_CACHE_PATH".to_string(), c.display().to_string()));
    }
    let proxies = ["http_proxy", "https_proxy", "no_proxy"];
    let mut passed: Vec<(String, String)> =
        caller.into_iter().filter(|(k, _)| proxies.contains(&k.to_ascii_lowercase().as_str())).collect();
    passed.sort();
    env.extend(passed);
    env
}

/// Whether a failed bootstrap's message shows a download failure that may pass (the mirror or
/// the network briefly unavailable), worth one more try: the debian template's "Failed to
/// download the rootfs" / "Failed to download 'debian base'", its release check ("not found in
/// mirror": the Release file could not be fetched), debootstrap's "Failed getting release file",
/// "Couldn't download", and resolver or connection errors.
pub fn transient_download_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "failed to download",
        "not found in mirror",
        "failed getting release",
        "couldn't download",
        "temporary failure",
        "could not resolve",
        "connection timed out",
        "connection refused",
        "network is unreachable",
        "hash sum mismatch",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Outcome of [`LxcBackend::ensure_base`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseStatus {
    /// The base existed already.
    Cached,
    /// The base was bootstrapped now.
    Bootstrapped,
}

impl LxcBackend {
    /// Makes sure the base container exists and is complete, bootstrapping it when needed.
    /// Concurrent callers (threads or processes) wait on a lock file
    /// `<lxcpath>/.<base>.lock`, so the base is bootstrapped once.
    ///
    /// # Errors
    /// A failing `lxc-create` (mirror unreachable twice, debootstrap missing), a base without
    /// sshd.
    pub async fn ensure_base(&self) -> Result<BaseStatus> {
        let base = self.opts.base.clone();
        let lock_path = self.base_lock_path();
        let lock = tokio::task::spawn_blocking(move || -> Result<std::fs::File> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .with_context(|| format!("cannot open {}", lock_path.display()))?;
            f.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
            Ok(f)
        })
        .await??;
        let dir = self.client.container_dir(&base);
        if dir.join(BASE_READY_FILE).is_file() && self.client.exists(&base) {
            drop(lock);
            return Ok(BaseStatus::Cached);
        }
        if self.client.exists(&base) {
            tracing::warn!("base `{base}` is incomplete (no {BASE_READY_FILE}): bootstrapping it again");
            let _ = self.client.stop(&base, self.opts.stop_timeout).await;
            self.client.destroy(&base).await.context("cannot remove the incomplete base")?;
        }
        let wait = crate::progress::Wait::start(format!(
            "bootstrapping base `{base}` (debootstrap debian {} from {}, about a minute)",
            self.opts.release, self.opts.mirror
        ));
        let release = format!("--release={}", self.opts.release);
        let packages = format!("--packages={}", BASE_PACKAGES.join(","));
        let env = bootstrap_env(&self.opts, std::env::vars());
        let mut attempt = 1;
        loop {
            let r =
                self.client.create(&base, "debian", &[&release, &packages], &env, self.opts.bootstrap_timeout).await;
            let Err(e) = r else { break };
            if self.client.exists(&base) {
                let _ = self.client.destroy(&base).await;
            }
            let text = e.to_string();
            if attempt == 1 && transient_download_error(&text) {
                tracing::warn!(
                    "bootstrapping the base `{base}` failed on a download from {}; trying once more in 5 s: {text}",
                    self.opts.mirror
                );
                tokio::time::sleep(Duration::from_secs(5)).await;
                attempt += 1;
                continue;
            }
            let tries = if attempt > 1 { " (tried twice)" } else { "" };
            return Err(anyhow!(e).context(format!(
                "cannot bootstrap the base container `{base}` from the Debian mirror {}{tries}; \
                 set PGO_LXC_MIRROR to a mirror that serves {} (see docs/lxc.md)",
                self.opts.mirror, self.opts.release
            )));
        }
        self.prepare_base(&base).with_context(|| format!("cannot prepare the base container `{base}`"))?;
        wait.finish("ready");
        drop(lock);
        Ok(BaseStatus::Bootstrapped)
    }

    /// Makes the fresh base a good source for clones: AppArmor unconfined, the bridge, no SSH
    /// host keys and an empty machine-id (each clone generates its own at first boot, through a
    /// `pgo-ssh-hostkeys.service` that runs `ssh-keygen -A` before `ssh.service`).
    fn prepare_base(&self, base: &str) -> Result<()> {
        let mut config = self.client.read_config(base)?.ok_or_else(|| anyhow!("the base has no config"))?;
        config.set("lxc.apparmor.profile", "unconfined");
        config.set("lxc.net.0.link", &self.opts.bridge);
        let rootfs = config
            .get("lxc.rootfs.path")
            .and_then(|p| p.strip_prefix("dir:").or(Some(p)).map(PathBuf::from))
            .ok_or_else(|| anyhow!("the base's config has no lxc.rootfs.path"))?;
        self.client.write_config(base, &config)?;
        if !rootfs.join("usr/sbin/sshd").is_file() {
            bail!("{}: openssh-server is missing from the base", rootfs.display());
        }
        for e in std::fs::read_dir(rootfs.join("etc/ssh"))?.flatten() {
            if e.file_name().to_string_lossy().starts_with("ssh_host_") {
                std::fs::remove_file(e.path())?;
            }
        }
        std::fs::write(rootfs.join("etc/machine-id"), b"")?;
        let unit = "[Unit]\nDescription=Generate SSH host keys of a proxmox-gitops clone\n\
                    ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\nBefore=ssh.service\n\n\
                    [Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n\n\
                    [Install]\nWantedBy=ssh.service\n";
        let sysd = rootfs.join("etc/systemd/system");
        std::fs::write(sysd.join("pgo-ssh-hostkeys.service"), unit)?;
        let wants = sysd.join("ssh.service.wants");
        std::fs::create_dir_all(&wants)?;
        let link = wants.join("pgo-ssh-hostkeys.service");
        if !link.exists() {
            std::os::unix::fs::symlink("/etc/systemd/system/pgo-ssh-hostkeys.service", &link)?;
        }
        let ready = serde_json::json!({ "base": base, "release": self.opts.release });
        lxc::write_atomic(
            &self.client.container_dir(base).join(BASE_READY_FILE),
            serde_json::to_string_pretty(&ready)?.as_bytes(),
            0o644,
        )?;
        Ok(())
    }

    /// Clones the base as `name`; returns how (`overlay snapshot` or `full copy`).
    pub(super) async fn clone_base(&self, name: &str) -> Result<&'static str> {
        let base = &self.opts.base;
        let timeout = Duration::from_secs(600);
        if self.opts.clone != CloneMode::Copy {
            match self.client.copy(base, name, true, timeout).await {
                Ok(()) => return Ok("overlay snapshot"),
                Err(e) if self.opts.clone == CloneMode::Auto => {
                    tracing::warn!("overlay snapshot of `{base}` failed, making a full copy: {e}");
                    if self.client.exists(name) {
                        let _ = self.client.destroy(name).await;
                    }
                }
                Err(e) => return Err(anyhow!(e).context(format!("cannot clone `{base}` as `{name}`"))),
            }
        }
        self.client
            .copy(base, name, false, timeout)
            .await
            .with_context(|| format!("cannot copy `{base}` as `{name}`"))?;
        Ok("full copy")
    }

    /// The lock file serialising bootstraps of the base: `<lxcpath>/.<base>.lock`.
    pub fn base_lock_path(&self) -> PathBuf {
        self.client.path().join(format!(".{}.lock", self.opts.base))
    }

    /// Destroys the cached base (e.g. to re-bootstrap it) and its lock file. Fails while
    /// containers cloned from it as overlay snapshots still exist.
    ///
    /// # Errors
    /// A failing `lxc-destroy` (snapshot clones remain).
    pub async fn destroy_base(&self) -> Result<bool> {
        let base = &self.opts.base;
        if !self.client.exists(base) {
            return Ok(false);
        }
        self.client.stop(base, self.opts.stop_timeout).await?;
        self.client.destroy(base).await.with_context(|| format!("cannot destroy the base `{base}`"))?;
        let _ = std::fs::remove_file(self.base_lock_path());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::lxc::LxcOptions;

    #[test]
    fn the_bootstrap_sees_only_path_mirrors_cache_and_proxies() {
        let caller = [
            ("MIRROR", "http://apt.example/ubuntu"),
            ("HOME", "/root"),
            ("https_proxy", "http://proxy:3128"),
            ("NO_PROXY", "localhost"),
            ("LXC_CACHE_PATH", "/elsewhere"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let opts = LxcOptions { cache_path: Some("/srv/cache".into()), ..LxcOptions::default() };
        let env: Vec<String> = bootstrap_env(&opts, caller).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            env,
            [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "MIRROR=http://deb.debian.org/debian",
                "SECURITY_MIRROR=http://security.debian.org/debian-security",
                "LXC_CACHE_PATH=/srv/cache",
                "NO_PROXY=localhost",
                "https_proxy=http://proxy:3128",
            ]
        );
        let opts = LxcOptions { mirror: "http://mirror.local/debian".into(), ..LxcOptions::default() };
        assert!(bootstrap_env(&opts, []).contains(&("MIRROR".into(), "http://mirror.local/debian".into())));
        assert!(!bootstrap_env(&opts, []).iter().any(|(k, _)| k == "LXC_CACHE_PATH"));
    }

    #[test]
    fn download_failures_are_retried_others_not() {
        for m in [
            "`lxc-create …` failed (exit status: 1): Failed to download the rootfs, aborting.",
            "Invalid release bookworm (not found in mirror)",
            "E: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release",
            "W: Couldn't download package libc6",
            "wget: unable to resolve host address: Temporary failure in name resolution",
        ] {
            assert!(transient_download_error(m), "{m}");
        }
        for m in ["`debootstrap` is not installed", "No space left on device", "Failed to add configuration"] {
            assert!(!transient_download_error(m), "{m}");
        }
    }
}
