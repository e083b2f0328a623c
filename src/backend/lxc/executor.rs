//! The lxc backend's executor: carries out a [`ContainerPlan`] with the LXC client (create from
//! the base, write the managed config keys, set cgroup limits live, start, read the address back,
//! install the SSH key, wait for sshd) and destroys containers. Every decision was made by the
//! planner; this file only acts and records each action in the [`Provision`] artifact.
//!
//! One actor per container: [`LxcBackend::apply`] and [`LxcBackend::destroy`] hold the
//! container's lock ([`super::lock`]) from before their first read of live state until after
//! their last write. Under it, `apply` plans again: the plan it was given was made without the
//! lock (and printed before anything changed), so another run may have acted since — typically
//! created the container this run planned to create. A fresh plan that only changes in place (or
//! nothing) replaces the given one (the artifact records the new plan); a fresh plan that would
//! create, recreate or refuse where the given one did not fails with "plan again", nothing changed.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::desired::{in_subnet, live_applicable};
use super::{
    BaseStatus, CurrentAddress, Desired, HostFacts, LxcBackend, META_FILE, desired, guest, interrupted, record,
};
use crate::inventory::ContainerSpec;
use crate::lxc::{self, State};
use crate::model::PlanPolicy;
use crate::model::{
    Action, ActionRecord, ApplyOptions, BackendKind, Change, ContainerPlan, Outcome, Provision, RecreatePolicy,
};

impl LxcBackend {
    /// Executes `plan` for `spec` and returns the `provision` artifact. Never panics and never
    /// returns early: a failure becomes [`Outcome::Failed`] with the actions done so far.
    ///
    /// The whole run holds the container's lock (module docs): a second run of the same
    /// container waits for the first (at most [`super::LxcOptions::lock_timeout`]), then plans
    /// again and finds its work done. When the fresh plan differs, [`Provision::plan`] is the
    /// fresh one.
    pub async fn apply(&self, spec: &ContainerSpec, plan: &ContainerPlan, opts: &ApplyOptions) -> Provision {
        let mut p = Provision::new(BackendKind::Lxc, spec, plan.clone(), opts);
        if let Err(e) = self.apply_locked(spec, plan, opts, &mut p).await {
            p.outcome = Outcome::Failed { error: crate::actions::redact(&format!("{e:#}")) };
        }
        if let Ok(s) = self.client.state(&spec.hostname).await {
            p.status = Some(s.as_str().to_string());
        }
        p
    }

    /// Takes the container's lock, plans again under it (module docs) and runs the plan that
    /// still holds; the lock is released on return, also after a failure.
    async fn apply_locked(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        p: &mut Provision,
    ) -> Result<()> {
        let name = spec.hostname.as_str();
        let t = Instant::now();
        let lock = self.lock_container(name).await?;
        if let Some((waited, holder)) = &lock.waited {
            let who = if holder.is_empty() { "another run".to_string() } else { holder.clone() };
            p.actions.push(record("lock-wait", t, Some(format!("{} held by {who}", lock.path().display()))));
            tracing::info!("{name}: waited {} s for {who}; planning again", waited.as_secs());
        }
        let again = self.plan(spec, PlanPolicy::of(plan)).await?;
        if again.action == plan.action {
            return self.apply_inner(spec, plan, opts, p).await;
        }
        let fine = matches!(again.action, Action::Nothing | Action::Update { .. })
            || (matches!(again.action, Action::Recreate { .. }) && matches!(plan.action, Action::Recreate { .. }));
        if !fine {
            bail!(
                "container `{name}` changed since the plan (was: {}, now: {}); nothing was changed, plan again",
                plan.action.summary(),
                again.action.summary()
            );
        }
        let note = format!(
            "container `{name}` changed since the plan (another run worked on it); planned again under its lock: {} \
             instead of {}",
            again.action.summary(),
            plan.action.summary()
        );
        tracing::info!("{note}");
        p.warnings.push(crate::actions::redact(&note));
        p.plan = again.clone();
        let result = self.apply_inner(spec, &again, opts, p).await;
        drop(lock);
        result
    }

