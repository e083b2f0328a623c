//! Waiting for PVE tasks.
//!
//! Every asynchronous API call answers with a UPID
//! (`UPID:NODE:PID:PSTART:STARTTIME:TYPE:ID:USER:`). [`PveClient::wait_task`] polls
//! `GET /nodes/{node}/tasks/{upid}/status` until `status == "stopped"`. Success is
//! `exitstatus == "OK"` or one starting with `WARNINGS` (the warning lines of the log are
//! returned); anything else is a [`PveError::Task`] carrying the tail of
//! `GET /nodes/{node}/tasks/{upid}/log`.
//!
//! # When to poll ([`PollSchedule`])
//!
//! A provision is bounded below by its tasks (create, start): a completion noticed late is time
//! lost for nothing, and a poll that finds the task still running is a request for nothing. PVE
//! offers no way to wait for a task on the server, so the client predicts: tasks of one type on
//! one node take about as long each time (unpacking the same template on the same storage,
//! booting the same kind of container). [`TaskTimes`] keeps, per `(node, task type)`, an interval
//! `(lo, secs]` the duration was last seen in ([`Learned`]; in memory, and in a small JSON file
//! across runs when [`crate::pve::ClientOptions::task_times`] names one), and the schedule polls
//!
//! * **known interval**: a tick every third of the expected duration (at least a second, at
//!   most ten) while the interval is further away than that (so that a much faster task is
//!   noticed within a third of what was expected, and a 13 s create costs two ticks), then
//!   * while the interval is wider than max(5 ms, 0.25 % of `secs`) — *learning* — probes
//!     evenly inside it, as many as cost the least expected lateness plus 0.2 % of `secs` (at
//!     least 2 ms) per expected poll (the cost a cold wait's guess uses,
//!     [`crate::pve::task_prior`]): one, a bisection, for a narrow interval; several for a wide
//!     one, which the next wait then knows within one step (a probe finding the task stopped
//!     ends the wait early and becomes the upper end, the last one finding it running the lower
//!     end),
//!   * once narrow, after eight waits without a probe — a *check* — one probe twice that width
//!     below `secs`, so that a task that got faster is followed: a check finding it running
//!     becomes the new `lo` (the old one may be stale), so the next wait bisects once more; one
//!     finding it stopped moves `secs` down and widens `lo` geometrically below it until a poll
//!     sees the task running, and the waits after learn again,
//!   * then the *target* just after `secs` (+ max(4 ms, 0.15 %)); if still running, every
//!     max(5 ms, 0.5 %) until `1.25 secs + 50 ms`, then as for an unknown duration;
//! * **nothing learned, but the node lists earlier tasks of the type** (a runner's first run, or
//!   a runner whose cache is new every job): one request for the node's task list gives their
//!   whole-second durations, [`crate::pve::task_prior`] turns them into a guessed interval and
//!   the poll points that cost the least expected lateness plus 0.2 % of the guess (at least
//!   2 ms) per poll within the poll bound, polled like a known interval's probes, the ticks first
//!   (a node that lists only tasks of 0 s, which took anything under a second: as unknown);
//! * **unknown duration** (nothing listed either): at once, after 50 ms, then doubling, at most
//!   every 500 ms.
//!
//! A steady task therefore costs one poll per wait besides the ticks of a long task (plus two
//! about every tenth wait: the check and the bisection after it), and its end is noticed within
//! about 0.5 % of its duration, after a few learning waits. Never more than
//! `4 + 2 × elapsed seconds` status polls in all (two per task-second, plus the first four, so
//! that a task of well under a second can still be bracketed), whatever the learned interval
//! says. Every wait ends at its timeout. Measurements: `docs/benchmarks/latency.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::task_prior::{Posterior, Prior};
use super::{PveClient, PveError};

/// How many log lines a failed task's error carries.
pub const LOG_TAIL_LINES: usize = 20;

/// A finished, successful task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// The UPID.
    pub upid: String,
    /// `OK` or `WARNINGS: n`.
    pub exit_status: String,
    /// The `WARN…` lines of the log when the exit status says WARNINGS.
    pub warnings: Vec<String>,
    /// Wall time waited.
    pub duration: Duration,
}

/// The node in a UPID (`UPID:NODE:…`), if it parses.
pub fn upid_node(upid: &str) -> Option<&str> {
    let mut parts = upid.split(':');
    (parts.next() == Some("UPID")).then(|| parts.next()).flatten().filter(|n| !n.is_empty())
}

