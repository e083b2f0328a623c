//! The monorepo's globals: `globals.json` < `globals.local.json`, flat maps of strings that
//! become Actions variables and the configuration's environment.
//!
//! Read by `resolve` (into the inventory) and by `publish` (the variables it sets), so it lives
//! with the inventory rather than in either step.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Location, Problems};

/// Why a key of `globals.json` cannot be a global ([`global_name`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobalNameError {
    /// Not `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("`{name}` is not a valid variable name: use letters, digits and `_`, not starting with a digit")]
    Malformed {
        /// The key as given.
        name: String,
    },
    /// Starts with a prefix Gitea reserves (`GITHUB_`, `GITEA_`, `CI`, case-insensitive).
    #[error("`{name}`: Gitea reserves variable names starting with `{prefix}`")]
    Reserved {
        /// The key as given.
        name: String,
        /// The reserved prefix it starts with.
        prefix: &'static str,
    },
}

/// Checks a global's name against Gitea's rules for Actions variables (globals become org
/// variables; docs.gitea.com, "Variables", naming conventions): `[A-Za-z_][A-Za-z0-9_]*`, not
/// starting with `GITHUB_`, `GITEA_` or `CI` (case-insensitive).
///
/// # Errors
/// [`GlobalNameError::Malformed`] or [`GlobalNameError::Reserved`].
pub fn global_name(k: &str) -> Result<(), GlobalNameError> {
    let mut chars = k.chars();
    let valid = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !valid {
        return Err(GlobalNameError::Malformed { name: k.to_string() });
    }
    let upper = k.to_ascii_uppercase();
    for prefix in ["GITHUB_", "GITEA_", "CI"] {
        if upper.starts_with(prefix) {
            return Err(GlobalNameError::Reserved { name: k.to_string(), prefix });
        }
    }
    Ok(())
}

/// `globals.json` < `globals.local.json`: flat maps of strings; empty values dropped. Problems
/// name the file and key.
pub fn read_globals(root: &Path, problems: &mut Problems) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for file in ["globals.json", "globals.local.json"] {
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.add(Location::file(file), format!("cannot read file: {e}"));
                continue;
            }
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.add(Location::line(file, e.line()), format!("invalid JSON: {e}"));
                continue;
            }
        };
        let Some(map) = value.as_object() else {
            problems.add(Location::file(file), "expected a JSON object of string values");
            continue;
        };
        let mut seen_upper: BTreeMap<String, &str> = BTreeMap::new();
        for (k, v) in map {
            if let Err(why) = global_name(k) {
                problems.add(Location::file(file).with_key(k), why.to_string());
                continue;
            }
            if let Some(first) = seen_upper.insert(k.to_ascii_uppercase(), k) {
                problems.add(
                    Location::file(file).with_key(k),
                    format!(
                        "`{k}` and `{first}` are the same variable name (Gitea variable names are case-insensitive)"
                    ),
                );
                continue;
            }
            match v {
                serde_json::Value::String(s) if s.is_empty() => {
                    out.remove(k);
                }
                serde_json::Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                serde_json::Value::Null => {
                    out.remove(k);
                }
                other => problems.add(
                    Location::file(file).with_key(k),
                    format!("expected a string value, found {other} (globals are flat string maps; quote it)"),
                ),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_name_errors_read_as_before() {
        assert_eq!(
            global_name("1x").unwrap_err().to_string(),
            "`1x` is not a valid variable name: use letters, digits and `_`, not starting with a digit"
        );
        assert_eq!(
            global_name("ci_x").unwrap_err().to_string(),
            "`ci_x`: Gitea reserves variable names starting with `CI`"
        );
        assert!(global_name("Share_Host").is_ok());
    }
}