    async fn apply_inner(
        &self,
        spec: &ContainerSpec,
        plan: &ContainerPlan,
        opts: &ApplyOptions,
        p: &mut Provision,
    ) -> Result<()> {
        let name = spec.hostname.as_str();
        let mut desired = self.desired(spec, true).await?;
        p.warnings.extend(desired.warnings.iter().cloned());
        let mut key_installed = false;
        match &plan.action {
            Action::Refused { reasons, .. } => {
                return Err(crate::error::Hinted::new(
                    format!(
                        "container `{name}` must be recreated ({}), but the recreate policy forbids it",
                        reasons.join("; ")
                    ),
                    crate::error::Hint::AllowRecreate { container: spec.name.clone() },
                )
                .into());
            }
            Action::Foreign { reason } => bail!("{reason}"),
            Action::Adopt { .. } => bail!(
                "container `{name}`: --adopt is supported by the pve backend only; the lxc backend does not take over \
                 containers it did not make"
            ),
            Action::Recreate { reasons } => {
                if plan.policy == RecreatePolicy::Never {
                    bail!("the plan recreates `{name}` ({}), but the recreate policy is `never`", reasons.join("; "));
                }
                p.actions.extend(self.destroy_container(name).await?);
                (desired, key_installed) = self.create(spec, opts, p).await?;
            }
            Action::Create => {
                // Cannot happen under the lock (the plan was made again under it), unless
                // something other than proxmox-gitops made it — or an interrupted create of ours
                // left it (the plan says create for that; `create` removes it first).
                let interrupted = interrupted::marked_vmid(&self.create_marker_path(name)) == Some(spec.vmid)
                    && self.read_meta(name)?.is_none();
                if self.client.exists(name) && !interrupted {
                    bail!("container `{name}` appeared since the plan was made; plan again");
                }
                (desired, key_installed) = self.create(spec, opts, p).await?;
            }
            Action::Update { changes, .. } => {
                let t = Instant::now();
                // Under the address lock, like a create: the address is chosen again and written.
                let lock = self.address_lock().await?;
                desired = self.desired(spec, true).await?;
                self.write_config(name, &desired)?;
                drop(lock);
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
                p.actions.push(record("config", t, Some(keys.join(", "))));
                if let Some(addr) = desired.static_address
                    && changes.iter().any(|c| c.key == "lxc.net.0.ipv4.address")
                {
                    let t = Instant::now();
                    self.write_guest_network(name).await?;
                    p.actions.push(record(
                        "guest-network",
                        t,
                        Some(format!("{addr}: /etc/network/interfaces (eth0 manual), /etc/resolv.conf")),
                    ));
                }
                if self.client.state(name).await? == State::Running {
                    let t = Instant::now();
                    let applied = self.apply_cgroups_live(name, changes).await?;
                    if !applied.is_empty() {
                        p.actions.push(record("cgroup", t, Some(applied.join(", "))));
                    }
                    let pending: Vec<&str> =
                        changes.iter().filter(|c| !live_applicable(&c.key)).map(|c| c.key.as_str()).collect();
                    if !pending.is_empty() {
                        p.warnings.push(format!(
                            "{} take effect at the next restart (`lxc-stop -n {name} -P {} && lxc-start -n {name} -P {}`)",
                            pending.join(", "),
                            self.client.path().display(),
                            self.client.path().display()
                        ));
                    }
                }
            }
            Action::Nothing => {}
        }

        let mut started = false;
        if self.client.state(name).await? != State::Running {
            let t = Instant::now();
            self.client.start(name).await?;
            p.actions.push(record("start", t, None));
            started = true;
        }
        let t = Instant::now();
        let addr = self.read_address(name, &desired).await?;
        p.address = Some(addr.to_string());
        if started {
            // Recorded after a (re)start only: the wait is the container's boot up to its lease.
            p.actions.push(record("address", t, Some(format!("{addr} (lxc-info -iH)"))));
        }

        let key = crate::ssh::keys::ensure(&opts.share, spec.vmid, &spec.hostname)
            .with_context(|| format!("cannot prepare the key pair of vmid {}", spec.vmid))?;
        let t = Instant::now();
        if !key_installed && self.install_key(name, &key.public_line).await? {
            p.actions.push(record(
                "install-key",
                t,
                Some(format!("{} → /root/.ssh/authorized_keys", key.public.display())),
            ));
        }
        if opts.wait_ssh {
            let t = Instant::now();
            crate::ssh::wait_for_ssh(SocketAddr::from((addr, opts.ssh_port)), opts.ssh_timeout)
                .await
                .with_context(|| format!("container `{name}` runs at {addr}, but its sshd does not answer"))?;
            if started {
                p.actions.push(record("wait-ssh", t, Some(format!("{addr}:{}", opts.ssh_port))));
            }
        }
        Ok(())
    }