impl PveClient {
    /// Waits until the task `upid` stops, for at most `timeout`.
    ///
    /// # Errors
    /// [`PveError::Task`] when it ended with an error (with the log tail), [`PveError::Timeout`]
    /// when it is still running after `timeout` (it is *not* stopped), API/transport errors of the
    /// status calls, [`PveError::Decode`] for a malformed UPID.
    pub async fn wait_task(&self, upid: &str, timeout: Duration, what: &str) -> Result<TaskOutcome, PveError> {
        let node = upid_node(upid).ok_or_else(|| PveError::Decode {
            method: "POST".into(),
            path: what.into(),
            detail: format!("`{upid}` is not a UPID"),
        })?;
        let status_path = format!("/nodes/{node}/tasks/{upid}/status");
        let key = upid_type(upid).map(|t| format!("{node}/{t}"));
        let start = Instant::now();
        let mut schedule = match key.as_deref().map(|k| (k, self.task_times().learned(k))) {
            Some((k, Some(learned))) => {
                tracing::debug!(
                    "{k}: learned before: ends within {:.3}–{:.3} s of its start",
                    learned.lo,
                    learned.secs
                );
                PollSchedule::new(Some(learned))
            }
            Some((k, None)) => match self.history_prior(node, k, upid).await {
                Some(prior) => PollSchedule::from_prior(&prior),
                None => PollSchedule::new(None),
            },
            None => PollSchedule::new(None),
        };
        let mut wait: Option<crate::progress::Wait> = None;
        loop {
            let first = schedule.next_poll();
            let elapsed = start.elapsed();
            if first > elapsed {
                tokio::time::sleep((first - elapsed).min(timeout.saturating_sub(elapsed))).await;
            }
            let polled_at = start.elapsed();
            let st = self.get(&status_path, &[]).await?;
            let status = st.get("status").and_then(Value::as_str).unwrap_or("");
            if status == "stopped" {
                let exit = st.get("exitstatus").and_then(Value::as_str).unwrap_or("unknown").to_string();
                // Only a task that did its work teaches how long that work takes (a failure
                // after half a second says nothing about the next successful create).
                if let Some(k) = &key
                    && (exit == "OK" || exit.starts_with("WARNINGS"))
                {
                    self.task_times().learn(k, schedule.finished(polled_at));
                }
                let duration = start.elapsed();
                if let Some(w) = wait.take() {
                    w.finish(&exit);
                }
                if exit == "OK" {
                    return Ok(TaskOutcome { upid: upid.into(), exit_status: exit, warnings: vec![], duration });
                }
                let log = self.task_log(node, upid).await.unwrap_or_default();
                if exit.starts_with("WARNINGS") {
                    let mut warnings: Vec<String> = log.iter().filter(|l| l.starts_with("WARN")).cloned().collect();
                    if warnings.is_empty() {
                        warnings.push(format!("{what}: task ended with {exit}"));
                    }
                    return Ok(TaskOutcome { upid: upid.into(), exit_status: exit, warnings, duration });
                }
                let tail = log[log.len().saturating_sub(LOG_TAIL_LINES)..].to_vec();
                return Err(PveError::Task {
                    upid: upid.into(),
                    exit_status: crate::actions::redact(&exit),
                    log_tail: tail,
                });
            }
            schedule.running_at(polled_at);
            if start.elapsed() >= timeout {
                return Err(PveError::Timeout { what: format!("{what} ({upid})"), secs: timeout.as_secs() });
            }
            let w = wait.get_or_insert_with(|| crate::progress::Wait::since(format!("{what} ({upid})"), start));
            w.state(if status.is_empty() { "waiting" } else { status });
        }
    }

    /// A first guess at how long a task of `key`'s type (`NODE/TYPE`) takes, from the node's
    /// task list (`GET /nodes/{node}/tasks?typefilter=TYPE&limit=50`: the successful ones,
    /// `upid` excluded), asked once per key and process, and only when nothing was learned
    /// of it (see [`crate::pve::task_prior`]). `None` when the node lists none, only tasks
    /// under a second, or the list cannot be read (the wait then polls as for an unknown
    /// duration).
    async fn history_prior(&self, node: &str, key: &str, upid: &str) -> Option<Prior> {
        if !self.task_times().first_look(key) {
            return None;
        }
        let kind = key.rsplit('/').next()?;
        let filter = super::TaskFilter { vmid: None, kind: Some(kind.into()), active: false, limit: 50 };
        let tasks = match self.node(node).tasks(&filter).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!("no task history of {key} ({e}): polling as for an unknown duration");
                return None;
            }
        };
        let durations: Vec<u64> = tasks
            .iter()
            .filter(|t| t.kind == kind && t.upid != upid && t.status.as_deref() == Some("OK"))
            .filter_map(|t| t.endtime?.checked_sub(t.starttime?))
            .collect();
        let Some(prior) = first_guess(&durations) else {
            tracing::debug!(
                "{key}: {} past tasks listed: no first guess (all under a second, or spread over an hour)",
                durations.len()
            );
            return None;
        };
        tracing::debug!(
            "{key}: {} past tasks listed; first guess {:.3}–{:.3} s after the task's start, polls planned at {}",
            durations.len(),
            prior.lo.as_secs_f64(),
            prior.hi.as_secs_f64(),
            prior.points.iter().map(|p| format!("{:.3}", p.as_secs_f64())).collect::<Vec<_>>().join(", ")
        );
        Some(prior)
    }

    /// The task's log lines (`GET /nodes/{node}/tasks/{upid}/log`, up to 5000 lines), redacted.
    ///
    /// # Errors
    /// API and transport errors.
    pub async fn task_log(&self, node: &str, upid: &str) -> Result<Vec<String>, PveError> {
        let data = self
            .get(&format!("/nodes/{node}/tasks/{upid}/log"), &[("start", "0".into()), ("limit", "5000".into())])
            .await?;
        Ok(data
            .as_array()
            .map(|a| a.iter().filter_map(|l| l.get("t").and_then(Value::as_str)).map(crate::actions::redact).collect())
            .unwrap_or_default())
    }
}

