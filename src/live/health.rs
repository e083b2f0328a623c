//! The health check of one container, shared by `health` and `update` (which checks after an
//! upgrade and after a rollback), and waiting until a container answers after a start.
//!
//! A container is checked in this order, each part bounded in time ([`CheckOptions`]):
//!
//! 1. **deployed?** — the backend's state ([`Containers::status`]): absent is *not deployed*
//!    (reported, not a failure); a container that is not ours is *foreign*;
//! 2. **running?** — anything but running is *stopped*;
//! 3. **does it answer?** — a way in ([`Containers::exec`]) and `systemctl is-system-running`
//!    through it; no way in, or no answer in time, is *unreachable*; a container without
//!    `systemctl` is an *error* (the checks need systemd);
//! 4. **services** — with `SERVICES` in the lib's `container.env`, `systemctl is-active --
//!    UNIT` per unit must print `active`; without it, `systemctl --failed --plain --no-legend`
//!    must list nothing. Otherwise the container is *down*, and the detail names the units.
//!
//! Every command is an argv of constant words plus the unit names `resolve` validated
//! (`[A-Za-z0-9@._:-]`, never starting with `-`), after `--`: no shell, no user value parsed as
//! an option. The functions that read the commands' output are pure and unit-tested here.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Containers, CtState};
use crate::exec::{ExecStatus, RemoteExec, run_collect};
use crate::inventory::ContainerSpec;

/// Bounds of one check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Bound of each command in the container and of each backend call, e.g. 30 s.
    pub timeout: Duration,
    /// Bound of getting a way in (SSH connect attempts included), e.g. 60 s.
    pub reach_timeout: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(30), reach_timeout: Duration::from_secs(60) }
    }
}

/// The verdict on one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthState {
    /// Running, answering, every declared service active (or no failed unit).
    Healthy,
    /// No container: nothing to check. Not a failure for `update` (nothing to upgrade); a
    /// failure of `health`, which checks the containers the inventory expects.
    NotDeployed,
    /// The container exists and does not run.
    Stopped,
    /// Running, but no way in or no answer in time.
    Unreachable,
    /// Answering, but a declared service is not active, or a unit failed.
    Down,
    /// Another container holds the spec's vmid (PVE) or name (LXC): not checked, not touched.
    Foreign,
    /// The check itself could not be made (the backend did not answer, no systemd).
    Error,
}

impl HealthState {
    /// True for the states that do not fail a run: healthy and not deployed.
    pub fn is_ok(self) -> bool {
        matches!(self, HealthState::Healthy | HealthState::NotDeployed)
    }

    /// The name in tables and artifacts: `healthy`, `not-deployed`, `stopped`, `unreachable`,
    /// `down`, `foreign`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::NotDeployed => "not-deployed",
            HealthState::Stopped => "stopped",
            HealthState::Unreachable => "unreachable",
            HealthState::Down => "down",
            HealthState::Foreign => "foreign",
            HealthState::Error => "error",
        }
    }
}

impl std::fmt::Display for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One declared service and what `systemctl is-active` said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceCheck {
    /// The unit, e.g. `mosquitto.service`.
    pub unit: String,
    /// `is-active`'s answer: `active`, `inactive`, `failed`, `activating`, … (`unknown` when it
    /// printed nothing).
    pub state: String,
}

impl ServiceCheck {
    /// True when the unit is active.
    pub fn active(&self) -> bool {
        self.state == "active"
    }

    /// The unit without `.service` (`mosquitto`), as the user usually writes it.
    pub fn short(&self) -> &str {
        short_unit(&self.unit)
    }
}

/// `unit` without a `.service` suffix.
pub fn short_unit(unit: &str) -> &str {
    unit.strip_suffix(".service").unwrap_or(unit)
}

