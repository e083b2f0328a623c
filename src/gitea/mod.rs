//! A thin typed client for the Gitea REST API (`/api/v1`).
//!
//! Every call here is an operation of Gitea's official Swagger description
//! (`templates/swagger/v1-swagger.generated.json`, Gitea 1.25): the doc comment of each method
//! names the `operationId`, the path and the status codes it treats as success. Request bodies
//! are the spec's `*Option` definitions; responses are decoded into the subset of the spec's
//! definitions the tool needs (unknown fields ignored).
//!
//! Why our own client: the published Gitea crates lag behind the API and lack the Actions
//! variable endpoints; the part we need is small.
//!
//! * **Authentication**: `Authorization: token …` (Gitea's `AuthorizationHeaderToken`) or HTTP
//!   basic auth (`BasicAuth`), from [`crate::settings::GiteaSettings`]. Credentials only ever go
//!   into headers: never into a URL (so never into a log line or an error message), never into
//!   a process argument. A base URL carrying `user:pass@` is refused.
//! * **Retries**: idempotent requests (GET, PUT, PATCH, DELETE) are retried on connection
//!   errors, timeouts and 5xx answers with exponential backoff, at most [`MAX_ATTEMPTS`]
//!   attempts; a POST is retried only when the connection failed before the request was sent
//!   (it cannot have had an effect).
//! * **Gitea's background work** (`background`): the answers Gitea gives until it has recorded a
//!   pushed branch (404 from `repoCreatePullRequest`) or checked a pull request (405 "Please try
//!   again later" from `repoMergePullRequest`) are retried within a [`Patience`].
//! * **Errors** ([`GiteaError`]) name the method, the API path, the HTTP status and Gitea's own
//!   `message` (the `APIError` body `{"message": …, "url": …}`).
//!
//! Layout: this file holds the errors, the authentication and the base URL; `client` the
//! transport (one request with retries and decoding); `repos` the calls on users, organizations,
//! repositories, forks, pull requests (listing, reading, editing and merging them) and branch
//! comparisons; `variables` the Actions variables (list, get, create, update, delete) and their
//! name rule; `secrets` the Actions secrets (list the names, create or update one); `types` the
//! request and response bodies; `names` the repository-name rules.

mod background;
mod client;
pub mod names;
pub mod release;
mod repos;
mod secrets;
pub mod types;
mod variables;

use std::time::Duration;

use reqwest::Method;
use secrecy::SecretString;
use url::Url;

use crate::settings::GiteaSettings;
pub use background::{CREATE_PULL_PATIENCE, MERGE_PATIENCE, Patience};
pub use client::Client;
pub use secrets::SecretWritten;
pub use types::*;
pub use variables::{VariableNameError, VariableScope, valid_variable_name};

/// Most attempts for one request (first try included).
pub const MAX_ATTEMPTS: usize = 4;
/// Timeout of one HTTP request, connect included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Items per page when listing (Gitea's default `MAX_RESPONSE_ITEMS` is 50).
pub const PAGE_LIMIT: u32 = 50;
/// Most pages read when listing (bounds every list loop).
pub const MAX_PAGES: u32 = 100;

