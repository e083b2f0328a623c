//! What publish sets from the settings (pure): the Actions variables and secrets the shipped
//! workflows read, with the values the binary itself reads from the environment and
//! `local/config*.json` ([`Settings`]), for each organization whose repositories run workflows.
//!
//! * **Variables**: every entry of [`Settings::variables`] (the given non-secret settings under
//!   the workflows' names, see [`crate::settings::WORKFLOW_VARIABLES`]), and `HOST`, the Gitea
//!   URL publish pushes to (the one the submodules and the workflows' checkouts point at).
//! * **Secrets** ([`SECRETS`]): `PROXMOX_PASSWORD`, `PROXMOX_SECRET` (the PVE token secret),
//!   `PASSWORD` (Gitea), `PROXMOX_GITOPS_TOKEN` (the Gitea token, `GITEA_TOKEN` here).
//!
//! A setting without a value sets nothing: what a user set in Gitea's UI for it stays. A name
//! given both here and in `globals*.json` with a different value is refused (set it in one
//! place); with the same value it is set once.

use secrecy::{ExposeSecret, SecretString};

use super::variables::Wanted;
use crate::error::{Location, Problems, Result};
use crate::gitea::{VariableScope, valid_variable_name};
use crate::settings::Settings;

/// The secrets publish sets, each with the settings it is read from.
pub const SECRETS: &[(&str, &str)] = &[
    ("PROXMOX_PASSWORD", "PROXMOX_PASSWORD, proxmox.password"),
    ("PROXMOX_SECRET", "PROXMOX_SECRET/PROXMOX_TOKEN_SECRET, proxmox.secret, the secret of a whole token"),
    ("PASSWORD", "PASSWORD, password"),
    ("PROXMOX_GITOPS_TOKEN", "GITEA_TOKEN, token"),
];

/// One secret to set.
#[derive(Debug, Clone)]
pub struct WantedSecret {
    /// Where (an organization).
    pub scope: VariableScope,
    /// Its name.
    pub name: &'static str,
    /// Its value (never shown; `Debug` prints `[REDACTED]`).
    pub value: SecretString,
}

/// The variables and secrets to set from the settings.
#[derive(Debug, Clone, Default)]
pub struct FromSettings {
    /// `(scope, name, value)`, ordered by organization, then name.
    pub variables: Wanted,
    /// Ordered by organization, then as [`SECRETS`].
    pub secrets: Vec<WantedSecret>,
}

