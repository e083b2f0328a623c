//! Reading any step artifact loosely ([`read_step_status`]): the digest, result and actions of a
//! step, whatever else its artifact holds, and stamping the digest into an artifact that lacks it;
//! and which steps of a plan `deploy` would skip as done ([`mark_done_steps`]).

use std::path::Path;

use crate::artifact::{self, ArtifactDir};
use crate::inventory::Inventory;
use crate::steps::plan::{Plan, Step};

/// What [`read_step_status`] makes of a step artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStatus {
    /// The artifact's `inputs_digest`, when it has one.
    pub digest: Option<String>,
    /// `Some(true)` for a success, `Some(false)` for a failure, `None` when the result is unknown.
    pub ok: Option<bool>,
    /// The `action` of each entry of the artifact's `actions` array, when it has one.
    pub actions: Vec<String>,
}

/// Reads the outcome of a step from its artifact as loose JSON, tolerant of the artifact's shape.
///
/// * digest: `inputs_digest` (or `digest`), at the top level or under `outcome`;
/// * result: `result` (`ok`/`success`/`succeeded`/`changed`/`unchanged` → success;
///   `failed`/`failure`/`error` → failure), at the top level or under `outcome`; a boolean `ok`
///   is accepted too;
/// * actions: `actions[].action` (or the entries themselves when they are strings).
///
/// Returns `None` when the file does not exist or is not a JSON object (never an error: an
/// unreadable artifact only means the step is not skipped).
pub fn read_step_status(path: &Path) -> Option<StepStatus> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    status_of(&value)
}

fn status_of(value: &serde_json::Value) -> Option<StepStatus> {
    let obj = value.as_object()?;
    let scopes: Vec<&serde_json::Map<String, serde_json::Value>> =
        std::iter::once(obj).chain(obj.get("outcome").and_then(|o| o.as_object())).collect();
    let find = |keys: &[&str]| scopes.iter().find_map(|s| keys.iter().find_map(|k| s.get(*k).filter(|v| !v.is_null())));
    let digest = find(&["inputs_digest", "digest"]).and_then(|v| v.as_str()).map(str::to_string);
    let ok = match find(&["result", "ok", "status"]) {
        Some(serde_json::Value::Bool(b)) => Some(*b),
        Some(serde_json::Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "ok" | "success" | "succeeded" | "changed" | "unchanged" => Some(true),
            "failed" | "failure" | "error" => Some(false),
            _ => None,
        },
        _ => None,
    };
    let actions = obj
        .get("actions")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| match x {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Object(o) => o.get("action").and_then(|v| v.as_str()).map(str::to_string),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(StepStatus { digest, ok, actions })
}

/// Sets `inputs_digest` in the artifact at `path` when it has none (atomic rewrite). Returns
/// whether the file was changed.
pub(super) fn stamp_digest(path: &Path, digest: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    let Some(obj) = value.as_object_mut() else { return false };
    match obj.get("inputs_digest") {
        Some(serde_json::Value::String(d)) => {
            if d != digest {
                tracing::warn!(
                    "{}: records inputs_digest {d}, deploy computed {digest}; it will not be skipped next time",
                    path.display()
                );
            }
            false
        }
        _ => {
            obj.insert("inputs_digest".into(), digest.into());
            let mut s = serde_json::to_string_pretty(&value).expect("JSON values render");
            s.push('\n');
            artifact::write_bytes(path, s.as_bytes()).is_ok()
        }
    }
}

/// Fills in each container's inputs digest and the steps `deploy` would skip because their
/// artifact shows success for the same digest (snapshots: for the same workflow run `run_id`),
/// exactly as `deploy` decides (what `plan` and `release-pr` show). `repo` is the checkout,
/// `dir` the artifacts directory (made here when missing). A digest that cannot be computed leaves the
/// container without skips (deploy would run its steps), with a warning.
pub fn mark_done_steps(repo: &Path, dir: &ArtifactDir, inv: &Inventory, p: &mut Plan, run_id: Option<&str>) {
    use super::{inputs_digest, run_digest, step_artifact};
    // The directory plan.json goes to, made now so that the digest can leave it out.
    let _ = std::fs::create_dir_all(dir.root());
    let (Ok(root), Ok(artifacts)) = (repo.canonicalize(), dir.root().canonicalize()) else { return };
    for c in &mut p.containers {
        let Some(spec) = inv.container(&c.name) else { continue };
        let digest = match inputs_digest(&root, inv, spec, &artifacts) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("{}: cannot compute the inputs digest: {e}", c.name);
                continue;
            }
        };
        // Live work (the container is to be created, changed or moved) is never skipped, and a
        // container provisioned again is configured again, as deploy decides.
        let live_work = c
            .provision
            .as_ref()
            .is_some_and(|cp| !matches!(cp.action, crate::model::Action::Nothing) || cp.migrate.is_some());
        for step in c.steps.clone() {
            if live_work && c.steps.contains(&Step::Provision) {
                break;
            }
            let want = match step {
                Step::Snapshot => run_id.map(|r| run_digest(&digest, r)),
                _ => Some(digest.clone()),
            };
            let status = read_step_status(&step_artifact(dir, step, &c.name));
            if want.is_some() && status.is_some_and(|s| s.ok == Some(true) && s.digest == want) {
                c.skipped_steps.push(step);
            }
        }
        c.inputs_digest = Some(digest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_status() {
        let s = status_of(&serde_json::json!({"kind":"provision","inputs_digest":"sha256:ab","result":"ok",
            "actions":[{"action":"create"},{"action":"start"}]}))
        .unwrap();
        assert_eq!(
            s,
            StepStatus {
                digest: Some("sha256:ab".into()),
                ok: Some(true),
                actions: vec!["create".into(), "start".into()]
            }
        );
        let s = status_of(&serde_json::json!({"outcome":{"result":"failed","digest":"d"}})).unwrap();
        assert_eq!(s, StepStatus { digest: Some("d".into()), ok: Some(false), actions: vec![] });
        let s = status_of(&serde_json::json!({"ok":true,"actions":["a"]})).unwrap();
        assert_eq!(s, StepStatus { digest: None, ok: Some(true), actions: vec!["a".into()] });
        assert_eq!(status_of(&serde_json::json!([1])), None);
        let s = status_of(&serde_json::json!({"result":"weird"})).unwrap();
        assert_eq!(s.ok, None);
    }
}