/// Errors of the Gitea client.
#[derive(Debug, thiserror::Error)]
pub enum GiteaError {
    /// Gitea answered with an unexpected HTTP status.
    #[error("Gitea {method} {path}: HTTP {status}: {message}")]
    Status {
        /// HTTP method.
        method: Method,
        /// API path below `/api/v1`, e.g. `/repos/main/nginx`.
        path: String,
        /// The HTTP status code.
        status: u16,
        /// Gitea's `message`, or the start of the body.
        message: String,
    },
    /// The request could not be sent or the answer not read (connection refused, timeout, …).
    #[error("Gitea {method} {path}: {source}")]
    Transport {
        /// HTTP method.
        method: Method,
        /// API path.
        path: String,
        /// The transport error (without URL credentials: the URL never carries any).
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not the JSON the spec describes.
    #[error("Gitea {method} {path}: unexpected answer ({status}): {source}")]
    Decode {
        /// HTTP method.
        method: Method,
        /// API path.
        path: String,
        /// The HTTP status code.
        status: u16,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The configuration cannot produce a client (bad base URL, no credentials).
    #[error("Gitea configuration: {0}")]
    Config(String),
}

impl GiteaError {
    /// The HTTP status, for [`GiteaError::Status`] and [`GiteaError::Decode`].
    pub fn status(&self) -> Option<u16> {
        match self {
            GiteaError::Status { status, .. } | GiteaError::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn retryable(&self, idempotent: bool) -> bool {
        match self {
            GiteaError::Status { status, .. } => idempotent && *status >= 500,
            GiteaError::Transport { source, .. } => {
                source.is_connect() || (idempotent && (source.is_timeout() || source.is_request()))
            }
            _ => false,
        }
    }
}

/// How requests are authenticated.
#[derive(Clone)]
pub enum Auth {
    /// `Authorization: token <token>`.
    Token(SecretString),
    /// HTTP basic auth with login and password.
    Basic {
        /// The login (user name).
        login: String,
        /// The password.
        password: SecretString,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token(***)"),
            Auth::Basic { login, .. } => write!(f, "Auth::Basic({login}, ***)"),
        }
    }
}

impl Auth {
    /// The auth configured in `settings`: a token wins over login/password (as
    /// [`GiteaSettings::auth_kind`]); `None` when neither is complete.
    pub fn from_settings(settings: &GiteaSettings) -> Option<Auth> {
        if let Some(t) = &settings.token {
            return Some(Auth::Token(t.clone()));
        }
        match (&settings.login, &settings.password) {
            (Some(l), Some(p)) => Some(Auth::Basic { login: l.clone(), password: p.clone() }),
            _ => None,
        }
    }
}

/// Normalizes the control-plane address to a base URL without trailing slash.
///
/// Accepts `http(s)://host[:port][/prefix]` as is, and a bare `host` or `host:port` the way the
/// seed addresses its control plane (`http://<host>:8080`).
///
/// # Errors
/// A URL that does not parse, is not http(s), or carries credentials / query / fragment.
pub fn base_url(host: &str) -> Result<Url, GiteaError> {
    let raw = host.trim();
    // The text as shown in messages: credentials redacted (they are refused below anyway).
    let host = crate::remote_url::redact(raw);
    let text = if raw.contains("://") {
        raw.to_string()
    } else if raw.contains(':') {
        format!("http://{raw}")
    } else {
        format!("http://{raw}:8080")
    };
    let mut url =
        Url::parse(&text).map_err(|e| GiteaError::Config(format!("`{host}` is not a valid Gitea URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(GiteaError::Config(format!("`{host}`: expected an http:// or https:// URL")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(GiteaError::Config(
            "the Gitea URL must not contain credentials; use LOGIN/PASSWORD or GITEA_TOKEN (login/password or token in \
             local/config.json)"
                .into(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(GiteaError::Config(format!("`{host}`: a Gitea base URL has no query or fragment")));
    }
    let path = url.path().trim_end_matches('/').to_string();
    url.set_path(&path);
    Ok(url)
}

/// Outcome of a create call that may find the object already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created<T> {
    /// Created now.
    New(T),
    /// Gitea said it exists (409, or 422 for organizations).
    Exists,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("10.0.0.2").unwrap().as_str(), "http://10.0.0.2:8080/");
        assert_eq!(base_url("10.0.0.2:3000").unwrap().as_str(), "http://10.0.0.2:3000/");
        assert_eq!(base_url("https://git.example/gitea/").unwrap().as_str(), "https://git.example/gitea");
        assert!(base_url("http://u:p@h/").unwrap_err().to_string().contains("must not contain credentials"));
        assert!(base_url("ftp://h/").is_err());
    }
    #[test]
    fn auth_debug_hides_secrets() {
        let a = Auth::Basic { login: "admin".into(), password: SecretString::from("pw123".to_string()) };
        assert_eq!(format!("{a:?}"), "Auth::Basic(admin, ***)");
    }
}