/// Plans the variables and secrets of `settings` for the organizations `orgs`, `gitea` being the
/// Gitea URL publish pushes to. Every name is checked with [`valid_variable_name`] and against
/// `globals` (the variables of `globals*.json`) before anything is sent.
///
/// # Errors
/// A name that is no valid variable name (a bug of the tables, named), or a variable that
/// `globals.json`/`globals.local.json` sets to another value than the settings.
pub fn from_settings(settings: &Settings, gitea: &str, orgs: &[String], globals: &Wanted) -> Result<FromSettings> {
    let mut problems = Problems::new();
    let mut vars: Vec<(&str, String)> = settings.variables.iter().map(|(k, v)| (*k, v.clone())).collect();
    vars.push(("HOST", gitea.trim_end_matches('/').to_string()));
    vars.sort();
    let secrets: Vec<(&'static str, &SecretString)> = SECRETS
        .iter()
        .filter_map(|(name, _)| {
            let v = match *name {
                "PROXMOX_PASSWORD" => settings.pve.password.as_ref(),
                "PROXMOX_SECRET" => settings.pve.secret.as_ref(),
                "PASSWORD" => settings.gitea.password.as_ref(),
                _ => settings.gitea.token.as_ref(),
            };
            v.filter(|v| !v.expose_secret().is_empty()).map(|v| (*name, v))
        })
        .collect();
    for name in vars.iter().map(|(n, _)| *n).chain(secrets.iter().map(|(n, _)| *n)) {
        if let Err(e) = valid_variable_name(name) {
            problems.add(Location::environment(name), e.to_string());
        }
    }
    let mut out = FromSettings::default();
    let mut refused = std::collections::BTreeSet::new();
    for org in orgs {
        let scope = VariableScope::Org { org: org.clone() };
        for (name, value) in &vars {
            match globals.iter().find(|(s, n, _)| s == &scope && n == name) {
                Some((_, _, g)) if g == value => continue,
                Some(_) => {
                    if refused.insert(*name) {
                        problems.add(
                            Location::file("globals.json").with_key(*name),
                            format!(
                                "{name} is also a setting publish sets (from {}) with another value: set it in one \
                                 place (remove it from globals.json/globals.local.json, or change the setting)",
                                source(name)
                            ),
                        );
                    }
                    continue;
                }
                None => out.variables.push((scope.clone(), name.to_string(), value.clone())),
            }
        }
        for (name, value) in &secrets {
            out.secrets.push(WantedSecret { scope: scope.clone(), name, value: (*value).clone() });
        }
    }
    problems.into_result()?;
    Ok(out)
}

/// Where a variable publish sets from the settings comes from, for messages and the docs.
pub fn source(name: &str) -> &'static str {
    if name == "HOST" {
        return "the Gitea URL publish pushes to (--gitea, else HOST)";
    }
    crate::settings::WORKFLOW_VARIABLES.iter().find(|(n, _)| *n == name).map_or("the settings", |(_, s)| s)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn settings(env: &[(&str, &str)], config: Option<&str>) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        if let Some(c) = config {
            std::fs::create_dir(dir.path().join("local")).unwrap();
            std::fs::write(dir.path().join("local/config.json"), c).unwrap();
        }
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load(dir.path(), &env).unwrap()
    }

    fn orgs() -> Vec<String> {
        ["main", "stage", "tasks"].map(String::from).to_vec()
    }

    /// The variables and the secrets (name, value) of one org.
    type Named = (Vec<(String, String)>, Vec<(&'static str, String)>);

    fn names(p: &FromSettings, org: &str) -> Named {
        let scope = VariableScope::Org { org: org.into() };
        (
            p.variables.iter().filter(|(s, _, _)| s == &scope).map(|(_, n, v)| (n.clone(), v.clone())).collect(),
            p.secrets
                .iter()
                .filter(|s| s.scope == scope)
                .map(|s| (s.name, s.value.expose_secret().to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_local_deploy_sets_every_given_setting_in_every_org_and_leaves_defaults_out() {
        let s = settings(
            &[
                ("LOGIN", "admin"),
                ("PASSWORD", "from-settings-pw-1"),
                ("PROXMOX_GITOPS_BACKEND", "lxc"),
                ("PROXMOX_GITOPS_BINARY", "/usr/local/bin/proxmox-gitops"),
                ("PROXMOX_SHARE", "/srv/share"),
                ("PROXMOX_GITOPS_CHECKOUT", "actions/checkout@v4"),
            ],
            None,
        );
        let p = from_settings(&s, "http://127.0.0.1:3000/", &orgs(), &Wanted::new()).unwrap();
        let want_vars: Vec<(String, String)> = [
            ("HOST", "http://127.0.0.1:3000"),
            ("LOGIN", "admin"),
            ("PROXMOX_GITOPS_BACKEND", "lxc"),
            ("PROXMOX_GITOPS_BINARY", "/usr/local/bin/proxmox-gitops"),
            ("PROXMOX_SHARE", "/srv/share"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
        for org in ["main", "stage", "tasks"] {
            assert_eq!(names(&p, org), (want_vars.clone(), vec![("PASSWORD", "from-settings-pw-1".to_string())]));
        }
        assert_eq!(p.variables.len(), 15);
        // No PVE settings given: none set (not even the defaults 8006, eth0, vmbr0, /share).
        let s = settings(&[], None);
        let p = from_settings(&s, "http://g", &["main".to_string()], &Wanted::new()).unwrap();
        assert_eq!(names(&p, "main"), (vec![("HOST".to_string(), "http://g".to_string())], vec![]));
    }

    #[test]
    fn pve_settings_follow_the_binarys_precedence_and_forms() {
        let config = r#"{"proxmox": {"host": "https://pve.example:8443", "node": "pve1", "bridge": "vmbr0",
            "mask": 24, "password": "from-config-pw-2", "storage": "local"}, "login": "cfg-login"}"#;
        let s = settings(
            &[
                ("PROXMOX_NODE", "pve2"),
                ("PROXMOX_TOKEN", "ci@pve!deploy=from-env-token-secret-3"),
                ("GITEA_TOKEN", "from-env-gitea-token-4"),
            ],
            Some(config),
        );
        let p = from_settings(&s, "http://g", &["main".to_string()], &Wanted::new()).unwrap();
        let (vars, secrets) = names(&p, "main");
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("HOST", "http://g"),
            ("LOGIN", "cfg-login"),
            ("PROXMOX_BRIDGE", "vmbr0"),
            ("PROXMOX_HOST", "pve.example"),
            ("PROXMOX_MASK", "24"),
            ("PROXMOX_NODE", "pve2"),
            ("PROXMOX_PORT", "8443"),
            ("PROXMOX_STORAGE", "local"),
            ("PROXMOX_TOKEN", "deploy"),
            ("PROXMOX_USER", "ci@pve"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into_iter()
        .collect();
        assert_eq!(vars, want);
        assert_eq!(
            secrets,
            vec![
                ("PROXMOX_PASSWORD", "from-config-pw-2".to_string()),
                ("PROXMOX_SECRET", "from-env-token-secret-3".to_string()),
                ("PROXMOX_GITOPS_TOKEN", "from-env-gitea-token-4".to_string()),
            ]
        );
        let debug = format!("{p:?}");
        assert!(!debug.contains("from-config-pw-2") && !debug.contains("from-env-token-secret-3"), "{debug}");
    }

    #[test]
    fn globals_agreeing_are_set_once_and_disagreeing_are_refused() {
        let s = settings(&[("LOGIN", "admin"), ("PROXMOX_NODE", "pve1")], None);
        let main = VariableScope::Org { org: "main".into() };
        let globals: Wanted = vec![(main.clone(), "LOGIN".into(), "admin".into())];
        let p = from_settings(&s, "http://g", &["main".to_string()], &globals).unwrap();
        assert!(p.variables.iter().all(|(_, n, _)| n != "LOGIN"), "{p:?}");
        let globals: Wanted = vec![
            (main.clone(), "PROXMOX_NODE".into(), "pve9".into()),
            (VariableScope::Org { org: "stage".into() }, "PROXMOX_NODE".into(), "pve9".into()),
        ];
        let e = from_settings(&s, "http://g", &orgs(), &globals).unwrap_err().to_string();
        assert!(e.contains("globals.json (PROXMOX_NODE)") && e.contains("from PROXMOX_NODE, proxmox.node"), "{e}");
        assert_eq!(e.matches("PROXMOX_NODE is also a setting").count(), 1, "named once: {e}");
    }

    #[test]
    fn the_tables_cover_every_variable_and_secret_the_shipped_workflows_read() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
        let mut read = std::collections::BTreeSet::new();
        for f in
            ["pipeline.yml", "snapshot.yml", "drift.yml", "templates/lib_pipeline.yml.hbs", "templates/task.yml.hbs"]
        {
            let text = std::fs::read_to_string(root.join(f)).unwrap();
            for kind in ["vars.", "secrets."] {
                for (i, _) in text.match_indices(kind) {
                    let name: String = text[i + kind.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        read.insert(format!("{kind}{name}"));
                    }
                }
            }
        }
        let mut set: std::collections::BTreeSet<String> =
            crate::settings::WORKFLOW_VARIABLES.iter().map(|(n, _)| format!("vars.{n}")).collect();
        set.insert("vars.HOST".into());
        set.extend(SECRETS.iter().map(|(n, _)| format!("secrets.{n}")));
        // Read by the workflows, deliberately never set by publish: the job's own token (Gitea
        // makes it), the aliases of PROXMOX_TOKEN/PROXMOX_SECRET (publish sets one name of
        // each), AUTO_DEPLOY (a switch the user turns on) and PROXMOX_GITOPS_CONFIGURE (a switch
        // for one run: `./local/run.sh --full config` must not leave every later pipeline forced).
        let never = [
            "secrets.GITEA_TOKEN",
            "vars.PROXMOX_TOKEN_ID",
            "secrets.PROXMOX_TOKEN_SECRET",
            "vars.AUTO_DEPLOY",
            "vars.PROXMOX_GITOPS_CONFIGURE",
        ];
        let uncovered: Vec<&String> =
            read.iter().filter(|n| !set.contains(*n) && !never.contains(&n.as_str())).collect();
        assert_eq!(uncovered, Vec::<&String>::new());
        let unread: Vec<&String> = set.iter().filter(|n| !read.contains(*n)).collect();
        assert_eq!(unread, Vec::<&String>::new(), "set but read by no workflow");
    }
}
