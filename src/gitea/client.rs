//! The transport of the Gitea client: one [`Client`] per instance and identity, one request with
//! retries ([`Client::send`]), status errors with Gitea's own message, and JSON decoding. The API
//! calls themselves live in the sibling modules, one per resource.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::{Method, StatusCode};
use secrecy::ExposeSecret;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use super::background::{CREATE_PULL_PATIENCE, MERGE_PATIENCE, Patience};
use super::{Auth, GiteaError, MAX_ATTEMPTS, MAX_PAGES, PAGE_LIMIT, REQUEST_TIMEOUT, base_url};
use crate::settings::GiteaSettings;

/// A Gitea API client bound to one instance and one identity.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: Option<Auth>,
    backoff: ExponentialBuilder,
    pub(super) create_pull_patience: Patience,
    pub(super) merge_patience: Patience,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base.as_str()).field("auth", &self.auth).finish()
    }
}

/// One answer: status and body bytes.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) body: Vec<u8>,
}

impl Client {
    /// A client for the Gitea at `base` (see [`base_url`]) with `auth`.
    ///
    /// # Errors
    /// [`GiteaError::Config`] for a bad base URL or when the HTTP client cannot be built.
    pub fn new(base: &str, auth: Option<Auth>) -> Result<Client, GiteaError> {
        let base = base_url(base)?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("proxmox-gitops/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| GiteaError::Config(format!("cannot build the HTTP client: {e}")))?;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(3))
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter();
        Ok(Client {
            http,
            base,
            auth,
            backoff,
            create_pull_patience: CREATE_PULL_PATIENCE,
            merge_patience: MERGE_PATIENCE,
        })
    }

    /// A client from the settings (`HOST`, `GITEA_TOKEN` or `LOGIN`/`PASSWORD`); `base`
    /// overrides `HOST`.
    ///
    /// # Errors
    /// [`GiteaError::Config`] when no host is known or the URL is bad.
    pub fn from_settings(settings: &GiteaSettings, base: Option<&str>) -> Result<Client, GiteaError> {
        let host = base.map(str::to_string).or_else(|| settings.host.clone()).ok_or_else(|| {
            GiteaError::Config(format!(
                "no Gitea address; {}",
                crate::error::Hint::PassOption { option: "--gitea URL".into(), variable: Some("HOST".into()) }
            ))
        })?;
        Client::new(&host, Auth::from_settings(settings))
    }

    /// Sets the backoff between retries (tests use short delays).
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff =
            ExponentialBuilder::default().with_min_delay(min).with_max_delay(max).with_max_times(MAX_ATTEMPTS - 1);
        self
    }

    /// Sets how long [`Client::create_pull`] and [`Client::merge_pull`] wait for Gitea's
    /// background work (see [`Patience`]; defaults [`CREATE_PULL_PATIENCE`] and
    /// [`MERGE_PATIENCE`]). Tests of the bounded failure use short ones.
    pub fn with_patience(mut self, create_pull: Patience, merge: Patience) -> Self {
        self.create_pull_patience = create_pull;
        self.merge_patience = merge;
        self
    }

    /// The base URL (no trailing slash), e.g. `http://10.0.0.2:8080`.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The authentication in use.
    pub fn auth(&self) -> Option<&Auth> {
        self.auth.as_ref()
    }

    /// The clone URL of `owner/repo`: `<base>/<owner>/<repo>.git` (no credentials).
    pub fn clone_url(&self, owner: &str, repo: &str) -> String {
        format!("{}/{owner}/{repo}.git", self.base.as_str().trim_end_matches('/'))
    }

    fn url(&self, segments: &[&str]) -> (Url, String) {
        let mut url = self.base.clone();
        {
            let mut s = url.path_segments_mut().expect("http(s) URLs have a path");
            s.pop_if_empty();
            s.extend(["api", "v1"]);
            s.extend(segments);
        }
        let display = format!("/{}", segments.join("/"));
        (url, display)
    }

    /// Sends one request with retries; returns the final answer whatever its status.
    pub(super) async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<(Answer, String), GiteaError> {
        let (mut url, path) = self.url(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let idempotent = method != Method::POST;
        let attempt = || async {
            let mut req = self.http.request(method.clone(), url.clone()).header("Accept", "application/json");
            req = match &self.auth {
                Some(Auth::Token(t)) => req.header("Authorization", format!("token {}", t.expose_secret())),
                Some(Auth::Basic { login, password }) => req.basic_auth(login, Some(password.expose_secret())),
                None => req,
            };
            if let Some(b) = &body {
                req = req.header("Content-Type", "application/json").body(b.clone());
            }
            let transport = |source: reqwest::Error| GiteaError::Transport {
                method: method.clone(),
                path: path.clone(),
                source: source.without_url(),
            };
            let resp = req.send().await.map_err(transport)?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(transport)?.to_vec();
            tracing::debug!("Gitea {method} {path} → {}", status.as_u16());
            if status.is_server_error() {
                return Err(GiteaError::Status {
                    method: method.clone(),
                    path: path.clone(),
                    status: status.as_u16(),
                    message: error_message(&bytes),
                });
            }
            Ok(Answer { status, body: bytes })
        };
        let answer = attempt
            .retry(self.backoff)
            .sleep(tokio::time::sleep)
            .when(|e: &GiteaError| e.retryable(idempotent))
            .notify(|e: &GiteaError, dur: Duration| {
                tracing::warn!("{e}; retrying in {:.1}s", dur.as_secs_f64());
            })
            .await?;
        Ok((answer, path))
    }

    /// `GET segments?…&page=…&limit=…` page after page (at most [`MAX_PAGES`] of
    /// [`PAGE_LIMIT`], stopping at the first short page): every item of a Gitea list endpoint,
    /// in Gitea's order. `query` holds the endpoint's own parameters.
    ///
    /// # Errors
    /// [`GiteaError::Status`] for an answer other than 200 (e.g. 404: no such organization or
    /// repository), [`GiteaError::Decode`] for a body that is not a list of `T`.
    pub(super) async fn get_pages<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Vec<T>, GiteaError> {
        let mut out = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut q = query.to_vec();
            q.push(("page", page.to_string()));
            q.push(("limit", PAGE_LIMIT.to_string()));
            let (a, path) = self.send(Method::GET, segments, &q, None).await?;
            if a.status.as_u16() != 200 {
                return Err(Self::status_error(Method::GET, path, &a));
            }
            let items: Vec<T> = Self::decode(Method::GET, path, &a)?;
            let n = items.len();
            out.extend(items);
            if n < PAGE_LIMIT as usize {
                break;
            }
        }
        Ok(out)
    }