/// The task type in a UPID (`UPID:NODE:PID:PSTART:STARTTIME:TYPE:…`: `vzcreate`, `vzstart` …).
pub fn upid_type(upid: &str) -> Option<&str> {
    let mut parts = upid.split(':');
    (parts.next() == Some("UPID")).then(|| parts.nth(4)).flatten().filter(|t| !t.is_empty())
}

/// The task's start in a UPID (`…:STARTTIME:…`, hexadecimal UNIX seconds of the node's clock).
pub fn upid_start(upid: &str) -> Option<u64> {
    let mut parts = upid.split(':');
    (parts.next() == Some("UPID")).then(|| parts.nth(3)).flatten().and_then(|t| u64::from_str_radix(t, 16).ok())
}

const MS: Duration = Duration::from_millis(1);

/// What is known of one `(node, task type)`'s duration between waits (and runs: the
/// [`TaskTimes`] file keeps it). Seconds since a wait started (just after the call that started
/// the task answered).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    /// The upper end: the task was seen stopped by then, or by the target poll just after it
    /// (which leaves `secs` as it was).
    pub secs: f64,
    /// The lower end: a poll saw the task still running then. It can be stale after the task got
    /// faster; the periodic check finds that out (see the module docs).
    pub lo: f64,
    /// Waits since the interval was last probed or checked; [`CHECK_EVERY`] or more also marks
    /// an interval whose lower end is a guess after the task got faster (the next waits keep
    /// checking below it).
    #[serde(default)]
    pub since: u32,
}

impl Learned {
    /// The interval learned from one wait that saw nothing but a stop at `secs` (the first poll)
    /// or a running poll at `lo` and the stop at `secs`.
    pub fn between(lo: Option<Duration>, secs: Duration) -> Self {
        Learned { secs: secs.as_secs_f64(), lo: lo.map_or(0.0, |d| d.as_secs_f64()), since: 0 }
    }
}

/// Poll points placed by a first guess from the node's task history ([`Prior`]).
const PRIOR_POINTS: usize = 10;

/// Waits without a probe after which a narrow interval is checked from below (so a check, and
/// the bisection it starts, come about every tenth wait).
pub const CHECK_EVERY: u32 = 8;
/// Probes in one learning wait, at most (see [`learning_probes`]).
const MAX_PROBES: u32 = 8;
/// Between polls while a task with a known duration has not reached it: a mispredicted (much
/// faster) task is noticed within this.
const TICK: Duration = Duration::from_secs(1);

/// An interval narrower than this is learned: max(5 ms, 0.25 % of `e`).
fn narrow(e: Duration) -> Duration {
    (e / 400).max(5 * MS)
}

/// The target poll comes this long after the expected end: max(4 ms, 0.15 % of `e`).
fn margin(e: Duration) -> Duration {
    (e * 3 / 2000).max(4 * MS)
}

/// Between polls of a task later than expected: max(5 ms, 0.5 % of `e`).
fn close(e: Duration) -> Duration {
    (e / 200).max(5 * MS)
}

/// Probes for a learning wait over an interval `width` wide of a task expected to take `e`:
/// the count `k` (1 to [`MAX_PROBES`]) with the least expected lateness plus
/// [`poll_cost`](super::task_prior::poll_cost)`(e)` per expected poll, for an end
/// anywhere in the interval and `k` probes evenly inside it: `width / (2 (k + 1))` late, and
/// `1 + k / 2` polls (each probe, and the target, is made only when the task ran past the one
/// before).
fn learning_probes(width: Duration, e: Duration) -> u32 {
    let (w, cost) = (width.as_secs_f64(), super::task_prior::poll_cost(e.as_secs_f64()));
    let expected = |k: u32| w / (2.0 * f64::from(k + 1)) + cost * (1.0 + f64::from(k) / 2.0);
    (1..=MAX_PROBES).min_by(|a, b| expected(*a).total_cmp(&expected(*b))).unwrap_or(1)
}

/// The first guess from the whole-second durations the node lists for a task type (see
/// [`crate::pve::task_prior`]), its points placed after the ticks before its range (see
/// [`tick_or`]). `None` without durations, or when all are 0 s: those tasks took anything under
/// a second, and the schedule for an unknown duration (at once, 50 ms, doubling) is made for
/// them — it notices a task of a few milliseconds at once, where a guess spread over the second
/// would wait for its first point.
fn first_guess(durations: &[u64]) -> Option<Prior> {
    if durations.iter().all(|&d| d == 0) {
        return None;
    }
    let posterior = Posterior::from_whole_seconds(durations)?;
    let ticks = (posterior.lo().as_nanos() / tick_every(posterior.hi()).as_nanos()) as usize;
    Some(posterior.prior(ticks, PRIOR_POINTS))
}

/// Between ticks while a task expected to take `e` has not reached its interval: a third of
/// `e`, at least [`TICK`] and at most ten of it.
fn tick_every(e: Duration) -> Duration {
    (e / 3).clamp(TICK, 10 * TICK)
}

/// The next tick after `at` (a multiple of [`tick_every`]), or the point `t` when that tick is
/// not clearly before it (a poll just before `t` would find the task running for nothing).
fn tick_or(at: Duration, e: Duration, t: Duration) -> Duration {
    let every = tick_every(e);
    let tick = every * (at.as_millis() / every.as_millis() + 1) as u32;
    if tick + (e / 20).max(50 * MS) >= t { t } else { tick }
}

