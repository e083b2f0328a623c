//! Step `health`: is each container deployed, running, answering, and are its services active —
//! checked from the inventory and the backend alone (a scheduled task has no artifacts), with
//! bounded parallelism; then, optionally, each lib repository's description on Gitea set to a
//! one-line status.
//!
//! The check of one container is [`crate::live::check`] (shared with `update`); this
//! step runs it for the selection ([`check_all`]), builds the `health.json` artifact
//! ([`Health`]) and the description lines ([`description_line`], pure), and writes them
//! ([`describe`]: `PATCH /repos/{owner}/{repo}`, Gitea `repoEdit`).
//!
//! # The description
//!
//! `healthy · mosquitto active · checked 2026-12-01 17:00 UTC`, or `DOWN: mosquitto inactive ·
//! checked …` (see [`description_line`]). It is written on every run, not only when the status
//! changed: the check time is part of the line, and it is what tells a reader that the check
//! still runs (a description that says "healthy" from three weeks ago would be a lie). One
//! `PATCH` per lib and run is cheap; Gitea keeps no history of descriptions.

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::artifact::Artifact;
use crate::gitea::{Client, EditRepoOption};
use crate::inventory::{ContainerSpec, Inventory};
use crate::live::{CheckOptions, ContainerHealth, Containers, HealthState, check};
use crate::model::{BackendKind, Outcome};

/// The `health.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// The stage checked.
    pub stage: String,
    /// The backend asked.
    pub backend: BackendKind,
    /// When the check started, RFC 3339 UTC.
    pub checked_at: String,
    /// True when every container is healthy. A container the inventory expects and the backend
    /// does not find (`not-deployed`) is not: a wrong `PGO_LXC_PATH`, stage or PVE host would
    /// otherwise make the check green while it checks nothing.
    pub healthy: bool,
    /// One result per selected container, in selection order.
    pub containers: Vec<ContainerHealth>,
    /// The lib repositories' descriptions written on Gitea (empty when not asked or no Gitea
    /// settings).
    pub descriptions: Vec<Description>,
}

impl Artifact for Health {
    const KIND: &'static str = "health";
    const SCHEMA_VERSION: (u32, u32) = (1, 0);
}

impl Health {
    /// The containers that fail the run: every one that is not healthy, not deployed included.
    pub fn unhealthy(&self) -> Vec<&ContainerHealth> {
        self.containers.iter().filter(|c| c.state != HealthState::Healthy).collect()
    }
}

/// One lib repository's description written (or not) on Gitea.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// Container (lib) name.
    pub container: String,
    /// The repository, `owner/name`.
    pub repository: String,
    /// The description.
    pub text: String,
    /// Whether the `PATCH` succeeded.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Options of [`check_all`].
#[derive(Debug, Clone)]
pub struct HealthOptions {
    /// At most this many containers checked at once (≥ 1).
    pub jobs: usize,
    /// Bounds of each check.
    pub check: CheckOptions,
    /// The time the run started (recorded, and named in the descriptions).
    pub now: OffsetDateTime,
}

/// Checks `specs` through `containers`, at most `opts.jobs` at a time; the artifact lists them
/// in the given order. Never fails: each container's problem is in its result.
pub async fn check_all(
    containers: &dyn Containers,
    stage: &str,
    specs: &[ContainerSpec],
    opts: &HealthOptions,
) -> Health {
    let results: Vec<ContainerHealth> = futures_util::stream::iter(specs.iter().map(|spec| async move {
        let h = check(containers, spec, &opts.check).await;
        match &h.detail {
            Some(d) if !h.state.is_ok() => tracing::warn!("{}: {} — {d}", h.name, h.state),
            _ => tracing::info!("{}: {} ({})", h.name, h.state, h.services_text()),
        }
        h
    }))
    .buffered(opts.jobs.max(1))
    .collect()
    .await;
    Health {
        stage: stage.to_string(),
        backend: containers.kind(),
        checked_at: rfc3339(opts.now),
        healthy: results.iter().all(|c| c.state == HealthState::Healthy),
        containers: results,
        descriptions: Vec::new(),
    }
}