/// The health of one container (part of the `health` and `update` artifacts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerHealth {
    /// Container (lib) name.
    pub name: String,
    /// Hostname.
    pub hostname: String,
    /// vmid.
    pub vmid: u32,
    /// The verdict.
    pub state: HealthState,
    /// `systemctl is-system-running`'s answer (`running`, `degraded`, `starting` …) when the
    /// container answered.
    pub system: Option<String>,
    /// The declared services (`SERVICES`) with their state, in declaration order; empty when
    /// the lib declares none or they were not reached.
    pub services: Vec<ServiceCheck>,
    /// Without `SERVICES`: the failed units `systemctl --failed` listed (empty: none); `None`
    /// when not checked (services declared, or not reached).
    pub failed_units: Option<Vec<String>>,
    /// Why it is not healthy (names the units, or the error), `None` when healthy.
    pub detail: Option<String>,
    /// Wall time of the check in milliseconds.
    pub duration_ms: u64,
}

impl ContainerHealth {
    fn new(spec: &ContainerSpec) -> Self {
        ContainerHealth {
            name: spec.name.clone(),
            hostname: spec.hostname.clone(),
            vmid: spec.vmid,
            state: HealthState::Error,
            system: None,
            services: Vec::new(),
            failed_units: None,
            detail: None,
            duration_ms: 0,
        }
    }

    fn set(&mut self, state: HealthState, detail: Option<String>) {
        self.state = state;
        self.detail = detail.map(|d| crate::actions::redact(&d));
    }

    /// What the services look like, in one short phrase: `mosquitto active, nginx inactive`;
    /// `no failed units` / `failed: a.service, b.service` without `SERVICES`; `-` when not
    /// checked.
    pub fn services_text(&self) -> String {
        if !self.services.is_empty() {
            return self.services.iter().map(|s| format!("{} {}", s.short(), s.state)).collect::<Vec<_>>().join(", ");
        }
        match &self.failed_units {
            Some(f) if f.is_empty() => "no failed units".into(),
            Some(f) => format!("failed: {}", f.join(", ")),
            None => "-".into(),
        }
    }
}

/// What the first command (`systemctl is-system-running`) told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// systemd answered with its state (`running`, `degraded`, `starting` …).
    System(String),
    /// `systemctl` is not installed (exit code 127, or the shell said "not found").
    NoSystemd,
    /// `systemctl` ran but printed no state (systemd not reachable): its stderr.
    NoAnswer(String),
}

/// Reads the answer of `systemctl is-system-running` (any exit code: it is non-zero for every
/// state but `running`). Early in a boot systemd is not reachable yet ("Failed to connect to
/// bus: No such file or directory", nothing on stdout): that is [`Probe::NoAnswer`], not a
/// missing `systemctl` (exit code 127, or a message naming `systemctl` as not found).
pub fn read_probe(stdout: &[u8], status: &ExecStatus) -> Probe {
    let out = String::from_utf8_lossy(stdout);
    let state = out.lines().map(str::trim).find(|l| !l.is_empty());
    match state {
        Some(s) => Probe::System(s.to_string()),
        None if status.code == Some(127)
            || (status.stderr.contains("systemctl")
                && (status.stderr.contains("not found") || status.stderr.contains("Failed to exec"))) =>
        {
            Probe::NoSystemd
        }
        None => Probe::NoAnswer(status.describe()),
    }
}

/// Reads the answer of `systemctl is-active -- UNIT`: its first line (`active`, `inactive`,
/// `failed` …), `unknown` when it printed nothing.
pub fn read_service_state(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout).lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("unknown").to_string()
}

/// The unit names `systemctl --failed --plain --no-legend` listed: the first word of each line
/// (a leading `●` or `*` marker, printed by some versions despite `--plain`, is skipped).
pub fn read_failed_units(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| *w != "●" && *w != "*").map(str::to_string))
        .collect()
}

