//! The cached base container: bootstrapped once per host (`lxc-create -t debian`, prepared for
//! cloning: SSH host keys and machine-id removed, AppArmor unconfined, [`super::BASE_READY_FILE`]
//! written last), then cloned for every container (`lxc-copy`, an overlay snapshot where the kernel
//! allows it). A lock file serialises concurrent bootstraps.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::{BASE_READY_FILE, CloneMode, LxcBackend};
use crate::lxc;

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
    /// A failing `lxc-create` (mirror unreachable, debootstrap missing), a base without sshd.
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
            "bootstrapping base `{base}` (debootstrap debian {}, about a minute)",
            self.opts.release
        ));
        let release = format!("--release={}", self.opts.release);
        let r =
            self.client.create(&base, "debian", &[&release, "--packages=python3"], self.opts.bootstrap_timeout).await;
        if let Err(e) = r {
            if self.client.exists(&base) {
                let _ = self.client.destroy(&base).await;
            }
            return Err(anyhow!(e).context(format!("cannot bootstrap the base container `{base}`")));
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
