//! Moving a container to the node its plan names ([`PveBackend::migrate_leased`]), under our
//! lease, and the lock retries every PVE call of the executor goes through
//! ([`PveBackend::locked`]).

use std::time::{Duration, Instant};

use anyhow::Context;

use super::lease::Held;
use super::{PveBackend, Rec};
use crate::model::{ContainerPlan, Migration};
use crate::pve::PveError;

impl PveBackend {
    /// The plan's migration, if any ([`PveBackend::migrate`]), under our lease: the lease line
    /// moves with the config, so its renewal follows the container to `node`.
    pub(super) async fn migrate_leased(
        &self,
        vmid: u32,
        plan: &ContainerPlan,
        node: &str,
        held: &mut Option<Held>,
        rec: &mut Rec,
    ) -> anyhow::Result<()> {
        let Some(m) = &plan.migrate else { return Ok(()) };
        self.migrate(vmid, m, rec).await?;
        if held.is_some()
            && let Some(old) = held.replace(self.hold(node, vmid))
        {
            old.stop();
        }
        Ok(())
    }

    /// Repeats `op` while PVE says the container is locked (`CT is locked (…)`, or the config
    /// file lock: `can't lock file … got timeout`) with capped exponential backoff (200 ms to
    /// 5 s, jittered): for at most [`Timeouts::lock`](super::Timeouts::lock) of wall-clock time
    /// since the first attempt — each attempt that meets the file lock has waited 10 s on PVE's
    /// side already — and at most [`super::lease::MAX_LOCK_TRIES`] attempts. The last error is
    /// returned; [`super::lease::with_lock_hint`] says how to see who holds the lock.
    pub(super) async fn locked<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, PveError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, PveError>>,
    {
        let started = Instant::now();
        let limit = self.opts.timeouts.lock;
        let mut delay = Duration::from_millis(200);
        let mut tries = 0;
        loop {
            tries += 1;
            match op().await {
                Err(e) if e.is_locked() && started.elapsed() < limit && tries < super::lease::MAX_LOCK_TRIES => {
                    let jittered = delay.mul_f64(1.0 + rand::random::<f64>() / 2.0);
                    let pause = jittered.min(limit.saturating_sub(started.elapsed())).max(Duration::from_millis(50));
                    tracing::info!("{what}: {e}; retrying in {} ms", pause.as_millis());
                    tokio::time::sleep(pause).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }

    /// Moves CT `vmid` as `m` says (`POST /nodes/{from}/lxc/{vmid}/migrate`, `restart=1` for a
    /// running container) and waits for the task, retrying while the container is locked. A
    /// container that was started since the plan (PVE: "can't migrate running container without
    /// --online or --restart") is moved in restart mode.
    async fn migrate(&self, vmid: u32, m: &Migration, rec: &mut Rec) -> anyhow::Result<()> {
        let started = Instant::now();
        let shutdown = self.opts.timeouts.shutdown.as_secs();
        let what = format!("migrate CT {vmid} from {} to {}", m.from, m.to);
        // Restart mode once PVE says the container runs (it was started since the plan).
        let restart = std::sync::atomic::AtomicBool::new(m.restart);
        let out = self
            .locked("migrate", || async {
                let mode = restart.load(std::sync::atomic::Ordering::Relaxed);
                let upid = match self.client.ct(&m.from, vmid).migrate(&m.to, mode, shutdown).await {
                    Err(e) if !mode && e.message().is_some_and(|t| t.contains("migrate running container")) => {
                        tracing::info!("CT {vmid} was started since the plan: migrating in restart mode");
                        restart.store(true, std::sync::atomic::Ordering::Relaxed);
                        self.client.ct(&m.from, vmid).migrate(&m.to, true, shutdown).await?
                    }
                    other => other?,
                };
                self.client.wait_task(&upid, self.opts.timeouts.migrate, &what).await
            })
            .await
            .with_context(|| format!("cannot {what}"))?;
        let how = if restart.into_inner() { "restart mode" } else { "offline" };
        rec.push("migrate", Some(&out), started, Some(format!("{} → {} ({how})", m.from, m.to)));
        Ok(())
    }
}
