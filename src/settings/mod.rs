//! Settings for the external systems: Proxmox VE and the Gitea control plane.
//!
//! Sources, lowest precedence first (the seed's layout and names):
//!
//! 1. `local/config.json` — a template committed to the monorepo, no secrets;
//! 2. `local/config.local.json` — the user's machine-local values (git-ignored);
//! 3. environment variables: `PROXMOX_HOST`, `PROXMOX_PORT`, `PROXMOX_USER`, `PROXMOX_PASSWORD`,
//!    `PROXMOX_TOKEN` (or `PROXMOX_TOKEN_ID`), `PROXMOX_SECRET` (or `PROXMOX_TOKEN_SECRET`),
//!    `PROXMOX_NODE`, `PROXMOX_GATEWAY`, `PROXMOX_MASK`,
//!    `PROXMOX_INTERFACE`, `PROXMOX_BRIDGE`, `PROXMOX_STORAGE`, `PROXMOX_TEMPLATE`,
//!    `PROXMOX_SHARE`, and for Gitea `HOST`, `LOGIN`, `PASSWORD`, `GITEA_TOKEN`; the checkout
//!    action the workflows use, `PROXMOX_GITOPS_CHECKOUT` (see [`CheckoutAction`]).
//!
//! An empty string anywhere means "not set". The JSON files have the shape
//!
//! ```json
//! { "proxmox": { "host": "", "port": 8006, "user": "root@pam", "password": "", "token": "",
//!                "secret": "", "node": "", "gateway": "", "mask": "24", "interface": "eth0",
//!                "bridge": "vmbr0", "storage": "local:vztmpl", "template": "", "share": "" },
//!   "host": "", "login": "", "password": "", "token": "", "checkout": "actions/checkout@v4" }
//! ```
//!
//! Unknown keys are input errors (a typo must not silently drop a setting). The API token may be
//! given as `TOKENID` with `PROXMOX_USER`, as `USER@REALM!TOKENID`, or whole as
//! `USER@REALM!TOKENID=SECRET` in the token or the secret setting; a user given twice is refused
//! (the rules are in `token`). `PROXMOX_HOST` takes
//! a host name, an address or an `https://HOST[:PORT]` URL (see `host`).
//!
//! Secret values (`proxmox.password`, `proxmox.secret`, `password`, `token`) are held as
//! [`SecretString`], are registered with [`crate::actions::mask`] the moment they are read, and the
//! types here are deliberately not `Serialize`: artifacts record only [`PveAuthKind`] and
//! [`GiteaAuthKind`], via [`PublicSettings`].
//!
//! Layout: this file holds the settings types and their precedence ([`Settings::load`]); `file`
//! reads and checks one config file (every unknown key and wrong type, with its line).

mod checkout;
mod file;
mod host;
#[cfg(test)]
mod tests;
mod token;

use std::path::Path;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::error::{EntryPoint, Location, Problems};

use file::{parse_mask, read_config};

pub use checkout::{ACTIONS_CHECKOUT, CheckoutAction, DEFAULT_CHECKOUT};

/// How the PVE API is authenticated, as recorded in artifacts (never the secret itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PveAuthKind {
    /// `PROXMOX_USER` + `PROXMOX_PASSWORD`: ticket auth (`POST /access/ticket`).
    Password,
    /// An API token (`PROXMOX_TOKEN` + `PROXMOX_SECRET`, in any of their forms): token auth.
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
    /// API host name or address (`PROXMOX_HOST`), without scheme or port: a URL given there
    /// (`https://pve.example:8006`) is stored as its host, its port in `port`.
    pub host: Option<String>,
    /// API port (`PROXMOX_PORT`), default 8006.
    pub port: u16,
    /// User with realm, e.g. `root@pam` (`PROXMOX_USER`, or the user a token setting names).
    pub user: Option<String>,
    /// Password for ticket auth (`PROXMOX_PASSWORD`). Secret.
    pub password: Option<SecretString>,
    /// API token id, the part after `!` (from `PROXMOX_TOKEN`/`PROXMOX_TOKEN_ID`, or the whole
    /// token in `PROXMOX_SECRET`).
    pub token: Option<String>,
    /// API token secret (`PROXMOX_SECRET`/`PROXMOX_TOKEN_SECRET`, or after `=` in a whole token).
    /// Secret.
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
    /// The monorepo on Gitea, `OWNER/REPO` as given (`PROXMOX_GITOPS_MONOREPO`, set in the task
    /// workflows; environment only, see [`monorepo`]); checked where it is used.
    pub monorepo: Option<String>,
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

