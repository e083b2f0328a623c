//! Step `update`: an unattended package upgrade of each container, with a container snapshot
//! before and an automatic rollback when the upgrade or the health check after it fails.
//!
//! Per container (at most `jobs` at once; one container's failure never stops the others):
//!
//! 0. a container whose hostname is this machine's is the one the run is in: skipped
//!    ([`plan::runs_inside`]);
//! 1. **health before** ([`crate::live::check`]): only a healthy container is
//!    updated ([`plan::start`]); not deployed is reported, a stopped one is skipped (neither
//!    is a failure), anything else fails with nothing changed;
//! 2. **distribution** — `/etc/os-release` picks the package manager ([`plan::package_manager`]:
//!    apt for Debian/Ubuntu, apk for Alpine); any other fails with nothing changed;
//! 3. **snapshot** `pgo-update-YYYYMMDD-HHMMSS` (UTC) through the backend (PVE: `POST
//!    …/snapshot`, UPID waited for; LXC: the running container frozen while `lxc-snapshot`'s
//!    copy is made, the pause recorded); no snapshot, no upgrade;
//! 4. **upgrade** ([`plan::upgrade_commands`]), output logged line by line and its tail kept,
//!    bounded by the upgrade timeout as a whole;
//! 5. **reboot** when [`plan::REBOOT_REQUIRED`] exists (PVE `POST …/status/reboot`; LXC stop,
//!    start), then wait until it answers;
//! 6. **health after**, re-checked for a settle time while services come back;
//! 7. when 4–6 fail: **rollback** to the snapshot (PVE `POST …/snapshot/{name}/rollback` with
//!    `start=1`; LXC stop, `lxc-snapshot -r`, start), wait until it answers, health check again;
//!    the result is `rolled-back` (a failure of the run). On success the older `pgo-update-*`
//!    snapshots are deleted and the new one is kept; after a rollback every snapshot is kept.
//!
//! The `update.json` artifact ([`Update`]) records every container's result, the commands with
//! their output tails, the snapshot, the health before and after, the rollback and a timeline of
//! actions with their UPIDs.

pub mod plan;
mod record;

pub use record::{CommandRun, ContainerUpdate, OUTPUT_KEEP, Rollback, Update, UpdateResult};

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio::io::AsyncWrite;

use self::plan::{PackageManager, Start};
use crate::exec::{RemoteExec, run_collect};
use crate::inventory::ContainerSpec;
use crate::live::health::secs;
use crate::live::{CheckOptions, ContainerHealth, Containers, HealthState, check, wait_ready};
use crate::model::{BackendKind, Outcome};

/// Options of the step.
#[derive(Debug, Clone)]
pub struct UpdateOptions {
    /// At most this many containers at once (≥ 1).
    pub jobs: usize,
    /// Bounds of each health check.
    pub check: CheckOptions,
    /// Bound of the whole upgrade of one container (all its commands), e.g. 30 min.
    pub upgrade_timeout: Duration,
    /// How long a container may take to answer after a start, reboot or rollback, e.g. 300 s.
    pub boot_timeout: Duration,
    /// How long the health check after the upgrade is repeated (every 5 s) while services come
    /// back, e.g. 60 s.
    pub settle_timeout: Duration,
    /// The run's start: names the snapshots.
    pub now: OffsetDateTime,
    /// The hostname of the machine this run is on (`/proc/sys/kernel/hostname`): a container with
    /// that hostname is the one the run is in (a runner inside the control plane), and is
    /// skipped — its snapshot, reboot or rollback would end the run.
    pub this_host: Option<String>,
}

/// Updates `specs` through `containers`, at most `opts.jobs` at a time, each independently (see
/// the module docs). Never fails: each container's result is in the artifact.
pub async fn update_all(
    containers: &dyn Containers,
    stage: &str,
    specs: &[ContainerSpec],
    opts: &UpdateOptions,
) -> Update {
    let overall = crate::progress::Overall::start("update", specs.len());
    let overall = &overall;
    let results: Vec<ContainerUpdate> = futures_util::stream::iter(specs.iter().map(|spec| async move {
        let result = update_one(containers, spec, opts).await;
        overall.done(result.result.is_failure());
        result
    }))
    .buffered(opts.jobs.max(1))
    .collect()
    .await;
    Update {
        stage: stage.to_string(),
        backend: containers.kind(),
        started_at: {
            let utc = opts.now.to_offset(time::UtcOffset::UTC).replace_nanosecond(0).unwrap_or(opts.now);
            utc.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
        },
        ok: results.iter().all(|c| !c.result.is_failure()),
        containers: results,
    }
}

