//! Step `drift`: how the deployed containers differ from the desired state — every key changed
//! by hand (in the PVE UI, in an LXC config), stopped or missing containers — and the
//! containers carrying our mark whose lib is gone; from the inventory and the backend alone
//! (a scheduled run has no artifacts). Reads only: nothing is changed.
//!
//! The comparison of one container is [`Live::drift`] (the backends' own desired-state code);
//! this step runs it for the selection with bounded parallelism, lists the orphans
//! ([`Live::orphans`]) when the whole stage is checked, and builds the `drift.json` artifact
//! ([`Drift`]).
//!
//! # Pending changes
//!
//! The desired state of a deployed container is what was released (the `release` branch: only
//! its pipeline provisions), while `main` usually holds changes the release pull request has not
//! brought there yet. Drift is measured against the released checkout; [`check_pending`]
//! measures the same containers against a second checkout (`main`) and keeps what differs only
//! there: changes **pending** release, reported apart and never counted as drift.

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::artifact::Artifact;
use crate::backend::live::{KeyDrift, Live, Orphan};
use crate::backend::pve::desired::PveDefaults;
use crate::inventory::ContainerSpec;
use crate::live::Containers;
use crate::model::BackendKind;

/// The `drift.json` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// The stage checked.
    pub stage: String,
    /// The backend asked.
    pub backend: BackendKind,
    /// When the check started, RFC 3339 UTC.
    pub checked_at: String,
    /// True when any container differs, or an orphan was found.
    pub drifted: bool,
    /// One entry per selected container, in selection order.
    pub containers: Vec<ContainerDrift>,
    /// Containers carrying our mark whose lib the stage no longer has (only looked for when the
    /// whole stage is checked; `null` otherwise).
    pub orphans: Option<Vec<Orphan>>,
    /// Why the orphans could not be listed, when they could not.
    pub orphans_error: Option<String>,
    /// With a pending checkout (`drift --pending-repo`): the containers that checkout would
    /// change besides their drift — one entry per container with such differences (the desired
    /// value is the pending checkout's), or that could not be compared (`error`); a lib the
    /// pending checkout no longer has is the key `lib`. Never counted as drift. `null` without
    /// a pending checkout (and in artifacts of schema 1.0).
    #[serde(default)]
    pub pending: Option<Vec<ContainerDrift>>,
    /// Why the pending checkout could not be resolved, when it could not.
    #[serde(default)]
    pub pending_error: Option<String>,
}

impl Artifact for Drift {
    const KIND: &'static str = "drift";
    const SCHEMA_VERSION: (u32, u32) = (1, 1);
}

/// The drift of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerDrift {
    /// The lib name (`config` for the control plane).
    pub name: String,
    /// vmid.
    pub vmid: u32,
    /// Hostname.
    pub hostname: String,
    /// The differences, empty when the container is as desired.
    pub differences: Vec<KeyDrift>,
    /// Why it could not be compared (then `differences` is empty).
    pub error: Option<String>,
}

/// One row of the report: container (or orphan hostname), key, desired, live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The container.
    pub container: String,
    /// The key.
    pub key: String,
    /// Desired value.
    pub desired: String,
    /// Live value.
    pub live: String,
}

impl Drift {
    /// The containers that could not be compared.
    pub fn errors(&self) -> Vec<&ContainerDrift> {
        self.containers.iter().filter(|c| c.error.is_some()).collect()
    }

    /// Every difference as a row, containers in order, then the orphans (key `lib`, desired
    /// `(none)`, live `LIB (CT VMID on NODE, STATE)`).
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = difference_rows(&self.containers);
        for o in self.orphans.iter().flatten() {
            rows.push(Row {
                container: o.hostname.clone(),
                key: "lib".into(),
                desired: "(none: no lib in the stage)".into(),
                live: match &o.node {
                    Some(n) => format!("{} (CT {} on {n}, {})", o.lib, o.vmid, o.state),
                    None => format!("{} (vmid {}, {})", o.lib, o.vmid, o.state),
                },
            });
        }
        rows
    }

    /// Every pending difference as a row (see [`Drift::pending`]), containers in order; the
    /// containers that could not be compared are in [`Drift::pending_errors`].
    pub fn pending_rows(&self) -> Vec<Row> {
        difference_rows(self.pending.as_deref().unwrap_or_default())
    }

    /// The containers whose pending changes could not be determined.
    pub fn pending_errors(&self) -> Vec<&ContainerDrift> {
        self.pending.iter().flatten().filter(|c| c.error.is_some()).collect()
    }
}

/// One row per difference of `containers`, in order.
fn difference_rows(containers: &[ContainerDrift]) -> Vec<Row> {
    containers
        .iter()
        .flat_map(|c| {
            c.differences.iter().map(|d| Row {
                container: c.name.clone(),
                key: d.key.clone(),
                desired: d.desired.clone(),
                live: d.live.clone(),
            })
        })
        .collect()
}

