//! The configuration contract handed to every engine (see the parent module's docs for the
//! order): the settings behind it ([`Contract`]), the `REQUIRES` check, the contract as a flat map
//! and the env file it becomes, and the `$PGO_OUTPUT` lines a lib writes back. Pure: nothing here
//! contacts a container, so all of it is unit-tested.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use super::ConfigureOptions;
use crate::artifact;
use crate::inventory::{ContainerSpec, Inventory};
use crate::model::Provision;

/// Values of the contract that come from settings, not from the inventory.
#[derive(Debug, Clone, Default)]
pub struct Contract {
    /// The control plane (`HOST`).
    pub host: Option<String>,
    /// `LOGIN`.
    pub login: Option<String>,
    /// `PASSWORD` (secret).
    pub password: Option<SecretString>,
}

impl Contract {
    /// The contract from the Gitea settings (`HOST`, `LOGIN`, `PASSWORD`).
    pub fn from_settings(g: &crate::settings::GiteaSettings) -> Self {
        Self { host: g.host.clone(), login: g.login.clone(), password: g.password.clone() }
    }
}

/// The names of `spec.requires` (`REQUIRES` in the lib's `container.env`) that the configuration
/// contract would hand the lib empty: a name is satisfied by a non-empty global, a non-empty key
/// of the container's env, the settings behind `HOST`, `LOGIN`, `PASSWORD` (see [`Contract`];
/// the inventory's public settings as fallback for `HOST` and `LOGIN`, as in the contract), or
/// one of the values the tool always sets (`IP`, `ID`, `HOSTNAME`, `STAGE`, `PGO_OUTPUT`,
/// `PGO_CONTAINERS`). In the order given.
pub fn missing_requirements(inv: &Inventory, spec: &ContainerSpec, contract: &Contract) -> Vec<String> {
    let set = |v: Option<&str>| v.is_some_and(|v| !v.trim().is_empty());
    spec.requires
        .iter()
        .filter(|name| {
            let ok = match name.as_str() {
                "IP" | "ID" | "HOSTNAME" | "STAGE" | "PGO_OUTPUT" | "PGO_CONTAINERS" => true,
                "HOST" => set(contract.host.as_deref()) || set(inv.settings.gitea_host.as_deref()),
                "LOGIN" => set(contract.login.as_deref()) || set(inv.settings.gitea_login.as_deref()),
                "PASSWORD" => contract.password.as_ref().is_some_and(|p| !p.expose_secret().trim().is_empty()),
                other => {
                    set(spec.env.get(other).map(String::as_str)) || set(inv.globals.get(other).map(String::as_str))
                }
            };
            !ok
        })
        .cloned()
        .collect()
}

/// The message for [`missing_requirements`]: which names, where they are required, and where
/// each can be set, e.g. "broker needs LOGIN and PASSWORD (REQUIRES in libs/broker/container.env),
/// which are not set: …".
pub fn requirements_error(spec: &ContainerSpec, missing: &[String]) -> String {
    let names = match missing {
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
        [] => String::new(),
    };
    let file = spec.dir.join("container.env");
    let hints: Vec<String> = missing
        .iter()
        .map(|n| match n.as_str() {
            "LOGIN" | "PASSWORD" | "HOST" => format!(
                "{n} in the environment (Gitea Actions: the {n} {}) or \"{}\" in local/config.local.json",
                if n == "PASSWORD" { "secret" } else { "variable" },
                n.to_lowercase()
            ),
            _ => format!("{n} in globals.json (or globals.local.json) or in {}", file.display()),
        })
        .collect();
    format!(
        "{} needs {names} (REQUIRES in {}), which {} not set: set {}",
        spec.name,
        file.display(),
        if missing.len() == 1 { "is" } else { "are" },
        hints.join("; ")
    )
}

/// The contract as a flat map (see the module docs for the order).
pub(super) fn contract(
    inv: &Inventory,
    spec: &ContainerSpec,
    opts: &ConfigureOptions,
    address: &str,
    output: &str,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (k, v) in &inv.globals {
        m.insert(k.clone(), v.clone());
    }
    for (k, v) in &spec.env {
        m.insert(k.clone(), v.clone());
    }
    m.insert("IP".into(), address.to_string());
    m.insert("ID".into(), spec.vmid.to_string());
    m.insert("HOSTNAME".into(), spec.hostname.clone());
    m.insert("STAGE".into(), inv.stage.clone());
    m.insert("HOST".into(), opts.contract.host.clone().or_else(|| inv.settings.gitea_host.clone()).unwrap_or_default());
    m.insert(
        "LOGIN".into(),
        opts.contract.login.clone().or_else(|| inv.settings.gitea_login.clone()).unwrap_or_default(),
    );
    m.insert(
        "PASSWORD".into(),
        opts.contract.password.as_ref().map(|p| p.expose_secret().to_string()).unwrap_or_default(),
    );
    m.insert("PGO_OUTPUT".into(), output.to_string());
    m.insert("PGO_CONTAINERS".into(), containers_json(inv, opts).to_string());
    m
}

/// The inventory's containers for libs that configure others (e.g. the proxy): the address
/// reached by `provision` when its artifact exists, else the static address.
pub(super) fn containers_json(inv: &Inventory, opts: &ConfigureOptions) -> serde_json::Value {
    serde_json::Value::Array(
        inv.containers
            .iter()
            .map(|c| {
                let ip = artifact::read::<Provision>(&opts.artifacts.provision(&c.name))
                    .ok()
                    .and_then(|p| p.address)
                    .or_else(|| c.ip.address().map(|a| a.to_string()));
                serde_json::json!({
                    "name": c.name, "hostname": c.hostname, "vmid": c.vmid, "ip": ip, "env": c.env,
                })
            })
            .collect(),
    )
}

/// True for names usable as shell variables.
fn is_var_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renders an env file sourced by bash: `export K='v'` with `'` written as `'\''`. Values never
/// reach a command line; this file is only read by `.` in the fixed wrapper.
pub(super) fn env_file(vars: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for (k, v) in vars {
        if !is_var_name(k) {
            continue;
        }
        s.push_str(&format!("export {k}='{}'\n", v.replace('\'', "'\\''")));
    }
    s
}

/// Parses `KEY=value` lines; blank lines and `#` comments are skipped, later keys win. Values
/// holding a secret are masked.
pub(super) fn parse_outputs(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if is_var_name(k.trim()) => {
                out.insert(k.trim().to_string(), crate::actions::redact(v));
            }
            _ => bad.push(format!(
                "$PGO_OUTPUT line {}: expected KEY=value, found `{}`",
                i + 1,
                crate::actions::redact(line)
            )),
        }
    }
    (out, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_quotes_everything() {
        let mut m = BTreeMap::new();
        m.insert("A".to_string(), "it's $(rm -rf /) `x`".to_string());
        m.insert("bad-name".to_string(), "skipped".to_string());
        m.insert("_B2".to_string(), "".to_string());
        assert_eq!(env_file(&m), "export A='it'\\''s $(rm -rf /) `x`'\nexport _B2=''\n");
    }

    #[test]
    fn outputs_are_parsed_and_masked() {
        crate::actions::mask("s3cr3t-output");
        let (m, bad) = parse_outputs("# c\nA=1\nB=x=y\n\nnot a line\nC=pre-s3cr3t-output\nA=2\n");
        let want: BTreeMap<String, String> =
            [("A", "2"), ("B", "x=y"), ("C", "pre-***")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(m, want);
        assert_eq!(bad, vec!["$PGO_OUTPUT line 5: expected KEY=value, found `not a line`".to_string()]);
    }
}
