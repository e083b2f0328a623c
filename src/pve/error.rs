//! Errors of the PVE API client, and how an HTTP answer becomes data or one of them
//! ([`parse_answer`]).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// An error talking to PVE. Every variant names the request (`METHOD /path`) it is about; none
/// carries a secret (tickets, passwords and token secrets are never part of a path or message).
#[derive(Debug, thiserror::Error)]
pub enum PveError {
    /// PVE answered with an HTTP error: `message` is PVE's (`{"data":null,"message":…}`, or the
    /// plain-text body, or the HTTP reason), `errors` the per-field map of a 400.
    #[error("{method} {path}: HTTP {status}: {message}{}", FieldErrors(errors))]
    Api {
        /// HTTP method.
        method: String,
        /// API path below `/api2/json`.
        path: String,
        /// HTTP status code.
        status: u16,
        /// PVE's message, trimmed.
        message: String,
        /// Per-parameter errors (400 "Parameter verification failed.").
        errors: BTreeMap<String, String>,
    },
    /// No HTTP answer: connection refused/reset, TLS failure, timeout.
    #[error("{method} {path}: {detail}")]
    Transport {
        /// HTTP method.
        method: String,
        /// API path.
        path: String,
        /// The transport error with its causes (e.g. the certificate verification failure).
        detail: String,
        /// False for failures a repetition cannot fix (certificate verification, bad URL).
        retryable: bool,
    },
    /// The TLS handshake failed because the server's certificate is not trusted (unknown issuer,
    /// wrong name, or another fingerprint than the pinned one). `fingerprint` is the SHA-256 of
    /// the certificate the server presented, `AA:BB:…` as PVE shows `ssl_fingerprint`; the
    /// message names the `PROXMOX_FINGERPRINT=…` setting that would trust it.
    #[error(
        "{method} {path}: the PVE API's certificate is not trusted ({detail}); to trust the certificate \
         it presented, set PROXMOX_FINGERPRINT={fingerprint}\n  \
         That is its SHA-256 fingerprint: check it is your PVE node's (`pvenode cert info` on the node, \
         or the node's System → Certificates panel in the PVE UI). Also possible: \
         --pve-fingerprint {fingerprint}, or trust the cluster CA with PROXMOX_CA=FILE (--pve-ca FILE), \
         FILE holding a copy of the node's /etc/pve/pve-root-ca.pem."
    )]
    Untrusted {
        /// HTTP method.
        method: String,
        /// API path.
        path: String,
        /// The verifier's reason (with the transport error's causes).
        detail: String,
        /// SHA-256 of the presented end-entity certificate, colon-separated upper-case hex.
        fingerprint: String,
    },
    /// The answer was not the JSON expected.
    #[error("{method} {path}: unexpected answer: {detail}")]
    Decode {
        /// HTTP method.
        method: String,
        /// API path.
        path: String,
        /// What did not match.
        detail: String,
    },
    /// A task ended with an error (`TASK ERROR: …`); `log_tail` holds the last lines of its log.
    #[error("task {upid} failed: {exit_status}{}", LogTail(log_tail))]
    Task {
        /// The task's UPID.
        upid: String,
        /// Its exit status (the error message).
        exit_status: String,
        /// The last lines of `/nodes/{node}/tasks/{upid}/log`.
        log_tail: Vec<String>,
    },
    /// A wait did not finish in time (the task may still run on PVE).
    #[error("{what}: no result after {secs} s (timeout)")]
    Timeout {
        /// What was waited for (e.g. the UPID).
        what: String,
        /// The timeout in seconds.
        secs: u64,
    },
    /// Bad client configuration (unreadable CA file, malformed fingerprint, missing credentials).
    #[error("{0}")]
    Config(String),
}

struct FieldErrors<'a>(&'a BTreeMap<String, String>);

impl fmt::Display for FieldErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}: {}", v.trim())).collect();
        write!(f, " ({})", parts.join("; "))
    }
}

struct LogTail<'a>(&'a [String]);

impl fmt::Display for LogTail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "\n  task log (last {} lines):", self.0.len())?;
        for l in self.0 {
            write!(f, "\n    {l}")?;
        }
        Ok(())
    }
}

impl PveError {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            PveError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// PVE's message (API error) or the task's exit status (task error).
    pub fn message(&self) -> Option<&str> {
        match self {
            PveError::Api { message, .. } => Some(message),
            PveError::Task { exit_status, .. } => Some(exit_status),
            _ => None,
        }
    }

