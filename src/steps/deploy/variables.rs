//! A lib's configure outputs become Actions variables of its Gitea repository, at the end of a
//! successful `configure` in the pipeline — what `publish` does by hand (the seed's
//! `Env.set` of outputs), so that workflows and other libs see them without a manual publish.
//!
//! * **When**: after the container's `configure` succeeded, or was skipped because it already
//!   succeeded for the same inputs (setting is idempotent: equal values are left alone, so a
//!   re-run repairs what an earlier run could not set). Only when the runner has Gitea settings
//!   ([`OutputVariables`], from `HOST` and `GITEA_TOKEN` or `LOGIN`/`PASSWORD`); without them
//!   nothing is attempted and one debug line says so.
//! * **Where**: the lib's repository, [`crate::gitea::names::lib_repository`] with the org of
//!   [`OutputVariables::org`] (the owner of `PROXMOX_GITOPS_MONOREPO`, else `main`) for libs whose
//!   submodule URL has no owner; the control plane has no repository of its own and is skipped.
//! * **What**: the `outputs` object of `configure/<name>.json` (`KEY: value`); names must be
//!   valid variable names ([`crate::gitea::valid_variable_name`]) and values non-empty, as in
//!   `publish`. Each is set with [`crate::steps::publish::ensure_variable`].
//! * **Failures are warnings**: the container is configured and running; a variable that could
//!   not be set (Gitea unreachable, a bad name) is reported in `deploy.json`
//!   ([`VariablesRecord::warning`]) and as a workflow warning, and does not fail the deploy. The
//!   next deploy (or `publish`) sets it.
//!
//! Values are not secrets (configure masks secret values in its outputs); `deploy.json` records
//! only names and what was done, as `publish.json` does.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::gitea::{Client, VariableScope, valid_variable_name};
use crate::inventory::{ContainerSpec, Inventory};
use crate::steps::publish::{ItemAction, ensure_variable};

/// Where configure outputs go: the Gitea client (with credentials) and the organization of libs
/// whose repository URL names none.
#[derive(Debug, Clone)]
pub struct OutputVariables {
    /// The Gitea client.
    pub client: Client,
    /// The organization for libs whose submodule URL is relative (or plain directories).
    pub org: String,
}

impl OutputVariables {
    /// From the settings: `None` (with a debug line) unless `HOST` and credentials are set. `org`
    /// is the owner of `monorepo` (`PROXMOX_GITOPS_MONOREPO`, `owner/repo`), else `main`.
    pub fn from_settings(gitea: &crate::settings::GiteaSettings, monorepo: Option<&str>) -> Option<OutputVariables> {
        let auth = crate::gitea::Auth::from_settings(gitea);
        if gitea.host.is_none() || auth.is_none() {
            tracing::debug!(
                "no Gitea settings (HOST and GITEA_TOKEN or LOGIN/PASSWORD, or host and token or login/password in \
                 local/config.json): configure outputs stay local"
            );
            return None;
        }
        let client = match Client::from_settings(gitea, None) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("configure outputs will not become variables: {e}");
                return None;
            }
        };
        let org = monorepo
            .and_then(|m| m.trim().split_once('/'))
            .map(|(owner, _)| owner.trim())
            .filter(|o| !o.is_empty())
            .unwrap_or("main")
            .to_string();
        Some(OutputVariables { client, org })
    }
}

/// What became of one container's outputs, in `deploy.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariablesRecord {
    /// The lib's repository, `owner/name`.
    pub repository: Option<String>,
    /// Each output set: its name and `created`, `updated` or `unchanged`.
    pub variables: Vec<VariableRecord>,
    /// What could not be set, and why (a warning: the deploy did not fail for it).
    pub warning: Option<String>,
}

/// One output variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableRecord {
    /// The variable's name.
    pub name: String,
    /// What was done.
    pub action: ItemAction,
}

/// The outputs that can be variables, `(name, value)`, and the problems of those that cannot.
type Outputs = (Vec<(String, String)>, Vec<String>);

