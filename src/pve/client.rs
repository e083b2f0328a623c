//! [`PveClient`]: authenticated, bounded requests to `https://HOST:PORT/api2/json`.
//!
//! **Authentication** (PVE API docs, "Authentication"):
//!
//! * ticket — `POST /access/ticket` with `username` and `password` in the form body (never in the
//!   URL); the answer's `ticket` is sent as cookie `PVEAuthCookie`, its `CSRFPreventionToken` as a
//!   header on every write. Tickets live two hours; on a 401 the client logs in again **once** per
//!   request and repeats it. Concurrent requests share one session and one re-login;
//! * API token — header `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`, no CSRF.
//!
//! Secret header values are marked sensitive (hyper never logs them) and registered with
//! [`crate::actions::mask`]; request parameters are never logged.
//!
//! **Retries**: a request that got no HTTP answer (connection refused/reset, timeout) is repeated
//! with capped exponential backoff only when the caller says replaying it is safe
//! ([`Replay::Safe`]: reads, and writes whose repetition the caller detects, such as a create whose
//! second attempt answers "already exists"). A `GET` (or `HEAD`) that got a gateway error —
//! `502`, `503` or `504`, which `pveproxy` or a proxy in front of it answers while a daemon
//! restarts or is overloaded ([`PveError::is_gateway_error`]) — is repeated the same way: a read
//! cannot have changed anything. A write is never repeated after an HTTP answer, not even a 5xx:
//! it may have been carried out behind the proxy. Every repetition is logged (INFO, with the error
//! and the delay); their number is [`ClientOptions::transport_retries`], each delay at most 2 s.
//! Everything else is reported at once. PVE's own errors are never retried here; lock conflicts
//! are the backend's business (it knows the operation).
//!
//! **Timeouts**: PVE answers a read in milliseconds, so a read that has not answered within
//! [`ClientOptions::read_timeout`] (10 s; the login too) is abandoned — a half-open connection,
//! a proxy that stalls — and, being safe to repeat, sent again on a fresh connection. A write
//! may wait 10 s for the container's config lock on PVE's side before PVE even starts it, so it
//! gets [`ClientOptions::request_timeout`] (60 s), and is only sent again when the caller says
//! that is safe. A connection attempt is bounded by the smaller of the read timeout and 10 s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::PveError;
use super::error::parse_answer;
use super::tls::{self, TlsMode};

/// How the client authenticates.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Ticket auth with `user` (`root@pam`) and password.
    Ticket {
        /// `USER@REALM`.
        user: String,
        /// The password (secret).
        password: SecretString,
    },
    /// API token `USER@REALM!TOKENID` with its secret.
    Token {
        /// `USER@REALM`.
        user: String,
        /// Token id (after `!`).
        token: String,
        /// Token secret (a UUID; secret).
        secret: SecretString,
    },
}

impl Auth {
    /// True when PVE treats the caller as `root@pam` for the options it reserves to root (bind
    /// mounts, devices, most feature flags): only a `root@pam` **ticket** qualifies — PVE compares
    /// the authenticated id with `root@pam`, and a token's id is `root@pam!TOKENID`
    /// (pve-container `LXC.pm` `check_ct_modify_config_perm`).
    pub fn is_root(&self) -> bool {
        matches!(self, Auth::Ticket { user, .. } if user == "root@pam")
    }

    /// The identity PVE sees: `USER@REALM` or `USER@REALM!TOKENID`.
    pub fn identity(&self) -> String {
        match self {
            Auth::Ticket { user, .. } => user.clone(),
            Auth::Token { user, token, .. } => format!("{user}!{token}"),
        }
    }
}

/// Whether a request may be sent again after it got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Repeating it cannot do harm (reads; writes whose repetition the caller recognises).
    Safe,
    /// Not repeated on transport errors.
    Unsafe,
}