/// Updates one container (see the module docs). Never fails: the result says what happened.
pub async fn update_one(c: &dyn Containers, spec: &ContainerSpec, opts: &UpdateOptions) -> ContainerUpdate {
    let started = Instant::now();
    let mut u = ContainerUpdate::new(spec);
    run(c, spec, opts, &mut u).await;
    u.duration_ms = started.elapsed().as_millis() as u64;
    match (&u.result, &u.error) {
        (r, Some(e)) if r.is_failure() => tracing::error!("{}: {r}: {e}", u.name),
        (r, Some(e)) => tracing::warn!("{}: {r}: {e}", u.name),
        (r, None) => tracing::info!("{}: {r}", u.name),
    }
    u
}

async fn run(c: &dyn Containers, spec: &ContainerSpec, opts: &UpdateOptions, u: &mut ContainerUpdate) {
    if let Some(why) = plan::runs_inside(spec, opts.this_host.as_deref()) {
        return u.fail(UpdateResult::Skipped, why);
    }
    let t = Instant::now();
    let before = check(c, spec, &opts.check).await;
    u.act("check", t, None, Ok(Some(format!("before: {}", before.state))));
    let decision = plan::start(&before);
    u.health_before = Some(before);
    match decision {
        Start::Update => {}
        Start::NotDeployed => return u.result = UpdateResult::NotDeployed,
        Start::Skip(why) => return u.fail(UpdateResult::Skipped, why),
        Start::Refuse(why) => return u.fail(UpdateResult::Failed, why),
    }
    let pm = match distribution(c, spec, opts).await {
        Ok((pm, os)) => {
            tracing::info!("{}: {os}, upgrading with {}", spec.name, pm_name(pm));
            u.os = Some(os);
            u.package_manager = Some(pm);
            pm
        }
        Err(e) => return u.fail(UpdateResult::Failed, e),
    };
    let Some(snapshot) = take_snapshot(c, spec, opts, u).await else { return };
    match upgrade(c, spec, opts, pm, u).await {
        Ok(()) => {
            u.result = UpdateResult::Updated;
            prune(c, spec, &snapshot, u).await;
        }
        Err(reason) => rollback(c, spec, opts, &snapshot, reason, u).await,
    }
}

fn pm_name(pm: PackageManager) -> &'static str {
    match pm {
        PackageManager::Apt => "apt-get",
        PackageManager::Apk => "apk",
    }
}

/// Reads `/etc/os-release` (else `/usr/lib/os-release`) and picks the package manager.
async fn distribution(
    c: &dyn Containers,
    spec: &ContainerSpec,
    opts: &UpdateOptions,
) -> Result<(PackageManager, String), String> {
    let exec = c.exec(spec, opts.check.timeout).await.map_err(|e| format!("not updated: {e:#}"))?;
    let mut last = String::new();
    for file in ["/etc/os-release", "/usr/lib/os-release"] {
        match tokio::time::timeout(opts.check.timeout, run_collect(exec.as_ref(), &["cat", file], b"")).await {
            Ok(Ok((out, st))) if st.success() => return plan::package_manager(&String::from_utf8_lossy(&out)),
            Ok(Ok((_, st))) => last = format!("cat {file}: {}", st.describe()),
            Ok(Err(e)) => return Err(format!("not updated: {}: {e}", exec.target())),
            Err(_) => return Err(format!("not updated: reading {file} did not finish in time")),
        }
    }
    Err(format!("not updated: the distribution is unknown ({last}); nothing was changed"))
}