/// The `outputs` of the configure artifact at `path` (see [`Outputs`]); `None` when the artifact
/// has no outputs.
fn outputs(path: &Path) -> Option<Outputs> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let outputs = value.get("outputs")?.as_object()?;
    if outputs.is_empty() {
        return None;
    }
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for (k, v) in outputs {
        let value = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => {
                bad.push(format!("{k}: expected a string, number or boolean"));
                continue;
            }
        };
        if let Err(e) = valid_variable_name(k) {
            bad.push(e.to_string());
        } else if value.is_empty() {
            bad.push(format!("{k}: empty value (Gitea refuses empty variables)"));
        } else {
            good.push((k.clone(), value));
        }
    }
    Some((good, bad))
}

/// Sets the outputs of `spec`'s configure artifact (`configure`) as variables of its lib's
/// repository (see the module docs). `None` when there is nothing to set (no outputs, or the
/// control plane).
pub async fn set_outputs(
    target: &OutputVariables,
    inv: &Inventory,
    spec: &ContainerSpec,
    configure: &Path,
) -> Option<VariablesRecord> {
    let (good, bad) = outputs(configure)?;
    let Some((owner, repo)) = crate::gitea::names::lib_repository(inv, spec, &target.org) else {
        tracing::debug!("{}: outputs are not variables: no lib repository", spec.name);
        return None;
    };
    let scope = VariableScope::Repo { owner: owner.clone(), repo: repo.clone() };
    let mut rec = VariablesRecord { repository: Some(format!("{owner}/{repo}")), variables: Vec::new(), warning: None };
    let mut problems = bad;
    for (name, value) in &good {
        match ensure_variable(&target.client, &scope, name, value).await {
            Ok(action) => rec.variables.push(VariableRecord { name: name.clone(), action }),
            Err(e) => problems.push(format!("{name}: {}", crate::actions::redact(&format!("{e:#}")))),
        }
    }
    let done: Vec<String> = rec.variables.iter().map(|v| format!("{} {}", v.name, word(v.action))).collect();
    if !done.is_empty() {
        tracing::info!("{}: outputs → variables of {scope}: {}", spec.name, done.join(", "));
    }
    if !problems.is_empty() {
        let warning = format!("outputs not set as variables of {scope}: {}", problems.join("; "));
        tracing::warn!("{}: {warning}", spec.name);
        crate::actions::warning_message(&format!("{}: {warning}", spec.name));
        rec.warning = Some(warning);
    }
    Some(rec)
}

fn word(a: ItemAction) -> &'static str {
    match a {
        ItemAction::Created => "created",
        ItemAction::Updated => "updated",
        ItemAction::Unchanged => "unchanged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.json");
        std::fs::write(&p, r#"{"outputs":{"PORT":8080,"URL":"http://x","bad-name":"1","EMPTY":"","OBJ":{}}}"#).unwrap();
        let (good, bad) = outputs(&p).unwrap();
        assert_eq!(good, vec![("PORT".to_string(), "8080".to_string()), ("URL".to_string(), "http://x".to_string())]);
        assert_eq!(bad.len(), 3, "{bad:?}");
        std::fs::write(&p, r#"{"outputs":{}}"#).unwrap();
        assert!(outputs(&p).is_none());
        std::fs::write(&p, r#"{"result":"ok"}"#).unwrap();
        assert!(outputs(&p).is_none());
        assert!(outputs(&dir.path().join("missing.json")).is_none());
    }

    #[test]
    fn org_from_the_monorepo_setting() {
        let g = crate::settings::GiteaSettings {
            host: Some("http://127.0.0.1:3000".into()),
            token: Some(secrecy::SecretString::from("t".to_string())),
            ..Default::default()
        };
        assert_eq!(OutputVariables::from_settings(&g, Some("infra/mono")).unwrap().org, "infra");
        assert_eq!(OutputVariables::from_settings(&g, None).unwrap().org, "main");
        assert_eq!(OutputVariables::from_settings(&g, Some(" ")).unwrap().org, "main");
        let no_creds = crate::settings::GiteaSettings { token: None, ..g.clone() };
        assert!(OutputVariables::from_settings(&no_creds, None).is_none());
        let no_host = crate::settings::GiteaSettings { host: None, ..g };
        assert!(OutputVariables::from_settings(&no_host, None).is_none());
    }
}
