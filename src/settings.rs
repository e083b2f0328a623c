//! Settings for the external systems: Proxmox VE and the Gitea control plane.
//!
//! Sources, lowest precedence first (the seed's layout and names):
//!
//! 1. `local/config.json` — a template committed to the monorepo, no secrets;
//! 2. `local/config.local.json` — the user's machine-local values (git-ignored);
//! 3. environment variables: `PROXMOX_HOST`, `PROXMOX_PORT`, `PROXMOX_USER`, `PROXMOX_PASSWORD`,
//!    `PROXMOX_TOKEN`, `PROXMOX_SECRET`, `PROXMOX_NODE`, `PROXMOX_GATEWAY`, `PROXMOX_MASK`,
//!    `PROXMOX_INTERFACE`, `PROXMOX_BRIDGE`, `PROXMOX_STORAGE`, `PROXMOX_TEMPLATE`,
//!    `PROXMOX_SHARE`, and for Gitea `HOST`, `LOGIN`, `PASSWORD`, `GITEA_TOKEN`.
//!
//! An empty string anywhere means "not set". The JSON files have the shape
//!
//! ```json
//! { "proxmox": { "host": "", "port": 8006, "user": "root@pam", "password": "", "token": "",
//!                "secret": "", "node": "", "gateway": "", "mask": "24", "interface": "eth0",
//!                "bridge": "vmbr0", "storage": "local:vztmpl", "template": "", "share": "" },
//!   "host": "", "login": "", "password": "", "token": "" }
//! ```
//!
//! Unknown keys are input errors (a typo must not silently drop a setting).
//!
//! Secret values (`proxmox.password`, `proxmox.secret`, `password`, `token`) are held as
//! [`SecretString`], are registered with [`crate::ci::mask`] the moment they are read, and the
//! types here are deliberately not `Serialize`: artifacts record only [`PveAuthKind`] and
//! [`GiteaAuthKind`], via [`PublicSettings`].

use std::path::Path;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::error::{Location, Problems};

/// Raw `proxmox` section of a config file (all optional; keys and types are checked by
/// [`read_config`] before this is built).
#[derive(Debug, Default, Deserialize)]
struct RawProxmox {
    host: Option<String>,
    #[serde(skip)]
    port: Option<u16>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    secret: Option<String>,
    node: Option<String>,
    gateway: Option<String>,
    mask: Option<serde_json::Value>,
    interface: Option<String>,
    bridge: Option<String>,
    storage: Option<String>,
    template: Option<String>,
    share: Option<String>,
}

/// Raw config file.
#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    #[serde(default)]
    proxmox: RawProxmox,
    host: Option<String>,
    login: Option<String>,
    password: Option<String>,
    token: Option<String>,
}

/// How the PVE API is authenticated, as recorded in artifacts (never the secret itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PveAuthKind {
    /// `PROXMOX_USER` + `PROXMOX_PASSWORD`: ticket auth (`POST /access/ticket`).
    Password,
    /// `PROXMOX_USER` + `PROXMOX_TOKEN` + `PROXMOX_SECRET`: API token auth.
    Token,
    /// Nothing configured.
    None,
}

/// How Gitea is authenticated, as recorded in artifacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GiteaAuthKind {
    /// `GITEA_TOKEN` (or `token` in the config).
    Token,
    /// `LOGIN` + `PASSWORD`: HTTP basic auth.
    Password,
    /// Nothing configured.
    None,
}

/// Proxmox VE settings, secrets included (not serializable).
#[derive(Debug, Clone, Default)]
pub struct PveSettings {
    /// API host name or address (`PROXMOX_HOST`), without scheme or port.
    pub host: Option<String>,
    /// API port (`PROXMOX_PORT`), default 8006.
    pub port: u16,
    /// User with realm, e.g. `root@pam` (`PROXMOX_USER`).
    pub user: Option<String>,
    /// Password for ticket auth (`PROXMOX_PASSWORD`). Secret.
    pub password: Option<SecretString>,
    /// API token id, the part after `!` (`PROXMOX_TOKEN`).
    pub token: Option<String>,
    /// API token secret (`PROXMOX_SECRET`). Secret.
    pub secret: Option<SecretString>,
    /// Node name (`PROXMOX_NODE`); when unset it is discovered from `GET /nodes`.
    pub node: Option<String>,
    /// Default gateway for static `net0` addresses (`PROXMOX_GATEWAY`).
    pub gateway: Option<String>,
    /// Default prefix length for static addresses given without one (`PROXMOX_MASK`), e.g. 24.
    pub mask: Option<u8>,
    /// Interface name inside the container (`PROXMOX_INTERFACE`), default `eth0`.
    pub interface: String,
    /// Host bridge (`PROXMOX_BRIDGE`), default `vmbr0`.
    pub bridge: String,
    /// Template storage, e.g. `local:vztmpl` or `local` (`PROXMOX_STORAGE`).
    pub storage: Option<String>,
    /// Template name without arch and extension, e.g. `debian-13-standard_13.1-2`
    /// (`PROXMOX_TEMPLATE`).
    pub template: Option<String>,
}