/// Takes the update snapshot (and for a backend that restarts the container for it, waits until
/// it answers again). `None` when it failed: the failure is recorded, nothing was upgraded.
async fn take_snapshot(
    c: &dyn Containers,
    spec: &ContainerSpec,
    opts: &UpdateOptions,
    u: &mut ContainerUpdate,
) -> Option<String> {
    let t = Instant::now();
    let existing = match c.snapshots(spec).await {
        Ok(s) => s,
        Err(e) => {
            let e = format!("no snapshot, so no upgrade: cannot list the snapshots: {e:#}");
            u.act("snapshot", t, None, Err(e.clone()));
            u.fail(UpdateResult::Failed, e);
            return None;
        }
    };
    let name = plan::snapshot_name(opts.now, &existing);
    let description = format!("proxmox-gitops update of {}: before the package upgrade", spec.name);
    match c.snapshot(spec, &name, &description).await {
        Ok(taken) => {
            let detail = match taken.downtime_ms {
                Some(ms) => format!("{name} (the container was paused for {ms} ms)"),
                None => name.clone(),
            };
            tracing::info!("{}: snapshot {detail} taken", spec.name);
            u.act("snapshot", t, taken.upid.clone(), Ok(Some(detail)));
            u.snapshot = Some(name.clone());
            if taken.restarted {
                let t = Instant::now();
                if let Err(e) = wait_ready(c, spec, opts.boot_timeout).await {
                    let e = format!("no upgrade: the container was restarted for the snapshot {name} and {e}");
                    u.act("wait", t, None, Err(e.clone()));
                    u.fail(UpdateResult::Failed, e);
                    return None;
                }
                u.act("wait", t, None, Ok(Some("answers after the snapshot".into())));
            }
            Some(name)
        }
        Err(e) => {
            let e = format!("no snapshot, so no upgrade (nothing was changed): {e:#}");
            u.act("snapshot", t, None, Err(e.clone()));
            u.fail(UpdateResult::Failed, e);
            // A backend that stops the container for its snapshot started it again; make sure
            // it answers before reporting.
            if c.kind() == BackendKind::Lxc
                && let Err(w) = wait_ready(c, spec, opts.boot_timeout).await
            {
                u.warnings.push(w);
            }
            None
        }
    }
}

/// Steps 4–6: upgrade, reboot when asked, health after. `Err` is the reason to roll back.
async fn upgrade(
    c: &dyn Containers,
    spec: &ContainerSpec,
    opts: &UpdateOptions,
    pm: PackageManager,
    u: &mut ContainerUpdate,
) -> Result<(), String> {
    let started = Instant::now();
    let exec = c.exec(spec, opts.upgrade_timeout).await.map_err(|e| format!("no way in for the upgrade: {e:#}"))?;
    for argv in plan::upgrade_commands(pm) {
        let t = Instant::now();
        let remaining = opts.upgrade_timeout.saturating_sub(started.elapsed());
        tracing::info!("{}: {}", spec.name, argv.join(" "));
        let run = run_command(exec.as_ref(), &spec.name, &argv, remaining).await;
        let failed = run.error.clone();
        u.act("upgrade", t, None, failed.clone().map_or(Ok(Some(run.command.clone())), Err));
        u.commands.push(run);
        if let Some(e) = failed {
            return Err(format!("`{}` failed: {e}", argv.join(" ")));
        }
    }
    let t = Instant::now();
    let asked = tokio::time::timeout(
        opts.check.timeout,
        run_collect(exec.as_ref(), &["test", "-e", plan::REBOOT_REQUIRED], b""),
    )
    .await;
    drop(exec);
    let reboot = match asked {
        Ok(Ok((_, st))) => st.code == Some(0),
        Ok(Err(e)) => return Err(format!("cannot check {}: {e}", plan::REBOOT_REQUIRED)),
        Err(_) => return Err(format!("checking {} did not finish in time", plan::REBOOT_REQUIRED)),
    };
    if reboot {
        tracing::info!("{}: {} exists: rebooting", spec.name, plan::REBOOT_REQUIRED);
        let upid = c.reboot(spec).await.map_err(|e| {
            let e = format!("the reboot after the upgrade failed: {e:#}");
            u.act("reboot", t, None, Err(e.clone()));
            e
        })?;
        u.act("reboot", t, upid, Ok(Some(format!("{} existed", plan::REBOOT_REQUIRED))));
        u.rebooted = true;
        let t = Instant::now();
        wait_ready(c, spec, opts.boot_timeout).await.map_err(|e| {
            let e = format!("after the reboot, {e}");
            u.act("wait", t, None, Err(e.clone()));
            e
        })?;
        u.act("wait", t, None, Ok(Some("answers after the reboot".into())));
    }
    let t = Instant::now();
    let after = settled_check(c, spec, opts).await;
    let healthy = after.state == HealthState::Healthy;
    let detail =
        format!("after: {}{}", after.state, after.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default());
    u.act("check", t, None, if healthy { Ok(Some(detail.clone())) } else { Err(detail.clone()) });
    u.health = Some(after);
    if healthy { Ok(()) } else { Err(format!("unhealthy after the upgrade: {}", detail.trim_start_matches("after: "))) }
}