/// When to poll one task's status (pure; see the module docs). Times are since the wait
/// started (just after the call that started the task answered).
#[derive(Debug, Clone)]
pub struct PollSchedule {
    /// The interval known before this wait (`None`: unknown, or `secs` under 20 ms).
    learned: Option<Learned>,
    /// Probes (ascending) then the target, the last element; empty when unknown.
    points: Vec<Duration>,
    /// This wait's only probe is a check below a narrow interval.
    check: bool,
    polls: u32,
    last_running: Option<Duration>,
    next: Duration,
}

impl PollSchedule {
    /// A schedule for a task whose duration was last seen in `learned` (`None`, or `secs` under
    /// 20 ms: unknown).
    pub fn new(learned: Option<Learned>) -> Self {
        let learned = learned
            .filter(|l| l.secs.is_finite() && l.secs > 0.020 && l.secs < 86_400.0)
            .map(|l| Learned { lo: if l.lo.is_finite() { l.lo.clamp(0.0, l.secs) } else { 0.0 }, ..l });
        let mut points = Vec::new();
        let mut check = false;
        if let Some(l) = learned {
            let e = Duration::from_secs_f64(l.secs);
            let lo = Duration::from_secs_f64(l.lo);
            let width = e - lo;
            let n = narrow(e);
            if width > n {
                let k = learning_probes(width, e).min((width.as_nanos() / n.as_nanos()) as u32).max(1);
                points.extend((1..=k).map(|i| lo + width * i / (k + 1)));
            } else if l.since >= CHECK_EVERY && e > 2 * n {
                check = true;
                points.push(e - 2 * n);
            }
            points.push(e + margin(e));
        }
        let next = match (learned, points.first()) {
            (Some(l), Some(first)) => tick_or(Duration::ZERO, Duration::from_secs_f64(l.secs), *first),
            _ => Duration::ZERO,
        };
        PollSchedule { learned, points, check, polls: 0, last_running: None, next }
    }

    /// A schedule for a task whose duration nothing was learned of, guessed from the node's task
    /// history ([`Prior`]): the prior's points are the probes and its upper end the target, as
    /// for an interval still being learned, so that a late task is followed the same way and the
    /// wait learns the interval its polls saw.
    pub fn from_prior(prior: &Prior) -> Self {
        let Some(&last) = prior.points.last() else { return Self::new(None) };
        let hi = prior.hi.max(last);
        if hi.as_secs_f64() <= 0.020 {
            return Self::new(None);
        }
        let learned = Learned { secs: hi.as_secs_f64(), lo: prior.lo.min(hi).as_secs_f64(), since: 0 };
        let mut points: Vec<Duration> = prior.points.iter().copied().filter(|p| *p < hi).collect();
        points.push(hi + margin(hi));
        let next = tick_or(Duration::ZERO, hi, points[0]);
        PollSchedule { learned: Some(learned), points, check: false, polls: 0, last_running: None, next }
    }

    /// When the next status poll is due.
    pub fn next_poll(&self) -> Duration {
        self.next
    }

    /// The target poll's time, when the duration is known.
    fn target(&self) -> Option<Duration> {
        self.points.last().copied()
    }

    /// The poll made at `at` found the task running: plans the next one.
    pub fn running_at(&mut self, at: Duration) {
        self.polls += 1;
        self.last_running = Some(at);
        let next = match self.learned.map(|l| Duration::from_secs_f64(l.secs)) {
            Some(e) => match self.points.iter().find(|p| **p > at) {
                // Before the target: once a second, the probes, the target.
                Some(p) => tick_or(at, e, *p),
                // Late: close polls up to a quarter beyond the expected duration.
                None if at < e + e / 4 + 50 * MS => at + close(e),
                None => self.backoff(at),
            },
            None => self.backoff(at),
        };
        // Two polls per task-second, plus the first four: poll n+1 not before (n - 3) / 2 s.
        let budget = Duration::from_millis(u64::from(self.polls.saturating_sub(3)) * 500);
        self.next = next.max(budget).max(at);
    }

    /// Unknown (or far beyond the expected duration): 50 ms doubling, at most 500 ms.
    fn backoff(&self, at: Duration) -> Duration {
        let k = self.polls.saturating_sub(1).min(4);
        at + (50 * MS * 2u32.pow(k)).min(500 * MS)
    }