impl PveSettings {
    /// Which authentication the settings configure: a password wins over a token, as in the seed.
    pub fn auth_kind(&self) -> PveAuthKind {
        if self.password.is_some() {
            PveAuthKind::Password
        } else if self.token.is_some() && self.secret.is_some() {
            PveAuthKind::Token
        } else {
            PveAuthKind::None
        }
    }
}

/// Gitea control-plane settings, secrets included (not serializable).
#[derive(Debug, Clone, Default)]
pub struct GiteaSettings {
    /// Control-plane host or base URL (`HOST`), e.g. `http://192.168.178.254:8080`.
    pub host: Option<String>,
    /// Login (`LOGIN`).
    pub login: Option<String>,
    /// Password (`PASSWORD`). Secret.
    pub password: Option<SecretString>,
    /// Access token (`GITEA_TOKEN`). Secret.
    pub token: Option<SecretString>,
}

impl GiteaSettings {
    /// Which authentication is configured: a token wins over login/password.
    pub fn auth_kind(&self) -> GiteaAuthKind {
        if self.token.is_some() {
            GiteaAuthKind::Token
        } else if self.login.is_some() && self.password.is_some() {
            GiteaAuthKind::Password
        } else {
            GiteaAuthKind::None
        }
    }
}

/// All settings, loaded from the config files and the environment.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Proxmox VE.
    pub pve: PveSettings,
    /// Gitea.
    pub gitea: GiteaSettings,
    /// The share directory on the runner (`PROXMOX_SHARE`, default `/share`): holds
    /// `.keys/<vmid>` and the snapshot store.
    pub share: std::path::PathBuf,
}

/// The non-secret view of [`Settings`] recorded in the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicSettings {
    /// PVE host, if configured.
    pub pve_host: Option<String>,
    /// PVE API port.
    pub pve_port: u16,
    /// PVE user (not secret).
    pub pve_user: Option<String>,
    /// PVE API token id (not secret; the token *secret* is).
    pub pve_token: Option<String>,
    /// Which PVE auth is configured.
    pub pve_auth: PveAuthKind,
    /// PVE node, if configured.
    pub pve_node: Option<String>,
    /// Gateway for static addresses.
    pub gateway: Option<String>,
    /// Default prefix length.
    pub mask: Option<u8>,
    /// Interface name in the container.
    pub interface: String,
    /// Host bridge.
    pub bridge: String,
    /// Template storage.
    pub storage: Option<String>,
    /// Template name.
    pub template: Option<String>,
    /// Share directory on the runner.
    pub share: std::path::PathBuf,
    /// Gitea host / base URL.
    pub gitea_host: Option<String>,
    /// Gitea login (not secret).
    pub gitea_login: Option<String>,
    /// Which Gitea auth is configured.
    pub gitea_auth: GiteaAuthKind,
}

/// The environment variables holding secrets (masked as soon as they are read).
pub const SECRET_VARS: &[&str] = &["PROXMOX_PASSWORD", "PROXMOX_SECRET", "PASSWORD", "GITEA_TOKEN"];

fn nonempty(s: Option<String>) -> Option<String> {
    s.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn secret(s: Option<String>) -> Option<SecretString> {
    nonempty(s).map(|v| {
        crate::ci::mask(&v);
        SecretString::from(v)
    })
}

/// Something that yields environment variables; tests pass a map instead of the process env.
pub trait EnvSource {
    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl EnvSource for std::collections::BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        std::collections::BTreeMap::get(self, key).cloned()
    }
}

/// Keys of the `proxmox` section and whether each is a string (`false`: string or number).
const PROXMOX_KEYS: &[(&str, bool)] = &[
    ("host", true),
    ("port", false),
    ("user", true),
    ("password", true),
    ("token", true),
    ("secret", true),
    ("node", true),
    ("gateway", true),
    ("mask", false),
    ("interface", true),
    ("bridge", true),
    ("storage", true),
    ("template", true),
    ("share", true),
];

