//! The Actions variables publish sets: collected from `globals.json` / `globals.local.json` and the
//! configure artifacts' `outputs`, validated before anything is sent, then set one by one.

use std::path::Path;

use super::report::ItemAction;
use super::{PublishOptions, STAGE_ORG, TASKS_ORG};
use crate::artifact::remotes::Remotes;
use crate::error::{Location, Problems, Result};
use crate::gitea::{Client, CreateVariableOption, Created, UpdateVariableOption, VariableScope, valid_variable_name};

/// The variables to set, validated: `(scope, name, value)`.
pub(super) type Wanted = Vec<(VariableScope, String, String)>;

/// Collects and validates every variable before anything is sent.
///
/// # Errors
/// Every bad name or value, with the file and key it came from.
pub fn wanted_variables(remotes: &Remotes, opts: &PublishOptions) -> Result<Wanted> {
    let mut problems = Problems::new();
    let globals = crate::inventory::globals::read_globals(&opts.repo, &mut problems);
    let mut out = Wanted::new();
    for (k, v) in &globals {
        let file =
            if has_key(&opts.repo.join("globals.local.json"), k) { "globals.local.json" } else { "globals.json" };
        if let Err(m) = valid_variable_name(k) {
            problems.add(Location::file(file).with_key(k), m.to_string());
            continue;
        }
        for org in [remotes.org.as_str(), STAGE_ORG, TASKS_ORG] {
            out.push((VariableScope::Org { org: org.to_string() }, k.clone(), v.clone()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for m in &remotes.modules {
        if m.parent.is_some() || !m.path.starts_with("libs") || !seen.insert(m.repo.clone()) {
            continue;
        }
        let lib = m.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = opts.artifacts.configure(&lib);
        let display = path.clone();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.add(Location::file(&display), format!("cannot read file: {e}"));
                continue;
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.add(Location::line(&display, e.line()), format!("invalid JSON: {e}"));
                continue;
            }
        };
        let outputs = match value.get("outputs") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::Object(o)) => o,
            Some(other) => {
                problems.add(
                    Location::file(&display).with_key("outputs"),
                    format!("expected an object of KEY: value, found {other}"),
                );
                continue;
            }
        };
        for (k, v) in outputs {
            let key = format!("outputs.{k}");
            if let Err(msg) = valid_variable_name(k) {
                problems.add(Location::file(&display).with_key(&key), msg.to_string());
                continue;
            }
            let value = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    problems.add(
                        Location::file(&display).with_key(&key),
                        format!("expected a string, number or boolean, found {other}"),
                    );
                    continue;
                }
            };
            if value.is_empty() {
                problems.add(Location::file(&display).with_key(&key), "empty value (Gitea refuses empty variables)");
                continue;
            }
            out.push((
                VariableScope::Repo { owner: m.owner_or(&remotes.org).to_string(), repo: m.repo.clone() },
                k.clone(),
                value,
            ));
        }
    }
    problems.into_result()?;
    Ok(out)
}

fn has_key(file: &Path, key: &str) -> bool {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get(key).is_some())
}

/// Sets one variable: `GET`, then `POST` when missing (on 409 `PUT`), `PUT` when different.
///
/// # Errors
/// The Gitea error of the failing call.
pub async fn ensure_variable(
    client: &Client,
    scope: &VariableScope,
    name: &str,
    value: &str,
) -> anyhow::Result<ItemAction> {
    match client.get_variable(scope, name).await? {
        Some(v) if v.data == value => Ok(ItemAction::Unchanged),
        Some(_) => {
            client
                .update_variable(scope, name, &UpdateVariableOption { value: value.into(), ..Default::default() })
                .await?;
            Ok(ItemAction::Updated)
        }
        None => match client
            .create_variable(scope, name, &CreateVariableOption { value: value.into(), description: None })
            .await?
        {
            Created::New(()) => Ok(ItemAction::Created),
            Created::Exists => {
                client
                    .update_variable(scope, name, &UpdateVariableOption { value: value.into(), ..Default::default() })
                    .await?;
                Ok(ItemAction::Updated)
            }
        },
    }
}