/// `now` as RFC 3339 in UTC, whole seconds (`2026-12-01T17:00:00Z`).
pub fn rfc3339(now: OffsetDateTime) -> String {
    let utc = now.to_offset(time::UtcOffset::UTC).replace_nanosecond(0).unwrap_or(now);
    utc.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// `now` as `2026-12-01 17:00 UTC` (minutes).
pub fn human_time(now: OffsetDateTime) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    now.to_offset(time::UtcOffset::UTC).format(&fmt).unwrap_or_default()
}

/// The longest description written (Gitea allows 2048 characters; a status line stays short).
pub const DESCRIPTION_MAX: usize = 255;

/// The one-line status of `h` for its lib repository's description, ending in `· checked <now>`:
///
/// * healthy — `healthy · mosquitto active · checked …` (the declared services), or
///   `healthy · no failed units · checked …`;
/// * not deployed — `not deployed · checked …`;
/// * stopped — `DOWN: container stopped · checked …`;
/// * down — `DOWN: mosquitto inactive · checked …` (the units that are not active), or
///   `DOWN: 2 failed units: a.service, b.service · checked …`;
/// * unreachable — `DOWN: unreachable · checked …` (the reason stays in the job log: it may
///   name addresses);
/// * foreign — `DOWN: vmid 120 holds another container · checked …`;
/// * error — `UNKNOWN: the check failed · checked …`.
///
/// At most [`DESCRIPTION_MAX`] characters (the middle part is shortened with `…`).
pub fn description_line(h: &ContainerHealth, now: OffsetDateTime) -> String {
    let status = match h.state {
        HealthState::Healthy => format!("healthy · {}", h.services_text()),
        HealthState::NotDeployed => "not deployed".to_string(),
        HealthState::Stopped => "DOWN: container stopped".to_string(),
        HealthState::Down => format!("DOWN: {}", h.detail.as_deref().unwrap_or("services not active")),
        HealthState::Unreachable => "DOWN: unreachable".to_string(),
        HealthState::Foreign => format!("DOWN: vmid {} holds another container", h.vmid),
        HealthState::Error => "UNKNOWN: the check failed".to_string(),
    };
    let tail = format!(" · checked {}", human_time(now));
    let room = DESCRIPTION_MAX.saturating_sub(tail.chars().count());
    let status: String = if status.chars().count() > room {
        status.chars().take(room.saturating_sub(1)).chain(std::iter::once('…')).collect()
    } else {
        status
    };
    format!("{status}{tail}")
}

/// Which lib repository describes which checked container: `(index into report.containers,
/// owner, repo)` for every container whose lib has a repository ([`crate::gitea::names::lib_repository`]:
/// not the control plane, not a submodule whose URL gives no name).
pub fn targets(inv: &Inventory, report: &Health, org: &str) -> Vec<(usize, String, String)> {
    report
        .containers
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let spec = inv.containers.iter().find(|s| s.name == h.name)?;
            let (owner, repo) = crate::gitea::names::lib_repository(inv, spec, org)?;
            Some((i, owner, repo))
        })
        .collect()
}