/// Top-level keys of a config file besides `proxmox` (all strings).
const TOP_KEYS: &[&str] = &["host", "login", "password", "token"];

/// 1-based line of the first `"key":` at or after byte `from` of `text`, and the byte offset
/// after it. A heuristic for messages (JSON parsers do not report key positions): a key that
/// also appears inside a string value earlier could be mis-attributed, never missed.
fn key_line(text: &str, key: &str, from: usize) -> Option<(usize, usize)> {
    let needle = format!("\"{key}\"");
    let mut start = from;
    while let Some(pos) = text.get(start..).and_then(|t| t.find(&needle)) {
        let at = start + pos;
        let after = at + needle.len();
        if text[after..].trim_start().starts_with(':') {
            return Some((text[..at].matches('\n').count() + 1, after));
        }
        start = after;
    }
    None
}

/// A wrongly typed value for a message: secret keys show only the JSON type, never the value
/// (a number or an object given as a password would otherwise end up in the log unmasked).
fn shown(key: &str, v: &serde_json::Value) -> String {
    if ["password", "secret", "token"].contains(&key) {
        match v {
            serde_json::Value::Bool(_) => "a boolean".into(),
            serde_json::Value::Number(_) => "a number".into(),
            serde_json::Value::Array(_) => "an array".into(),
            serde_json::Value::Object(_) => "an object".into(),
            _ => "another type".into(),
        }
    } else {
        v.to_string()
    }
}

/// Reads one config file, reporting *every* unknown key and wrongly typed value (with its line
/// when it can be found), not just the first one as a strict deserializer would.
fn read_config(path: &Path, display: &Path, problems: &mut Problems) -> RawConfig {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RawConfig::default(),
        Err(e) => {
            problems.add(Location::file(display), format!("cannot read file: {e}"));
            return RawConfig::default();
        }
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            problems.add(Location::line(display, e.line()), format!("invalid JSON: {e}"));
            return RawConfig::default();
        }
    };
    let serde_json::Value::Object(mut top) = value else {
        problems.add(
            Location::file(display),
            "expected a JSON object with `proxmox`, `host`, `login`, `password`, `token`",
        );
        return RawConfig::default();
    };
    let at = |key: &str, json_key: &str, from: usize| {
        let mut loc = Location::file(display);
        loc.line = key_line(&text, key, from).map(|(l, _)| l);
        loc.with_key(json_key)
    };
    let bad = |loc: Location, msg: String, problems: &mut Problems| problems.add(loc, msg);

    let mut proxmox = serde_json::Map::new();
    match top.remove("proxmox") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(map)) => {
            let from = key_line(&text, "proxmox", 0).map_or(0, |(_, o)| o);
            for (k, v) in map {
                let json_key = format!("proxmox.{k}");
                match PROXMOX_KEYS.iter().find(|(name, _)| *name == k) {
                    None => bad(
                        at(&k, &json_key, from),
                        format!(
                            "unknown key `{k}`; the `proxmox` section takes {}",
                            PROXMOX_KEYS.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        ),
                        problems,
                    ),
                    Some((_, true)) if !(v.is_string() || v.is_null()) => {
                        bad(at(&k, &json_key, from), format!("expected a string, found {}", shown(&k, &v)), problems)
                    }
                    Some((_, false)) if !(v.is_string() || v.is_number() || v.is_null()) => {
                        bad(at(&k, &json_key, from), format!("expected a number or a string, found {v}"), problems)
                    }
                    Some(_) => {
                        proxmox.insert(k, v);
                    }
                }
            }
        }
        Some(other) => bad(at("proxmox", "proxmox", 0), format!("expected an object, found {other}"), problems),
    }
    let mut kept = serde_json::Map::new();
    for (k, v) in top {
        if !TOP_KEYS.contains(&k.as_str()) {
            bad(
                at(&k, &k, 0),
                format!("unknown key `{k}`; a config file takes `proxmox`, `host`, `login`, `password`, `token`"),
                problems,
            );
        } else if !(v.is_string() || v.is_null()) {
            bad(at(&k, &k, 0), format!("expected a string, found {}", shown(&k, &v)), problems);
        } else {
            kept.insert(k, v);
        }
    }
    // `port` as a string ("8006") is accepted like the number.
    let port = match proxmox.remove("port") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => {
            let text_value = v.as_str().map(str::trim).map(str::to_string).unwrap_or_else(|| v.to_string());
            match text_value.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ if text_value.is_empty() => None,
                _ => {
                    problems.add(
                        at("port", "proxmox.port", key_line(&text, "proxmox", 0).map_or(0, |(_, o)| o)),
                        format!("expected a TCP port 1–65535, found {v}"),
                    );
                    None
                }
            }
        }
    };
    kept.insert("proxmox".into(), serde_json::Value::Object(proxmox));
    let mut raw: RawConfig = serde_json::from_value(serde_json::Value::Object(kept)).unwrap_or_default();
    raw.proxmox.port = port;
    raw
}