    /// True for PVE's "does not exist" answers (HTTP 500 `Configuration file … does not exist`),
    /// which mean the guest is absent (pve-container `LXC/Config.pm` `load_config`).
    pub fn is_absent(&self) -> bool {
        matches!(self, PveError::Api { status: 500, message, .. } if message.contains("does not exist"))
    }

    /// True for a config-lock conflict that clears by itself: `CT is locked (…)`,
    /// `VM is locked (…)`, `can't lock file '…' - got timeout` (PVE `AbstractConfig::lock_config`
    /// and `check_lock`), whether answered directly or as a task's exit status.
    pub fn is_locked(&self) -> bool {
        self.message().is_some_and(is_lock_message)
    }

    /// True for PVE's config file lock that another worker holds: `can't lock file
    /// '/run/lock/lxc/pve-config-VMID.lock' - got timeout` (pve-common `PVE::Tools::lock_file`,
    /// through `AbstractConfig::lock_config`, after PVE waited 10 s for the `flock`). A lock,
    /// held by a running task or API call; not a changed config ([`PveError::is_config_changed`]).
    pub fn is_file_lock_timeout(&self) -> bool {
        self.message().is_some_and(is_file_lock_message)
    }

    /// The lock file a [`PveError::is_file_lock_timeout`] error names
    /// (`/run/lock/lxc/pve-config-101.lock`), as PVE quoted it.
    pub fn locked_file(&self) -> Option<&str> {
        let m = self.message().filter(|m| is_file_lock_message(m))?;
        let rest = m.split_once("can't lock file '")?.1;
        rest.split_once('\'').map(|(file, _)| file).filter(|f| !f.is_empty())
    }

    /// True for a lost compare-and-set: `detected modified configuration - file changed by other
    /// user? Try again.` (pve-common `PVE::Tools::assert_if_modified`), the answer to a write
    /// whose `digest` is not the config's any more. The config changed; nothing is locked.
    pub fn is_config_changed(&self) -> bool {
        self.message().is_some_and(|m| m.contains("detected modified configuration"))
    }

    /// True for `… already exists …` (create of a vmid in use).
    pub fn is_already_exists(&self) -> bool {
        self.message().is_some_and(|m| m.contains("already exists"))
    }

    /// True for "already running" (start of a running guest).
    pub fn is_already_running(&self) -> bool {
        self.message().is_some_and(|m| m.contains("already running"))
    }

    /// True for "not running" (stop/shutdown of a stopped guest).
    pub fn is_not_running(&self) -> bool {
        self.message().is_some_and(|m| m.contains("not running"))
    }

    /// True for the gateway errors 502 (Bad Gateway), 503 (Service Unavailable) and 504 (Gateway
    /// Timeout): `pveproxy` (or a reverse proxy in front of it) could not get an answer from the
    /// API daemon right now. Passing, but not proof that nothing happened: the client repeats
    /// reads that got one, never writes.
    pub fn is_gateway_error(&self) -> bool {
        matches!(self.status(), Some(502..=504))
    }

    /// True for 401: the ticket expired or was revoked, or the CSRF token was refused.
    pub fn is_unauthorized(&self) -> bool {
        self.status() == Some(401)
    }
}

/// True when `msg` is a lock conflict message (see [`PveError::is_locked`]).
pub fn is_lock_message(msg: &str) -> bool {
    msg.contains("is locked (") || is_file_lock_message(msg)
}

/// True when `msg` says PVE's config file lock is held (see [`PveError::is_file_lock_timeout`]).
fn is_file_lock_message(msg: &str) -> bool {
    msg.contains("can't lock file") && msg.contains("got timeout")
}