    /// The poll made at `at` found the task stopped: the interval to remember (see the module
    /// docs).
    pub fn finished(&mut self, at: Duration) -> Learned {
        self.polls += 1;
        let running = self.last_running;
        let (Some(l), Some(target)) = (self.learned, self.target()) else {
            return Learned::between(running, at);
        };
        let secs = at.as_secs_f64();
        let run = running.map(|r| r.as_secs_f64());
        if at < target {
            // Stopped at a probe or a tick: faster than `secs`.
            let descending = self.check || l.since >= CHECK_EVERY;
            match run {
                // A fresh lower end, not below what was known (or what was known is now wrong).
                Some(r) if r >= l.lo || l.lo >= secs => Learned { secs, lo: r, since: 0 },
                // Learning: what was known still fits.
                _ if l.lo < secs && !descending => Learned { secs, lo: l.lo, since: 0 },
                // Faster than the check (or than the interval) said, and no poll saw it running
                // since: the lower end is a guess, twice as far below as the last step, until a
                // poll sees the task running.
                _ => {
                    Learned { secs, lo: (secs - 2.0 * (l.secs - l.lo).max(l.secs - secs)).max(0.0), since: CHECK_EVERY }
                }
            }
        } else if running.is_some_and(|r| r >= target) {
            // Late: the last close poll that saw it running and this one.
            Learned::between(running, at)
        } else {
            // Stopped by the target, as expected: the interval holds, narrowed from below by
            // the probes (or ticks) that saw it running. A check replaces the lower end (which
            // may be stale), so that the next wait bisects the interval below the target again.
            let probed = self.points.len() > 1;
            let lo = match run {
                Some(r) if self.check => r,
                Some(r) => r.max(l.lo),
                None => l.lo,
            };
            Learned { secs: l.secs, lo: lo.min(l.secs), since: if probed { 0 } else { l.since.saturating_add(1) } }
        }
    }

    /// Status polls made so far.
    pub fn polls(&self) -> u32 {
        self.polls
    }
}

/// Learned task duration intervals per `NODE/TYPE` (see the module docs), optionally kept in a
/// JSON file (`{"https://host:8006/api2/json NODE/TYPE": {"secs": …, "lo": …, "since": …, "at":
/// UNIX seconds learned}, …}`, at most 256 entries: beyond that the one learned longest ago is
/// dropped) that every process using the same file shares; written atomically (a temporary file
/// renamed). An entry of the older form (a number of seconds) is read as an interval 3 % wide
/// below it.
///
/// Inside a tokio runtime the file is written on a blocking thread, off the path from a task's
/// end to the next request: a rename on a busy disk can take a few hundred milliseconds (seen
/// here on ext4). What those writers have not written when the `TaskTimes` (its client) is
/// dropped is written then, so the last wait's interval is kept also when the process ends
/// right after it.
pub struct TaskTimes {
    prefix: String,
    file: Option<PathBuf>,
    map: Mutex<BTreeMap<String, Entry>>,
    /// Keys whose task history was asked for (once per process).
    looked: Mutex<std::collections::BTreeSet<String>>,
    /// The generation of the newest snapshot handed to a writer.
    generation: std::sync::atomic::AtomicU64,
    /// Held while writing: the generation last written (an older snapshot is then skipped).
    written: std::sync::Arc<Mutex<u64>>,
}

const MAX_ENTRIES: usize = 256;

/// One key's interval in the file, with when it was learned (UNIX seconds; 0 when unknown).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    learned: Learned,
    #[serde(default)]
    at: u64,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl TaskTimes {
    /// Intervals of the API at `base` (the key prefix), loaded from `file` when it exists and
    /// parses (anything else starts empty; an entry that does not parse is dropped).
    pub fn new(base: &str, file: Option<PathBuf>) -> Self {
        let map = file
            .as_deref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|b| serde_json::from_slice::<BTreeMap<String, Value>>(&b).ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| {
                let e = match v {
                    Value::Number(n) => {
                        n.as_f64().map(|secs| Entry { learned: Learned { secs, lo: secs * 0.97, since: 0 }, at: 0 })
                    }
                    v => serde_json::from_value::<Entry>(v).ok(),
                }?;
                let l = e.learned;
                (l.secs.is_finite() && l.secs >= 0.0 && l.lo.is_finite()).then_some((k, e))
            })
            .collect();
        TaskTimes {
            prefix: format!("{base} "),
            file,
            map: Mutex::new(map),
            looked: Mutex::new(Default::default()),
            generation: std::sync::atomic::AtomicU64::new(0),
            written: std::sync::Arc::new(Mutex::new(0)),
        }
    }

    /// True the first time it is asked for `key` in this process (then false): whether a wait
    /// may ask the node's task history for a first guess.
    pub fn first_look(&self, key: &str) -> bool {
        self.looked.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_string())
    }

    /// The interval learned for `key` (`NODE/TYPE`), if any.
    pub fn learned(&self, key: &str) -> Option<Learned> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&format!("{}{key}", self.prefix)).map(|e| e.learned).filter(|l| l.secs < 86_400.0)
    }

    /// The upper end of what was learned for `key`, if anything.
    pub fn expected(&self, key: &str) -> Option<Duration> {
        self.learned(key).map(|l| Duration::from_secs_f64(l.secs))
    }

    /// Remembers what a wait learned about `key` (from [`PollSchedule::finished`]), and writes
    /// the file when there is one: on a blocking thread inside a tokio runtime, else at once (a
    /// failure to write is logged at debug level and otherwise ignored: the file is a cache).
    pub fn learn(&self, key: &str, learned: Learned) {
        use std::sync::atomic::Ordering;
        let (snapshot, generation) = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            let full = format!("{}{key}", self.prefix);
            map.insert(full.clone(), Entry { learned, at: unix_now() });
            while map.len() > MAX_ENTRIES {
                let oldest = map.iter().filter(|(k, _)| **k != full).min_by_key(|(_, e)| e.at).map(|(k, _)| k.clone());
                let Some(k) = oldest else { break };
                map.remove(&k);
            }
            (map.clone(), self.generation.fetch_add(1, Ordering::SeqCst) + 1)
        };
        let Some(file) = self.file.clone() else { return };
        let written = std::sync::Arc::clone(&self.written);
        let write = move || {
            let mut last = written.lock().unwrap_or_else(|e| e.into_inner());
            if *last >= generation {
                return; // a newer snapshot is already in the file
            }
            if let Err(e) = write_atomically(&file, &snapshot) {
                tracing::debug!("cannot keep the learned task durations in {}: {e}", file.display());
            }
            *last = generation;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(write)),
            Err(_) => write(),
        }
    }
}