fn parse_mask(v: Option<serde_json::Value>, loc: Location, problems: &mut Problems) -> Option<u8> {
    let text = match v? {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) if s.trim().is_empty() => return None,
        serde_json::Value::String(s) => s,
        other => {
            problems.add(loc, format!("expected a prefix length 0–32, found {other}"));
            return None;
        }
    };
    match text.trim().trim_start_matches('/').parse::<u8>() {
        Ok(m) if m <= 32 => Some(m),
        _ => {
            problems.add(loc, format!("expected a prefix length 0–32, found `{text}`"));
            None
        }
    }
}

impl Settings {
    /// Loads settings for the monorepo at `root` from the config files and `env`.
    ///
    /// # Errors
    /// Unreadable or malformed config files, unknown keys, a bad `mask` or port: every problem
    /// with its file and line (or the env variable's name).
    pub fn load(root: &Path, env: &dyn EnvSource) -> Result<Settings, Problems> {
        let mut problems = Problems::new();
        let base_display = Path::new("local/config.json");
        let local_display = Path::new("local/config.local.json");
        let base = read_config(&root.join(base_display), base_display, &mut problems);
        let local = read_config(&root.join(local_display), local_display, &mut problems);
        // Every secret value the process learns is masked, including ones a higher layer
        // overrides: they are still in memory and must never reach a log unmasked.
        for raw in [&base, &local] {
            for v in [&raw.proxmox.password, &raw.proxmox.secret, &raw.password, &raw.token] {
                secret(v.clone());
            }
        }
        for var in SECRET_VARS {
            secret(env.get(var));
        }

        macro_rules! pick {
            ($env:literal, $field:ident) => {
                nonempty(env.get($env))
                    .or_else(|| nonempty(local.proxmox.$field.clone()))
                    .or_else(|| nonempty(base.proxmox.$field.clone()))
            };
        }
        macro_rules! pick_top {
            ($env:literal, $field:ident) => {
                nonempty(env.get($env))
                    .or_else(|| nonempty(local.$field.clone()))
                    .or_else(|| nonempty(base.$field.clone()))
            };
        }

        let port = match nonempty(env.get("PROXMOX_PORT")) {
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => {
                    problems.add(
                        Location::environment("PROXMOX_PORT"),
                        format!("expected a TCP port 1–65535, found `{p}`"),
                    );
                    8006
                }
            },
            None => local.proxmox.port.or(base.proxmox.port).unwrap_or(8006),
        };
        let mask = match nonempty(env.get("PROXMOX_MASK")) {
            Some(m) => {
                parse_mask(Some(serde_json::Value::String(m)), Location::environment("PROXMOX_MASK"), &mut problems)
            }
            None => {
                let local_mask = parse_mask(
                    local.proxmox.mask.clone(),
                    Location::file(local_display).with_key("proxmox.mask"),
                    &mut problems,
                );
                local_mask.or_else(|| {
                    parse_mask(
                        base.proxmox.mask.clone(),
                        Location::file(base_display).with_key("proxmox.mask"),
                        &mut problems,
                    )
                })
            }
        };