/// The verdict on a container that answered: down when a declared service is not active (the
/// detail names each with its state) or, without declared services, when a unit failed.
pub fn verdict(services: &[ServiceCheck], failed_units: Option<&[String]>) -> (HealthState, Option<String>) {
    let bad: Vec<String> =
        services.iter().filter(|s| !s.active()).map(|s| format!("{} {}", s.short(), s.state)).collect();
    if !bad.is_empty() {
        return (HealthState::Down, Some(bad.join(", ")));
    }
    match failed_units {
        Some(f) if !f.is_empty() => {
            let n = f.len();
            (HealthState::Down, Some(format!("{n} failed unit{}: {}", if n == 1 { "" } else { "s" }, f.join(", "))))
        }
        _ => (HealthState::Healthy, None),
    }
}

/// `d` for messages: `300 s`, or `0.6 s` below whole seconds.
pub fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{} s", d.as_secs()) } else { format!("{:.1} s", d.as_secs_f64()) }
}

/// Runs `argv` in the container bounded by `timeout`; `Err` names the target and what went wrong
/// (transport failure, timeout).
async fn run(exec: &dyn RemoteExec, argv: &[&str], timeout: Duration) -> Result<(Vec<u8>, ExecStatus), String> {
    match tokio::time::timeout(timeout, run_collect(exec, argv, b"")).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("{}: {e}", exec.target())),
        Err(_) => Err(format!("{}: `{}` did not answer within {}", exec.target(), argv.join(" "), secs(timeout))),
    }
}

/// Checks `spec`'s container through `c` (see the module docs). Never fails: what went wrong is
/// in the result's state and detail.
pub async fn check(c: &dyn Containers, spec: &ContainerSpec, opts: &CheckOptions) -> ContainerHealth {
    let started = Instant::now();
    let mut h = ContainerHealth::new(spec);
    check_into(c, spec, opts, &mut h).await;
    h.duration_ms = started.elapsed().as_millis() as u64;
    h
}

async fn check_into(c: &dyn Containers, spec: &ContainerSpec, opts: &CheckOptions, h: &mut ContainerHealth) {
    let state = match tokio::time::timeout(opts.timeout, c.status(spec)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return h.set(HealthState::Error, Some(format!("cannot read its state: {e:#}"))),
        Err(_) => {
            return h.set(
                HealthState::Error,
                Some(format!("the backend did not report its state within {}", secs(opts.timeout))),
            );
        }
    };
    match state {
        CtState::Absent => {
            let detail = format!("no container `{}` (vmid {}) in {}", spec.hostname, spec.vmid, c.searched());
            return h.set(HealthState::NotDeployed, Some(detail));
        }
        CtState::Foreign { detail } => return h.set(HealthState::Foreign, Some(detail)),
        CtState::NotRunning { state } => return h.set(HealthState::Stopped, Some(format!("container is {state}"))),
        CtState::Running => {}
    }
    let exec = match tokio::time::timeout(opts.reach_timeout, c.exec(spec, opts.timeout)).await {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return h.set(HealthState::Unreachable, Some(format!("{e:#}"))),
        Err(_) => {
            return h.set(
                HealthState::Unreachable,
                Some(format!("no way into the container within {}", secs(opts.reach_timeout))),
            );
        }
    };
    let exec = exec.as_ref();
    match run(exec, &["systemctl", "is-system-running"], opts.timeout).await {
        Err(e) => return h.set(HealthState::Unreachable, Some(e)),
        Ok((out, st)) => match read_probe(&out, &st) {
            Probe::System(s) => h.system = Some(s),
            Probe::NoSystemd => {
                return h.set(
                    HealthState::Error,
                    Some("systemctl is not installed in the container: the health check needs systemd".into()),
                );
            }
            Probe::NoAnswer(why) => return h.set(HealthState::Error, Some(format!("systemd does not answer: {why}"))),
        },
    }
    if spec.services.is_empty() {
        match run(exec, &["systemctl", "--failed", "--plain", "--no-legend", "--no-pager"], opts.timeout).await {
            Err(e) => return h.set(HealthState::Unreachable, Some(e)),
            Ok((_, st)) if !st.success() => {
                return h.set(HealthState::Error, Some(format!("systemctl --failed: {}", st.describe())));
            }
            Ok((out, _)) => h.failed_units = Some(read_failed_units(&out)),
        }
    } else {
        for unit in &spec.services {
            match run(exec, &["systemctl", "is-active", "--", unit], opts.timeout).await {
                Err(e) => return h.set(HealthState::Unreachable, Some(e)),
                Ok((out, _)) => h.services.push(ServiceCheck { unit: unit.clone(), state: read_service_state(&out) }),
            }
        }
    }
    let (state, detail) = verdict(&h.services, h.failed_units.as_deref());
    h.set(state, detail);
}