    pub(super) fn status_error(method: Method, path: String, a: &Answer) -> GiteaError {
        GiteaError::Status { method, path, status: a.status.as_u16(), message: error_message(&a.body) }
    }

    pub(super) fn decode<T: DeserializeOwned>(method: Method, path: String, a: &Answer) -> Result<T, GiteaError> {
        serde_json::from_slice(&a.body).map_err(|source| GiteaError::Decode {
            method,
            path,
            status: a.status.as_u16(),
            source,
        })
    }

    pub(super) fn json<B: Serialize>(body: &B) -> Option<Vec<u8>> {
        Some(serde_json::to_vec(body).expect("option structs serialize"))
    }
}

/// Gitea's error message from an `APIError` body, from a merge conflict's body (`repoMergePullRequest`
/// answers 409 with the conflict error's fields `Style`, `StdOut`, `StdErr`: the `CONFLICT …`
/// lines of git are kept), or the start of the body; secrets redacted.
fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ApiError {
        message: Option<String>,
        errors: Option<Vec<String>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Conflict {
        style: String,
        std_out: String,
        std_err: String,
    }
    if let Ok(c) = serde_json::from_slice::<Conflict>(body) {
        let text = format!("{}\n{}", c.std_out, c.std_err);
        let lines: Vec<&str> =
            text.lines().map(str::trim).filter(|l| l.starts_with("CONFLICT") || l.starts_with("fatal:")).collect();
        let detail = if lines.is_empty() { c.std_err.trim().chars().take(300).collect() } else { lines.join("; ") };
        let what = if c.style.starts_with("rebase") { "rebase conflict" } else { "merge conflict" };
        return crate::actions::redact(&if detail.is_empty() { what.to_string() } else { format!("{what}: {detail}") });
    }
    let text = match serde_json::from_slice::<ApiError>(body) {
        Ok(ApiError { message: Some(m), errors }) if !m.is_empty() => match errors {
            Some(e) if !e.is_empty() => format!("{m} ({})", e.join("; ")),
            _ => m,
        },
        _ => {
            let s = String::from_utf8_lossy(body);
            let s = s.trim();
            if s.is_empty() { "(empty body)".to_string() } else { s.chars().take(300).collect() }
        }
    };
    crate::actions::redact(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_urls_and_clone_urls() {
        let c = Client::new("http://127.0.0.1:3000/prefix/", None).unwrap();
        let (u, p) = c.url(&["repos", "main", "a b", "actions", "variables", "X"]);
        assert_eq!(u.as_str(), "http://127.0.0.1:3000/prefix/api/v1/repos/main/a%20b/actions/variables/X");
        assert_eq!(p, "/repos/main/a b/actions/variables/X");
        assert_eq!(c.clone_url("main", "nginx"), "http://127.0.0.1:3000/prefix/main/nginx.git");
        let c = Client::new("http://127.0.0.1:3000", None).unwrap();
        assert_eq!(c.url(&["orgs"]).0.as_str(), "http://127.0.0.1:3000/api/v1/orgs");
    }
    #[test]
    fn error_messages() {
        assert_eq!(error_message(br#"{"message":"repo exists","url":"x"}"#), "repo exists");
        assert_eq!(error_message(br#"{"message":"bad","errors":["a","b"]}"#), "bad (a; b)");
        assert_eq!(error_message(b""), "(empty body)");
        assert_eq!(error_message(b"plain"), "plain");
        let conflict = br#"{"Style":"merge","StdOut":"abc\n100644 1 2\ta\n\nAuto-merging a\nCONFLICT (add/add): Merge conflict in a","StdErr":"","Err":{}}"#;
        assert_eq!(error_message(conflict), "merge conflict: CONFLICT (add/add): Merge conflict in a");
        let unrelated =
            br#"{"Style":"rebase","StdOut":"","StdErr":"fatal: refusing to merge unrelated histories","Err":{}}"#;
        assert_eq!(error_message(unrelated), "rebase conflict: fatal: refusing to merge unrelated histories");
    }

    #[tokio::test]
    async fn connection_errors_are_retried_then_named() {
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let c = Client::new(&format!("http://127.0.0.1:{port}"), None)
            .unwrap()
            .with_backoff(Duration::from_millis(1), Duration::from_millis(5));
        let e = c.get_org("main").await.unwrap_err();
        assert!(matches!(e, GiteaError::Transport { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with("Gitea GET /orgs/main: "), "{msg}");
        assert!(!msg.contains("127.0.0.1"), "the URL is left out of transport errors: {msg}");
        assert!(e.retryable(false), "a refused connection is retried even for POST");
        let s = GiteaError::Status { method: Method::POST, path: "/orgs".into(), status: 500, message: "x".into() };
        assert!(!s.retryable(false) && s.retryable(true));
        assert_eq!(s.to_string(), "Gitea POST /orgs: HTTP 500: x");
    }
}