        let pve = PveSettings {
            host: pick!("PROXMOX_HOST", host),
            port,
            user: pick!("PROXMOX_USER", user),
            password: secret(pick!("PROXMOX_PASSWORD", password)),
            token: pick!("PROXMOX_TOKEN", token),
            secret: secret(pick!("PROXMOX_SECRET", secret)),
            node: pick!("PROXMOX_NODE", node),
            gateway: pick!("PROXMOX_GATEWAY", gateway),
            mask,
            interface: pick!("PROXMOX_INTERFACE", interface).unwrap_or_else(|| "eth0".into()),
            bridge: pick!("PROXMOX_BRIDGE", bridge).unwrap_or_else(|| "vmbr0".into()),
            storage: pick!("PROXMOX_STORAGE", storage),
            template: pick!("PROXMOX_TEMPLATE", template),
        };
        let share = pick!("PROXMOX_SHARE", share).unwrap_or_else(|| "/share".into());
        let gitea = GiteaSettings {
            host: pick_top!("HOST", host),
            login: pick_top!("LOGIN", login),
            password: secret(pick_top!("PASSWORD", password)),
            token: secret(pick_top!("GITEA_TOKEN", token)),
        };
        problems.into_result()?;
        Ok(Settings { pve, gitea, share: share.into() })
    }

    /// The non-secret view recorded in artifacts.
    pub fn public(&self) -> PublicSettings {
        PublicSettings {
            pve_host: self.pve.host.clone(),
            pve_port: self.pve.port,
            pve_user: self.pve.user.clone(),
            pve_token: self.pve.token.clone(),
            pve_auth: self.pve.auth_kind(),
            pve_node: self.pve.node.clone(),
            gateway: self.pve.gateway.clone(),
            mask: self.pve.mask,
            interface: self.pve.interface.clone(),
            bridge: self.pve.bridge.clone(),
            storage: self.pve.storage.clone(),
            template: self.pve.template.clone(),
            share: self.share.clone(),
            gitea_host: self.gitea.host.clone(),
            gitea_login: self.gitea.login.clone(),
            gitea_auth: self.gitea.auth_kind(),
        }
    }

    /// Every secret value configured (for tests that check artifacts and logs never contain one).
    pub fn secret_values(&self) -> Vec<String> {
        [&self.pve.password, &self.pve.secret, &self.gitea.password, &self.gitea.token]
            .into_iter()
            .flatten()
            .map(|s| s.expose_secret().to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn precedence_env_over_local_over_base() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("local")).unwrap();
        std::fs::write(
            dir.path().join("local/config.json"),
            r#"{"proxmox":{"host":"base","user":"root@pam","bridge":"vmbr1","mask":"24"},"login":"admin"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("local/config.local.json"),
            r#"{"proxmox":{"host":"local","password":"pw","mask":16}}"#,
        )
        .unwrap();
        let env: BTreeMap<String, String> =
            [("PROXMOX_HOST".to_string(), "fromenv".to_string()), ("PROXMOX_NODE".into(), "".into())].into();
        let s = Settings::load(dir.path(), &env).unwrap();
        assert_eq!(s.pve.host.as_deref(), Some("fromenv"));
        assert_eq!(s.pve.bridge, "vmbr1");
        assert_eq!(s.pve.mask, Some(16));
        assert_eq!(s.pve.node, None);
        assert_eq!(s.pve.auth_kind(), PveAuthKind::Password);
        assert_eq!(s.gitea.login.as_deref(), Some("admin"));
        assert_eq!(s.secret_values(), vec!["pw".to_string()]);
    }

    #[test]
    fn unknown_key_is_an_error_with_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("local")).unwrap();
        std::fs::write(dir.path().join("local/config.json"), "{\n \"proxmox\": {\n  \"hots\": \"x\"\n }\n}\n").unwrap();
        let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
        assert_eq!(e.0[0].location.file, Path::new("local/config.json"));
        assert_eq!(e.0[0].location.line, Some(3));
        assert!(e.0[0].message.contains("hots"), "{}", e.0[0].message);
    }

    #[test]
    fn every_bad_key_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("local")).unwrap();
        std::fs::write(
            dir.path().join("local/config.json"),
            "{\n \"proxmox\": {\n  \"hots\": \"x\",\n  \"port\": \"http\",\n  \"user\": 5\n },\n \"logn\": \"a\"\n}\n",
        )
        .unwrap();
        let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
        let got: Vec<(Option<usize>, Option<&str>)> =
            e.iter().map(|p| (p.location.line, p.location.key.as_deref())).collect();
        assert_eq!(
            got,
            vec![
                (Some(3), Some("proxmox.hots")),
                (Some(4), Some("proxmox.port")),
                (Some(5), Some("proxmox.user")),
                (Some(7), Some("logn")),
            ]
        );
    }

    #[test]
    fn a_mistyped_secret_is_not_echoed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("local")).unwrap();
        std::fs::write(
            dir.path().join("local/config.local.json"),
            r#"{"proxmox": {"password": 31415926}, "token": {"t": "zz-secret-zz"}}"#,
        )
        .unwrap();
        let e = Settings::load(dir.path(), &BTreeMap::new()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("(proxmox.password): expected a string, found a number"), "{text}");
        assert!(text.contains("(token): expected a string, found an object"), "{text}");
        assert!(!text.contains("31415926") && !text.contains("zz-secret-zz"), "{text}");
    }
}