/// Waits until `spec`'s container answers after a start, reboot or rollback: it runs, a way in
/// works, and systemd finished booting (`systemctl is-system-running --wait` prints `running`
/// or `degraded`; a container without systemd answers when any command runs). Polls with
/// backoff (0.25 s doubling up to 3 s) for at most `budget`. Returns systemd's state.
///
/// # Errors
/// The last reason it did not answer, once `budget` is spent.
pub async fn wait_ready(c: &dyn Containers, spec: &ContainerSpec, budget: Duration) -> Result<String, String> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(250);
    let mut last = String::from("no attempt");
    loop {
        let remaining = budget.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Err(format!("{} did not answer within {}: {last}", spec.name, secs(budget)));
        }
        match tokio::time::timeout(remaining, ready_once(c, spec, remaining)).await {
            Ok(Ok(state)) => return Ok(state),
            Ok(Err(e)) => last = e,
            Err(_) => last = "no answer in time".into(),
        }
        let remaining = budget.saturating_sub(started.elapsed());
        tokio::time::sleep(delay.min(remaining)).await;
        delay = (delay * 2).min(Duration::from_secs(3));
    }
}

async fn ready_once(c: &dyn Containers, spec: &ContainerSpec, remaining: Duration) -> Result<String, String> {
    match c.status(spec).await.map_err(|e| format!("{e:#}"))? {
        CtState::Running => {}
        CtState::NotRunning { state } => return Err(format!("container is {state}")),
        CtState::Absent => return Err("container does not exist".into()),
        CtState::Foreign { detail } => return Err(detail),
    }
    let bound = remaining.min(Duration::from_secs(120));
    let exec = c.exec(spec, bound).await.map_err(|e| format!("{e:#}"))?;
    let (out, st) = run(exec.as_ref(), &["systemctl", "is-system-running", "--wait"], bound).await?;
    match read_probe(&out, &st) {
        Probe::System(s) if s == "running" || s == "degraded" => Ok(s),
        Probe::System(s) => Err(format!("systemd is {s}")),
        Probe::NoSystemd => Ok("no systemd".into()),
        // systemd before 240 has no --wait: ask without it.
        Probe::NoAnswer(why) if why.contains("--wait") || why.contains("unrecognized option") => {
            let (out, st) = run(exec.as_ref(), &["systemctl", "is-system-running"], bound).await?;
            match read_probe(&out, &st) {
                Probe::System(s) if s == "running" || s == "degraded" => Ok(s),
                Probe::System(s) => Err(format!("systemd is {s}")),
                Probe::NoSystemd => Ok("no systemd".into()),
                Probe::NoAnswer(why) => Err(format!("systemd does not answer: {why}")),
            }
        }
        Probe::NoAnswer(why) => Err(format!("systemd does not answer: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(code: Option<i32>, stderr: &str) -> ExecStatus {
        ExecStatus { code, stderr: stderr.into() }
    }

    fn svc(unit: &str, state: &str) -> ServiceCheck {
        ServiceCheck { unit: unit.into(), state: state.into() }
    }

    #[test]
    fn probes() {
        assert_eq!(read_probe(b"running\n", &st(Some(0), "")), Probe::System("running".into()));
        assert_eq!(read_probe(b"degraded\n", &st(Some(1), "")), Probe::System("degraded".into()));
        assert_eq!(read_probe(b"", &st(Some(127), "")), Probe::NoSystemd);
        assert_eq!(read_probe(b"", &st(Some(1), "sudo: systemctl: command not found")), Probe::NoSystemd);
        assert_eq!(
            read_probe(b"", &st(Some(1), "Failed to connect to bus: No such file or directory")),
            Probe::NoAnswer("exit code 1: Failed to connect to bus: No such file or directory".into())
        );
        assert_eq!(
            read_probe(b"", &st(Some(1), "Failed to connect to bus: No such device\n")),
            Probe::NoAnswer("exit code 1: Failed to connect to bus: No such device".into())
        );
    }

    #[test]
    fn service_states_and_failed_units() {
        assert_eq!(read_service_state(b"active\n"), "active");
        assert_eq!(read_service_state(b"\ninactive\n"), "inactive");
        assert_eq!(read_service_state(b""), "unknown");
        let listed = b"cron.service loaded failed failed Regular background program processing daemon\n\
                       \xe2\x97\x8f ssh.service loaded failed failed OpenBSD Secure Shell server\n\n";
        assert_eq!(read_failed_units(listed), vec!["cron.service".to_string(), "ssh.service".to_string()]);
        assert_eq!(read_failed_units(b""), Vec::<String>::new());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(&[svc("mosquitto.service", "active")], None), (HealthState::Healthy, None));
        assert_eq!(
            verdict(
                &[svc("mosquitto.service", "inactive"), svc("nginx.service", "active"), svc("a.timer", "failed")],
                None
            ),
            (HealthState::Down, Some("mosquitto inactive, a.timer failed".into()))
        );
        assert_eq!(verdict(&[], Some(&[])), (HealthState::Healthy, None));
        assert_eq!(
            verdict(&[], Some(&["x.service".to_string()])),
            (HealthState::Down, Some("1 failed unit: x.service".into()))
        );
        assert_eq!(
            verdict(&[], Some(&["x.service".to_string(), "y.mount".to_string()])),
            (HealthState::Down, Some("2 failed units: x.service, y.mount".into()))
        );
    }

    #[test]
    fn texts() {
        let mut h = ContainerHealth::new(&ContainerSpec::new("app", 101, crate::inventory::IpConfig::Dhcp));
        assert_eq!(h.services_text(), "-");
        h.failed_units = Some(vec![]);
        assert_eq!(h.services_text(), "no failed units");
        h.failed_units = Some(vec!["a.service".into()]);
        assert_eq!(h.services_text(), "failed: a.service");
        h.services = vec![svc("mosquitto.service", "active"), svc("cron.timer", "inactive")];
        assert_eq!(h.services_text(), "mosquitto active, cron.timer inactive");
        assert!(HealthState::Healthy.is_ok() && HealthState::NotDeployed.is_ok());
        for s in [HealthState::Stopped, HealthState::Unreachable, HealthState::Down, HealthState::Foreign] {
            assert!(!s.is_ok(), "{s}");
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(s.as_str().into()));
        }
        assert_eq!(serde_json::to_value(HealthState::NotDeployed).unwrap(), "not-deployed");
    }
}