/// Options of [`check_all`].
#[derive(Debug, Clone)]
pub struct DriftOptions {
    /// At most this many containers compared at once.
    pub jobs: usize,
    /// The PVE defaults (template, network, storage) the desired containers are derived with;
    /// required for PVE.
    pub pve: Option<PveDefaults>,
    /// Look for orphans (the whole stage is selected).
    pub orphans: bool,
    /// The check's time.
    pub now: OffsetDateTime,
}

/// Compares `specs` (the selection) with their containers through `live`; with
/// `opts.orphans`, also lists orphans against `stage_specs` (every spec of the stage). Never
/// fails: a container that cannot be compared carries its error.
pub async fn check_all(
    live: &Live,
    stage: &str,
    specs: &[ContainerSpec],
    stage_specs: &[ContainerSpec],
    opts: &DriftOptions,
) -> Drift {
    let containers: Vec<ContainerDrift> = futures_util::stream::iter(specs.iter().map(|spec| async move {
        let (differences, error) = match live.drift(spec, opts.pve.as_ref()).await {
            Ok(d) => (d, None),
            Err(e) => (Vec::new(), Some(crate::actions::redact(&format!("{e:#}")))),
        };
        match (&error, differences.len()) {
            (Some(e), _) => tracing::warn!("{}: cannot compare: {e}", spec.name),
            (None, 0) => tracing::info!("{}: as desired", spec.name),
            (None, n) => tracing::warn!("{}: {n} difference(s)", spec.name),
        }
        ContainerDrift { name: spec.name.clone(), vmid: spec.vmid, hostname: spec.hostname.clone(), differences, error }
    }))
    .buffered(opts.jobs.max(1))
    .collect()
    .await;
    let (orphans, orphans_error) = if opts.orphans {
        match live.orphans(stage, stage_specs).await {
            Ok(o) => (Some(o), None),
            Err(e) => (None, Some(crate::actions::redact(&format!("{e:#}")))),
        }
    } else {
        (None, None)
    };
    let drifted =
        containers.iter().any(|c| !c.differences.is_empty()) || orphans.as_ref().is_some_and(|o| !o.is_empty());
    let utc = opts.now.to_offset(time::UtcOffset::UTC).replace_nanosecond(0).unwrap_or(opts.now);
    Drift {
        stage: stage.to_string(),
        backend: live.kind(),
        checked_at: utc.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        drifted,
        containers,
        orphans,
        orphans_error,
        pending: None,
        pending_error: None,
    }
}

/// The changes pending release: compares `pending_specs` (the containers of the pending
/// checkout, e.g. `main`, that the check covers) with their containers through `live`, and
/// keeps of each the differences `deployed` (the report against the released checkout) does not
/// already have for that container, key, desired and live value alike; `removed` (specs of the
/// released checkout the pending one no longer has) each get the key `lib`, desired `(none:
/// lib removed)`. Containers without such differences are left out. Never fails: a container
/// that cannot be compared carries its error.
pub async fn check_pending(
    live: &Live,
    deployed: &Drift,
    pending_specs: &[ContainerSpec],
    removed: &[ContainerSpec],
    opts: &DriftOptions,
) -> Vec<ContainerDrift> {
    let compared: Vec<ContainerDrift> = futures_util::stream::iter(pending_specs.iter().map(|spec| async move {
        let known: &[KeyDrift] =
            deployed.containers.iter().find(|c| c.name == spec.name).map_or(&[], |c| c.differences.as_slice());
        let (differences, error) = match live.drift(spec, opts.pve.as_ref()).await {
            Ok(d) => (d.into_iter().filter(|k| !known.contains(k)).collect::<Vec<_>>(), None),
            Err(e) => (Vec::new(), Some(crate::actions::redact(&format!("{e:#}")))),
        };
        match (&error, differences.len()) {
            (Some(e), _) => tracing::warn!("{}: cannot compare with the pending checkout: {e}", spec.name),
            (None, 0) => {}
            (None, n) => tracing::info!("{}: {n} change(s) pending release", spec.name),
        }
        ContainerDrift { name: spec.name.clone(), vmid: spec.vmid, hostname: spec.hostname.clone(), differences, error }
    }))
    .buffered(opts.jobs.max(1))
    .collect()
    .await;
    compared
        .into_iter()
        .filter(|c| c.error.is_some() || !c.differences.is_empty())
        .chain(removed.iter().map(|spec| ContainerDrift {
            name: spec.name.clone(),
            vmid: spec.vmid,
            hostname: spec.hostname.clone(),
            differences: vec![KeyDrift::new("lib", "(none: lib removed)", format!("CT {}", spec.vmid))],
            error: None,
        }))
        .collect()
}
