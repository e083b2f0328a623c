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
//! * **Errors** ([`GiteaError`]) name the method, the API path, the HTTP status and Gitea's own
//!   `message` (the `APIError` body `{"message": …, "url": …}`).

pub mod types;

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::settings::GiteaSettings;
pub use types::*;

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
    let host = host.trim();
    let text = if host.contains("://") {
        host.to_string()
    } else if host.contains(':') {
        format!("http://{host}")
    } else {
        format!("http://{host}:8080")
    };
    let mut url =
        Url::parse(&text).map_err(|e| GiteaError::Config(format!("`{host}` is not a valid Gitea URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(GiteaError::Config(format!("`{host}`: expected an http:// or https:// URL")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(GiteaError::Config(
            "the Gitea URL must not contain credentials; use LOGIN/PASSWORD or GITEA_TOKEN".into(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(GiteaError::Config(format!("`{host}`: a Gitea base URL has no query or fragment")));
    }
    let path = url.path().trim_end_matches('/').to_string();
    url.set_path(&path);
    Ok(url)
}

/// Scope of an Actions variable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(tag = "scope", rename_all = "lowercase")]
pub enum VariableScope {
    /// Organization variables: `/orgs/{org}/actions/variables`.
    Org {
        /// The organization.
        org: String,
    },
    /// Repository variables: `/repos/{owner}/{repo}/actions/variables`.
    Repo {
        /// The owner.
        owner: String,
        /// The repository.
        repo: String,
    },
}

impl VariableScope {
    fn segments(&self) -> Vec<&str> {
        match self {
            VariableScope::Org { org } => vec!["orgs", org, "actions", "variables"],
            VariableScope::Repo { owner, repo } => vec!["repos", owner, repo, "actions", "variables"],
        }
    }
}

impl std::fmt::Display for VariableScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VariableScope::Org { org } => write!(f, "org {org}"),
            VariableScope::Repo { owner, repo } => write!(f, "repo {owner}/{repo}"),
        }
    }
}

/// Outcome of a create call that may find the object already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created<T> {
    /// Created now.
    New(T),
    /// Gitea said it exists (409, or 422 for organizations).
    Exists,
}

/// A Gitea API client bound to one instance and one identity.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: Option<Auth>,
    backoff: ExponentialBuilder,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base.as_str()).field("auth", &self.auth).finish()
    }
}