#[cfg(test)]
mod check_tests {
    use super::super::fake::{Fake, debian};
    use super::*;
    use crate::inventory::{ContainerSpec, IpConfig};
    use crate::model::BackendKind;

    fn spec(services: &[&str]) -> ContainerSpec {
        ContainerSpec {
            services: services.iter().map(|s| s.to_string()).collect(),
            ..ContainerSpec::new("broker", 120, IpConfig::Dhcp)
        }
    }

    async fn run(fake: &Fake, spec: &ContainerSpec) -> ContainerHealth {
        let mut h = check(fake, spec, &CheckOptions::default()).await;
        h.duration_ms = 0;
        h
    }

    #[tokio::test]
    async fn declared_services_must_be_active() {
        let fake = Fake::new(BackendKind::Pve, debian());
        let h = run(&fake, &spec(&["mosquitto.service"])).await;
        assert_eq!(
            h,
            ContainerHealth {
                name: "broker".into(),
                hostname: "broker".into(),
                vmid: 120,
                state: HealthState::Healthy,
                system: Some("running".into()),
                services: vec![ServiceCheck { unit: "mosquitto.service".into(), state: "active".into() }],
                failed_units: None,
                detail: None,
                duration_ms: 0,
            }
        );
        assert_eq!(
            fake.calls(),
            ["status", "exec", "run systemctl is-system-running", "run systemctl is-active -- mosquitto.service"]
        );
        fake.state.lock().unwrap().disk.services.insert("mosquitto.service".into(), "inactive".into());
        let h = run(&fake, &spec(&["mosquitto.service", "cron.service"])).await;
        assert_eq!(h.state, HealthState::Down);
        assert_eq!(h.detail.as_deref(), Some("mosquitto inactive, cron inactive"));
        assert_eq!(h.services_text(), "mosquitto inactive, cron inactive");
    }

