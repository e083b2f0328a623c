//! Step `provision`: plan and apply the inventory's containers on a backend, concurrently.
//!
//! 1. [`crate::backend::plan_all`] reads live state and plans every selected container (bounded
//!    parallelism); the caller prints the plans **before** anything changes;
//! 2. [`apply_all`] executes them (same bound), writing `provision/<name>.json` atomically as
//!    each container finishes. A failing container does not stop the others.
//!
//! One backend instance — and so one PVE client and session — serves every container.
//!
//! **No destroy without a snapshot**: a plan that recreates a container goes through
//! [`Backend::apply`], which applies [`crate::snapshot::guard::protect`] first: a container that
//! declares `SNAPSHOT` paths gets a verified data snapshot; when it cannot be reached or the
//! snapshot fails, the recreate is refused and nothing is touched, unless `--no-snapshot`
//! ([`ApplyOptions::no_snapshot`]). `Provision.protected_by` records the outcome.
//!
//! **When the container was last created** outlives the run that created it: before an artifact
//! is written over the previous one, [`carry_created_at`] takes `created_at` over from it when
//! this run left the container in place, so `configure` still replaces the host key of a
//! container recreated by an earlier run ([`crate::ssh::recreated_since_recorded`]).

use std::path::Path;

use anyhow::Context;

use crate::artifact::{self, ArtifactDir};
use crate::backend::dispatch::pooled;
use crate::backend::{Backend, Planned, failed_before_plan};
use crate::error::{Error, Result};
use crate::model::{ApplyOptions, Provision};

/// Applies the plans with at most `jobs` at a time; writes `provision/<name>.json` for each
/// as it finishes, and returns the artifacts in the given order. A container whose planning
/// failed gets a failed artifact (with a `refused` plan: nothing was changed).
///
/// # Errors
/// Only when an artifact cannot be written.
pub async fn apply_all(
    backend: &Backend,
    planned: Vec<Planned>,
    opts: &ApplyOptions,
    jobs: usize,
    artifacts: &ArtifactDir,
) -> Result<Vec<Provision>> {
    let overall = crate::progress::Overall::start("provision", planned.len());
    let overall = &overall;
    // A free slot takes the next container at once, whichever one ended (see `pooled`).
    let results: Vec<anyhow::Result<Provision>> = pooled(
        planned.into_iter().map(|p| async move {
            let _group = crate::actions::Group::start(&format!("provision {}", p.spec.name));
            let prov = match &p.plan {
                Ok(plan) => backend.apply(&p.spec, plan, opts, artifacts).await,
                Err(e) => failed_before_plan(backend.kind(), &p.spec, opts, e),
            };
            let mut prov = prov;
            overall.done(!matches!(prov.outcome, crate::model::Outcome::Ok));
            let path = artifacts.provision(&prov.name);
            carry_created_at(&mut prov, &path);
            write_artifact(&path, &prov)?;
            Ok(prov)
        }),
        jobs,
    )
    .await;
    results.into_iter().map(|r| r.map_err(Error::Failed)).collect()
}

/// Sets [`Provision::created_at`] of `prov` from the artifact at `path` that the previous run
/// wrote for the container ([`Provision::carry_created_at`]), before `prov` replaces it. The
/// previous artifact's creation is [`Provision::last_creation`]: for one written before schema
/// 1.1 that says `created`, its modification time, so that a recreate by an older build survives
/// a run of this one. No artifact there means no earlier creation known; one that cannot be read
/// is treated the same, with a warning naming it (the container's host key then cannot be
/// replaced by `configure` until it is created again).
pub fn carry_created_at(prov: &mut Provision, path: &Path) {
    let previous = match artifact::read::<Provision>(path) {
        Ok(mut p) => {
            p.created_at = p.last_creation(path);
            Some(p)
        }
        Err(artifact::ArtifactError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            let msg = format!(
                "cannot read the previous provision artifact ({e}): when the container was last created is unknown"
            );
            tracing::warn!("{}: {msg}", prov.name);
            prov.warnings.push(crate::actions::redact(&msg));
            None
        }
    };
    prov.carry_created_at(previous.as_ref());
}

fn write_artifact(path: &Path, prov: &Provision) -> anyhow::Result<()> {
    artifact::write(path, prov).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An artifact of `broker` (vmid 101 on pve1) that planned `action`, as JSON.
    fn artifact(action: &str, created: bool) -> serde_json::Value {
        serde_json::json!({
            "kind": "provision", "schema_version": "1.0", "backend": "pve", "name": "broker",
            "node": "pve1", "vmid": 101, "hostname": "broker", "address": "10.0.0.5", "ssh_port": 22,
            "plan": {"name": "broker", "vmid": 101, "hostname": "broker", "action": action, "start": false,
                     "policy": "never"},
            "actions": [], "warnings": [], "status": "running", "created": created, "protected_by": null,
            "inputs_digest": null, "result": "ok"
        })
    }

    #[test]
    fn a_recreate_recorded_by_a_build_before_created_at_survives_a_run_of_this_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.json");
        std::fs::write(&path, artifact("create", true).to_string()).unwrap();
        let written = time::macros::datetime!(2026-05-01 10:00:00 UTC);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(written.into()).unwrap();
        let mut now: Provision = serde_json::from_value(artifact("nothing", false)).unwrap();
        carry_created_at(&mut now, &path);
        assert_eq!(now.created_at, Some(written));
        assert!(now.warnings.is_empty(), "{:?}", now.warnings);
        // An old artifact that did not create knows no creation.
        std::fs::write(&path, artifact("nothing", false).to_string()).unwrap();
        let mut now: Provision = serde_json::from_value(artifact("nothing", false)).unwrap();
        carry_created_at(&mut now, &path);
        assert_eq!(now.created_at, None);
        // An unreadable one: unknown, with a warning naming it.
        std::fs::write(&path, "{").unwrap();
        carry_created_at(&mut now, &path);
        assert_eq!(now.created_at, None);
        assert!(now.warnings.iter().any(|w| w.contains("broker.json")), "{:?}", now.warnings);
    }
}