/// Interprets an HTTP answer: `data` for 2xx; otherwise [`PveError::Api`] with PVE's message
/// (JSON `message`, else the plain-text body, else the HTTP reason) and per-field `errors`.
pub fn parse_answer(method: &str, path: &str, status: u16, reason: &str, body: &[u8]) -> Result<Value, PveError> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        return match json {
            Some(v) => Ok(v.get("data").cloned().unwrap_or(Value::Null)),
            None => Err(PveError::Decode {
                method: method.into(),
                path: path.into(),
                detail: format!("HTTP {status} with a body that is not JSON: {}", snippet(body)),
            }),
        };
    }
    let mut errors = std::collections::BTreeMap::new();
    let mut message = None;
    if let Some(v) = &json {
        message = v.get("message").and_then(Value::as_str).map(|m| m.trim().to_string()).filter(|m| !m.is_empty());
        if let Some(map) = v.get("errors").and_then(Value::as_object) {
            for (k, e) in map {
                let text = e.as_str().map(str::to_string).unwrap_or_else(|| e.to_string());
                errors.insert(k.clone(), text.trim().to_string());
            }
        }
    }
    let message = message
        .or_else(|| if json.is_none() { Some(snippet(body)).filter(|s| !s.is_empty()) } else { None })
        .unwrap_or_else(|| reason.to_string());
    Err(PveError::Api {
        method: method.into(),
        path: path.into(),
        status,
        message: crate::actions::redact(&message),
        errors,
    })
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut s: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(
            parse_answer("GET", "/version", 200, "OK", br#"{"data":{"v":1}}"#).unwrap(),
            serde_json::json!({"v":1})
        );
        let e = parse_answer("POST", "/nodes/pve1/lxc", 400, "Parameter verification failed.",
            br#"{"data":null,"message":"Parameter verification failed.\n","errors":{"memory":"type check ('integer') failed - got 'abc'\n"}}"#).unwrap_err();
        match &e {
            PveError::Api { status, message, errors, .. } => {
                assert_eq!(*status, 400);
                assert_eq!(message, "Parameter verification failed.");
                assert_eq!(errors["memory"], "type check ('integer') failed - got 'abc'");
            }
            other => panic!("{other:?}"),
        }
        // Plain-text bodies (a proxy, or PVE's own non-JSON errors).
        let e = parse_answer("GET", "/x", 502, "Bad Gateway", b"<html>upstream down</html>").unwrap_err();
        assert_eq!(e.to_string(), "GET /x: HTTP 502: <html>upstream down</html>");
        let e = parse_answer("GET", "/x", 596, "", b"").unwrap_err();
        assert_eq!(e.to_string(), "GET /x: HTTP 596: ");
        assert!(matches!(parse_answer("GET", "/x", 200, "OK", b"nope"), Err(PveError::Decode { .. })));
    }

    #[test]
    fn display_and_classes() {
        let e = PveError::Api {
            method: "POST".into(),
            path: "/nodes/pve1/lxc".into(),
            status: 400,
            message: "Parameter verification failed.".into(),
            errors: [("memory".to_string(), "type check ('integer') failed - got 'abc'\n".to_string())].into(),
        };
        assert_eq!(
            e.to_string(),
            "POST /nodes/pve1/lxc: HTTP 400: Parameter verification failed. (memory: type check ('integer') failed - got 'abc')"
        );
        let absent = PveError::Api {
            method: "GET".into(),
            path: "/nodes/pve1/lxc/100/config".into(),
            status: 500,
            message: "Configuration file 'nodes/pve1/lxc/100.conf' does not exist".into(),
            errors: BTreeMap::new(),
        };
        assert!(absent.is_absent());
        assert!(!absent.is_locked());
        assert!(is_lock_message("CT is locked (backup)"));
        assert!(is_lock_message("can't lock file '/run/lock/lxc/pve-config-101.lock' - got timeout"));
        assert!(!is_lock_message("CT 101 already running"));
        let api = |message: &str| PveError::Api {
            method: "PUT".into(),
            path: "/nodes/pve1/lxc/101/config".into(),
            status: 500,
            message: message.into(),
            errors: BTreeMap::new(),
        };
        let held = api("can't lock file '/run/lock/lxc/pve-config-101.lock' - got timeout");
        assert!(held.is_locked() && held.is_file_lock_timeout() && !held.is_config_changed());
        assert_eq!(held.locked_file(), Some("/run/lock/lxc/pve-config-101.lock"));
        let changed = api("detected modified configuration - file changed by other user? Try again.");
        assert!(changed.is_config_changed() && !changed.is_locked() && !changed.is_file_lock_timeout());
        assert_eq!(changed.locked_file(), None);
        let property = api("CT is locked (backup)");
        assert!(property.is_locked() && !property.is_file_lock_timeout() && property.locked_file().is_none());
        let t = PveError::Task {
            upid: "UPID:x".into(),
            exit_status: "boom".into(),
            log_tail: vec!["a".into(), "TASK ERROR: boom".into()],
        };
        assert_eq!(t.to_string(), "task UPID:x failed: boom\n  task log (last 2 lines):\n    a\n    TASK ERROR: boom");
    }
}