/// Writes what the blocking writers have not written yet (their last ones may never have started
/// when the runtime shut down).
impl Drop for TaskTimes {
    fn drop(&mut self) {
        let generation = *self.generation.get_mut();
        let Some(file) = &self.file else { return };
        let mut last = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if *last >= generation {
            return;
        }
        let map = self.map.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = write_atomically(file, map) {
            tracing::debug!("cannot keep the learned task durations in {}: {e}", file.display());
        }
        *last = generation;
    }
}

fn write_atomically(file: &Path, map: &BTreeMap<String, Entry>) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(map).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, file)
}

/// The default file for learned task durations: `pve-task-times.json` in the user's cache
/// directory of proxmox-gitops ([`crate::settings::cache_dir`]: `$XDG_CACHE_HOME/proxmox-gitops`,
/// else `$HOME/.cache/proxmox-gitops`); `None` when neither variable is set.
pub fn default_task_times_file() -> Option<PathBuf> {
    Some(crate::settings::cache_dir(&crate::settings::ProcessEnv)?.join("pve-task-times.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `s` against a task that stops at `t`; returns (noticed at, polls, learned).
    fn run(mut s: PollSchedule, t: Duration) -> (Duration, u32, Learned) {
        loop {
            let at = s.next_poll();
            if at >= t {
                let l = s.finished(at);
                return (at, s.polls(), l);
            }
            s.running_at(at);
            assert!(s.polls() < 10_000);
        }
    }

    /// A small deterministic jitter source (0 ..= `max_ms` ms).
    struct Jitter(u64);
    impl Jitter {
        fn next(&mut self, max_ms: u64) -> Duration {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            Duration::from_micros((self.0 >> 33) % (max_ms * 1000 + 1))
        }
    }

    /// Waits for tasks of `durations` in turn, learning as `wait_task` does; returns per wait
    /// (lateness, polls).
    fn waits(durations: &[f64], jitter_ms: u64) -> Vec<(Duration, u32)> {
        let times = TaskTimes::new("https://h:8006/api2/json", None);
        let mut j = Jitter(7);
        durations
            .iter()
            .map(|secs| {
                let t = Duration::from_secs_f64(*secs) + j.next(jitter_ms);
                let (at, polls, l) = run(PollSchedule::new(times.learned("pve1/vzcreate")), t);
                assert!(l.lo <= l.secs, "{l:?}");
                times.learn("pve1/vzcreate", l);
                (at - t, polls)
            })
            .collect()
    }

    #[test]
    fn task_types_of_upids() {
        assert_eq!(upid_type("UPID:pve1:000003E9:00001B5F:6B0DA64A:vzcreate:101:root@pam:"), Some("vzcreate"));
        assert_eq!(upid_type("UPID:pve1:1"), None);
    }

    #[test]
    fn unknown_durations_poll_at_once_then_back_off_within_two_polls_per_second() {
        let (at, polls, _) = run(PollSchedule::new(None), Duration::ZERO);
        assert_eq!((at, polls), (Duration::ZERO, 1));
        for secs in [0.3, 1.0, 3.0, 10.0, 100.0] {
            let t = Duration::from_secs_f64(secs);
            let (at, polls, l) = run(PollSchedule::new(None), t);
            assert!(at - t <= Duration::from_millis(500), "{secs}: noticed at {at:?}");
            assert!(f64::from(polls) <= 4.0 + 2.0 * secs, "{secs}: {polls} polls");
            assert!(l.lo < secs && l.secs >= secs && l.secs == at.as_secs_f64(), "{l:?}");
        }
    }

    #[test]
    fn a_learned_duration_costs_one_poll_just_after_it_plus_one_a_second_before() {
        for secs in [0.3, 1.0, 3.0, 10.0] {
            let e = Duration::from_secs_f64(secs);
            let learned = Learned { secs, lo: secs - narrow(e).as_secs_f64() / 2.0, since: 0 };
            let (at, polls, l) = run(PollSchedule::new(Some(learned)), e - MS);
            let every = (secs / 3.0).max(1.0);
            let ticks = ((secs - 1e-9) / every).floor() as u32;
            assert_eq!(polls, ticks + 1, "{secs}: a tick every max(1 s, a third), then the one just after it");
            assert!(at - e <= margin(e), "{secs}: {at:?}");
            assert_eq!((l.secs, l.since), (secs, 1), "the interval holds");
        }
        // A much faster task than expected is noticed at the next tick (every third of the
        // expected duration, at most 10 s), and moves the interval.
        let learned = Learned { secs: 12.0, lo: 11.9, since: 0 };
        let (at, _, l) = run(PollSchedule::new(Some(learned)), Duration::from_secs_f64(3.5));
        assert_eq!(at, Duration::from_secs(4));
        assert_eq!(l.secs, 4.0);
        let learned = Learned { secs: 100.0, lo: 99.9, since: 0 };
        let (at, _, l) = run(PollSchedule::new(Some(learned)), Duration::from_secs_f64(9.5));
        assert_eq!(at, Duration::from_secs(10));
        assert_eq!(l.secs, 10.0);
    }

    #[test]
    fn a_first_guess_from_the_history_notices_the_end_within_its_point_spacing() {
        // Ten listed creates of a 13.3 s task (whole seconds: 13 seven times, 14 three times).
        let prior =
            Posterior::from_whole_seconds(&[13, 14, 13, 13, 14, 13, 13, 14, 13, 13]).unwrap().prior(2, PRIOR_POINTS);
        let spacing = prior
            .points
            .windows(2)
            .chain([[*prior.points.last().unwrap(), prior.hi].as_slice()])
            .map(|w| w[1] - w[0])
            .max()
            .unwrap();
        let t = Duration::from_secs_f64(13.3);
        let (at, polls, l) = run(PollSchedule::from_prior(&prior), t);
        assert!(at >= t && at - t <= spacing, "{at:?} {prior:?}");
        assert!(polls <= 4 + 10, "two ticks, the points up to the end: {polls}");
        // What the wait learned is the narrow interval its polls saw.
        assert!(l.secs - l.lo <= spacing.as_secs_f64() + 1e-9, "{l:?}");
        // A task far slower than the history says is still followed to its end.
        let slow = Duration::from_secs(40);
        let (at, _, _) = run(PollSchedule::from_prior(&prior), slow);
        assert!(at >= slow && at - slow <= Duration::from_millis(500), "{at:?}");
    }

    #[test]
    fn tasks_listed_as_0_s_get_no_first_guess_and_are_polled_at_once() {
        assert_eq!(first_guess(&[]), None);
        assert_eq!(first_guess(&[0, 0, 0]), None);
        let (at, polls, _) = run(PollSchedule::new(None), Duration::from_millis(3));
        assert_eq!((at, polls), (Duration::from_millis(50), 2), "at once, then 50 ms");
        // One listed second or more: a guess, its points after the ticks before its range.
        let p = first_guess(&[0, 1, 1]).unwrap();
        assert!(!p.points.is_empty() && p.points[0] > Duration::ZERO, "{p:?}");
        let p = first_guess(&[13, 14, 13]).unwrap();
        assert!(p.points.iter().all(|t| *t >= p.lo), "{p:?}");
    }

    #[test]
    fn a_wide_interval_is_learned_with_several_probes_a_narrow_one_is_bisected() {
        let e = Duration::from_millis(1300);
        assert!(learning_probes(Duration::from_millis(130), e) >= 3);
        assert_eq!(learning_probes(Duration::from_millis(10), e), 1);
        // A short task: a poll costs at least 2 ms, so a few ms of interval get one probe.
        assert_eq!(learning_probes(Duration::from_millis(10), Duration::from_millis(300)), 1);
        // From what a cold wait at 1.3 s leaves (about 130 ms wide), narrow after three waits,
        // each noticing the end sooner than a bisection's would.
        let mut learned = Learned { secs: 1.42, lo: 1.29, since: 0 };
        let t = Duration::from_millis(1313);
        let mut lateness = Vec::new();
        for _ in 0..3 {
            let (at, polls, l) = run(PollSchedule::new(Some(learned)), t);
            assert!(f64::from(polls) <= 4.0 + 2.0 * at.as_secs_f64(), "{polls} polls by {at:?}");
            lateness.push(at - t);
            learned = l;
        }
        assert!(Duration::from_secs_f64(learned.secs - learned.lo) <= narrow(e), "{learned:?}");
        assert!(lateness[0] < Duration::from_millis(35), "{lateness:?}");
    }

    #[test]
    fn learning_narrows_the_interval_within_a_few_waits_then_polls_once_per_wait() {
        for secs in [0.3, 1.0, 3.0, 10.0] {
            let w = waits(&[secs; 40], 2);
            let e = Duration::from_secs_f64(secs);
            // After the learning waits (each halves the cold wait's last backoff step, at most
            // 500 ms, towards 5 ms: seven at most), noticed within the learned interval's width,
            // the target's margin (0.8 % of a long task, 9 ms of a short one) and the jitter.
            for (i, (late, _)) in w.iter().enumerate().skip(8) {
                assert!(*late <= narrow(e) + margin(e) + 2 * MS, "{secs} s, wait {i}: {late:?} late ({w:?})");
            }
            // Steady: the polls before the expected end (one a second) and the target, plus a
            // check and the bisection after it about every tenth wait, on average.
            let steady: u32 = w[8..].iter().map(|(_, p)| p).sum();
            let per_wait = f64::from(steady) / 32.0;
            assert!(per_wait <= secs.ceil() + 0.25, "{secs} s: {per_wait} polls per wait ({w:?})");
        }
    }

    #[test]
    fn a_slower_task_is_bracketed_closely_and_the_next_wait_is_exact_again() {
        let w = waits(&[[10.0; 10].as_slice(), &[10.15; 5]].concat(), 0);
        let (late, polls) = w[10];
        assert!(late <= close(Duration::from_secs(10)), "{w:?}");
        assert!(f64::from(polls) <= 4.0 + 2.0 * 10.15, "{polls}");
        for (late, _) in &w[12..] {
            assert!(*late <= Duration::from_millis(110), "{w:?}");
        }
        // Far slower (another template, a busy storage): back to the backoff, still bounded.
        let learned = Learned { secs: 10.0, lo: 9.99, since: 0 };
        let (at, polls, _) = run(PollSchedule::new(Some(learned)), Duration::from_secs(60));
        assert!(at - Duration::from_secs(60) <= Duration::from_millis(500), "{at:?}");
        assert!(f64::from(polls) <= 4.0 + 2.0 * 60.0, "{polls}");
    }

    #[test]
    fn a_faster_task_is_followed_by_the_checks_also_below_a_second() {
        for (before, after) in [(1.0, 0.6), (10.0, 8.0), (0.3, 0.29)] {
            let w = waits(&[vec![before; 12], vec![after; 30]].concat(), 1);
            let e = Duration::from_secs_f64(after);
            // Within two check periods the new duration is noticed as closely as the old one was.
            for (i, (late, _)) in w.iter().enumerate().skip(12 + 2 * CHECK_EVERY as usize) {
                assert!(*late <= narrow(e) + margin(e) + MS, "{before} → {after}, wait {i}: {late:?} ({w:?})");
            }
        }
    }

    #[test]
    fn no_interval_makes_a_wait_poll_more_than_two_per_task_second_plus_four() {
        let mut j = Jitter(11);
        for _ in 0..2000 {
            let secs = 0.021 + j.next(20_000).as_secs_f64();
            let lo = secs * j.next(1000).as_secs_f64();
            let since = (j.next(10).as_millis() as u32) % (CHECK_EVERY + 2);
            let t = j.next(30_000);
            let s = PollSchedule::new(Some(Learned { secs, lo, since }));
            let (at, polls, l) = run(s, t);
            assert!(f64::from(polls) <= 4.0 + 2.0 * at.as_secs_f64() + 1e-9, "{secs} {lo} {t:?}: {polls} by {at:?}");
            assert!(l.lo <= l.secs && l.secs <= at.as_secs_f64() + secs, "{l:?}");
        }
    }

    #[test]
    fn learned_intervals_survive_in_the_file_and_the_older_form_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/times.json");
        let a = TaskTimes::new("https://h:8006/api2/json", Some(file.clone()));
        a.learn("pve1/vzstart", Learned { secs: 3.0, lo: 2.99, since: 2 });
        let b = TaskTimes::new("https://h:8006/api2/json", Some(file.clone()));
        assert_eq!(b.learned("pve1/vzstart"), Some(Learned { secs: 3.0, lo: 2.99, since: 2 }));
        assert_eq!(b.expected("pve1/vzstart"), Some(Duration::from_secs(3)));
        let other = TaskTimes::new("https://other:8006/api2/json", Some(file.clone()));
        assert_eq!(other.expected("pve1/vzstart"), None);
        std::fs::write(&file, r#"{"https://h:8006/api2/json pve1/vzcreate": 10.0, "x y": "garbage"}"#).unwrap();
        let old = TaskTimes::new("https://h:8006/api2/json", Some(file));
        assert_eq!(old.learned("pve1/vzcreate"), Some(Learned { secs: 10.0, lo: 9.7, since: 0 }));
    }

    #[test]
    fn inside_a_runtime_the_file_is_written_off_the_waiting_path_and_the_newest_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("times.json");
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let a = TaskTimes::new("https://h:8006/api2/json", Some(file.clone()));
            for i in 1..=20 {
                a.learn("pve1/vzstart", Learned { secs: f64::from(i), lo: 0.5, since: 0 });
            }
        });
        drop(rt);
        let b = TaskTimes::new("https://h:8006/api2/json", Some(file));
        assert_eq!(b.expected("pve1/vzstart"), Some(Duration::from_secs(20)), "the newest snapshot wins");
    }

    #[test]
    fn a_full_file_drops_the_entry_learned_longest_ago_never_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("times.json");
        // 256 entries of other APIs, learned at 1000 + i; the key of this API sorts first.
        let full: BTreeMap<String, Value> = (0..MAX_ENTRIES)
            .map(|i| {
                (
                    format!("https://z{i:03}:8006/api2/json pve1/vzstart"),
                    serde_json::json!({"secs": 3.0, "lo": 2.9, "at": 1000 + i}),
                )
            })
            .collect();
        std::fs::write(&file, serde_json::to_vec(&full).unwrap()).unwrap();
        let a = TaskTimes::new("https://a:8006/api2/json", Some(file.clone()));
        a.learn("pve1/vzcreate", Learned { secs: 10.0, lo: 9.9, since: 0 });
        drop(a);
        let kept: BTreeMap<String, Value> = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert!(kept.contains_key("https://a:8006/api2/json pve1/vzcreate"));
        assert!(!kept.contains_key("https://z000:8006/api2/json pve1/vzstart"), "the oldest is dropped");
        assert!(kept.contains_key("https://z001:8006/api2/json pve1/vzstart"));
    }

    #[test]
    fn nodes_of_upids() {
        assert_eq!(upid_node("UPID:pve1:000003E9:00001B5F:6B0DA64A:vzcreate:101:root@pam:"), Some("pve1"));
        assert_eq!(upid_node("nope"), None);
        assert_eq!(upid_node("UPID::x"), None);
    }
}