    /// Clones the base as the container of `spec`, then, under the address lock, chooses its
    /// address and writes its config, its guest files (network, SSH host key, root's
    /// `authorized_keys`) and its metadata. Returns the desired state written and whether the
    /// SSH key was installed. A failure after the clone removes the clone again.
    async fn create(&self, spec: &ContainerSpec, opts: &ApplyOptions, p: &mut Provision) -> Result<(Desired, bool)> {
        let name = spec.hostname.as_str();
        let t = Instant::now();
        if self.ensure_base().await? == BaseStatus::Bootstrapped {
            p.actions.push(record(
                "bootstrap-base",
                t,
                Some(format!("{} (debian {}) in {}", self.opts.base, self.opts.release, self.client.path().display())),
            ));
        }
        let marker = self.create_marker_path(name);
        let t = Instant::now();
        if let Some(what) = self.remove_interrupted(name, spec.vmid, &marker).await? {
            p.actions.push(record("remove-interrupted", t, Some(what)));
        }
        interrupted::mark(&marker, spec.vmid)?;
        // Before the clone: no host key of the new container exists yet.
        let at = time::OffsetDateTime::now_utc();
        let t = Instant::now();
        let how = match self.clone_base(name).await {
            Ok(how) => how,
            Err(e) => {
                // The marker stays while lxc-copy left anything behind: the next create removes it.
                if !self.client.container_dir(name).exists() {
                    let _ = interrupted::clear(&marker);
                }
                return Err(e);
            }
        };
        p.actions.push(record("clone", t, Some(format!("{how} of {}", self.opts.base))));
        p.created = true;
        p.created_at = Some(at);
        let t = Instant::now();
        match self.configure_new(spec, opts).await.and_then(|r| interrupted::clear(&marker).map(|()| r)) {
            Ok((desired, key, detail)) => {
                p.actions.push(record("config", t, Some(detail)));
                if let Some(key) = &key {
                    // Part of the config action (the file was written with the others).
                    p.actions.push(record(
                        "install-key",
                        Instant::now(),
                        Some(format!("{} → /root/.ssh/authorized_keys (written into the rootfs)", key.display())),
                    ));
                }
                Ok((desired, key.is_some()))
            }
            Err(e) => {
                // Nothing half-made stays behind: the clone without its config is removed.
                if self.client.destroy(name).await.is_ok() {
                    let _ = interrupted::clear(&marker);
                }
                p.created = false;
                p.created_at = None;
                Err(e.context(format!("cannot configure the new container `{name}` (removed again)")))
            }
        }
    }

    /// Removes what an interrupted create of `vmid` left under `name` (see [`interrupted`]): a
    /// container or a bare directory without metadata, while the create marker names `vmid`.
    /// Returns what was removed; `None` when there was nothing (a stale marker is dropped).
    /// Called under the container's lock, so the marker's writer is gone.
    ///
    /// # Errors
    /// `lxc-destroy` or removing the directory failed.
    async fn remove_interrupted(&self, name: &str, vmid: u32, marker: &std::path::Path) -> Result<Option<String>> {
        let dir = self.client.container_dir(name);
        if interrupted::marked_vmid(marker) != Some(vmid) || !dir.exists() || dir.join(META_FILE).exists() {
            return Ok(None);
        }
        let what = if self.client.exists(name) {
            self.client
                .destroy(name)
                .await
                .with_context(|| format!("cannot remove `{name}`, which an interrupted create left half made"))?;
            format!("`{name}`: a clone an interrupted create of vmid {vmid} left without its metadata")
        } else {
            std::fs::remove_dir_all(&dir).with_context(|| {
                format!("cannot remove {}, which an interrupted create left half made", dir.display())
            })?;
            format!("{}: a directory an interrupted create of vmid {vmid} left without a config", dir.display())
        };
        tracing::warn!("{name}: removed {what} (marker {})", marker.display());
        Ok(Some(what))
    }