/// The health check after the upgrade, repeated every 5 s for at most the settle time while the
/// container is down, unreachable or the check errs (services restart after an upgrade).
async fn settled_check(c: &dyn Containers, spec: &ContainerSpec, opts: &UpdateOptions) -> ContainerHealth {
    let started = Instant::now();
    loop {
        let h = check(c, spec, &opts.check).await;
        let retry = matches!(h.state, HealthState::Down | HealthState::Unreachable | HealthState::Error);
        let wait = Duration::from_secs(5);
        if !retry || started.elapsed() + wait > opts.settle_timeout {
            return h;
        }
        tracing::info!("{}: {} after the upgrade, checking again in 5 s", spec.name, h.state);
        tokio::time::sleep(wait).await;
    }
}

/// Step 7: back to the snapshot, wait, check again; the result is `rolled-back`, or `failed`
/// when the rollback itself failed.
async fn rollback(
    c: &dyn Containers,
    spec: &ContainerSpec,
    opts: &UpdateOptions,
    snapshot: &str,
    reason: String,
    u: &mut ContainerUpdate,
) {
    tracing::warn!("{}: {reason}: rolling back to {snapshot}", spec.name);
    let t = Instant::now();
    match c.rollback(spec, snapshot).await {
        Ok(upid) => {
            u.act("rollback", t, upid.clone(), Ok(Some(snapshot.to_string())));
            u.rollback =
                Some(Rollback { snapshot: snapshot.into(), reason: reason.clone(), upid, outcome: Outcome::Ok });
            u.fail(UpdateResult::RolledBack, format!("{reason}; rolled back to {snapshot}"));
        }
        Err(e) => {
            let error = crate::actions::redact(&format!("{e:#}"));
            u.act("rollback", t, None, Err(error.clone()));
            u.rollback = Some(Rollback {
                snapshot: snapshot.into(),
                reason: reason.clone(),
                upid: None,
                outcome: Outcome::Failed { error: error.clone() },
            });
            return u.fail(
                UpdateResult::Failed,
                format!(
                    "{reason}; the rollback to {snapshot} FAILED: {error}. The snapshot is kept: roll {} back to it by \
                     hand ({})",
                    spec.name,
                    match c.kind() {
                        BackendKind::Pve => format!("`pct rollback {} {snapshot} --start` on its node", spec.vmid),
                        BackendKind::Lxc => format!(
                            "`lxc-snapshot -n {} -L -C` lists it by its comment; stop the container, \
                             `lxc-snapshot -n {} -r snapN`, start it",
                            spec.hostname, spec.hostname
                        ),
                    }
                ),
            );
        }
    }
    let t = Instant::now();
    match wait_ready(c, spec, opts.boot_timeout).await {
        Ok(_) => u.act("wait", t, None, Ok(Some("answers after the rollback".into()))),
        Err(e) => u.act("wait", t, None, Err(e)),
    }
    let t = Instant::now();
    let h = check(c, spec, &opts.check).await;
    let detail = format!("after the rollback: {}", h.state);
    u.act("check", t, None, if h.state == HealthState::Healthy { Ok(Some(detail)) } else { Err(detail) });
    if h.state != HealthState::Healthy {
        let still = format!(
            "still {} after the rollback{}",
            h.state,
            h.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
        );
        u.error = Some(format!("{}; {still}", u.error.take().unwrap_or_default()));
    }
    u.health = Some(h);
}