/// The default [`ClientOptions::read_timeout`]: 10 s (PVE answers reads in milliseconds; a slow
/// storage listing takes a few seconds).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`ClientOptions::request_timeout`] of writes: 60 s.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Connection options.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Host name or address (no scheme, no port).
    pub host: String,
    /// API port (8006).
    pub port: u16,
    /// Certificate verification.
    pub tls: TlsMode,
    /// Timeout of one write (POST, PUT, DELETE) until its whole answer arrived: PVE holds a
    /// write up to 10 s while it waits for a config lock, before it starts the work.
    pub request_timeout: Duration,
    /// Timeout of one read (GET, HEAD, and the ticket login) until its whole answer arrived;
    /// a read that timed out is repeated like any read without answer.
    pub read_timeout: Duration,
    /// How many times a request without answer (when [`Replay::Safe`]), or a read answered
    /// 502/503/504, is repeated.
    pub transport_retries: usize,
    /// First backoff delay between those repetitions (doubling, capped at 2 s, jittered).
    pub retry_delay: Duration,
    /// The JSON file where learned task durations are kept across runs (see
    /// [`super::task_wait::TaskTimes`]); `None` keeps them for this client's life only.
    pub task_times: Option<std::path::PathBuf>,
}

impl ClientOptions {
    /// Options with defaults: port 8006, system roots, 60 s per write
    /// ([`DEFAULT_WRITE_TIMEOUT`]), 10 s per read ([`DEFAULT_READ_TIMEOUT`]), 6 retries from
    /// 100 ms.
    pub fn new(host: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            port: 8006,
            tls: TlsMode::System,
            request_timeout: DEFAULT_WRITE_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            transport_retries: 6,
            retry_delay: Duration::from_millis(100),
            task_times: None,
        }
    }
}

#[derive(Debug)]
struct Session {
    ticket: SecretString,
    csrf: SecretString,
    generation: u64,
}

/// A PVE API client; cheap to share (`Arc`), safe to use from many tasks at once.
pub struct PveClient {
    http: reqwest::Client,
    base: url::Url,
    auth: Auth,
    opts: ClientOptions,
    session: RwLock<Option<Arc<Session>>>,
    login: tokio::sync::Mutex<u64>,
    requests: AtomicU64,
    logins: AtomicU64,
    presented: tls::Presented,
    task_times: super::task_wait::TaskTimes,
    /// PVE's clock minus ours, seconds, from the last answer's `Date` header.
    clock_offset: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for PveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PveClient").field("base", &self.base.as_str()).field("identity", &self.auth.identity()).finish()
    }
}

/// Joins the API base and a path such as `/nodes/pve1/lxc/101/config`, percent-encoding each
/// segment (node names, UPIDs and storage ids are taken literally).
fn url_for(base: &url::Url, path: &str) -> url::Url {
    let mut url = base.clone();
    if let Ok(mut segs) = url.path_segments_mut() {
        segs.pop_if_empty();
        segs.extend(path.trim_start_matches('/').split('/'));
    }
    url
}

fn form_encode(params: &[(&str, String)]) -> String {
    let mut ser = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        ser.append_pair(k, v);
    }
    ser.finish()
}