    /// The part of [`Self::create`] after the clone: the address is chosen and the config written
    /// under the address lock; the guest files and the metadata after it.
    async fn configure_new(
        &self,
        spec: &ContainerSpec,
        opts: &ApplyOptions,
    ) -> Result<(Desired, Option<std::path::PathBuf>, String)> {
        let name = spec.hostname.as_str();
        let lock = self.address_lock().await?;
        let mut host = HostFacts::gather(spec, &self.opts, &self.client, true).await?;
        // The clone exists already, with the base's config: it is new.
        host.current = CurrentAddress::Absent;
        let desired = desired(spec, &host, &self.opts)?;
        for d in &desired.host_dirs {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let config = self.write_config(name, &desired)?;
        drop(lock);
        let mut detail = vec![match desired.static_address {
            Some(a) => format!("address {a}"),
            None => "address from DHCP".to_string(),
        }];
        let mut key_installed = None;
        if let Some(root) = guest::guest_root(&config) {
            let mut files = guest::host_key_files(name)?;
            if let Some(bridge) = desired.static_address.map(|_| host.bridge_net.0) {
                files.extend(guest::network_files(bridge));
            }
            let key = crate::ssh::keys::ensure(&opts.share, spec.vmid, &spec.hostname)
                .with_context(|| format!("cannot prepare the key pair of vmid {}", spec.vmid))?;
            files.push(guest::GuestFile {
                path: "root/.ssh/authorized_keys",
                content: format!("{}\n", key.public_line.trim()).into_bytes(),
                mode: 0o600,
            });
            for f in &files {
                guest::write(&root, f)?;
            }
            let ssh_dir = root.dir.join("root/.ssh");
            std::fs::set_permissions(&ssh_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .with_context(|| format!("cannot set the mode of {}", ssh_dir.display()))?;
            key_installed = Some(key.public);
            detail.push(format!(
                "written into the rootfs: {}",
                files.iter().map(|f| format!("/{}", f.path)).collect::<Vec<_>>().join(", ")
            ));
        }
        let meta = serde_json::to_vec_pretty(&desired.meta)?;
        lxc::write_atomic(&self.client.container_dir(name).join(META_FILE), &meta, 0o644)?;
        Ok((desired, key_installed, detail.join("; ")))
    }

    /// Writes the guest's network files ([`guest::network_files`]) of the existing container
    /// `name` whose static address changed: into its rootfs while it is stopped, from the inside
    /// with `lxc-attach` while it runs (so no host-side write can follow a symlink of a running
    /// container). Either takes effect at its next start, with the new config.
    async fn write_guest_network(&self, name: &str) -> Result<()> {
        let bridge = lxc::bridge_ipv4_or_planned(&self.opts.bridge).await?.0;
        let files = guest::network_files(bridge);
        if self.client.state(name).await? == State::Stopped {
            let config = self.client.read_config(name)?.ok_or_else(|| anyhow!("container `{name}` has no config"))?;
            let Some(root) = guest::guest_root(&config) else {
                bail!("container `{name}`: its rootfs is not a directory, so its network files cannot be written")
            };
            for f in &files {
                guest::write(&root, f)?;
            }
            return Ok(());
        }
        // The path is one of ours (a constant), given as "$1", never pasted into the script.
        let script = "umask 022 && cat > \"$1.pgo-new\" && mv -f \"$1.pgo-new\" \"$1\"";
        for f in &files {
            let path = format!("/{}", f.path);
            self.client
                .attach(name, &["/bin/sh", "-c", script, "sh", &path], Some(&f.content), lxc::QUICK_TIMEOUT)
                .await
                .with_context(|| format!("cannot write {path} in `{name}`"))?;
        }
        Ok(())
    }

    /// Serialises choosing and writing addresses (threads and processes): an exclusive lock on
    /// `<lxcpath>/.proxmox-gitops-addresses.lock`, released when the returned file is dropped.
    async fn address_lock(&self) -> Result<std::fs::File> {
        let path = self.client.path().join(".proxmox-gitops-addresses.lock");
        tokio::task::spawn_blocking(move || -> Result<std::fs::File> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            f.lock().with_context(|| format!("cannot lock {}", path.display()))?;
            Ok(f)
        })
        .await?
    }

    /// Writes the managed keys of `desired` into the container's config; returns the config.
    fn write_config(&self, name: &str, desired: &Desired) -> Result<lxc::LxcConfig> {
        let mut config = self
            .client
            .read_config(name)?
            .ok_or_else(|| anyhow!("container `{name}` has no config file in {}", self.client.path().display()))?;
        for d in &desired.host_dirs {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        for (k, v) in &desired.keys {
            config.set_all(k, v);
        }
        self.client.write_config(name, &config)?;
        Ok(config)
    }

    /// Sets changed cgroup limits on the running container; returns the keys set. A limit that
    /// the kernel refuses in this order (v1 memory must stay ≤ memory+swap) is retried once
    /// after the others.
    async fn apply_cgroups_live(&self, name: &str, changes: &[Change]) -> Result<Vec<String>> {
        let mut todo: Vec<(String, String)> = changes
            .iter()
            .filter(|c| live_applicable(&c.key))
            .filter_map(|c| {
                let sub = c.key.trim_start_matches("lxc.cgroup2.").trim_start_matches("lxc.cgroup.");
                Some((sub.to_string(), c.to.clone()?))
            })
            .collect();
        let mut done = Vec::new();
        for _round in 0..2 {
            let mut failed = Vec::new();
            let mut last_err = None;
            for (k, v) in todo {
                match self.client.cgroup_set(name, &k, &v).await {
                    Ok(()) => done.push(k),
                    Err(e) => {
                        last_err = Some(e);
                        failed.push((k, v));
                    }
                }
            }
            if failed.is_empty() {
                return Ok(done);
            }
            todo = failed;
            if _round == 1 {
                return Err(
                    anyhow!(last_err.expect("a failure")).context(format!("cannot set cgroup limits of `{name}` live"))
                );
            }
        }
        Ok(done)
    }

    /// Polls `lxc-info -iH` (backoff 0.2 s doubling to 2 s, bounded by `address_timeout`) until
    /// the container has the static address, or an address in the bridge's subnet.
    async fn read_address(&self, name: &str, desired: &Desired) -> Result<Ipv4Addr> {
        let bridge = lxc::bridge_ipv4(&self.opts.bridge).await?;
        let start = Instant::now();
        let mut delay = Duration::from_millis(200);
        let mut wait = crate::progress::Wait::start(format!("waiting for the address of `{name}`"));
        loop {
            let ips = self.client.ipv4(name).await?;
            let found = match desired.static_address {
                Some(a) => ips.iter().copied().find(|i| *i == a),
                None => ips.iter().copied().find(|i| bridge.is_none_or(|b| in_subnet(*i, b))),
            };
            if let Some(a) = found {
                wait.finish(&a.to_string());
                return Ok(a);
            }
            wait.state(&format!("{} address(es) so far", ips.len()));
            if start.elapsed() >= self.opts.address_timeout {
                bail!(
                    "container `{name}` got no IPv4 address on {} within {}s (addresses seen: {ips:?}); \
                     check that lxc-net's dnsmasq runs (`/usr/libexec/lxc/lxc-net start`)",
                    self.opts.bridge,
                    self.opts.address_timeout.as_secs()
                );
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Authorizes `public_line` for root inside the running container (from the inside, with
    /// `lxc-attach`, so no host-side write can follow a symlink in the container's rootfs):
    /// `/root/.ssh` 0700, `authorized_keys` 0600. Returns false when the key was there already.
    async fn install_key(&self, name: &str, public_line: &str) -> Result<bool> {
        let t = lxc::QUICK_TIMEOUT;
        let out = self
            .client
            .attach(name, &["/bin/sh", "-c", "cat /root/.ssh/authorized_keys 2>/dev/null || true"], None, t)
            .await?;
        let have = String::from_utf8_lossy(&out.stdout);
        if have.lines().any(|l| l.trim() == public_line.trim()) {
            return Ok(false);
        }
        let script = "umask 077 && mkdir -p /root/.ssh && cat >> /root/.ssh/authorized_keys \
                      && chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys \
                      && chown root:root /root/.ssh /root/.ssh/authorized_keys";
        let line = format!("{}\n", public_line.trim());
        self.client
            .attach(name, &["/bin/sh", "-c", script], Some(line.as_bytes()), t)
            .await
            .with_context(|| format!("cannot install the SSH key into `{name}`"))?;
        Ok(true)
    }

    async fn destroy_container(&self, name: &str) -> Result<Vec<ActionRecord>> {
        let mut actions = Vec::new();
        if self.client.state(name).await? != State::Stopped {
            let t = Instant::now();
            self.client.stop(name, self.opts.stop_timeout).await?;
            actions.push(record("stop", t, None));
        }
        let t = Instant::now();
        // Its container snapshots (`snapshot`, `update`) go with it, as on Proxmox VE; the data
        // was snapshotted into the share before (the guard of every destroy and recreate).
        self.client.destroy_with_snapshots(name).await?;
        actions.push(record("destroy", t, None));
        Ok(actions)
    }

    /// Stops and destroys the container of `spec` (its key pair stays in the share), holding
    /// its lock (module docs). A missing container is not an error (nothing to do, no actions).
    ///
    /// # Errors
    /// The container was not made by proxmox-gitops or belongs to another vmid (refused: nothing
    /// is touched), another run holds its lock beyond [`super::LxcOptions::lock_timeout`], a
    /// failing `lxc-stop`/`lxc-destroy`.
    pub async fn destroy(&self, spec: &ContainerSpec) -> Result<Vec<ActionRecord>> {
        let _lock = self.lock_container(&spec.hostname).await?;
        if !self.owned(spec)? {
            return Ok(vec![]);
        }
        self.destroy_container(&spec.hostname).await
    }
}
