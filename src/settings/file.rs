//! Reading one settings file (`local/config.json`, `local/config.local.json`): every unknown key
//! and wrongly typed value is reported with its line, secrets are never echoed.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Location, Problems};

/// Raw `proxmox` section of a config file (all optional; keys and types are checked by
/// [`read_config`] before this is built).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawProxmox {
    pub(super) host: Option<String>,
    #[serde(skip)]
    pub(super) port: Option<u16>,
    pub(super) user: Option<String>,
    pub(super) password: Option<String>,
    pub(super) token: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) node: Option<String>,
    pub(super) gateway: Option<String>,
    pub(super) mask: Option<serde_json::Value>,
    pub(super) interface: Option<String>,
    pub(super) bridge: Option<String>,
    pub(super) storage: Option<String>,
    pub(super) template: Option<String>,
    pub(super) share: Option<String>,
}

/// Raw config file.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) proxmox: RawProxmox,
    pub(super) host: Option<String>,
    pub(super) login: Option<String>,
    pub(super) password: Option<String>,
    pub(super) token: Option<String>,
    /// The checkout action (`PROXMOX_GITOPS_CHECKOUT`), checked by `Settings::load`.
    pub(super) checkout: Option<String>,
    #[serde(default)]
    pub(super) control_plane: RawControlPlane,
}

/// Raw `control_plane` section of a config file: where the programs of the control plane's
/// container are on this host (all optional strings).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawControlPlane {
    pub(super) gitea_binary: Option<String>,
    pub(super) gitea_static: Option<String>,
    pub(super) runner_binary: Option<String>,
}

/// What a key of a config file's section takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// A string.
    Text,
    /// A number or a string (`port`, `mask`).
    NumberOrText,
    /// A path: a string.
    Path,
}

/// Keys of the `control_plane` section: paths on this host.
const CONTROL_PLANE_KEYS: &[(&str, Takes)] =
    &[("gitea_binary", Takes::Path), ("gitea_static", Takes::Path), ("runner_binary", Takes::Path)];

/// Keys of the `proxmox` section.
const PROXMOX_KEYS: &[(&str, Takes)] = &[
    ("host", Takes::Text),
    ("port", Takes::NumberOrText),
    ("user", Takes::Text),
    ("password", Takes::Text),
    ("token", Takes::Text),
    ("secret", Takes::Text),
    ("node", Takes::Text),
    ("gateway", Takes::Text),
    ("mask", Takes::NumberOrText),
    ("interface", Takes::Text),
    ("bridge", Takes::Text),
    ("storage", Takes::Text),
    ("template", Takes::Text),
    ("share", Takes::Text),
];

/// Top-level keys of a config file besides `proxmox` (all strings).
const TOP_KEYS: &[&str] = &["host", "login", "password", "token", "checkout"];

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
pub(super) fn read_config(path: &Path, display: &Path, problems: &mut Problems) -> RawConfig {
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
            "expected a JSON object with `proxmox`, `control_plane`, `host`, `login`, `password`, `token`, `checkout`",
        );
        return RawConfig::default();
    };
    let at = |key: &str, json_key: &str, from: usize| {
        let mut loc = Location::file(display);
        loc.line = key_line(&text, key, from).map(|(l, _)| l);
        loc.with_key(json_key)
    };
    let bad = |loc: Location, msg: String, problems: &mut Problems| problems.add(loc, msg);

    let mut section = |name: &str, keys: &[(&str, Takes)], problems: &mut Problems| {
        let mut kept = serde_json::Map::new();
        match top.remove(name) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(map)) => {
                let from = key_line(&text, name, 0).map_or(0, |(_, o)| o);
                for (k, v) in map {
                    let json_key = format!("{name}.{k}");
                    let expected = match keys.iter().find(|(key, _)| *key == k) {
                        None => {
                            let known = keys.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                            let msg = format!("unknown key `{k}`; the `{name}` section takes {known}");
                            bad(at(&k, &json_key, from), msg, problems);
                            continue;
                        }
                        Some((_, Takes::Text)) if !(v.is_string() || v.is_null()) => "a string",
                        Some((_, Takes::Path)) if !(v.is_string() || v.is_null()) => "a path (a string)",
                        Some((_, Takes::NumberOrText)) if !(v.is_string() || v.is_number() || v.is_null()) => {
                            "a number or a string"
                        }
                        Some(_) => {
                            kept.insert(k, v);
                            continue;
                        }
                    };
                    bad(at(&k, &json_key, from), format!("expected {expected}, found {}", shown(&k, &v)), problems);
                }
            }
            Some(other) => bad(at(name, name, 0), format!("expected an object, found {other}"), problems),
        }
        kept
    };
    let mut proxmox = section("proxmox", PROXMOX_KEYS, problems);
    let control_plane = section("control_plane", CONTROL_PLANE_KEYS, problems);
    let mut kept = serde_json::Map::new();
    for (k, v) in top {
        if !TOP_KEYS.contains(&k.as_str()) {
            bad(
                at(&k, &k, 0),
                format!(
                    "unknown key `{k}`; a config file takes `proxmox`, `control_plane`, `host`, `login`, \
                     `password`, `token`, `checkout`"
                ),
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
    kept.insert("control_plane".into(), serde_json::Value::Object(control_plane));
    let mut raw: RawConfig = serde_json::from_value(serde_json::Value::Object(kept)).unwrap_or_default();
    raw.proxmox.port = port;
    raw
}

pub(super) fn parse_mask(v: Option<serde_json::Value>, loc: Location, problems: &mut Problems) -> Option<u8> {
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