fn sensitive(value: &str) -> Result<HeaderValue, PveError> {
    let mut v = HeaderValue::from_str(value)
        .map_err(|_| PveError::Config("credentials contain characters not allowed in an HTTP header".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

impl PveClient {
    /// Builds a client; nothing is sent until the first request (a ticket login happens then).
    ///
    /// # Errors
    /// [`PveError::Config`] for an unusable TLS set-up (see [`tls::client_config`]).
    pub fn new(opts: ClientOptions, auth: Auth) -> Result<Self, PveError> {
        if opts.tls == TlsMode::Insecure {
            tracing::warn!(
                "--insecure: the certificate of {} is NOT verified; anyone on the path can read the PVE credentials. \
                 Use --pve-fingerprint or --pve-ca instead.",
                opts.host
            );
        }
        match &auth {
            Auth::Ticket { password, .. } => crate::actions::mask(password.expose_secret()),
            Auth::Token { secret, .. } => crate::actions::mask(secret.expose_secret()),
        }
        let (config, presented) = tls::client_config_recording(&opts.tls)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(config)
            .timeout(opts.request_timeout.max(opts.read_timeout))
            .connect_timeout(opts.read_timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("proxmox-gitops/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PveError::Config(format!("cannot build the HTTP client: {e}")))?;
        let host = if opts.host.contains(':') && !opts.host.starts_with('[') {
            format!("[{}]", opts.host)
        } else {
            opts.host.clone()
        };
        let base = url::Url::parse(&format!("https://{host}:{}/api2/json", opts.port)).map_err(|e| {
            PveError::Config(format!("PROXMOX_HOST `{}` is not a host name or address: {e}", opts.host))
        })?;
        let task_times = super::task_wait::TaskTimes::new(base.as_str(), opts.task_times.clone());
        Ok(Self {
            task_times,
            http,
            base,
            auth,
            opts,
            session: RwLock::new(None),
            login: tokio::sync::Mutex::new(0),
            requests: AtomicU64::new(0),
            logins: AtomicU64::new(0),
            presented,
            clock_offset: std::sync::atomic::AtomicI64::new(0),
        })
    }

    /// The authentication in use.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// `https://HOST:PORT/api2/json`.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// PVE's time, seconds since the Unix epoch: this machine's clock corrected by the offset
    /// seen in the last answer's `Date` header (pve-http-server's `PVE::APIServer::AnyEvent`
    /// sets it on every response from the node's clock); this machine's own clock before any
    /// answer. Runs on several runners agree on time through it, whatever their own clocks say
    /// (leases, see `backend::pve::lease`). Whole seconds.
    pub fn server_now(&self) -> u64 {
        let local = unix_now();
        local.saturating_add_signed(self.clock_offset.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The learned task durations ([`PveClient::wait_task`] polls by them).
    pub fn task_times(&self) -> &super::task_wait::TaskTimes {
        &self.task_times
    }

    /// HTTP requests sent so far (every attempt, logins included).
    pub fn request_count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Ticket logins done so far.
    pub fn login_count(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }

    /// `GET path` with `params` in the query string; returns `data`. Like the other raw calls
    /// it is visible only inside this module: the rest of the crate goes through the typed
    /// calls ([`PveClient::ct`], [`PveClient::node`], [`PveClient::cluster_resources`]), so a
    /// path is built in one place.
    ///
    /// # Errors
    /// See [`PveClient::call`].
    pub(in crate::pve) async fn get(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::GET, path, params, Replay::Safe).await
    }

    /// `POST path` with a form body; returns `data` (a UPID for asynchronous calls).
    ///
    /// # Errors
    /// See [`PveClient::call`].
    pub(in crate::pve) async fn post(
        &self,
        path: &str,
        params: &[(&str, String)],
        replay: Replay,
    ) -> Result<Value, PveError> {
        self.call(Method::POST, path, params, replay).await
    }

    /// `PUT path` with a form body.
    ///
    /// # Errors
    /// See [`PveClient::call`].
    pub(in crate::pve) async fn put(
        &self,
        path: &str,
        params: &[(&str, String)],
        replay: Replay,
    ) -> Result<Value, PveError> {
        self.call(Method::PUT, path, params, replay).await
    }

    /// `DELETE path` with `params` in the query string.
    ///
    /// # Errors
    /// See [`PveClient::call`].
    pub(in crate::pve) async fn delete(
        &self,
        path: &str,
        params: &[(&str, String)],
        replay: Replay,
    ) -> Result<Value, PveError> {
        self.call(Method::DELETE, path, params, replay).await
    }

    /// Sends one API request and returns the `data` member of the answer.
    ///
    /// Ticket auth logs in first when there is no session, and once more after a 401.
    ///
    /// # Errors
    /// [`PveError::Api`] for an HTTP error (with PVE's message and per-field `errors`),
    /// [`PveError::Transport`] when no answer came (after the retries [`Replay::Safe`] allows),
    /// [`PveError::Decode`] for an answer that is not PVE's JSON.
    pub(in crate::pve) async fn call(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
        replay: Replay,
    ) -> Result<Value, PveError> {
        let mut relogged = false;
        loop {
            let session = match &self.auth {
                Auth::Ticket { .. } => Some(self.session().await?),
                Auth::Token { .. } => None,
            };
            let res = self.send_retrying(&method, path, params, replay, session.as_deref()).await;
            match res {
                Err(e) if e.is_unauthorized() && !relogged && session.is_some() => {
                    let generation = session.as_ref().map(|s| s.generation).unwrap_or(0);
                    tracing::info!("{method} {path}: ticket refused (401), logging in again");
                    self.relogin(generation).await?;
                    relogged = true;
                }
                other => return other,
            }
        }
    }

    async fn session(&self) -> Result<Arc<Session>, PveError> {
        if let Some(s) = self.session.read().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(s);
        }
        self.relogin(0).await
    }

    /// Logs in unless another task already replaced the session of `generation`.
    async fn relogin(&self, generation: u64) -> Result<Arc<Session>, PveError> {
        let mut current = self.login.lock().await;
        if let Some(s) = self.session.read().unwrap_or_else(|e| e.into_inner()).clone()
            && s.generation != generation
        {
            return Ok(s);
        }
        let Auth::Ticket { user, password } = &self.auth else {
            return Err(PveError::Config("no ticket auth configured".into()));
        };
        let params = [("username", user.clone()), ("password", password.expose_secret().to_string())];
        let data = self.send_retrying(&Method::POST, "/access/ticket", &params, Replay::Safe, None).await?;
        self.logins.fetch_add(1, Ordering::Relaxed);
        if data.get("NeedTFA").and_then(Value::as_i64).unwrap_or(0) != 0 {
            return Err(PveError::Config(format!(
                "{user} needs a second factor (TFA) to log in; use an API token (PROXMOX_TOKEN + PROXMOX_SECRET) instead"
            )));
        }
        let field = |k: &str| {
            data.get(k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| PveError::Decode {
                method: "POST".into(),
                path: "/access/ticket".into(),
                detail: format!("no `{k}` in the login answer"),
            })
        };
        let ticket = field("ticket")?;
        let csrf = field("CSRFPreventionToken")?;
        crate::actions::mask(&ticket);
        crate::actions::mask(&csrf);
        *current += 1;
        let s = Arc::new(Session { ticket: ticket.into(), csrf: csrf.into(), generation: *current });
        *self.session.write().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
        tracing::debug!("logged in to {} as {user}", self.opts.host);
        Ok(s)
    }

    async fn send_retrying(
        &self,
        method: &Method,
        path: &str,
        params: &[(&str, String)],
        replay: Replay,
        session: Option<&Session>,
    ) -> Result<Value, PveError> {
        let times = if replay == Replay::Safe { self.opts.transport_retries } else { 0 };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.opts.retry_delay)
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(times)
            .with_jitter();
        let read = *method == Method::GET || *method == Method::HEAD;
        let mut retry = 0;
        (|| self.send_once(method, path, params, session))
            .retry(backoff)
            .when(|e: &PveError| worth_repeating(e, read))
            .notify(|e: &PveError, d: Duration| {
                retry += 1;
                tracing::info!("{e}; repeating in {} ms (retry {retry} of {times})", d.as_millis());
            })
            .await
    }

    async fn send_once(
        &self,
        method: &Method,
        path: &str,
        params: &[(&str, String)],
        session: Option<&Session>,
    ) -> Result<Value, PveError> {
        let mut url = url_for(&self.base, path);
        let write = *method != Method::GET && *method != Method::HEAD;
        let body_in_query = *method == Method::GET || *method == Method::DELETE;
        if body_in_query && !params.is_empty() {
            url.set_query(Some(&form_encode(params)));
        }
        let mut headers = HeaderMap::new();
        match (&self.auth, session) {
            (Auth::Token { user, token, secret }, _) => {
                headers.insert(
                    reqwest::header::AUTHORIZATION,
                    sensitive(&format!("PVEAPIToken={user}!{token}={}", secret.expose_secret()))?,
                );
            }
            (Auth::Ticket { .. }, Some(s)) => {
                headers.insert(
                    reqwest::header::COOKIE,
                    sensitive(&format!("PVEAuthCookie={}", s.ticket.expose_secret()))?,
                );
                if write {
                    headers.insert("CSRFPreventionToken", sensitive(s.csrf.expose_secret())?);
                }
            }
            (Auth::Ticket { .. }, None) => {}
        }
        // A read (and the login, which changes nothing) answers fast or is stuck.
        let quick = !write || path == "/access/ticket";
        let timeout = if quick { self.opts.read_timeout } else { self.opts.request_timeout };
        let mut req = self.http.request(method.clone(), url).headers(headers).timeout(timeout);
        if !body_in_query {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form_encode(params));
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        tracing::trace!("{method} {path}");
        let transport = |e: reqwest::Error| {
            let detail = if e.is_timeout() {
                format!(
                    "no answer within {:.1} s ({}): {}",
                    timeout.as_secs_f64(),
                    if quick { "read timeout" } else { "write timeout" },
                    error_chain(&e)
                )
            } else {
                error_chain(&e)
            };
            // A certificate the verifier refused stays refused: report it at once.
            let refused_cert = detail.contains("certificate") || detail.contains("fingerprint");
            if refused_cert && let Some(fp) = self.presented.refused() {
                return PveError::Untrusted {
                    method: method.to_string(),
                    path: path.to_string(),
                    detail,
                    fingerprint: tls::colon_hex(&fp),
                };
            }
            let retryable = !(e.is_builder() || refused_cert);
            PveError::Transport { method: method.to_string(), path: path.to_string(), detail, retryable }
        };
        let resp = req.send().await.map_err(transport)?;
        if let Some(server) =
            resp.headers().get(reqwest::header::DATE).and_then(|v| v.to_str().ok()).and_then(http_date)
        {
            let offset = server - i64::try_from(unix_now()).unwrap_or(i64::MAX);
            self.clock_offset.store(offset, std::sync::atomic::Ordering::Relaxed);
        }
        let status = resp.status();
        let reason = status.canonical_reason().unwrap_or("").to_string();
        let bytes = resp.bytes().await.map_err(transport)?;
        parse_answer(method.as_str(), path, status.as_u16(), &reason, &bytes)
    }
}

/// Seconds since the Unix epoch, by this machine's clock.
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// An HTTP `Date` header (RFC 9110 IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`, as Perl's
/// `HTTP::Date::time2str` writes it) as Unix seconds; `None` for any other form.
fn http_date(value: &str) -> Option<i64> {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(value.trim(), fmt).ok().map(|t| t.assume_utc().unix_timestamp())
}

/// Whether a request that failed with `e` may be sent again (the caller allowing replays): when
/// no answer came (and a repetition can help), or when a read (`read`: GET/HEAD) got a gateway
/// error (502/503/504). A write that got any HTTP answer is never repeated.
fn worth_repeating(e: &PveError, read: bool) -> bool {
    matches!(e, PveError::Transport { retryable: true, .. }) || (read && e.is_gateway_error())
}

/// The error and its sources, `: `-joined (reqwest hides the TLS cause in the chain).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    crate::actions::redact(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_as_pve_writes_them() {
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(http_date("Wed, 02 Dec 2026 00:30:45 GMT"), Some(1_796_171_445));
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(http_date("garbage"), None);
    }

    #[test]
    fn gateway_errors_are_repeated_for_reads_only() {
        let api = |status| PveError::Api {
            method: "GET".into(),
            path: "/nodes/pve1/status".into(),
            status,
            message: "Service Unavailable".into(),
            errors: Default::default(),
        };
        for status in [502, 503, 504] {
            assert!(worth_repeating(&api(status), true), "{status}");
            assert!(!worth_repeating(&api(status), false), "{status} on a write");
        }
        for status in [400, 401, 403, 500, 501, 595, 596] {
            assert!(!worth_repeating(&api(status), true), "{status}");
        }
        let transport = |retryable| PveError::Transport {
            method: "POST".into(),
            path: "/nodes/pve1/lxc".into(),
            detail: "connection reset".into(),
            retryable,
        };
        assert!(worth_repeating(&transport(true), false));
        assert!(!worth_repeating(&transport(false), true));
    }

    #[test]
    fn urls() {
        let base = url::Url::parse("https://127.0.0.1:8006/api2/json").unwrap();
        assert_eq!(
            url_for(&base, "/nodes/pve1/tasks/UPID:pve1:000003E8:00001B58:6B0DA64A:download:local:root@pam:/status")
                .as_str(),
            "https://127.0.0.1:8006/api2/json/nodes/pve1/tasks/UPID:pve1:000003E8:00001B58:6B0DA64A:download:local:root@pam:/status"
        );
        assert_eq!(form_encode(&[("net0", "name=eth0,ip=1.2.3.4/24".into())]), "net0=name%3Deth0%2Cip%3D1.2.3.4%2F24");
    }

    #[test]
    fn root_rule() {
        let t = Auth::Ticket { user: "root@pam".into(), password: "x".to_string().into() };
        assert!(t.is_root());
        let k = Auth::Token { user: "root@pam".into(), token: "ci".into(), secret: "s".to_string().into() };
        assert!(!k.is_root());
        assert_eq!(k.identity(), "root@pam!ci");
    }
}