/// Deletes the older update snapshots after a successful update; failures are warnings.
async fn prune(c: &dyn Containers, spec: &ContainerSpec, kept: &str, u: &mut ContainerUpdate) {
    let t = Instant::now();
    let existing = match c.snapshots(spec).await {
        Ok(s) => s,
        Err(e) => {
            u.warnings.push(format!("older update snapshots not deleted: cannot list them: {e:#}"));
            return;
        }
    };
    for name in plan::to_prune(&existing, kept) {
        let t = Instant::now();
        match c.delete_snapshot(spec, &name).await {
            Ok(upid) => {
                u.act("prune", t, upid, Ok(Some(name.clone())));
                u.pruned.push(name);
            }
            Err(e) => {
                let w = format!("older update snapshot {name} not deleted: {e:#}");
                u.act("prune", t, None, Err(w.clone()));
                u.warnings.push(w);
            }
        }
    }
    if u.pruned.is_empty() {
        tracing::debug!("{}: no older update snapshot ({} ms)", spec.name, t.elapsed().as_millis());
    }
}

/// Runs one upgrade command with an empty stdin, its stdout logged line by line and its tail
/// kept, bounded by `budget`.
async fn run_command(exec: &dyn RemoteExec, name: &str, argv: &[&str], budget: Duration) -> CommandRun {
    let started = Instant::now();
    let mut out = Capture::new(name, OUTPUT_KEEP);
    let mut stdin: &[u8] = b"";
    let result = tokio::time::timeout(budget, exec.run(argv, &mut stdin, &mut out)).await;
    let output_tail = out.finish();
    let (exit_code, stderr_tail, error) = match result {
        Ok(Ok(st)) => {
            let tail = tail_lines(&st.stderr, 20);
            let error = (!st.success()).then(|| st.describe());
            (st.code, tail, error)
        }
        Ok(Err(e)) => (None, String::new(), Some(format!("{}: {e}", exec.target()))),
        Err(_) => (None, String::new(), Some(format!("did not finish within {}", secs(budget)))),
    };
    CommandRun {
        command: argv.join(" "),
        exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        output_tail,
        stderr_tail: crate::actions::redact(&stderr_tail),
        error: error.map(|e| crate::actions::redact(&e)),
    }
}

/// The last `n` lines of `text`.
fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// An [`AsyncWrite`] that logs every complete line (prefixed with the container's name, control
/// characters escaped, secrets redacted) and keeps the last `keep` bytes.
struct Capture {
    name: String,
    keep: usize,
    tail: Vec<u8>,
    /// True once the front of the output was dropped from `tail`.
    cut: bool,
    line: Vec<u8>,
}

/// Longest line logged; the rest of a longer line is dropped from the log (not from the tail).
const LINE_MAX: usize = 4096;

impl Capture {
    fn new(name: &str, keep: usize) -> Self {
        Capture { name: name.into(), keep, tail: Vec::new(), cut: false, line: Vec::new() }
    }

    fn push(&mut self, buf: &[u8]) {
        self.tail.extend_from_slice(buf);
        if self.tail.len() > 2 * self.keep {
            let cut = self.tail.len() - self.keep;
            self.tail.drain(..cut);
            self.cut = true;
        }
        for &b in buf {
            if b == b'\n' {
                self.log_line();
            } else if self.line.len() < LINE_MAX {
                self.line.push(b);
            }
        }
    }

    fn log_line(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.trim_end_matches('\r');
        if !text.trim().is_empty() {
            let safe = crate::error::terminal_safe_line(text);
            tracing::info!("{}: {}", self.name, crate::actions::redact(&safe));
        }
        self.line.clear();
    }

    /// Logs what is left of the last line and returns the kept tail, starting at a line
    /// boundary when it was cut.
    fn finish(mut self) -> String {
        if !self.line.is_empty() {
            self.log_line();
        }
        let start = self.tail.len().saturating_sub(self.keep);
        let mut kept = &self.tail[start..];
        if (start > 0 || self.cut)
            && let Some(nl) = kept.iter().position(|b| *b == b'\n')
        {
            kept = &kept[nl + 1..];
        }
        crate::actions::redact(&String::from_utf8_lossy(kept))
    }
}

impl AsyncWrite for Capture {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.get_mut().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