/// One answer: status and body bytes.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
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
        Ok(Client { http, base, auth, backoff })
    }

    /// A client from the settings (`HOST`, `GITEA_TOKEN` or `LOGIN`/`PASSWORD`); `base`
    /// overrides `HOST`.
    ///
    /// # Errors
    /// [`GiteaError::Config`] when no host is known or the URL is bad.
    pub fn from_settings(settings: &GiteaSettings, base: Option<&str>) -> Result<Client, GiteaError> {
        let host = base
            .map(str::to_string)
            .or_else(|| settings.host.clone())
            .ok_or_else(|| GiteaError::Config("no Gitea address: set HOST (or pass --gitea URL)".into()))?;
        Client::new(&host, Auth::from_settings(settings))
    }

    /// Sets the backoff between retries (tests use short delays).
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff =
            ExponentialBuilder::default().with_min_delay(min).with_max_delay(max).with_max_times(MAX_ATTEMPTS - 1);
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
    async fn send(
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

    fn status_error(method: Method, path: String, a: &Answer) -> GiteaError {
        GiteaError::Status { method, path, status: a.status.as_u16(), message: error_message(&a.body) }
    }

    fn decode<T: DeserializeOwned>(method: Method, path: String, a: &Answer) -> Result<T, GiteaError> {
        serde_json::from_slice(&a.body).map_err(|source| GiteaError::Decode {
            method,
            path,
            status: a.status.as_u16(),
            source,
        })
    }

    fn json<B: Serialize>(body: &B) -> Option<Vec<u8>> {
        Some(serde_json::to_vec(body).expect("option structs serialize"))
    }

    /// `GET /user` (`userGetCurrent`, 200): the authenticated user.
    pub async fn current_user(&self) -> Result<User, GiteaError> {
        let (a, path) = self.send(Method::GET, &["user"], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `GET /orgs/{org}` (`orgGet`, 200/404).
    pub async fn get_org(&self, org: &str) -> Result<Option<Organization>, GiteaError> {
        let (a, path) = self.send(Method::GET, &["orgs", org], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST /orgs` (`orgCreate`, 201); 422 (Gitea's "user already exists") and 409 give
    /// [`Created::Exists`] when the org can then be read.
    pub async fn create_org(&self, opt: &CreateOrgOption) -> Result<Created<Organization>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["orgs"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 | 422 => match self.get_org(&opt.username).await? {
                Some(_) => Ok(Created::Exists),
                None => Err(Self::status_error(Method::POST, path, &a)),
            },
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}` (`repoGet`, 200/404).
    pub async fn get_repo(&self, owner: &str, repo: &str) -> Result<Option<Repository>, GiteaError> {
        let (a, path) = self.send(Method::GET, &["repos", owner, repo], &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST /orgs/{org}/repos` (`createOrgRepo`, 201); 409 (exists) gives [`Created::Exists`].
    pub async fn create_org_repo(&self, org: &str, opt: &CreateRepoOption) -> Result<Created<Repository>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["orgs", org, "repos"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `PATCH /repos/{owner}/{repo}` (`repoEdit`, 200).
    pub async fn edit_repo(&self, owner: &str, repo: &str, opt: &EditRepoOption) -> Result<Repository, GiteaError> {
        let (a, path) = self.send(Method::PATCH, &["repos", owner, repo], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::PATCH, path, &a),
            _ => Err(Self::status_error(Method::PATCH, path, &a)),
        }
    }

    /// `POST /repos/{owner}/{repo}/forks` (`createFork`, 202); 409 (the fork exists) gives
    /// [`Created::Exists`].
    pub async fn create_fork(
        &self,
        owner: &str,
        repo: &str,
        opt: &CreateForkOption,
    ) -> Result<Created<Repository>, GiteaError> {
        let (a, path) = self.send(Method::POST, &["repos", owner, repo, "forks"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            202 => Self::decode(Method::POST, path, &a).map(Created::New),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `GET /repos/{owner}/{repo}/pulls?state=…&base_branch=…` (`repoListPullRequests`, 200),
    /// all pages (at most [`MAX_PAGES`] of [`PAGE_LIMIT`]).
    pub async fn list_pulls(
        &self,
        owner: &str,
        repo: &str,
        state: &str,
        base_branch: Option<&str>,
    ) -> Result<Vec<PullRequest>, GiteaError> {
        let mut out = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut q =
                vec![("state", state.to_string()), ("page", page.to_string()), ("limit", PAGE_LIMIT.to_string())];
            if let Some(b) = base_branch {
                q.push(("base_branch", b.to_string()));
            }
            let (a, path) = self.send(Method::GET, &["repos", owner, repo, "pulls"], &q, None).await?;
            if a.status.as_u16() != 200 {
                return Err(Self::status_error(Method::GET, path, &a));
            }
            let items: Vec<PullRequest> = Self::decode(Method::GET, path, &a)?;
            let n = items.len();
            out.extend(items);
            if n < PAGE_LIMIT as usize {
                break;
            }
        }
        Ok(out)
    }

    /// `POST /repos/{owner}/{repo}/pulls` (`repoCreatePullRequest`, 201).
    pub async fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        opt: &CreatePullRequestOption,
    ) -> Result<PullRequest, GiteaError> {
        let (a, path) = self.send(Method::POST, &["repos", owner, repo, "pulls"], &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 => Self::decode(Method::POST, path, &a),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `GET …/actions/variables/{variablename}` (`getOrgVariable` / `getRepoVariable`,
    /// 200/404).
    pub async fn get_variable(&self, scope: &VariableScope, name: &str) -> Result<Option<ActionVariable>, GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::GET, &seg, &[], None).await?;
        match a.status.as_u16() {
            200 => Self::decode(Method::GET, path, &a).map(Some),
            404 => Ok(None),
            _ => Err(Self::status_error(Method::GET, path, &a)),
        }
    }

    /// `POST …/actions/variables/{variablename}` (`createOrgVariable` / `createRepoVariable`,
    /// 201 → [`Created::New`], 409 → [`Created::Exists`]).
    pub async fn create_variable(
        &self,
        scope: &VariableScope,
        name: &str,
        opt: &CreateVariableOption,
    ) -> Result<Created<()>, GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::POST, &seg, &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 | 204 => Ok(Created::New(())),
            409 => Ok(Created::Exists),
            _ => Err(Self::status_error(Method::POST, path, &a)),
        }
    }

    /// `PUT …/actions/variables/{variablename}` (`updateOrgVariable` / `updateRepoVariable`,
    /// 201/204).
    pub async fn update_variable(
        &self,
        scope: &VariableScope,
        name: &str,
        opt: &UpdateVariableOption,
    ) -> Result<(), GiteaError> {
        let mut seg = scope.segments();
        seg.push(name);
        let (a, path) = self.send(Method::PUT, &seg, &[], Self::json(opt)).await?;
        match a.status.as_u16() {
            201 | 204 => Ok(()),
            _ => Err(Self::status_error(Method::PUT, path, &a)),
        }
    }
}

/// Gitea's error message from an `APIError` body, or the start of the body; secrets redacted.
fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ApiError {
        message: Option<String>,
        errors: Option<Vec<String>>,
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
    crate::ci::redact(&text)
}

/// True when `name` is a valid Actions variable name for this tool: `^[A-Z_][A-Z0-9_]*$`, not
/// starting with `GITEA_` or `GITHUB_` (Gitea's Actions name rule; Gitea upper-cases names, we
/// demand them upper-case so the files and the UI agree).
pub fn valid_variable_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if !ok {
        return Err(format!(
            "`{name}` is not a valid variable name: expected upper-case letters, digits and `_`, \
             not starting with a digit (^[A-Z_][A-Z0-9_]*$)"
        ));
    }
    if name.starts_with("GITEA_") || name.starts_with("GITHUB_") {
        return Err(format!("`{name}`: variable names must not start with GITEA_ or GITHUB_ (reserved by Actions)"));
    }
    Ok(())
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
    fn variable_names() {
        for ok in ["A", "_X", "IP_1", "SHARE_PATH"] {
            assert!(valid_variable_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1A", "a", "Foo", "A-B", "GITEA_X", "GITHUB_TOKEN", "A B", "É"] {
            assert!(valid_variable_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(error_message(br#"{"message":"repo exists","url":"x"}"#), "repo exists");
        assert_eq!(error_message(br#"{"message":"bad","errors":["a","b"]}"#), "bad (a; b)");
        assert_eq!(error_message(b""), "(empty body)");
        assert_eq!(error_message(b"plain"), "plain");
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

    #[test]
    fn auth_debug_hides_secrets() {
        let a = Auth::Basic { login: "admin".into(), password: SecretString::from("pw123".to_string()) };
        assert_eq!(format!("{a:?}"), "Auth::Basic(admin, ***)");
    }
}