/// Where the programs of the control plane's container (`config`: Gitea and its runner) are on
/// the host that configures it. Unset, they are downloaded from Gitea's release site and
/// verified ([`crate::control_plane::binaries`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlPlaneSettings {
    /// The Gitea server binary (`PGO_GITEA_BINARY` or `control_plane.gitea_binary`).
    pub gitea_binary: Option<std::path::PathBuf>,
    /// Gitea's `templates/` and `options/` for a binary built without them embedded
    /// (`PGO_GITEA_STATIC` or `control_plane.gitea_static`; Gitea's `STATIC_ROOT_PATH`). Release
    /// binaries embed them: unset then.
    pub gitea_static: Option<std::path::PathBuf>,
    /// The Actions runner binary (`PGO_RUNNER_BINARY` or `control_plane.runner_binary`).
    pub runner_binary: Option<std::path::PathBuf>,
    /// Gitea's release site for programs not given (`PGO_GITEA_DOWNLOAD`, environment only;
    /// default [`crate::gitea::release::DEFAULT_SITE`]).
    pub download_site: Option<String>,
    /// Where downloaded programs are kept, by version: [`cache_dir`]`/control-plane`.
    pub cache: Option<std::path::PathBuf>,
    /// proxmox-gitops for `config`'s runner; `None` (always, from [`Settings::load`]): the
    /// running executable. A program that uses the library sets it.
    pub tool_binary: Option<std::path::PathBuf>,
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
    /// The non-secret settings that were *given* (not defaulted), under the names of the Actions
    /// variables the workflows read them from ([`WORKFLOW_VARIABLES`]): what `publish` sets as
    /// organization variables. Built by [`Settings::load`] with the same precedence as the
    /// fields above (environment, `local/config.local.json`, `local/config.json`); the secrets
    /// are never in here (they stay in the [`SecretString`] fields).
    pub variables: std::collections::BTreeMap<&'static str, String>,
    /// The control plane's programs on this host.
    pub control_plane: ControlPlaneSettings,
    /// The lxc backend's base and mirrors (environment only).
    pub lxc: LxcSettings,
}

/// What the lxc backend takes from the environment, each trimmed, `None` when unset or empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LxcSettings {
    /// The base container to clone (`PGO_LXC_BASE`).
    pub base: Option<String>,
    /// Debian's mirror for the base's bootstrap (`PGO_LXC_MIRROR`).
    pub mirror: Option<String>,
    /// Debian's security mirror for it (`PGO_LXC_SECURITY_MIRROR`).
    pub security_mirror: Option<String>,
}

/// The Actions variables of the workflows that [`Settings::variables`] can hold, each with the
/// settings it is read from (a name the workflows read but not listed here, e.g. `HOST` or
/// `AUTO_DEPLOY`, is not a setting of the binary; see the publish step).
pub const WORKFLOW_VARIABLES: &[(&str, &str)] = &[
    ("PROXMOX_HOST", "PROXMOX_HOST, proxmox.host"),
    ("PROXMOX_PORT", "PROXMOX_PORT, proxmox.port, the port of a PROXMOX_HOST URL"),
    ("PROXMOX_USER", "PROXMOX_USER, proxmox.user, the user of a token setting"),
    ("PROXMOX_TOKEN", "the token id of PROXMOX_TOKEN/PROXMOX_TOKEN_ID/PROXMOX_SECRET, proxmox.token"),
    ("PROXMOX_NODE", "PROXMOX_NODE, proxmox.node"),
    ("PROXMOX_GATEWAY", "PROXMOX_GATEWAY, proxmox.gateway"),
    ("PROXMOX_MASK", "PROXMOX_MASK, proxmox.mask"),
    ("PROXMOX_INTERFACE", "PROXMOX_INTERFACE, proxmox.interface"),
    ("PROXMOX_BRIDGE", "PROXMOX_BRIDGE, proxmox.bridge"),
    ("PROXMOX_STORAGE", "PROXMOX_STORAGE, proxmox.storage"),
    ("PROXMOX_TEMPLATE", "PROXMOX_TEMPLATE, proxmox.template"),
    ("PROXMOX_SHARE", "PROXMOX_SHARE, proxmox.share"),
    ("LOGIN", "LOGIN, login"),
    ("PROXMOX_FINGERPRINT", "the environment"),
    ("PROXMOX_CA", "the environment"),
    ("PROXMOX_GITOPS_BACKEND", "the environment"),
    ("PROXMOX_GITOPS_BINARY", "the environment"),
    ("PROXMOX_GITOPS_STAGE", "the environment"),
    ("PROXMOX_GITOPS_ARTIFACTS", "the environment"),
    ("PROXMOX_GITOPS_RECREATE", "the environment"),
    ("PROXMOX_GITOPS_KEEP", "the environment"),
];