    #[tokio::test]
    async fn without_services_no_unit_may_fail() {
        let fake = Fake::new(BackendKind::Lxc, debian());
        let h = run(&fake, &spec(&[])).await;
        assert_eq!((h.state, h.failed_units.clone()), (HealthState::Healthy, Some(vec![])));
        assert_eq!(fake.calls()[3], "run systemctl --failed --plain --no-legend --no-pager");
        fake.state.lock().unwrap().failed = vec!["ssh.service".into()];
        let h = run(&fake, &spec(&[])).await;
        assert_eq!(h.state, HealthState::Down);
        assert_eq!(h.system.as_deref(), Some("degraded"));
        assert_eq!(h.detail.as_deref(), Some("1 failed unit: ssh.service"));
    }

    #[tokio::test]
    async fn states_before_the_services() {
        type Case = (Box<dyn Fn(&mut super::super::fake::State)>, HealthState, Option<&'static str>);
        let cases: Vec<Case> = vec![
            (
                Box::new(|s| s.exists = false),
                HealthState::NotDeployed,
                Some("no container `broker` (vmid 120) in the pve backend"),
            ),
            (Box::new(|s| s.running = false), HealthState::Stopped, Some("container is stopped")),
            (Box::new(|s| s.foreign = true), HealthState::Foreign, Some("CT 120 holds hostname `other`")),
            (Box::new(|s| s.reachable = false), HealthState::Unreachable, Some("cannot reach SSH at 10.0.0.5:22")),
            (
                Box::new(|s| s.systemd = false),
                HealthState::Error,
                Some("systemctl is not installed in the container: the health check needs systemd"),
            ),
        ];
        for (set, state, detail) in cases {
            let mut st = debian();
            set(&mut st);
            let fake = Fake::new(BackendKind::Pve, st);
            let h = run(&fake, &spec(&["mosquitto.service"])).await;
            assert_eq!((h.state, h.detail.as_deref()), (state, detail));
            assert!(h.services.is_empty(), "{h:?}");
            // Nothing is run in a container that is not there, not running or not ours.
            if matches!(state, HealthState::NotDeployed | HealthState::Stopped | HealthState::Foreign) {
                assert_eq!(fake.calls(), ["status"], "{state}");
            }
        }
    }

    #[tokio::test]
    async fn waiting_until_it_answers() {
        let fake = Fake::new(BackendKind::Lxc, debian());
        assert_eq!(wait_ready(&fake, &spec(&[]), Duration::from_secs(30)).await, Ok("running".into()));
        assert_eq!(fake.calls(), ["status", "exec", "run systemctl is-system-running --wait"]);
        let mut st = debian();
        st.reachable = false;
        let fake = Fake::new(BackendKind::Lxc, st);
        // Polls at 0, 0.25, 0.75 and 1.75 s: a budget that leaves room for at least two even on
        // a busy machine (0.6 s saw one poll there).
        let e = wait_ready(&fake, &spec(&[]), Duration::from_secs(2)).await.unwrap_err();
        assert_eq!(e, "broker did not answer within 2 s: cannot reach SSH at 10.0.0.5:22");
        assert!(fake.calls().iter().filter(|c| *c == "exec").count() >= 2, "it polled: {:?}", fake.calls());
    }
}