/// Sets each lib repository's description to its container's status line (see the module
/// docs), one `PATCH /repos/{owner}/{repo}` (`repoEdit`) each, and records every write in
/// `report.descriptions`. A failed write is recorded and logged; the others are still written.
pub async fn describe(client: &Client, inv: &Inventory, report: &mut Health, org: &str, now: OffsetDateTime) {
    for (i, owner, repo) in targets(inv, report, org) {
        let h = &report.containers[i];
        let text = description_line(h, now);
        let opt = EditRepoOption { description: Some(text.clone()), ..Default::default() };
        let outcome = match client.edit_repo(&owner, &repo, &opt).await {
            Ok(_) => {
                tracing::info!("{}: description of {owner}/{repo}: {text}", h.name);
                Outcome::Ok
            }
            Err(e) => {
                let error = crate::actions::redact(&format!("cannot set the description of {owner}/{repo}: {e}"));
                tracing::error!("{}: {error}", h.name);
                Outcome::Failed { error }
            }
        };
        let container = h.name.clone();
        report.descriptions.push(Description { container, repository: format!("{owner}/{repo}"), text, outcome });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::ServiceCheck;
    use time::macros::datetime;

    fn health(state: HealthState) -> ContainerHealth {
        ContainerHealth {
            name: "broker".into(),
            hostname: "broker".into(),
            vmid: 120,
            state,
            system: None,
            services: vec![],
            failed_units: None,
            detail: None,
            duration_ms: 0,
        }
    }

    #[test]
    fn description_lines() {
        let now = datetime!(2026-12-01 17:00:59 UTC);
        let mut h = health(HealthState::Healthy);
        h.services = vec![ServiceCheck { unit: "mosquitto.service".into(), state: "active".into() }];
        assert_eq!(description_line(&h, now), "healthy · mosquitto active · checked 2026-12-01 17:00 UTC");
        h.services.clear();
        h.failed_units = Some(vec![]);
        assert_eq!(description_line(&h, now), "healthy · no failed units · checked 2026-12-01 17:00 UTC");
        let mut d = health(HealthState::Down);
        d.detail = Some("mosquitto inactive".into());
        assert_eq!(description_line(&d, now), "DOWN: mosquitto inactive · checked 2026-12-01 17:00 UTC");
        let at = datetime!(2026-12-01 18:30:00 +01:00);
        assert_eq!(
            description_line(&health(HealthState::NotDeployed), at),
            "not deployed · checked 2026-12-01 17:30 UTC"
        );
        assert_eq!(
            description_line(&health(HealthState::Stopped), now),
            "DOWN: container stopped · checked 2026-12-01 17:00 UTC"
        );
        let mut u = health(HealthState::Unreachable);
        u.detail = Some("broker: cannot reach SSH at 10.0.0.5:22".into());
        assert_eq!(description_line(&u, now), "DOWN: unreachable · checked 2026-12-01 17:00 UTC");
        assert_eq!(
            description_line(&health(HealthState::Foreign), now),
            "DOWN: vmid 120 holds another container · checked 2026-12-01 17:00 UTC"
        );
        assert_eq!(
            description_line(&health(HealthState::Error), now),
            "UNKNOWN: the check failed · checked 2026-12-01 17:00 UTC"
        );
        d.detail = Some("x".repeat(400));
        let long = description_line(&d, now);
        assert_eq!(long.chars().count(), DESCRIPTION_MAX);
        assert!(long.ends_with("x… · checked 2026-12-01 17:00 UTC"), "{long}");
    }

    #[test]
    fn times() {
        let t = datetime!(2026-12-01 18:00:07.5 +01:00);
        assert_eq!(rfc3339(t), "2026-12-01T17:00:07Z");
        assert_eq!(human_time(t), "2026-12-01 17:00 UTC");
    }

    #[test]
    fn repositories_of_libs_only() {
        let config = ContainerSpec {
            dir: ".".into(),
            ..ContainerSpec::new(crate::inventory::CONTROL_PLANE, 100, crate::inventory::IpConfig::Dhcp)
        };
        let inv = Inventory {
            root: "/repo".into(),
            stage: "main".into(),
            head: None,
            containers: vec![config, ContainerSpec::new("broker", 120, crate::inventory::IpConfig::Dhcp)],
            submodules: vec![],
            globals: Default::default(),
            tasks: vec![],
            configs: vec![],
            base: None,
            libraries: None,
            settings: crate::settings::Settings::load(
                std::path::Path::new("/nonexistent"),
                &std::collections::BTreeMap::<String, String>::new(),
            )
            .unwrap()
            .public(),
        };
        let mut report = Health {
            stage: "main".into(),
            backend: BackendKind::Lxc,
            checked_at: String::new(),
            healthy: true,
            containers: vec![health(HealthState::Healthy), health(HealthState::Healthy)],
            descriptions: vec![],
        };
        report.containers[0].name = "config".into();
        assert_eq!(targets(&inv, &report, "main"), vec![(1, "main".to_string(), "broker".to_string())]);
    }
}