/// `PROXMOX_GITOPS_MONOREPO` (the monorepo on Gitea, `OWNER/REPO`, set by the task workflows),
/// trimmed; `None` when unset or empty. The one place the variable is read.
pub fn monorepo(env: &dyn EnvSource) -> Option<String> {
    env.get("PROXMOX_GITOPS_MONOREPO").map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The variable that forces `configure`'s full run ([`configure_full`]).
pub const CONFIGURE_VAR: &str = "PROXMOX_GITOPS_CONFIGURE";

/// `PROXMOX_GITOPS_CONFIGURE`, trimmed: `full` runs the base role and every lib's engine even when
/// the stamp in the container shows nothing changed since the last successful run (the same as
/// `configure --force`); unset, empty or `auto` skips what is proven unchanged. The one place the
/// variable is read.
///
/// # Errors
/// Any other value, as a problem located at the variable.
pub fn configure_full(env: &dyn EnvSource) -> Result<bool, Problems> {
    match env.get(CONFIGURE_VAR).as_deref().map(str::trim) {
        None | Some("") | Some("auto") => Ok(false),
        Some("full") => Ok(true),
        Some(other) => {
            let mut p = Problems::new();
            p.add(
                Location::environment(CONFIGURE_VAR),
                format!("expected `full` (run every engine) or `auto` (skip what is unchanged), found `{other}`"),
            );
            Err(p)
        }
    }
}

/// The variable `./local/run.sh` exports (`PGO_ENTRY=local-run`) so that hints name its options.
pub const ENTRY_VAR: &str = "PGO_ENTRY";

/// How the user runs proxmox-gitops, for the phrasing of hints ([`crate::error::Hint::render`]):
/// [`EntryPoint::Actions`] under Gitea or GitHub Actions (`GITEA_ACTIONS` or `GITHUB_ACTIONS`
/// set, not `false`; first, since a runner started from `./local/run.sh` may inherit its
/// environment), else [`EntryPoint::LocalRun`] when `PGO_ENTRY` is `local-run`, else
/// [`EntryPoint::Binary`]. The one place these variables are read for it.
pub fn entry_point(env: &dyn EnvSource) -> EntryPoint {
    let set = |k: &str| env.get(k).is_some_and(|v| !v.is_empty() && v != "false");
    if set("GITEA_ACTIONS") || set("GITHUB_ACTIONS") {
        EntryPoint::Actions
    } else if env.get(ENTRY_VAR).is_some_and(|v| v.trim() == "local-run") {
        EntryPoint::LocalRun
    } else {
        EntryPoint::Binary
    }
}

/// The user's cache directory of proxmox-gitops: `$XDG_CACHE_HOME/proxmox-gitops`, else
/// `$HOME/.cache/proxmox-gitops`; `None` when neither variable is set.
pub fn cache_dir(env: &dyn EnvSource) -> Option<std::path::PathBuf> {
    let base = nonempty(env.get("XDG_CACHE_HOME"))
        .map(std::path::PathBuf::from)
        .or_else(|| nonempty(env.get("HOME")).map(|h| std::path::Path::new(&h).join(".cache")))?;
    Some(base.join("proxmox-gitops"))
}

/// The settings that both the environment and the config files (`local/config.json`,
/// `local/config.local.json`) take: the environment variable and the JSON key (`proxmox.host`
/// for a key of the `proxmox` object). The second names of two settings (`PROXMOX_TOKEN_ID`,
/// `PROXMOX_TOKEN_SECRET`) are environment-only aliases.
pub const CONFIG_KEYS: &[(&str, &str)] = &[
    ("PROXMOX_HOST", "proxmox.host"),
    ("PROXMOX_PORT", "proxmox.port"),
    ("PROXMOX_USER", "proxmox.user"),
    ("PROXMOX_PASSWORD", "proxmox.password"),
    ("PROXMOX_TOKEN", "proxmox.token"),
    ("PROXMOX_SECRET", "proxmox.secret"),
    ("PROXMOX_NODE", "proxmox.node"),
    ("PROXMOX_GATEWAY", "proxmox.gateway"),
    ("PROXMOX_MASK", "proxmox.mask"),
    ("PROXMOX_INTERFACE", "proxmox.interface"),
    ("PROXMOX_BRIDGE", "proxmox.bridge"),
    ("PROXMOX_STORAGE", "proxmox.storage"),
    ("PROXMOX_TEMPLATE", "proxmox.template"),
    ("PROXMOX_SHARE", "proxmox.share"),
    ("HOST", "host"),
    ("LOGIN", "login"),
    ("PASSWORD", "password"),
    ("GITEA_TOKEN", "token"),
    (CHECKOUT_VAR, "checkout"),
    ("PGO_GITEA_BINARY", "control_plane.gitea_binary"),
    ("PGO_GITEA_STATIC", "control_plane.gitea_static"),
    ("PGO_RUNNER_BINARY", "control_plane.runner_binary"),
];

/// Every place setting `var` can be given, for messages about a setting that is not set:
/// `PROXMOX_TEMPLATE or proxmox.template in local/config.json` for a setting of
/// [`CONFIG_KEYS`], `var` alone for one only the environment takes. (`local/config.local.json`
/// takes the same keys; the committed template is the file users know.)
pub fn setting_names(var: &str) -> String {
    match CONFIG_KEYS.iter().find(|(v, _)| *v == var) {
        Some((_, key)) => format!("{var} or {key} in local/config.json"),
        None => var.to_string(),
    }
}

/// The problem of setting `var` being set nowhere: at [`Location::setting`] naming both places
/// ([`setting_names`]), with `message` (e.g. `not set: the PVE API host (name or address)`).
pub fn not_set(var: &str, message: impl Into<String>) -> Problems {
    let mut p = Problems::new();
    p.add(Location::setting(setting_names(var)), message);
    p
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

/// The environment variable naming the checkout action (see [`CheckoutAction`]).
pub const CHECKOUT_VAR: &str = "PROXMOX_GITOPS_CHECKOUT";

/// The checkout action of `PROXMOX_GITOPS_CHECKOUT`, else `checkout` of
/// `local/config.local.json`, else of `local/config.json`, else the default; a bad value is a
/// problem naming the variable or the file and key.
fn pick_checkout(
    env: &dyn EnvSource,
    base: &file::RawConfig,
    local: &file::RawConfig,
    problems: &mut Problems,
) -> CheckoutAction {
    [
        (env.get(CHECKOUT_VAR), Location::environment(CHECKOUT_VAR)),
        (local.checkout.clone(), Location::file("local/config.local.json").with_key("checkout")),
        (base.checkout.clone(), Location::file("local/config.json").with_key("checkout")),
    ]
    .into_iter()
    .find_map(|(v, at)| nonempty(v).map(|v| (v, at)))
    .map_or_else(CheckoutAction::default, |(v, at)| {
        CheckoutAction::parse(&v).unwrap_or_else(|why| {
            problems.add(at, why);
            CheckoutAction::default()
        })
    })
}

/// The checkout action the workflows use, for the monorepo at `root` with the environment `env`:
/// `PROXMOX_GITOPS_CHECKOUT`, else `checkout` in `local/config.local.json` or `local/config.json`,
/// else `git` (checkout steps of git commands, no action). (Kept apart from [`Settings`], which holds what the steps talk to
/// PVE and Gitea with; [`Settings::load`] checks it too.)
///
/// # Errors
/// The value is not a checkout action ([`CheckoutAction::parse`]), naming where it was set, or a
/// config file cannot be read or parsed.
pub fn load_checkout(root: &Path, env: &dyn EnvSource) -> Result<CheckoutAction, Problems> {
    let mut problems = Problems::new();
    let base_display = Path::new("local/config.json");
    let local_display = Path::new("local/config.local.json");
    let base = read_config(&root.join(base_display), base_display, &mut problems);
    let local = read_config(&root.join(local_display), local_display, &mut problems);
    let checkout = pick_checkout(env, &base, &local, &mut problems);
    problems.into_result()?;
    Ok(checkout)
}

/// The environment variables holding secrets (masked as soon as they are read).
pub const SECRET_VARS: &[&str] =
    &["PROXMOX_PASSWORD", "PROXMOX_SECRET", "PROXMOX_TOKEN_SECRET", "PASSWORD", "GITEA_TOKEN"];

fn nonempty(s: Option<String>) -> Option<String> {
    s.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn secret(s: Option<String>) -> Option<SecretString> {
    nonempty(s).map(|v| {
        crate::actions::mask(&v);
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
        // A token value may carry its secret after `=` (`USER@REALM!TOKENID=SECRET`).
        for v in [
            env.get("PROXMOX_TOKEN"),
            env.get("PROXMOX_TOKEN_ID"),
            base.proxmox.token.clone(),
            local.proxmox.token.clone(),
        ]
        .into_iter()
        .flatten()
        {
            token::mask_token_value(&v);
        }

        // The first non-empty of the environment variable, the local file's key, the base file's
        // key (`proxmox.host` for a key in the `proxmox` object, `host` for a top-level one).
        macro_rules! pick {
            ($env:literal, $($key:ident).+) => {
                nonempty(env.get($env))
                    .or_else(|| nonempty(local.$($key).+.clone()))
                    .or_else(|| nonempty(base.$($key).+.clone()))
            };
        }

        let explicit_port = match nonempty(env.get("PROXMOX_PORT")) {
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => {
                    problems.add(
                        Location::environment("PROXMOX_PORT"),
                        format!("expected a TCP port 1–65535, found `{p}`"),
                    );
                    None
                }
            },
            None => local.proxmox.port.or(base.proxmox.port),
        };
        let mut port = explicit_port.unwrap_or(8006);
        let mut port_given = explicit_port.is_some();
        // The host, with where it was set: a URL's port sets the port unless one is set apart.
        let host = [
            (env.get("PROXMOX_HOST"), Location::environment("PROXMOX_HOST")),
            (local.proxmox.host.clone(), Location::file(local_display).with_key("proxmox.host")),
            (base.proxmox.host.clone(), Location::file(base_display).with_key("proxmox.host")),
        ]
        .into_iter()
        .find_map(|(v, at)| nonempty(v).map(|v| (v, at)))
        // Credentials in a pasted URL are refused below; mask them first, as any settings URL.
        .inspect(|(v, _)| crate::remote_url::mask_userinfo(v))
        .and_then(|(raw, at)| match host::parse(&raw) {
            Ok((host, url_port)) => {
                match (url_port, explicit_port) {
                    (Some(u), Some(p)) if u != p => problems.add(
                        at,
                        format!("the URL's port {u} differs from the port {p} set by PROXMOX_PORT or proxmox.port; set one of them"),
                    ),
                    (Some(u), _) => {
                        port = u;
                        port_given = true;
                    }
                    (None, _) => {}
                }
                Some(host)
            }
            Err(why) => {
                problems.add(at, why);
                None
            }
        });
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

        // The user, token and secret with where each was set: the token forms are resolved
        // together (see `token`).
        let given = |var: Option<&str>, local_v: &Option<String>, base_v: &Option<String>, key: &str| {
            [
                (var.and_then(|v| env.get(v)), Location::environment(var.unwrap_or_default()), 0),
                (local_v.clone(), Location::file(local_display).with_key(key), 1),
                (base_v.clone(), Location::file(base_display).with_key(key), 2),
            ]
            .into_iter()
            .find_map(|(v, at, layer)| nonempty(v).map(|value| token::Given { value, at, layer }))
        };
        let env_given = |var: &str| {
            nonempty(env.get(var)).map(|value| token::Given { value, at: Location::environment(var), layer: 0 })
        };
        let user = given(Some("PROXMOX_USER"), &local.proxmox.user, &base.proxmox.user, "proxmox.user");
        let token_given = token::one_of(env_given("PROXMOX_TOKEN"), env_given("PROXMOX_TOKEN_ID"), &mut problems)
            .or_else(|| given(None, &local.proxmox.token, &base.proxmox.token, "proxmox.token"));
        let secret_given = token::one_of(env_given("PROXMOX_SECRET"), env_given("PROXMOX_TOKEN_SECRET"), &mut problems)
            .or_else(|| given(None, &local.proxmox.secret, &base.proxmox.secret, "proxmox.secret"));
        let creds = token::resolve(user, token_given, secret_given, &mut problems);

        let pve = PveSettings {
            host,
            port,
            user: creds.user,
            password: secret(pick!("PROXMOX_PASSWORD", proxmox.password)),
            token: creds.token,
            secret: creds.secret,
            node: pick!("PROXMOX_NODE", proxmox.node),
            gateway: pick!("PROXMOX_GATEWAY", proxmox.gateway),
            mask,
            interface: pick!("PROXMOX_INTERFACE", proxmox.interface).unwrap_or_else(|| "eth0".into()),
            bridge: pick!("PROXMOX_BRIDGE", proxmox.bridge).unwrap_or_else(|| "vmbr0".into()),
            storage: pick!("PROXMOX_STORAGE", proxmox.storage),
            template: pick!("PROXMOX_TEMPLATE", proxmox.template),
        };
        let share_given = pick!("PROXMOX_SHARE", proxmox.share);
        let share = share_given.clone().unwrap_or_else(|| "/share".into());
        // Checked here with every other setting; read with [`load_checkout`].
        pick_checkout(env, &base, &local, &mut problems);
        let gitea = GiteaSettings {
            host: pick!("HOST", host).inspect(|h| crate::remote_url::mask_userinfo(h)),
            login: pick!("LOGIN", login),
            password: secret(pick!("PASSWORD", password)),
            token: secret(pick!("GITEA_TOKEN", token)),
            monorepo: monorepo(env),
        };
        // What was given, under the workflows' names (defaults left out: the binary on the
        // runner applies them itself).
        let given = [
            ("PROXMOX_HOST", pve.host.clone()),
            ("PROXMOX_PORT", port_given.then(|| pve.port.to_string())),
            ("PROXMOX_USER", pve.user.clone()),
            ("PROXMOX_TOKEN", pve.token.clone()),
            ("PROXMOX_NODE", pve.node.clone()),
            ("PROXMOX_GATEWAY", pve.gateway.clone()),
            ("PROXMOX_MASK", pve.mask.map(|m| m.to_string())),
            ("PROXMOX_INTERFACE", pick!("PROXMOX_INTERFACE", proxmox.interface)),
            ("PROXMOX_BRIDGE", pick!("PROXMOX_BRIDGE", proxmox.bridge)),
            ("PROXMOX_STORAGE", pve.storage.clone()),
            ("PROXMOX_TEMPLATE", pve.template.clone()),
            ("PROXMOX_SHARE", share_given),
            ("LOGIN", gitea.login.clone()),
        ];
        let mut variables: std::collections::BTreeMap<&'static str, String> =
            given.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
        for (name, from) in WORKFLOW_VARIABLES {
            if *from == "the environment"
                && let Some(v) = nonempty(env.get(name))
            {
                variables.insert(name, v);
            }
        }
        let control_plane = ControlPlaneSettings {
            gitea_binary: pick!("PGO_GITEA_BINARY", control_plane.gitea_binary).map(Into::into),
            gitea_static: pick!("PGO_GITEA_STATIC", control_plane.gitea_static).map(Into::into),
            runner_binary: pick!("PGO_RUNNER_BINARY", control_plane.runner_binary).map(Into::into),
            download_site: nonempty(env.get("PGO_GITEA_DOWNLOAD")),
            cache: cache_dir(env).map(|d| d.join("control-plane")),
            tool_binary: None,
        };
        problems.into_result()?;
        let lxc_var = |name: &str| nonempty(env.get(name)).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let lxc = LxcSettings {
            base: lxc_var("PGO_LXC_BASE"),
            mirror: lxc_var("PGO_LXC_MIRROR"),
            security_mirror: lxc_var("PGO_LXC_SECURITY_MIRROR"),
        };
        Ok(Settings { pve, gitea, share: share.into(), variables, control_plane, lxc })
    }

    /// The non-secret view recorded in artifacts.
    pub fn public(&self) -> PublicSettings {
        PublicSettings {
            pve_host: self.pve.host.as_deref().map(|h| crate::remote_url::redact(h).into_owned()),
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
            gitea_host: self.gitea.host.as_deref().map(|h| crate::remote_url::redact(h).into_owned()),
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
